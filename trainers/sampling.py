"""Which tasks a training step runs: env sources with their train/test splits, and
the uniform task sampler (the failure miner, `agentenv.miner.MinerSampler`, plugs
in through the same protocol).

Sampling is a pure function of (seed, step, round), so a resumed run draws exactly
the tasks the uninterrupted run would have drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from agentenv.env import Env
from agentenv.miner.sampler import Draw  # defined with the miner (core), which trainers may import
from agentenv.task import TaskSet
from agentenv.trajectory import Trajectory

__all__ = ["Draw", "EnvSource", "TaskSampler", "UniformSampler"]


@dataclass
class EnvSource:
    """One env the trainer draws from."""

    name: str
    factory: Callable[[], Env]
    weight: float
    train: TaskSet
    test: TaskSet
    reward_weights: Mapping[str, float]
    env_id: str | None = None
    """The registered id, when the env came from the registry (needed for its oracle)."""


class TaskSampler(Protocol):
    def sample(self, step: int, round_: int, n_groups: int) -> list[Draw]: ...
    def update(self, step: int, trajectories: Sequence[Trajectory]) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class UniformSampler:
    """Env by weight, then a task uniformly from its train split."""

    def __init__(self, sources: Sequence[EnvSource], seed: int) -> None:
        self.sources = list(sources)
        self.seed = seed
        total = sum(s.weight for s in self.sources)
        self.p = np.array([s.weight / total for s in self.sources])

    def sample(self, step: int, round_: int, n_groups: int) -> list[Draw]:
        rng = np.random.default_rng([self.seed, step, round_])
        draws = []
        for _ in range(n_groups):
            i = int(rng.choice(len(self.sources), p=self.p))
            draws.append(Draw(i, self.sources[i].train.sample(rng), int(rng.integers(2**31))))
        return draws

    def update(self, step: int, trajectories: Sequence[Trajectory]) -> None:
        """Uniform sampling learns nothing from outcomes."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Stateless: every draw is a function of (seed, step, round)."""
