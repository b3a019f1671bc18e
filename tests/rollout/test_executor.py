"""The `Executor` protocol: `rollout`'s ``executor`` takes a name or an executor of one's own."""

from __future__ import annotations

import pytest

from agentenv import ScriptedPolicy, Trajectory, rollout, tool_call_text
from agentenv.core.policy import Policy
from agentenv.rollout import EnvStepper, Executor, Recorder, RolloutJob, ask_policy
from tests.toy_envs import CounterEnv


def reach_two(conversation):
    """Solves task t0 (reach 2) in three turns; other tasks end wrong."""
    return tool_call_text("add", amount=1) if conversation.turn < 2 else tool_call_text("submit")


class OneAtATime:
    """A user's executor, built from the public pieces: one episode at a time, in this thread."""

    def __init__(self) -> None:
        self.jobs: list[RolloutJob] = []
        self.batches: list[int] = []

    def run(self, job: RolloutJob, policy: Policy, recorder: Recorder) -> None:
        self.jobs.append(job)
        stepper = EnvStepper(job.env_id, job.factory, keep_snapshots=job.keep_snapshots, threads=1)
        recorder.open()
        try:
            for ep in job.episodes:
                stepper.start([ep])
                while not ep.done:
                    outputs = ask_policy(policy, [ep.conversation()])
                    self.batches.append(len(outputs))
                    stepper.advance([(ep, outputs[0])])
                recorder.record(ep.index, stepper.finish(ep))
        finally:
            stepper.close()


def _outcome(traj: Trajectory) -> tuple:
    return traj.task.id, traj.seed, traj.failure, traj.rewards, traj.messages


def test_an_executor_of_ones_own_runs_the_rollout(tmp_path):
    mine, out, seen = OneAtATime(), tmp_path / "trajs.jsonl", []
    tasks = ["t0", "t1", "t0"]
    trajs = rollout(CounterEnv, ScriptedPolicy(reach_two), tasks=tasks, executor=mine, out=out, on_episode=seen.append)
    assert isinstance(mine, Executor)
    assert len(mine.jobs) == 1 and mine.batches and set(mine.batches) == {1}  # it ran them, its own way
    # The same episodes as with threads, in the order asked for, written out and reported.
    threads = rollout(CounterEnv, ScriptedPolicy(reach_two), tasks=tasks)
    assert [_outcome(t) for t in trajs] == [_outcome(t) for t in threads]
    assert [t.success for t in trajs] == [True, False, True]
    assert [_outcome(t) for t in Trajectory.read_jsonl(out)] == [_outcome(t) for t in trajs]
    assert seen == trajs


def test_the_job_carries_the_checked_arguments():
    mine = OneAtATime()
    rollout("tests.toy_envs:CounterEnv", ScriptedPolicy(reach_two), n=3, seed=4, concurrency=2, executor=mine)
    (job,) = mine.jobs
    assert job.env_id == "tests.toy_envs:CounterEnv" and job.concurrency == 2 and job.threads is None
    assert [(ep.index, ep.seed) for ep in job.episodes] == [(0, 4), (1, 5), (2, 6)]


def test_an_unknown_executor_name_fails_with_a_did_you_mean():
    with pytest.raises(ValueError, match=r"executor must be one of \['thread', 'ray'\].*Did you mean 'thread'\?"):
        rollout(CounterEnv, ScriptedPolicy(reach_two), n=1, executor="threads")
    with pytest.raises(ValueError, match="Did you mean 'ray'"):
        rollout(CounterEnv, ScriptedPolicy(reach_two), n=1, executor="rey")


def test_an_object_that_is_no_executor_is_refused_with_what_it_is():
    with pytest.raises(TypeError, match=r"an Executor \(an object with run\(job, policy, recorder\)\), got int"):
        rollout(CounterEnv, ScriptedPolicy(reach_two), n=1, executor=4)


def test_a_mistyped_task_id_fails_before_any_episode_runs_and_makes_no_file(tmp_path):
    out = tmp_path / "trajs.jsonl"
    with pytest.raises(KeyError, match="CounterEnv has no task 't9'"):
        rollout(CounterEnv, ScriptedPolicy(reach_two), tasks=["t0", "t9"], out=out)
    assert not out.exists()
