"""`rollout`: many episodes at once, one batched policy call per turn.

`rollout` checks its arguments, plans the episodes (`agentenv.rollout.episode`),
picks the executor that runs them (`agentenv.rollout.executor`: threads in this
process by default, Ray actors with ``executor="ray"``, or any `Executor` passed
in) and returns what the `Recorder` collected, in the order asked for. How an
episode that fails becomes data, and how snapshots are kept, is the episode's
business (`agentenv.rollout.episode`); how the rounds run, the executor's.

Left out: retries of infra failures (the failure miner re-queues them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentenv.core.env import Snapshot
from agentenv.core.policy import Policy
from agentenv.core.task import Task, did_you_mean
from agentenv.core.trajectory import Trajectory
from agentenv.rollout.episode import EnvFactory, env_factory, plan_episodes
from agentenv.rollout.executor import Executor, RolloutJob
from agentenv.rollout.recorder import Recorder
from agentenv.rollout.threads import ThreadExecutor

__all__ = ["EXECUTORS", "rollout"]

EXECUTORS = ("thread", "ray")
"""The executors `rollout` knows by name."""


def rollout(
    env: str | EnvFactory,
    policy: Policy,
    *,
    n: int | None = None,
    tasks: Sequence[Task | str | None] | None = None,
    seeds: Sequence[int | None] | None = None,
    seed: int = 0,
    concurrency: int | None = None,
    max_workers: int | None = None,
    out: str | Path | None = None,
    keep_snapshots: bool = False,
    resume_from: Sequence[Snapshot | None] | None = None,
    on_episode: Callable[[Trajectory], None] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    executor: str | Executor = "thread",
) -> list[Trajectory]:
    """Run episodes and return their trajectories, in the order asked for.

    Args:
        env: A registered env id (or any name `agentenv.registry.resolve` takes, such
            as ``module:Class``) or a factory returning a fresh `Env`.
        policy: Called once per turn with all live episodes.
        n: Number of episodes (defaults to the length of ``tasks`` or ``seeds``).
        tasks: The task (or task id) of each episode; None lets the env draw one.
        seeds: The reset seed of each episode; defaults to ``seed + i``.
        seed: Base seed used when ``seeds`` is not given.
        concurrency: Episodes live at once (default: all of them).
        max_workers: Threads stepping envs (default: ``concurrency``).
        out: A JSONL file; each trajectory is appended and flushed as it finishes.
        keep_snapshots: Keep an env snapshot before every turn (for the failure miner).
        resume_from: Per episode, a snapshot to start from instead of the task's first
            turn (the failure miner's resume tasks); its task entry, if any, relabels it.
        on_episode: Called with each trajectory as it finishes (progress bars).
        env_kwargs: Keyword arguments for `agentenv.make` when ``env`` is an id.
        executor: Where the envs run: ``"thread"`` (this process, stepped by a thread
            pool), ``"ray"`` (Ray actors made for this call, see `agentenv.rollout.ray`),
            a `agentenv.rollout.ray.RayExecutor` whose actors outlive the call, or any
            other `agentenv.rollout.Executor`. With Ray, ``max_workers`` is the threads
            of each actor.
    """
    env_id, factory = env_factory(env, env_kwargs or {})
    episodes = plan_episodes(n, tasks, seeds, seed, resume_from)
    concurrency = max(1, min(concurrency or len(episodes), len(episodes))) if episodes else 1
    if max_workers is not None and max_workers < 1:
        raise ValueError(f"max_workers must be >= 1, got {max_workers}")
    job = RolloutJob(env, env_kwargs or {}, env_id, factory, episodes, concurrency, max_workers, keep_snapshots)
    recorder = Recorder(len(episodes), out, on_episode)
    with _chosen(executor) as chosen:
        try:
            chosen.run(job, policy, recorder)
        finally:
            recorder.close()
    return recorder.trajectories()


@contextmanager
def _chosen(executor: str | Executor) -> Iterator[Executor]:
    """The executor ``executor`` names (one made here for the call is closed after it),
    or ``executor`` itself."""
    if not isinstance(executor, str):
        if not isinstance(executor, Executor):
            raise TypeError(
                f"executor must be one of {list(EXECUTORS)} or an Executor (an object with "
                f"run(job, policy, recorder)), got {type(executor).__name__}"
            )
        yield executor
    elif executor == "thread":
        yield ThreadExecutor()
    elif executor == "ray":
        from agentenv.rollout.ray import RayExecutor  # Ray, an optional extra, loads on first use

        with RayExecutor() as ray_executor:
            yield ray_executor
    else:
        hint = did_you_mean(executor, EXECUTORS)
        raise ValueError(f"executor must be one of {list(EXECUTORS)} or an Executor, got {executor!r}.{hint}")
