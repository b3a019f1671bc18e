"""Variants of failed tasks and the validation every new task passes first.

A variant comes from the env's own `Env.mutate(task, rng)` (same family and
difficulty, new content). A task enters the pool only if it is solvable: the
env's scripted oracle, replayed on it, reaches the success threshold. For envs
whose oracle submits a reference solution (the code env) that is the verifier
path: the reference passes the hidden tests. A resume task is validated the same
way from its snapshot: the oracle, restarted there, must still finish the task. A
variant or proposal without a validator never enters the pool; a validator that
raises rejects the task, it never crashes the run.

`content_key` is what makes two tasks the same task: their prompt and payload. The
sampler refuses a new task whose content a train or mined task already has.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from agentenv.core.env import Env, Snapshot
from agentenv.core.policy import Policy
from agentenv.core.task import Task, content_key
from agentenv.rollout import rollout

__all__ = ["OracleValidator", "Validator", "check", "content_key", "make_variant", "stable_hash"]


class Validator(Protocol):
    """Returns None when the task is valid, otherwise why it is not. A resume task comes
    with the snapshot it restarts from; a new task (a variant, a proposal) without."""

    def __call__(self, task: Task, snapshot: Snapshot | None = None, /) -> str | None: ...


def check(validate: Validator, task: Task, snapshot: Snapshot | None = None) -> str | None:
    """``validate``'s verdict on ``task``; a validator that raises rejects the task."""
    try:
        return validate(task) if snapshot is None else validate(task, snapshot)
    except Exception as e:  # noqa: BLE001 - a broken validator rejects, it never crashes the run
        return f"the validator raised {type(e).__name__}: {e}"


def stable_hash(text: str) -> int:
    """A process-independent hash (Python's ``hash`` of a str is salted per process)."""
    return zlib.crc32(text.encode())


@dataclass
class OracleValidator:
    """Valid = the oracle solves the task (task reward at or above the env's threshold),
    from its start or, for a resume task, from its snapshot."""

    factory: Callable[[], Env]
    oracle: Callable[[], Policy]

    def __call__(self, task: Task, snapshot: Snapshot | None = None, /) -> str | None:
        resume_from = None if snapshot is None else [snapshot]
        try:
            [traj] = rollout(self.factory, self.oracle(), tasks=[task], seeds=[0], resume_from=resume_from)
        except Exception as e:  # noqa: BLE001 - a broken task is rejected, not a crash
            return f"{type(e).__name__}: {e}"
        if traj.error is not None:
            return f"the oracle's episode failed: {traj.error}"
        if not traj.success:
            return f"the oracle did not solve it (task reward {traj.task_reward}, failure {traj.failure.value})"
        return None


def make_variant(env: Env, task: Task, rng: np.random.Generator, validate: Validator) -> tuple[Task | None, str | None]:
    """``env.mutate(task, rng)`` if it validates: (variant, None), or (None, why not)."""
    try:
        variant = env.mutate(task, rng)
    except Exception as e:  # noqa: BLE001
        return None, f"mutate raised {type(e).__name__}: {e}"
    if variant is None:
        return None, "the env makes no variants"
    try:  # made with model_copy, nothing checked it: an id past its bound would not read back
        variant = Task.model_validate(variant.model_dump())
    except (AttributeError, ValueError) as e:  # ValidationError is a ValueError
        return None, f"mutate made an invalid task: {e}"
    if variant.id == task.id:
        return None, f"the variant kept the id {task.id!r}"
    if (variant.prompt, variant.payload) == (task.prompt, task.payload):
        return None, f"the variant is {task.id!r} again under a new id"  # a second record and weight for one task
    reason = check(validate, variant)
    return (None, reason) if reason is not None else (variant, None)
