"""Break points: the turn where a failed episode went wrong, and the resume task
that restarts it there.

The rule, in order: the first turn with an error (a bad action or a failed tool
call), else the first turn with a negative step reward, else the last turn. The
resume task keeps the original prompt and payload under a new id; the episode
restarts from the snapshot the rollout kept just before that turn
(``rollout(..., keep_snapshots=True)``), so the agent practises from the point
where it broke with the same conversation so far.

A resume task is its state: its id ``ID@tK.HASH`` names the root task, the turn and
a short hash of the snapshot's state and conversation, so another failure that
reaches a different state at the same turn is another task with its own ledger
record (one keyed by turn alone would inherit the record of whatever state held
the id before: solved, or quarantined). The same state reached again keeps its id.

Left out: a turn 0 break point makes no resume task (it is the task itself), and
infra failures have no break point (they were never the policy's). Whether the
agent can still finish from there is the sampler's check (`turns_left`, and the
env's oracle replayed from the snapshot), not this module's.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from agentenv.core.env import Snapshot
from agentenv.core.task import MAX_ID_CHARS, Task, TaskMeta
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure

__all__ = ["BreakPoint", "break_point", "resume_from", "resume_task", "root_id", "state_digest", "turns_left"]

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
    """The task a resume task (``ID@tK.HASH``) restarts."""
    return task_id.split(RESUME_MARK, 1)[0]


def turns_left(traj: Trajectory, point: BreakPoint) -> int | None:
    """Turns the episode ran from ``point`` on, for a truncated one: out of turns, what a
    resume task from there has left (out of tokens or time, about what it can use).
    None for an episode that ended otherwise: it was not the budget that stopped it."""
    if traj.failure is not Failure.TRUNCATED or not traj.transitions:
        return None
    return traj.transitions[-1].turn + 1 - point.turn


def state_digest(snap: Snapshot) -> str:
    """Eight hex digits of the snapshot's state and conversation, the same in every
    process. The RNG is left out: the same position reached under another seed is
    the same task."""
    text = json.dumps([snap.state, snap.messages], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=4).hexdigest()


def resume_task(traj: Trajectory, point: BreakPoint) -> tuple[Task, Snapshot] | None:
    """The task that restarts ``traj`` just before ``point.turn``, with its snapshot;
    None at turn 0 or when the rollout kept no snapshot of that turn."""
    if point.turn == 0:
        return None
    snap = next((s for s in traj.snapshots if s.turn == point.turn and not s.ended), None)
    if snap is None:
        return None
    return resume_from(traj.task.id, snap), snap


def resume_from(task_id: str, snap: Snapshot) -> Task:
    """The resume task that restarts ``snap`` (a snapshot of an episode of the task
    ``task_id``, itself perhaps a resume task) at its turn."""
    original = snap.task
    meta = original.metadata
    return original.model_copy(
        update={
            "id": _resume_id(root_id(task_id), f"{RESUME_MARK}{snap.turn}.{state_digest(snap)}"),
            "metadata": TaskMeta(
                family=meta.family,
                difficulty=meta.difficulty,
                tags=(*[t for t in meta.tags if not t.startswith("resume:")], f"resume:{snap.turn}"),
            ),
        }
    )


def _resume_id(root: str, suffix: str) -> str:
    """``root + suffix``, within `MAX_ID_CHARS`: past it, the task would not read back
    from a checkpoint (nor its trajectories from their file). A long root is cut, and a
    hash of the whole root keeps two roots that share the cut part apart."""
    if len(root) + len(suffix) <= MAX_ID_CHARS:
        return root + suffix
    digest = hashlib.blake2b(root.encode(), digest_size=4).hexdigest()
    return f"{root[: MAX_ID_CHARS - len(suffix) - len(digest) - 1]}~{digest}{suffix}"
