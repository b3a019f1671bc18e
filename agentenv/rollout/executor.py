"""The contract between `rollout` and where the envs run: the `Executor` protocol.

`rollout` checks its arguments, plans the episodes and hands them to an executor as a
`RolloutJob`, with the policy and a `Recorder`. The executor runs the rounds (start
episodes in the free slots, ask the policy once for every live episode, step the
envs, finish the episodes that ended) wherever its envs are, and records each
trajectory as it finishes. Built in: `agentenv.rollout.threads.ThreadExecutor` (this
process, ``executor="thread"``) and `agentenv.rollout.ray.RayExecutor` (Ray actors,
``executor="ray"``); any object with the same ``run`` method is an executor too.

Left out: the executors themselves, and choosing one by name (`rollout` does, so
that this module imports neither and Ray stays unimported until asked for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentenv.core.policy import Policy
from agentenv.rollout.episode import EnvFactory, Episode
from agentenv.rollout.recorder import Recorder

__all__ = ["Executor", "RolloutJob"]


@dataclass(frozen=True, slots=True)
class RolloutJob:
    """What one `rollout` call asks an executor to run, its arguments checked."""

    env: str | EnvFactory
    """The env as the caller named it: an id (or ``module:Class``) or a factory. An
    executor in other processes builds its envs from this and ``env_kwargs``."""
    env_kwargs: dict[str, Any]
    env_id: str | None
    """The registered id recorded in each trajectory (None for a factory)."""
    factory: EnvFactory
    """Fresh envs in this process, the registry already consulted."""
    episodes: list[Episode]
    """The episodes in the order asked for; ``Episode.index`` is each one's place."""
    concurrency: int
    """Episodes live at once, at most (at least 1)."""
    threads: int | None
    """``rollout``'s ``max_workers``: threads stepping envs (None: the executor's default)."""
    keep_snapshots: bool


@runtime_checkable
class Executor(Protocol):
    """Runs a rollout's episodes: anything with this ``run`` can be `rollout`'s ``executor``."""

    def run(self, job: RolloutJob, policy: Policy, recorder: Recorder) -> None:
        """Run every episode of ``job``, at most ``job.concurrency`` live at once, asking
        ``policy`` once per round for all of them (`agentenv.rollout.ask_policy`), and
        call ``recorder.record(episode.index, trajectory)`` as each finishes. Call
        ``recorder.open()`` once the job is known to run. A failure inside an episode
        is that episode's data (see `agentenv.rollout.episode`); the caller closes the
        recorder."""
        ...
