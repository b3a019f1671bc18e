"""The thread executor (``executor="thread"``, the default): envs in this process.

Each round it starts episodes in the free slots, asks the policy for the actions of
every live episode in one call, steps the envs concurrently in a thread pool (env
steps are I/O: containers, HTTP services, browsers), and finishes the episodes that
ended, recording each as it ends. The env side is `EnvStepper`, which each Ray actor
runs too, so an episode behaves the same with either executor.

Left out: processes (a slow pure-Python env holds the GIL; the Ray executor gives
each actor its own process).
"""

from __future__ import annotations

from collections import deque

from agentenv.core.policy import Policy
from agentenv.rollout.episode import Episode, ask_policy, asked_task_ids, check_task_ids
from agentenv.rollout.executor import RolloutJob
from agentenv.rollout.recorder import Recorder
from agentenv.rollout.stepper import EnvStepper

__all__ = ["ThreadExecutor"]


class ThreadExecutor:
    """Runs a rollout's envs in this process, stepped by a thread pool of ``job.threads``
    threads (default: one per live episode). Holds nothing between rollouts."""

    def run(self, job: RolloutJob, policy: Policy, recorder: Recorder) -> None:
        stepper = EnvStepper(
            job.env_id, job.factory, keep_snapshots=job.keep_snapshots, threads=job.threads or job.concurrency
        )
        try:
            asked = asked_task_ids(job.episodes)
            if asked:  # checked on an env made here, which the first episode then gets
                env_name, known = stepper.task_ids()
                check_task_ids(asked, known, env_name)
            recorder.open()
            _Rounds(job, policy, recorder, stepper).run()
        finally:
            stepper.close()


class _Rounds:
    """The episodes of one rollout waiting and live: `start_episodes` fills the free
    slots, `step` asks the policy once for every live episode and applies the actions,
    and each episode that ended is finished and recorded at once."""

    def __init__(self, job: RolloutJob, policy: Policy, recorder: Recorder, stepper: EnvStepper) -> None:
        self.policy, self.recorder, self.stepper = policy, recorder, stepper
        self.concurrency = job.concurrency
        self.pending = deque(job.episodes)
        self.live: list[Episode] = []

    def run(self) -> None:
        while self.pending or self.live:
            self.start_episodes()
            if self.live:
                self.step()

    def start_episodes(self) -> None:
        starting: list[Episode] = []
        while self.pending and len(self.live) + len(starting) < self.concurrency:
            starting.append(self.pending.popleft())
        self.stepper.start(starting)
        self.live += self.finished_removed(starting)

    def step(self) -> None:
        outputs = ask_policy(self.policy, [ep.conversation() for ep in self.live])
        self.stepper.advance(list(zip(self.live, outputs, strict=True)))
        self.live = self.finished_removed(self.live)

    def finished_removed(self, episodes: list[Episode]) -> list[Episode]:
        """Finish and record the episodes that are done; the ones that go on, in order."""
        going_on = []
        for ep in episodes:
            if ep.done:
                self.recorder.record(ep.index, self.stepper.finish(ep))
            else:
                going_on.append(ep)
        return going_on
