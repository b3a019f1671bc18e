import random

import pytest

from agentenv import EnvCheckError, State, check_env, tool_call_text
from tests.toy_envs import CounterEnv, CounterState

PLAN = [tool_call_text("add", amount=1), tool_call_text("add", amount=1, note="x"), tool_call_text("submit")]


def test_a_conforming_env_passes_with_a_report():
    report = check_env(CounterEnv(), actions=PLAN)
    assert report.passed == ("determinism", "snapshot", "bad actions", "episode end")
    assert report.env == "CounterEnv" and report.seed == 0 and report.actions == 3
    assert str(report) == "CounterEnv passes determinism, snapshot, bad actions, episode end (seed 0, 3 actions)"
    assert check_env(CounterEnv()).actions == 2  # default plan: one call per tool from its schema


def test_nondeterministic_reset_is_caught():
    class Unseeded(CounterEnv):
        def initial_state(self, task):
            return CounterState(count=random.randrange(10**9))  # ignores self.np_random

    with pytest.raises(EnvCheckError, match="determinism"):
        check_env(Unseeded(), actions=PLAN)


def test_state_outside_the_model_breaks_snapshots():
    class Leaky(CounterEnv):
        hidden = 0

        def step_rewards(self, outcomes):
            self.hidden += 1  # not in State, not in snapshot_external
            return {"progress": float(self.hidden)}

    with pytest.raises(EnvCheckError, match="snapshot: restoring the snapshot taken at turn"):
        check_env(Leaky(), actions=PLAN)


def test_non_finite_rewards_are_caught():
    class NaN(CounterEnv):
        def step_rewards(self, outcomes):
            return {"progress": float("nan")}

    with pytest.raises(EnvCheckError, match="finite"):
        check_env(NaN(), actions=PLAN)


def test_the_checker_leaves_the_env_open_for_its_owner():
    env = CounterEnv()
    check_env(env, seed=1, actions=PLAN)
    env.reset(seed=1, options={"task": "t2"})  # still usable
    *_, info = env.step(tool_call_text("add", amount=4))
    assert info["error"] is None and env.state.count == 4
    env.close()


def test_checker_reports_a_bad_verifier():
    class BadVerify(CounterEnv):
        def verify(self, task):
            return {"score": 1.0}

    with pytest.raises(EnvCheckError, match="'task' key"):
        check_env(BadVerify(), actions=PLAN)


class UnserialisableState(State):
    items: set[int] = set()


def test_state_must_json_round_trip():
    class SetEnv(CounterEnv):
        state_type = UnserialisableState

        def initial_state(self, task):
            return UnserialisableState(items={3, 1, 2})

        def verify(self, task):
            return 0.0

    # sets dump to lists and come back as sets: this one round-trips, so it passes
    check_env(SetEnv(), actions=[tool_call_text("submit")])


def test_a_plan_that_ends_the_episode_early_is_checked_up_to_its_end():
    # 666 ends the episode as infra on the first action; the rest of the plan is never stepped
    plan = [tool_call_text("add", amount=666), tool_call_text("add", amount=1), tool_call_text("submit")]
    assert check_env(CounterEnv(), actions=plan).passed == ("determinism", "snapshot", "bad actions", "episode end")
