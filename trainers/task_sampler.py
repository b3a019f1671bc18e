"""The trainer's side of task sampling: the envs it draws from (`EnvSource`, each with
its train/test split), the uniform sampler, and which sampler a run uses by default
(`default_sampler`: the failure miner when configured, else uniform).

The contract every sampler follows (`TaskSampler`, `Draw`, `Source`) lives in
`agentenv.core.task_sampler`, shared with the failure miner (`agentenv.miner.MinerSampler`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentenv.core.env import Env
from agentenv.core.task import TaskSet
from agentenv.core.task_sampler import Draw, Source, TaskSampler
from agentenv.miner import MinerConfig, MinerSampler

__all__ = ["EnvSource", "UniformSampler", "default_sampler"]


@dataclass
class EnvSource:
    """One env the trainer draws from (an `agentenv.core.task_sampler.Source`)."""

    name: str
    factory: Callable[[], Env]
    weight: float
    train: TaskSet
    test: TaskSet
    reward_weights: Mapping[str, float]
    env_id: str | None = None
    """The registered id, when the env came from the registry (needed for its oracle)."""


class UniformSampler(TaskSampler):
    """Env by weight, then a task uniformly from its train split."""

    def __init__(self, sources: Sequence[Source], seed: int) -> None:
        self.sources = list(sources)
        self.seed = seed
        # Scaled by the largest first: weights that are each finite can sum to infinity
        # (1e308 twice), which made every probability 0.
        weights = np.array([s.weight for s in self.sources], dtype=float)
        weights /= weights.max()
        self.p = weights / weights.sum()

    def sample(self, step: int, round_: int, n_groups: int) -> list[Draw]:
        rng = np.random.default_rng([self.seed, step, round_])
        draws = []
        for _ in range(n_groups):
            i = int(rng.choice(len(self.sources), p=self.p))
            draws.append(Draw(i, self.sources[i].train.sample(rng), int(rng.integers(2**31))))
        return draws

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Stateless: every draw is a function of (seed, step, round)."""


def default_sampler(sources: Sequence[Source], seed: int, miner: MinerConfig | None) -> TaskSampler:
    """The failure miner with ``miner`` set, otherwise uniform over each source's train split."""
    if miner is None:
        return UniformSampler(sources, seed)
    return MinerSampler(sources, seed, miner)
