"""Hand-made trajectories and a sampler source for the miner tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from agentenv import Env, Task, TaskSet, Trajectory, Transition
from agentenv.core.types import Failure


def traj(
    task: Task,
    success: bool = False,
    *,
    infra: bool = False,
    seed: int = 0,
    transitions: list[Transition] | None = None,
) -> Trajectory:
    failure = Failure.INFRA if infra else (Failure.NONE if success else Failure.POLICY)
    return Trajectory(
        task=task,
        seed=seed,
        messages=[],
        transitions=transitions or [],
        success=success,
        task_reward=None if infra else float(success),
        failure=failure,
    )


def step(turn: int, *, error: str | None = None, reward: float = 0.0) -> Transition:
    return Transition(turn, "a", [], [], {"progress": reward}, {}, [], 0.0, error, "tool" if error else None)


@dataclass
class Src:
    name: str
    train: TaskSet
    factory: Callable[[], Env]
    weight: float = 1.0
    env_id: str | None = None
    test: TaskSet = field(default_factory=TaskSet)
