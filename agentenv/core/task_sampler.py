"""The task-sampler contract: what the GRPO trainer asks of whatever picks its tasks.

Each training step asks its `TaskSampler` for ``n_groups`` draws. A `Draw` names an
env (by its index in the trainer's list of sources), a task and the reset seed;
the trainer rolls it out G times. After the step the sampler sees every trajectory
(groups that dynamic sampling dropped included) and may change what it draws next.
An env the trainer draws from is a `Source`.

Two samplers ship: uniform (`agentenv.trainers.task_sampler.UniformSampler`) and the
failure miner (`agentenv.miner.MinerSampler`); both subclass `TaskSampler`, and a
sampler of your own does the same.

Sampling must be a pure function of (seed, step, round, the sampler's state), and
the state must round-trip through `state_dict` as JSON (it is saved in every
checkpoint): then a resumed run draws exactly the tasks the uninterrupted run would
have drawn.

This module is torch-free, like the rest of the core: the trainer and the miner
both import it, and neither is imported here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentenv.core.env import Env, Snapshot
from agentenv.core.task import Task, TaskSet
from agentenv.core.trajectory import Trajectory

__all__ = ["Draw", "Source", "TaskSampler"]


class Source(Protocol):
    """One env a sampler draws from (the trainer's `agentenv.trainers.task_sampler.EnvSource`)."""

    @property
    def name(self) -> str:
        """A label for logs: the registered id, or the factory's name."""

    @property
    def weight(self) -> float:
        """Sampling weight of the env among the sources (any positive scale)."""

    @property
    def train(self) -> TaskSet:
        """The tasks to draw from (the env's train split)."""

    @property
    def test(self) -> TaskSet:
        """The held-out tasks (the env's test split): never drawn, and a task the miner
        makes may not copy one (trained on, it would no longer be held out)."""

    @property
    def factory(self) -> Callable[[], Env]:
        """Makes a fresh env (the miner makes one to build variants of failed tasks)."""

    @property
    def env_id(self) -> str | None:
        """The registered id, when the env came from the registry (its oracle validates variants)."""


@dataclass(frozen=True)
class Draw:
    """One group to roll out: the env (by index), the task, the reset seed."""

    source: int
    """Index of the env in the sampler's sources."""
    task: Task
    seed: int
    """Reset seed shared by the group's G rollouts."""
    snapshot: Snapshot | None = None
    """Start from this snapshot instead of the first turn (a resume task)."""
    weight: float = 1.0
    """Importance weight: uniform probability over the pool / sampling probability."""


class TaskSampler(ABC):
    """Picks the tasks of each training step. Subclass it and write `sample`,
    `state_dict` and `load_state_dict`; override `update`, `metrics` and
    `keep_snapshots` when the sampler learns from outcomes."""

    @abstractmethod
    def sample(self, step: int, round_: int, n_groups: int) -> list[Draw]:
        """The ``n_groups`` draws of round ``round_`` of ``step`` (rounds above 0 refill
        a batch after dynamic sampling dropped groups)."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to draw as this one would, as JSON-able data."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict`'s output (``{}`` when the checkpoint has no sampler state)."""

    def update(self, step: int, trajectories: Sequence[Trajectory]) -> None:
        """Learn from the step's trajectories, every group's; by default nothing."""
        return None

    def metrics(self) -> dict[str, Any]:
        """Metrics of the last `update`, logged with the step's; by default none."""
        return {}

    @property
    def keep_snapshots(self) -> bool:
        """Whether rollouts must keep a snapshot before every turn (for resume tasks)."""
        return False
