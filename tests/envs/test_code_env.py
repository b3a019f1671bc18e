"""The code env: the contract, the oracle on every shipped task, snapshots, bad input, rewards."""

from __future__ import annotations

import pytest

import agentenv
from agentenv import check_env, tool_call_text
from agentenv.envs.code import CodeEnv, CodeSandboxes, default_tasks
from tests.envs._code import ADD_TASK, require, sandboxes, submit
from tests.envs._oracle import oracle_plan

pytestmark = pytest.mark.slow  # sandboxes on every backend


@pytest.fixture(scope="module", params=["docker", "process"])
def env(request):
    require(request.param)
    env = CodeEnv(sandboxes=sandboxes(request.param), run_timeout_s=1)
    yield env
    env.close()
    env.sandboxes.close()


def test_passes_check_env_with_the_oracles_actions(env):
    with CodeEnv(sandboxes=env.sandboxes) as checked:  # closed after: its workspace goes back to the pool
        check_env(checked, seed=3, actions=oracle_plan("code-v0", 3))


def test_passes_check_env_with_default_actions(env):
    with CodeEnv(sandboxes=env.sandboxes) as checked:
        check_env(checked)


@pytest.mark.docker
def test_oracle_reaches_reward_1_on_every_shipped_task():
    require("docker")
    tasks = default_tasks()
    with CodeSandboxes("auto", workspaces=4, verifiers=2) as pools:
        trajs = agentenv.rollout(
            lambda: CodeEnv(sandboxes=pools), agentenv.spec("code-v0").make_oracle(), tasks=tasks.ids, concurrency=4
        )
    assert [(t.task.id, t.failure, t.error) for t in trajs if t.task_reward != 1.0] == []


def test_oracle_on_the_process_backend():
    tasks = default_tasks()[::40]
    with CodeSandboxes("process", workspaces=2, verifiers=2) as pools:
        trajs = agentenv.rollout(
            lambda: CodeEnv(sandboxes=pools), agentenv.spec("code-v0").make_oracle(), tasks=tasks.ids, concurrency=2
        )
    assert all(t.task_reward == 1.0 for t in trajs)


def test_snapshot_restore_brings_back_the_workspace_files(env):
    env.reset(options={"task": ADD_TASK})
    env.step(tool_call_text("write_file", path="notes/a.txt", content="first"))
    blob = env.snapshot().model_dump_json()
    env.step(tool_call_text("write_file", path="notes/a.txt", content="second"))
    env.step(tool_call_text("run_python", code="open('extra.txt', 'w').write('x')"))
    env.restore(blob)
    assert env.step(tool_call_text("read_file", path="notes/a.txt"))[0][0]["content"] == "first"
    assert "no file" in env.step(tool_call_text("read_file", path="extra.txt"))[0][0]["content"]


@pytest.mark.parametrize(
    "code, expected",
    [
        ("def broken(:\n", "does not parse, nothing was run: SyntaxError"),
        ("x = '\x00'", "does not parse"),
        ("while True:\n    pass\n", "timed out after 1 s"),
        ("print('y' * 10**7)", "[... "),
        ("import sys; sys.stdout.buffer.write(bytes(range(256)) * 1000)", "exit code 0"),
        (
            "f = open('big', 'wb')\nfor _ in range(1024):\n    f.write(b'0' * (1 << 20))",
            "exit code 1",
        ),  # 1 GiB: too big
    ],
)
def test_bad_code_gives_a_clear_observation(env, code, expected):
    env.reset(options={"task": ADD_TASK})
    observation, _, terminated, truncated, info = env.step(tool_call_text("run_python", code=code))
    assert expected in observation[0]["content"]
    assert len(observation[0]["content"]) < 20_000 and "\x00" not in observation[0]["content"]
    assert not (terminated or truncated) and info["error"] is None
    assert "exit code 0" in env.step(tool_call_text("run_python", code="print(1)"))[0][0]["content"]


def test_huge_and_binary_files_read_back_as_clear_observations(env):
    env.reset(options={"task": ADD_TASK})
    env.step(
        tool_call_text(
            "run_python", code="open('b', 'wb').write(bytes(range(256)))\nopen('t', 'w').write('z' * 5_000_000)"
        )
    )
    assert "is not UTF-8 text (256 bytes)" in env.step(tool_call_text("read_file", path="b"))[0][0]["content"]
    text = env.step(tool_call_text("read_file", path="t"))[0][0]["content"]
    assert len(text) < 20_000 and "more characters cut" in text


def test_step_rewards_parse_run_and_progress_only_when_the_visible_pass_rate_rises(env):
    env.reset(options={"task": ADD_TASK})
    rewards = lambda action: env.step(action)[4]["rewards"]  # noqa: E731
    assert rewards(tool_call_text("run_python", code="def (")) | {} == {
        "format": 0.0,
        "parses": 0.0,
        "runs": 0.0,
        "progress": 0.0,
    }
    assert rewards(tool_call_text("run_python", code="print(1)"))["runs"] == 1.0
    env.step(tool_call_text("write_file", path="solution.py", content="def add(a, b):\n    return 3\n"))
    assert rewards(tool_call_text("run_tests"))["progress"] == 0.5
    assert rewards(tool_call_text("run_tests"))["progress"] == 0.0  # no reward for repeating it
    env.step(tool_call_text("write_file", path="solution.py", content="def add(a, b):\n    return a + b\n"))
    assert rewards(tool_call_text("run_tests"))["progress"] == 0.5


LOOKUP_TABLE = "TABLE = {(1, 2): 3, (0, 0): 0}\ndef add(a, b):\n    return TABLE.get((a, b))\n"
PARTIAL = "def add(a, b):\n    return a + b if a >= 0 else 0\n"  # 3 of the 4 hidden tests


@pytest.mark.parametrize(
    ("code", "kept"),
    [(LOOKUP_TABLE, 0.0), (PARTIAL, 0.75), (ADD_TASK.payload["solution"], 1.0)],
    ids=["visible-tests-hard-coded", "partial", "solution"],
)
def test_progress_the_hidden_tests_do_not_confirm_is_taken_back_on_the_last_step(env, code, kept):
    # The prompt shows the visible tests' expected values: a table of them passed every
    # visible test, and its progress (0.5 of the 1.55 a solve returns) was kept.
    write = tool_call_text("write_file", path="solution.py", content=code)
    info = submit(env, code, before=[write, tool_call_text("run_tests")])
    progress = [t.rewards["progress"] for t in env.transitions]
    assert progress == [0.0, 1.0, pytest.approx(kept - 1.0)] and sum(progress) == pytest.approx(kept)
    assert info["task_reward"] == float(kept == 1.0)


def test_hard_coded_progress_is_worth_nothing_to_the_trainer_however_long_the_policy_stalls(env):
    """Discounted, a take-back on the last turn weighs less than the payment it cancels;
    the trainer moves it to the turn that was paid, so stalling to the turn limit after
    hard-coding the visible tests returns what submitting at once does."""
    from agentenv.trainers.advantages import discounted_returns
    from agentenv.trainers.batch import step_rewards

    write = tool_call_text("write_file", path="solution.py", content=LOOKUP_TABLE)
    plans = {
        "submit": [write, tool_call_text("run_tests"), tool_call_text("submit")],
        "stall": [write, tool_call_text("run_tests")] + [tool_call_text("read_file", path="solution.py")] * 30,
    }
    returns = {}
    for name, plan in plans.items():
        env.reset(options={"task": ADD_TASK})
        for action in plan:
            *_, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        assert env.transitions[-1].closing == {"progress": pytest.approx(-1.0)}
        paid = step_rewards(_trajectory(env), env.reward_weights)
        returns[name] = discounted_returns(paid, 0.95)[0]
    assert len(env.transitions) == env.max_turns  # the stalled one ran to the limit
    # what is left is the one-time rewards: parses (0.02, the write) and runs (0.03, the tests)
    assert returns["stall"] == pytest.approx(returns["submit"]) == pytest.approx(0.02 + 0.95 * 0.03)


def _trajectory(env: CodeEnv) -> agentenv.Trajectory:
    transitions = list(env.transitions)
    return agentenv.Trajectory(task=env.task, messages=[], transitions=transitions, failure=agentenv.Failure.POLICY)


def test_progress_is_taken_back_whole_when_the_episode_ends_without_a_submission(env):
    env.reset(options={"task": ADD_TASK})
    env.step(tool_call_text("write_file", path="solution.py", content=ADD_TASK.payload["solution"]))
    for _ in range(env.max_turns - 1):
        *_, truncated, _ = env.step(tool_call_text("run_tests"))
    assert truncated and [t.rewards["progress"] for t in env.transitions][1::14] == [1.0, -1.0]


def test_parses_and_runs_are_paid_once_per_episode_so_running_pass_every_turn_earns_almost_nothing(env):
    # Paid every step, run_python("pass") for 16 turns summed to 0.8: most of a solve.
    env.reset(options={"task": ADD_TASK})
    paid = []
    for _ in range(env.max_turns):
        _, reward, *_, info = env.step(tool_call_text("run_python", code="pass"))
        paid.append((info["rewards"]["parses"], info["rewards"]["runs"], reward))
    assert paid[0] == (1.0, 1.0, pytest.approx(0.05)) and all(p == (0.0, 0.0, 0.0) for p in paid[1:])
    assert env.state.shaped == ["parses", "runs"]


def test_no_submission_scores_zero_and_truncates(env):
    env.reset(options={"task": ADD_TASK})
    for _ in range(env.max_turns):
        *_, terminated, truncated, info = env.step(tool_call_text("run_python", code="pass"))
    assert truncated and not terminated and info["task_reward"] == 0.0 and info["failure"] == "truncated"


def test_made_from_the_registry_without_starting_a_sandbox_and_closed_cleanly():
    env = agentenv.make("code-v0", backend="process")
    assert env.sandboxes._pools == {}  # nothing started before the first reset
    assert submit(env, ADD_TASK.payload["solution"])["task_reward"] == 1.0
    pools = list(env.sandboxes._pools.values())
    env.close()
    assert all(pool._closed for pool in pools)


DEEP_CODE = {"unary chain": "-" * 30000 + "1", "binop chain": "1" + "+1" * 10000, "call chain": "f" + "()" * 10000}


@pytest.mark.parametrize("code", list(DEEP_CODE.values()), ids=list(DEEP_CODE))
def test_code_nested_past_the_compilers_stack_is_an_observation_never_a_crash(env, code):
    # compile() on the host raised RecursionError or MemoryError out of step.
    env.reset(seed=0, options={"task": ADD_TASK})
    obs, _, _, _, info = env.step(tool_call_text("run_python", code=code))
    assert "nested too deeply for the compiler" in obs[0]["content"] and info["rewards"]["parses"] == 0.0
    _, _, _, _, info = env.step(tool_call_text("write_file", path="solution.py", content=code))
    assert info["error"] is None
    *_, terminated, _, info = env.step(tool_call_text("submit", code=code))
    assert terminated and info["failure"] == "policy" and info["task_reward"] == 0.0


def test_a_fifo_named_like_the_solution_is_refused_at_once(env):
    # The runner blocked 60 s opening it, and the episode ended as infra: a way to dodge a failure.
    env.reset(seed=0, options={"task": ADD_TASK})
    env.step(tool_call_text("run_python", code="import os; os.mkfifo('solution.py')"))
    obs, _, _, _, info = env.step(tool_call_text("run_tests"))
    assert info["error_kind"] == "tool" and "not a regular file" in obs[0]["content"]
    obs, _, terminated, truncated, info = env.step(tool_call_text("submit"))
    assert not (terminated or truncated) and info["error_kind"] == "tool" and "not a regular file" in info["error"]
