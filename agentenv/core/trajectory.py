"""`Trajectory`: one finished episode, with everything needed to train on it,
score it, replay it or mine it. JSON round trip; JSONL files of them are the
exchange format between rollouts, the trainer and the failure miner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

from agentenv.core import _safejson
from agentenv.core.env import Snapshot, Transition
from agentenv.core.policy import Generation
from agentenv.core.task import Task
from agentenv.core.types import Failure

__all__ = ["Trajectory"]


class Trajectory(BaseModel):
    """One finished episode. `rollout` makes them; ``agentenv eval --out`` writes them,
    one JSON object per line (`load_jsonl` / `read_jsonl` read them back)."""

    model_config = ConfigDict(extra="forbid")

    env_id: str | None = None
    """The registered id the episode ran on; None when the rollout was given a factory."""
    task: Task
    seed: int | None = None
    """The reset seed."""
    messages: list[dict[str, Any]]
    """The whole conversation, system prompt first."""
    transitions: list[Transition]
    """One per step, in order."""
    generations: list[Generation | None] = []
    """Per step, what the model generated (token ids, log-probs) when the policy said."""
    snapshots: list[Snapshot] = []
    """When kept: the env just before each turn, in order (``snapshot.turn`` says which);
    a turn whose snapshot the env refused to take has none (see `agentenv.rollout`)."""
    rewards: list[float] = []
    """The scalar reward of each step."""
    task_reward: float | None = None
    """The verifier's reward on the final state; None when the episode ended in infra."""
    success: bool = False
    """The task reward reached the env's ``success_threshold``."""
    failure: Failure
    """How it ended: none (solved), policy, format, truncated or infra."""
    duration_s: float = 0.0
    error: str | None = None
    """For ``infra`` failures: what broke."""

    @model_validator(mode="before")
    @classmethod
    def _finite_in_json(cls, data: Any, info: ValidationInfo) -> Any:
        """Read from JSON, a NaN or an infinity (``NaN``, ``Infinity``, ``1e309``, which the
        parser accepts) is refused: written back it would be null, and the trajectory would
        no longer read (nor would an evaluation scored from it)."""
        if info.mode == "json" and (where := _safejson.first_non_finite(data)) is not None:
            raise ValueError(
                f"{where or '(record)'} is NaN or infinity, which JSON cannot hold (written back it would be "
                "null): use a finite number"
            )
        return data

    @property
    def turns(self) -> int:
        """Steps taken."""
        return len(self.transitions)

    @property
    def total_reward(self) -> float:
        """The sum of the step rewards (the task reward included, on the last step)."""
        return float(sum(self.rewards))

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> Trajectory:
        return cls.model_validate_json(text)

    @staticmethod
    def read_jsonl(path: str | Path) -> Iterator[Trajectory]:
        """The trajectories of a JSONL file one at a time, read as they are asked
        for (a generator: a large file never sits in memory whole)."""
        with Path(path).open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield Trajectory.model_validate_json(line)

    @staticmethod
    def load_jsonl(path: str | Path) -> list[Trajectory]:
        """Every trajectory of a JSONL file, as a list (`read_jsonl` streams them)."""
        return list(Trajectory.read_jsonl(path))
