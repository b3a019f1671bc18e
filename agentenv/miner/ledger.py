"""The ledger: what happened to each task, fed by trajectories.

One `TaskRecord` per task id: attempts, successes, an exponential moving average
of the success rate, the last step it was seen, failures by kind, the turns where
its episodes broke, and its place in the pool (active, solved, quarantined).

A *visit* is one group: the G rollouts of a task in one step. Infra failures are
counted apart and never as attempts; a visit with nothing but infra failures is
reported back so the sampler re-queues the task, up to ``max_requeues`` times in
a row: a task whose environment stays broken (a dead service, a bad task file)
is then quarantined, retested every ``retest_every`` steps instead of taking a
group every step, and back in the pool once its episodes run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentenv.core.task import Task
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.miner.breakpoints import break_point
from agentenv.miner.config import MinerConfig

__all__ = ["Ledger", "TaskRecord", "Visit"]

Status = Literal["active", "solved", "quarantined"]
Origin = Literal["train", "resume", "variant", "proposed"]


class TaskRecord(BaseModel):
    """The outcomes of one task so far."""

    model_config = ConfigDict(extra="forbid")

    source: int = Field(0, ge=0)
    family: str = "default"
    difficulty: int = Field(0, ge=0)
    origin: Origin = "train"
    attempts: int = Field(0, ge=0)
    """Episodes that ended by the policy's doing (infra failures excluded)."""
    successes: int = Field(0, ge=0)
    infra: int = Field(0, ge=0)
    """Episodes lost to infrastructure: re-queued, never counted as attempts."""
    infra_streak: int = Field(0, ge=0)
    """Consecutive visits in which every rollout was lost to infrastructure."""
    ema: float | None = Field(None, ge=0, le=1)
    """EMA of the per-visit success rate; None until the first counted visit."""
    last_step: int | None = Field(None, ge=0)
    failures: dict[str, int] = Field(default_factory=dict)
    """Failed episodes by `Failure` kind (policy, format, truncated)."""
    break_turns: dict[int, int] = Field(default_factory=dict)
    """Break-point turn -> failed episodes that broke there."""
    recent: list[Annotated[int, Field(ge=0, le=1)]] = Field(default_factory=list)
    """Outcomes (1 = solved) of the latest episodes, at most ``solved_window``."""
    all_fail_streak: int = 0
    """Consecutive visits in which every rollout failed."""
    status: Status = "active"
    status_step: int = 0
    """The step the status last changed (for quarantine: its last failed test)."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        # What `Ledger.record_visit` keeps true; a record read back from a checkpoint may not.
        if self.successes > self.attempts:
            raise ValueError(f"successes {self.successes} > attempts {self.attempts}")
        return self

    @property
    def seen(self) -> bool:
        return self.ema is not None

    @property
    def success_rate(self) -> float:
        return self.successes / self.attempts if self.attempts else 0.0


class Visit(BaseModel):
    """What one visit changed."""

    task_id: str
    counted: int
    successes: int
    requeue: bool
    informative: bool
    """Rewards differed within the group (a non-zero-variance group)."""
    status_change: Status | None = None


class Ledger:
    """Per-task records; JSON round trip through `state_dict` / `load_state_dict`."""

    def __init__(self, config: MinerConfig) -> None:
        self.config = config
        self.records: dict[str, TaskRecord] = {}

    def __contains__(self, task_id: object) -> bool:
        return task_id in self.records

    def get(self, task_id: str) -> TaskRecord | None:
        return self.records.get(task_id)

    def add(self, task: Task, source: int, origin: Origin = "train") -> TaskRecord:
        """The task's record, made (unseen) the first time."""
        record = self.records.get(task.id)
        if record is None:
            record = TaskRecord(
                source=source, family=task.metadata.family, difficulty=task.metadata.difficulty, origin=origin
            )
            self.records[task.id] = record
        return record

    def forget(self, task_id: str) -> None:
        """Drop the record of a task that left the pool (a mined task evicted past its bound)."""
        self.records.pop(task_id, None)

    def record_visit(self, task: Task, source: int, step: int, group: Sequence[Trajectory]) -> Visit:
        """Count one group of rollouts of ``task`` at ``step``."""
        cfg = self.config
        record = self.add(task, source)
        valid = [t for t in group if t.failure is not Failure.INFRA]
        record.infra += len(group) - len(valid)
        rewards = {t.task_reward or 0.0 for t in valid}
        if not valid:
            record.infra_streak += 1
            requeue = record.infra_streak <= cfg.max_requeues
            broken = None
            if not requeue:  # its env stays broken: out of the pool, retested like a quarantined task
                broken = "quarantined" if record.status != "quarantined" else None
                record.status, record.status_step = "quarantined", step
            return Visit(
                task_id=task.id, counted=0, successes=0, requeue=requeue, informative=False, status_change=broken
            )
        record.infra_streak = 0
        wins = [int(t.success) for t in valid]
        record.attempts += len(valid)
        record.successes += sum(wins)
        for t in valid:
            if t.success:
                continue
            record.failures[t.failure.value] = record.failures.get(t.failure.value, 0) + 1
            point = break_point(t)
            if point is not None:
                record.break_turns[point.turn] = record.break_turns.get(point.turn, 0) + 1
        rate = sum(wins) / len(wins)
        record.ema = rate if record.ema is None else (1 - cfg.ema_alpha) * record.ema + cfg.ema_alpha * rate
        record.last_step = step
        record.recent = (record.recent + wins)[-cfg.solved_window :]
        record.all_fail_streak = record.all_fail_streak + 1 if not any(wins) else 0
        change = _next_status(record, cfg, any(wins))
        if change is not None:
            record.status, record.status_step = change, step
        elif record.status == "quarantined":
            record.status_step = step  # failed its retest: wait another period
        return Visit(
            task_id=task.id,
            counted=len(valid),
            successes=sum(wins),
            requeue=False,
            informative=len(rewards) > 1,
            status_change=change,
        )

    def state_dict(self) -> dict[str, object]:
        return {task_id: r.model_dump(mode="json") for task_id, r in self.records.items()}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.records = {task_id: TaskRecord.model_validate(r) for task_id, r in state.items()}


def _next_status(record: TaskRecord, cfg: MinerConfig, any_win: bool) -> Status | None:
    """The status this visit moves the task to, if it changes."""
    if record.status == "quarantined":  # back on a win, or if it came for a broken env, not for failing
        return "active" if any_win or record.all_fail_streak < cfg.quarantine_after else None
    if record.all_fail_streak >= cfg.quarantine_after:
        return "quarantined"
    window = record.recent
    if len(window) >= cfg.solved_window and sum(window) / len(window) >= cfg.solved_threshold:
        return "solved"
    return None
