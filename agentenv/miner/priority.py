"""Prioritized Level Replay (Jiang et al., 2021) with the learnability score.

Pure functions of arrays, so each is tested by hand:

    score        S_i = p_i (1 - p_i)                  p_i: the task's success EMA
    rank         P_S(i) = h_i^(1/beta) / sum_j h_j^(1/beta),  h_i = 1 / rank(S_i)
    staleness    P_C(i) = (c - C_i) / sum_j (c - C_j)  c: this step, C_i: last step seen
    replay       P(i) = (1 - rho) P_S(i) + rho P_C(i)

Ranks count from 1 for the highest score; ties keep pool order. When every task
was seen this step the staleness term is uniform.
"""

from __future__ import annotations

import numpy as np

__all__ = ["learnability", "rank_priorities", "replay_distribution", "staleness_priorities"]


def learnability(p: np.ndarray) -> np.ndarray:
    """p(1 - p): highest for tasks solved half the time, 0 for always or never."""
    return p * (1.0 - p)


def rank_priorities(scores: np.ndarray, temperature: float) -> np.ndarray:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    h = (1.0 / ranks) ** (1.0 / temperature)
    return h / h.sum()


def staleness_priorities(last_steps: np.ndarray, step: int) -> np.ndarray:
    stale = np.maximum(step - last_steps, 0).astype(float)
    total = stale.sum()
    return stale / total if total > 0 else np.full(len(stale), 1.0 / len(stale))


def replay_distribution(
    p: np.ndarray, last_steps: np.ndarray, step: int, *, temperature: float, staleness_coef: float
) -> np.ndarray:
    """The PLR replay distribution over seen tasks."""
    scores = learnability(p)
    mix = (1.0 - staleness_coef) * rank_priorities(scores, temperature)
    return mix + staleness_coef * staleness_priorities(last_steps, step)
