"""The env side of a rollout: the envs of the live episodes, stepped concurrently.

`EnvStepper` is what runs next to the envs: the thread executor holds one in this
process, and each Ray actor holds one on its node. It makes envs (or hands an idle
one to the next episode), starts and advances episodes in a thread pool (env steps
are I/O: containers, HTTP services, browsers), and finishes an episode into its
`Trajectory`: the one place an ended episode's env is kept for the next episode, or
closed if it raised (it may be broken).

Left out: asking the policy and writing trajectories out (the caller's side, which
stays in the caller's process with either executor), and how many episodes live at
once (the executor decides; the stepper steps what it is given).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentenv.core.env import Env
from agentenv.core.policy import PolicyOutput
from agentenv.core.trajectory import Trajectory
from agentenv.rollout.episode import EnvFactory, Episode, close_quietly

__all__ = ["EnvStepper"]


class EnvStepper:
    """The envs of one rollout in one process, and a thread pool to step them with.

    ``live`` holds the episodes started and not yet finished, by index; `close` closes
    their envs and the idle ones, so a rollout that stops early leaves none open."""

    def __init__(self, env_id: str | None, factory: EnvFactory, *, keep_snapshots: bool, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.env_id, self.factory, self.keep_snapshots = env_id, factory, keep_snapshots
        self.live: dict[int, Episode] = {}
        self.idle: list[Env] = []
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="agentenv-step")

    def task_ids(self) -> tuple[str, list[str]]:
        """The env's name and its task ids, from an env made now and kept for the first episode."""
        probe = self.factory()
        self.idle.append(probe)
        return type(probe).__name__, list(probe.tasks.ids)

    def start(self, episodes: Sequence[Episode]) -> None:
        """Reset each episode's env, concurrently: an idle env if there is one, else a new one.
        An episode whose start failed is ``done`` (see `Episode.start`): finish it."""
        for ep in episodes:
            ep.env = self.idle.pop() if self.idle else None
            self.live[ep.index] = ep
        _each(self.pool, lambda ep: ep.start(self.factory, self.keep_snapshots), list(episodes))

    def advance(self, outputs: Sequence[tuple[Episode, PolicyOutput]]) -> None:
        """Step each episode with the policy's output for it, concurrently."""
        _each(self.pool, lambda pair: pair[0].advance(pair[1], self.keep_snapshots), list(outputs))

    def finish(self, ep: Episode) -> Trajectory:
        """The trajectory of an episode that is ``done``; its env goes to the next episode,
        or is closed if it raised (an env that raised may be broken: never reuse it)."""
        traj = ep.trajectory(self.env_id)
        self.live.pop(ep.index, None)
        if ep.env is not None:
            if ep.error is None:
                self.idle.append(ep.env)
            else:
                close_quietly(ep.env)
            ep.env = None
        return traj

    def close(self) -> None:
        """Stop the thread pool, then close every env, live or idle."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        for env in [ep.env for ep in self.live.values() if ep.env is not None] + self.idle:
            close_quietly(env)
        self.live, self.idle = {}, []


def _each(pool: ThreadPoolExecutor, fn: Callable[[Any], None], items: list[Any]) -> None:
    """``fn`` on every item, concurrently in ``pool``."""
    if len(items) == 1:
        fn(items[0])  # no thread hop for a single episode
    elif items:
        list(pool.map(fn, items))
