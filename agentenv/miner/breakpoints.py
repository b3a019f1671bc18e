"""Break points: the turn where a failed episode went wrong, and the resume task
that restarts it there.

The rule, in order: the first turn with an error (a bad action or a failed tool
call), else the first turn with a negative step reward, else the last turn. The
resume task keeps the original prompt and payload under a new id; the episode
restarts from the snapshot the rollout kept just before that turn
(``rollout(..., keep_snapshots=True)``), so the agent practises from the point
where it broke with the same conversation so far.

Left out: a turn 0 break point makes no resume task (it is the task itself), and
infra failures have no break point (they were never the policy's).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentenv.env import Snapshot
from agentenv.task import Task, TaskMeta
from agentenv.trajectory import Trajectory
from agentenv.types import Failure

__all__ = ["BreakPoint", "break_point", "resume_task", "root_id"]

RESUME_MARK = "@t"


@dataclass(frozen=True, slots=True)
class BreakPoint:
    turn: int
    """The absolute turn number (0 = the agent's first action)."""
    rule: str
    """Which rule found it: "error", "negative_reward" or "last_turn"."""


def break_point(traj: Trajectory) -> BreakPoint | None:
    """Where ``traj`` went wrong; None for a success, an infra failure or an empty episode."""
    if traj.success or traj.failure in (Failure.NONE, Failure.INFRA) or not traj.transitions:
        return None
    for tr in traj.transitions:
        if tr.error is not None:
            return BreakPoint(tr.turn, "error")
    for tr in traj.transitions:
        if sum(tr.rewards.values()) < 0:
            return BreakPoint(tr.turn, "negative_reward")
    return BreakPoint(traj.transitions[-1].turn, "last_turn")


def root_id(task_id: str) -> str:
    """The task a resume task (``ID@tK``) restarts."""
    return task_id.split(RESUME_MARK, 1)[0]


def resume_task(traj: Trajectory, point: BreakPoint) -> tuple[Task, Snapshot] | None:
    """The task that restarts ``traj`` just before ``point.turn``, with its snapshot;
    None at turn 0 or when the rollout kept no snapshot of that turn."""
    if point.turn == 0:
        return None
    snap = next((s for s in traj.snapshots if s.turn == point.turn and not s.ended), None)
    if snap is None:
        return None
    original = snap.task
    meta = original.metadata
    task = original.model_copy(
        update={
            "id": f"{root_id(traj.task.id)}{RESUME_MARK}{point.turn}",
            "metadata": TaskMeta(
                family=meta.family,
                difficulty=meta.difficulty,
                tags=(*[t for t in meta.tags if not t.startswith("resume:")], f"resume:{point.turn}"),
            ),
        }
    )
    return task, snap
