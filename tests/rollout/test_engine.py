"""`agentenv.rollout.rollout` with the thread executor: batching, failures as data, the JSONL file."""

import functools
import json
import threading

import pytest

import agentenv
from agentenv import Generation, PolicyFailure, ScriptedPolicy, Task, TaskSet, Trajectory, rollout, tool_call_text
from tests.toy_envs import CounterEnv, CounterState


class Recording:
    """Wraps a policy and records the size of every batch it is asked for."""

    def __init__(self, inner):
        self.inner, self.batches = inner, []

    def act(self, conversations):
        self.batches.append(len(conversations))
        return self.inner.act(conversations)


def test_oracle_solves_every_episode_and_order_is_kept():
    policy = Recording(agentenv.spec("arithmetic-v0").make_oracle())
    trajs = rollout("arithmetic-v0", policy, n=12, seed=100)
    assert [t.seed for t in trajs] == list(range(100, 112))
    assert all(t.success and t.failure == "none" and t.task_reward == 1.0 for t in trajs)
    assert policy.batches[0] == 12  # one call per turn with every live episode
    assert len(policy.batches) == max(t.turns for t in trajs)


def test_concurrency_limits_live_episodes():
    policy = Recording(agentenv.spec("guess-number-v0").make_oracle())
    trajs = rollout("guess-number-v0", policy, n=10, concurrency=3)
    assert len(trajs) == 10 and all(t.success for t in trajs)
    assert max(policy.batches) == 3


def test_an_exception_in_one_env_fails_only_that_episode():
    class Flaky(CounterEnv):
        def initial_state(self, task):
            if task.id == "t1":
                raise RuntimeError("disk on fire")
            return super().initial_state(task)

    policy = ScriptedPolicy(lambda c: tool_call_text("add", amount=1) if c.turn < 2 else tool_call_text("submit"))
    trajs = rollout(Flaky, policy, tasks=["t0", "t1", "t0"])
    assert [t.failure for t in trajs] == ["none", "infra", "none"]
    assert "RuntimeError: disk on fire" in trajs[1].error and not trajs[1].success
    assert trajs[1].task.id == "t1"


def test_an_env_reused_for_an_episode_that_fails_to_start_records_nothing_of_the_episode_before():
    # One slot: t1 gets the env t0 finished with. Before, t1's record held t0's conversation.
    class Flaky(CounterEnv):
        def initial_state(self, task):
            if task.id == "t1":
                raise RuntimeError("disk on fire")
            return super().initial_state(task)

    policy = ScriptedPolicy(lambda c: tool_call_text("add", amount=1) if c.turn < 2 else tool_call_text("submit"))
    first, failed = rollout(Flaky, policy, tasks=["t0", "t1"], concurrency=1)
    assert first.success and first.messages
    assert failed.failure == "infra" and "disk on fire" in failed.error
    assert failed.task.id == "t1" and failed.task.prompt == "Reach 3."
    assert failed.messages == [] and failed.transitions == []


def test_an_env_that_fails_to_start_is_an_infra_failure():
    def factory():
        raise OSError("no containers left")

    trajs = rollout(factory, ScriptedPolicy(lambda c: ""), n=2)
    assert [t.failure for t in trajs] == ["infra", "infra"] and "no containers left" in trajs[0].error


def test_policy_failures_end_the_episode_as_infra():
    policy = ScriptedPolicy(lambda c: PolicyFailure(error="HTTP 503") if c.id == 0 else tool_call_text("submit"))
    trajs = rollout(CounterEnv, policy, tasks=["t0", "t0"])
    assert trajs[0].failure == "infra" and trajs[0].error == "policy: HTTP 503"
    assert trajs[1].failure == "policy"


class _Unreadable(Generation):
    def __getattribute__(self, name):  # a subclass may override anything
        if name == "action":
            raise RuntimeError("no action here")
        return super().__getattribute__(name)


class _NoClass:
    @property
    def __class__(self):  # isinstance() reads it: whatever it raises, raises there
        raise RuntimeError("no class here")


class _FailureUnread(PolicyFailure):
    def __getattribute__(self, name):
        if name == "error":
            raise RuntimeError("no error here")
        return super().__getattribute__(name)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda: Generation.model_construct(token_ids=[1]), id="generation-without-action"),
        pytest.param(lambda: _Unreadable(action="x"), id="action-that-raises"),
        pytest.param(lambda: Generation.model_construct(action="x", logprobs=[float("nan")]), id="nan-logprob"),
        pytest.param(
            lambda: Generation.model_construct(action="x", token_ids=[10**5000]), id="token-id-past-any-vocab"
        ),
        pytest.param(lambda: PolicyFailure.model_construct(), id="failure-without-error"),
        pytest.param(_NoClass, id="class-that-raises"),
        pytest.param(lambda: _FailureUnread(error="x"), id="failure-whose-error-raises"),
    ],
)
def test_a_policy_output_that_cannot_be_taken_fails_its_episode_alone_and_every_line_reads_back(tmp_path, bad):
    # Such an output is the policy's code failing, like a policy that raises: infra for
    # that episode; before, reading it ended the whole rollout, or wrote a line no
    # reader took back.
    out = tmp_path / "trajs.jsonl"

    def act(c):
        if c.id == 0:
            return bad()
        return tool_call_text("add", amount=1) if c.turn < 2 else tool_call_text("submit")  # reaches 2

    policy = ScriptedPolicy(act)
    trajs = rollout(CounterEnv, policy, tasks=["t0", "t0", "t0"], out=out)
    assert [t.failure for t in trajs] == ["infra", "none", "none"] and trajs[0].error.startswith("policy: ")
    assert [t.failure for t in Trajectory.read_jsonl(out)] == ["infra", "none", "none"]


def test_generations_hold_vocabulary_indices_and_finite_log_probs():
    Generation(action="x", prompt_ids=[0, 5], token_ids=[2**32 - 1], logprobs=[-1e30, 0.0])
    for bad in ({"token_ids": [-1]}, {"prompt_ids": [2**32]}, {"logprobs": [float("-inf")]}):
        with pytest.raises(ValueError):
            Generation(action="x", **bad)


def test_a_policy_that_writes_into_what_it_is_shown_changes_neither_the_task_nor_the_record():
    def forger(c):
        c.task.payload["target"] = 0  # verify would read 0: solved without a move
        c.messages[1]["content"] = "Reach 0."
        c.tools.clear()
        return tool_call_text("submit")

    trajs = rollout(CounterEnv, ScriptedPolicy(forger), tasks=["t0", "t0"], concurrency=1)
    assert [t.task_reward for t in trajs] == [0.0, 0.0]
    assert [t.task.payload["target"] for t in trajs] == [2, 2]
    assert all(t.messages[1]["content"] == "Reach 2." for t in trajs)
    seen = []
    rollout(CounterEnv, ScriptedPolicy(lambda c: seen.append(len(c.tools)) or tool_call_text("submit")), tasks=["t0"])
    assert seen == [2]


def test_a_task_whose_payload_cannot_be_copied_is_one_error_naming_it():
    locked = Task(id="locked", prompt="Reach 2.", payload={"target": 2, "lock": threading.Lock()})
    policy = ScriptedPolicy(lambda c: tool_call_text("submit"))
    with pytest.raises(TypeError, match=r"CounterEnv's task 'locked' cannot be copied .*cannot pickle '_thread.lock'"):
        rollout(functools.partial(CounterEnv, tasks=TaskSet([locked])), policy, n=1)


def test_trajectories_are_appended_and_flushed_as_each_episode_ends(tmp_path):
    out = tmp_path / "trajs.jsonl"
    out.write_text("")
    lines_seen = []
    rollout(
        "arithmetic-v0",
        agentenv.spec("arithmetic-v0").make_oracle(),
        n=6,
        concurrency=2,
        out=out,
        on_episode=lambda t: lines_seen.append(len(out.read_text().splitlines())),
    )
    assert lines_seen == [1, 2, 3, 4, 5, 6]
    rollout("arithmetic-v0", agentenv.spec("arithmetic-v0").make_oracle(), n=2, out=out)
    loaded = list(Trajectory.read_jsonl(out))
    assert len(loaded) == 8 and all(t.success for t in loaded)


def test_a_crash_of_the_caller_keeps_finished_episodes(tmp_path):
    out = tmp_path / "trajs.jsonl"

    def boom(traj):
        if traj.seed == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rollout(
            "arithmetic-v0", agentenv.spec("arithmetic-v0").make_oracle(), n=4, concurrency=1, out=out, on_episode=boom
        )
    assert [t.seed for t in Trajectory.read_jsonl(out)] == [0, 1]


def test_trajectory_json_round_trip_keeps_everything():
    gen = ScriptedPolicy(
        lambda c: Generation(
            action=tool_call_text("submit"), token_ids=[1, 2], logprobs=[-0.5, -0.1], finish_reason="stop"
        )
    )
    (traj,) = rollout(CounterEnv, gen, tasks=["t0"], keep_snapshots=True)
    again = Trajectory.from_json(traj.to_json())
    assert again == traj
    assert again.generations[0].token_ids == [1, 2] and len(again.snapshots) == 1
    assert json.loads(traj.to_json())["failure"] == "policy"
    assert traj.turns == 1 and traj.total_reward == traj.rewards[0]


def test_snapshots_restart_an_episode_at_any_turn():
    oracle = agentenv.spec("guess-number-v0").make_oracle()
    (traj,) = rollout("guess-number-v0", oracle, n=1, seed=5, keep_snapshots=True)
    assert len(traj.snapshots) == traj.turns
    env = agentenv.make("guess-number-v0")
    k = traj.turns - 1
    env.restore(traj.snapshots[k])
    assert env.messages == traj.messages[: len(env.messages)]
    *_, info = env.step(traj.transitions[k].action)
    assert info["success"] is True


def test_steps_run_concurrently():
    barrier = threading.Barrier(4, timeout=5)

    class Meeting(CounterEnv):
        def step_rewards(self, outcomes):
            barrier.wait()  # deadlocks (and times out) unless 4 steps run at once
            return {}

    trajs = rollout(Meeting, ScriptedPolicy(lambda c: tool_call_text("submit")), tasks=["t0"] * 4)
    assert all(t.failure == "policy" for t in trajs)


def test_bad_arguments():
    oracle = agentenv.spec("arithmetic-v0").make_oracle()
    with pytest.raises(ValueError, match="give n, tasks or seeds"):
        rollout("arithmetic-v0", oracle)
    with pytest.raises(agentenv.UnknownEnvError):
        rollout("nope-v0", oracle, n=1)
    with pytest.raises(KeyError, match="no task 'arith-0-99999'"):
        rollout("arithmetic-v0", oracle, tasks=["arith-0-1", "arith-0-99999"])
    with pytest.raises(ValueError, match="must both have n=2"):
        rollout("arithmetic-v0", oracle, n=2, seeds=[1])
    [traj] = rollout("arithmetic-v0", Silent(), n=1)  # a broken policy fails its episodes, as data
    assert traj.failure == "infra" and traj.error == "policy: the policy returned 0 actions for 1 conversations"


class Silent:
    def act(self, conversations):
        return []


class Unsaveable(CounterEnv):
    """Its snapshot fails once the counter passes 1: as a sandbox does when what the agent
    made cannot be archived (a ValueError: SandboxError is one), or dead (an InfraError)."""

    error: type[Exception] = ValueError

    def snapshot_external(self):
        if self.state.count > 1:
            raise self.error("the workspace cannot be archived")
        return None


def test_a_snapshot_refused_for_what_the_episode_made_is_left_out_not_infra():
    policy = ScriptedPolicy.replay([tool_call_text("add", amount=2), tool_call_text("add", amount=-2)] * 2)
    (traj,) = rollout(Unsaveable, policy, tasks=["t0"], keep_snapshots=True)  # target 2: never reached at the end
    assert traj.failure == "truncated" and traj.error is None, traj.error
    assert [s.turn for s in traj.snapshots] == [0, 2, 4]  # turns 1 and 3 began with count 2: no snapshot


def test_a_snapshot_that_fails_for_the_infrastructure_is_still_infra():
    class Dead(Unsaveable):
        error = agentenv.InfraError

    (traj,) = rollout(Dead, ScriptedPolicy.replay([tool_call_text("add", amount=2)]), tasks=["t0"], keep_snapshots=True)
    assert traj.failure == "infra" and "cannot be archived" in traj.error


class Powers(CounterEnv):
    """Keeps an integer far past the digit limit of str() in its state (10**5000)."""

    def initial_state(self, task):
        return CounterState(count=10**5000)


def test_a_line_with_an_integer_past_the_digit_limit_reads_back(tmp_path):
    out = tmp_path / "trajs.jsonl"
    rollout(Powers, ScriptedPolicy.replay([tool_call_text("submit")]), tasks=["t0"], out=out, keep_snapshots=True)
    (back,) = Trajectory.read_jsonl(out)  # json writes such a line but no reader takes it back
    assert back.task.id == "t0" and back.failure == "policy" and len(back.snapshots) == 1
    assert back.snapshots[0].state["count"] == "<int of 16610 bits>"
