"""Actions a policy can produce never escape `Env.step`, never pass for infra, and
always serialise; a policy that raises fails only its own episodes.

Each case is one move a trained policy could find: text that breaks a decoder, a
value that breaks an encoder, a tool or a verifier that crashes on what it is given.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import agentenv
from agentenv import Env, ScriptedPolicy, State, Task, ToolCall, ToolError, Trajectory, rollout, tool, tool_call_text
from agentenv.core.env import Snapshot
from agentenv.envs.arithmetic import ArithmeticEnv, make_tasks
from tests.toy_envs import CounterEnv

DEEP = 3000
HUGE = "9" * 5000


class Odd:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


HOSTILE = {
    "5,000-digit integer in the JSON": (
        f'<tool_call>{{"name": "submit", "arguments": {{"answer": {HUGE}}}}}</tool_call>'
    ),
    "5,000-digit integer in a bare JSON call": f'{{"name": "submit", "arguments": {{"answer": {HUGE}}}}}',
    "JSON nested 3,000 deep": '<tool_call>{"name": "submit", "arguments": {"answer": '
    + "[" * DEEP
    + "]" * DEEP
    + "}}</tool_call>",
    "arguments nested 3,000 deep as a string": {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "submit", "arguments": '{"answer": ' + "[" * DEEP + "]" * DEEP + "}"},
            }
        ],
    },
    "lone surrogate in the text": '\udc80<tool_call>{"name": "submit", "arguments": {"answer": 1}}</tool_call>',
    "lone surrogate escaped in the JSON": (
        '<tool_call>{"name": "submit\\udc80", "arguments": {"answer": 1}}</tool_call>'
    ),
    "lone surrogate in an argument": '<tool_call>{"name": "submit", "arguments": {"answer": "\\ud800"}}</tool_call>',
    "NaN": '<tool_call>{"name": "submit", "arguments": {"answer": NaN}}</tool_call>',
    "a ToolCall with a huge integer": ToolCall("submit", {"answer": 10**5000}),
    "a ToolCall with an object": ToolCall("submit", {"answer": Odd()}),
    "a ToolCall with deep nesting": ToolCall("submit", {"answer": json.loads("[" * 500 + "]" * 500)}),
    "a ToolCall with a surrogate key": ToolCall("submit", {"\udc80": 1}),
    "a message whose tool_calls is a number": {"role": "assistant", "content": "x", "tool_calls": 7},
    "a message with non-string keys": {"role": "assistant", "content": "x", (1, 2): "tuple key"},
    "a message holding an object": {"role": "assistant", "content": Odd()},
    "a message with a huge integer": {"role": "assistant", "content": "x", "extra": 10**5000},
    "a message with tool calls of odd shapes": {"role": "assistant", "tool_calls": [1, "x", None, {"function": 3}]},
    "a message nested 3,000 deep": {"role": "assistant", "content": "x", "deep": json.loads("[" * 900 + "]" * 900)},
    "None": None,
    "bytes": b"<tool_call>{}</tool_call>",
    "an object with a hostile repr": Odd(),
    "a str subclass": type("Sneaky", (str,), {"__len__": lambda self: 0})('<tool_call>{"name": 1}</tool_call>'),
}


def _serialises(env: Env) -> None:
    traj = Trajectory(task=env.task, messages=env.messages, transitions=env.transitions, failure="none")
    line = traj.model_dump_json()
    line.encode("utf-8")
    assert Trajectory.model_validate_json(line).turns == len(env.transitions)


@pytest.mark.parametrize("action", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_action_is_a_format_error_that_serialises(action):
    env = ArithmeticEnv(make_tasks(4, seed=1))
    env.reset(seed=0)
    obs, _reward, terminated, truncated, info = env.step(action)
    assert info["error_kind"] == "format", info
    assert info["rewards"]["format"] == -env.format_penalty
    assert not terminated and not truncated
    for message in obs:
        message["content"].encode("utf-8")
    _serialises(env)


@pytest.mark.parametrize("action", list(HOSTILE.values()), ids=list(HOSTILE))
def test_an_episode_of_hostile_actions_ends_as_the_policys_failure_never_infra(action):
    env = ArithmeticEnv(make_tasks(4, seed=1))
    env.reset(seed=0)
    for _ in range(env.max_format_errors):
        *_, terminated, _truncated, info = env.step(action)
    assert terminated and info["failure"] == "format"
    _serialises(env)


class Fragile(State):
    seen: list[str] = []


class FragileEnv(Env[Fragile]):
    """Tools and hooks with the bugs an action can reach."""

    state_type = Fragile
    max_turns = 4

    @tool
    def lookup(self, key: str) -> str:
        """Look a key up."""
        return {"a": "found"}[key]  # KeyError for any other key

    @tool
    def echo(self, value: int) -> object:
        """Return something nobody can show."""
        return {"value": value, "self": Odd(), "nan": math.nan}

    @tool
    def run(self, command: str) -> str:
        """Run a command line."""
        parser = argparse.ArgumentParser(prog="run")
        parser.add_argument("-n", type=int, required=True)
        return str(parser.parse_args(command.split()).n)  # SystemExit(2) for a bad command line

    @tool
    def note(self, text: str) -> str:
        """Keep a note."""
        self.state.seen.append(text)
        return "kept"

    @tool(terminal=True)
    def finish(self, text: str) -> str:
        """Finish."""
        self.state.seen.append(text)
        return "done"

    def step_rewards(self, outcomes):
        if outcomes and outcomes[0].call.name == "echo":
            return {"length": 1.0 / len(self.state.seen)}
        if outcomes and outcomes[0].call.name == "note":
            return {"share": math.inf if self.state.seen[-1] == "inf" else 0.0}
        return {}

    def is_done(self) -> bool:
        return bool(self.state.seen) and int(self.state.seen[-1]) > 99  # ValueError for text

    def verify(self, task: Task) -> Any:
        text = self.state.seen[-1]
        # Slips of a verifier an answer can steer: no return on a branch, numpy's bool, 0/0.
        slips = {"none": None, "close": np.isclose(1.0, 1.0), "nan": math.nan}
        return slips[text] if text in slips else float(int(text) > 0)


ENV_BUGS = {  # action: (error kind, failure, error message start)
    "a tool that raises KeyError": (tool_call_text("lookup", key="zzz"), "tool", None, "the tool 'lookup' failed"),
    "a tool that exits": (tool_call_text("run", command="-n"), "tool", None, "the tool 'run' failed: SystemExit"),
    "a result no encoder takes": (tool_call_text("echo", value=1), None, None, None),
    "a verifier that raises": (tool_call_text("finish", text="x"), None, "policy", "the verifier failed: ValueError"),
    "a verifier that returns None": (tool_call_text("finish", text="none"), None, "policy", "the verifier failed"),
    "a verifier that returns NaN": (tool_call_text("finish", text="nan"), None, "policy", "the verifier failed"),
    "an is_done that raises": (tool_call_text("note", text="x"), None, "policy", "is_done failed: ValueError"),
    "a step reward of inf": (tool_call_text("note", text="inf"), None, "policy", "is_done failed"),
}


@pytest.mark.parametrize("case", list(ENV_BUGS), ids=list(ENV_BUGS))
def test_env_code_that_an_action_crashes_is_the_policys_failure_never_infra(case, caplog):
    action, error_kind, failure, error = ENV_BUGS[case]
    env = FragileEnv([Task(id="t", prompt="go")])
    env.reset(seed=0)
    obs, reward, _terminated, _truncated, info = env.step(action)
    assert (info["error_kind"], info["failure"]) == (error_kind, failure)
    assert failure != "infra" and math.isfinite(reward)
    assert info["error"] == error if error is None else info["error"].startswith(error)
    if failure is not None:
        assert info["task_reward"] == 0.0 and info["success"] is False
    for message in obs:
        message["content"].encode("utf-8")
    _serialises(env)


@pytest.mark.parametrize(
    "action",
    [
        "x" * 10_000_000,
        "é" * 1_000_000,
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "add", "arguments": "1" * 10**6}}]},
        ToolCall("add", {"amount": 1, "note": "n" * 10**6}),
    ],
    ids=["10MB-text", "non-ascii", "message", "tool-call"],
)
def test_an_action_past_the_limit_is_refused_and_recorded_cut_to_the_limit(tmp_path: Path, action):
    env = CounterEnv()
    env.reset(options={"task": "t0"})
    *_, info = env.step(action)
    assert info["error_kind"] == "format" and "characters long; the limit is 32000" in info["error"]
    recorded = env.messages[-2]  # the assistant message, before the error observation
    assert recorded["role"] == "assistant" and 32_000 < len(recorded["content"]) < 32_100
    assert len(json.dumps(env.transitions[-1].action, ensure_ascii=False)) < 33_000
    assert env.state.count == 0  # no call ran


class Wallet(State):
    balance: float = 10.0


class WalletEnv(Env[Wallet]):
    @tool
    def pay(self, amount: float) -> str:
        """Pay out of the balance."""
        if amount <= 0 or amount > self.state.balance:  # False for NaN: it would pass
            raise ToolError("amount must be in (0, balance]")
        self.state.balance -= amount
        return f"paid {amount}"


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e309"])
def test_a_float_argument_takes_no_nan_or_infinity(number):
    env = WalletEnv([Task(id="t", prompt="go")])
    env.reset(seed=0)
    *_, info = env.step('<tool_call>{"name": "pay", "arguments": {"amount": ' + number + "}}</tool_call>")
    assert info["error_kind"] == "format" and "finite number" in info["error"]
    assert env.state.balance == 10.0
    env.restore(Snapshot.model_validate_json(env.snapshot().model_dump_json()))  # the state still round-trips


def test_a_verifier_may_return_any_real_number_such_as_numpys_bool():
    env = FragileEnv([Task(id="t", prompt="go")])
    env.reset(seed=0)
    *_, info = env.step(tool_call_text("finish", text="close"))
    assert (info["task_reward"], info["success"], info["error"]) == (1.0, True, None)


def test_a_tool_that_exits_leaves_every_episode_of_the_rollout_to_finish(tmp_path: Path):
    policy = ScriptedPolicy.replay([tool_call_text("run", command="-n"), tool_call_text("finish", text="1")])
    trajs = rollout(lambda: FragileEnv([Task(id="t", prompt="go")]), policy, tasks=["t"] * 4, out=tmp_path / "e.jsonl")
    assert [t.failure for t in trajs] == ["none"] * 4
    assert len((tmp_path / "e.jsonl").read_text().splitlines()) == 4


# -- the rollout: a policy that raises ----------------------------------------------------


class Flaky:
    """Answers by script, but raises for the batch whenever conversation 2 is in it at turn 1."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls = 0

    def act(self, conversations):
        self.calls += 1
        if any(c.id == 2 and c.turn == 1 for c in conversations):
            raise self.error
        return [tool_call_text("add", amount=1) if c.turn < 2 else tool_call_text("submit") for c in conversations]


def test_a_policy_that_raises_fails_its_episodes_as_infra_and_the_rollout_goes_on(tmp_path: Path):
    out = tmp_path / "episodes.jsonl"
    trajs = rollout(
        CounterEnv, Flaky(TimeoutError("the server took too long")), tasks=["t0"] * 6, concurrency=2, out=out
    )
    assert len(trajs) == 6
    failures = [t.failure for t in trajs]
    # Episodes 2 and 3 were asked together when the policy raised; the rest finished.
    assert failures == ["none", "none", "infra", "infra", "none", "none"]
    assert trajs[2].error.startswith("policy: TimeoutError: the server took too long")
    lines = out.read_text().splitlines()
    assert len(lines) == 6
    assert sorted(Trajectory.from_json(line).failure for line in lines) == sorted(failures)


class Unspeakable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message for you")


@pytest.mark.parametrize("error", [KeyError(10**5000), Unspeakable()], ids=["huge-int key", "hostile __str__"])
def test_a_policy_error_whose_message_cannot_be_read_still_fails_only_its_episodes(error: Exception):
    trajs = rollout(CounterEnv, Flaky(error), tasks=["t0"] * 4, concurrency=2)
    assert [t.failure for t in trajs] == ["none", "none", "infra", "infra"]
    assert trajs[2].error.startswith(f"policy: {type(error).__name__}: <its message could not be read")


@pytest.mark.parametrize("error", [KeyError(10**5000), Unspeakable()], ids=["huge-int key", "hostile __str__"])
def test_a_scripted_policy_error_whose_message_cannot_be_read_fails_only_its_episode(error: Exception):
    def act(conv):
        if conv.id == 1 and conv.turn == 1:
            raise error
        return tool_call_text("add", amount=1) if conv.turn < 2 else tool_call_text("submit")

    trajs = rollout(CounterEnv, ScriptedPolicy(act), tasks=["t0"] * 3, concurrency=3)
    assert [t.failure for t in trajs] == ["none", "infra", "none"]
    assert "<its message could not be read" in trajs[1].error


def test_keyboard_interrupt_still_stops_a_rollout(tmp_path: Path):
    out = tmp_path / "episodes.jsonl"
    with pytest.raises(KeyboardInterrupt):
        rollout(CounterEnv, Flaky(KeyboardInterrupt()), tasks=["t0"] * 4, concurrency=1, out=out)
    assert [Trajectory.from_json(line).failure for line in out.read_text().splitlines()] == ["none", "none"]


def test_a_trajectory_that_pydantic_cannot_encode_is_still_written(tmp_path: Path):
    class Leaky(CounterEnv):
        def render_intro(self, task):
            return [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "bad \udc80 prompt", "extra": float("nan")},
            ]

    out = tmp_path / "episodes.jsonl"
    [_traj] = rollout(Leaky, ScriptedPolicy(lambda c: tool_call_text("submit")), tasks=["t0"], out=out)
    [line] = out.read_text(encoding="utf-8").splitlines()
    assert "bad \\udc80 prompt" in json.loads(line)["messages"][1]["content"]


AIMED_AT_EVERY_TOOL = (
    "5,000-digit integer in the JSON",
    "JSON nested 3,000 deep",
    "lone surrogate in an argument",
    "NaN",
    "a ToolCall with a huge integer",
    "a ToolCall with an object",
)
"""The part of `HOSTILE` aimed at each tool after an env's first, which gets all of it."""


def _aimed(action: Any, tool: str) -> Any:
    """``action`` (an entry of `HOSTILE`, aimed at ``submit``) aimed at ``tool``."""
    if type(action) is str:  # a str subclass stays as it is: its replace would return a plain str
        return action.replace('"submit', f'"{tool}')
    if isinstance(action, ToolCall):
        return ToolCall(tool, action.arguments)
    if isinstance(action, dict) and isinstance(action.get("tool_calls"), list):
        aimable = [isinstance(c, dict) and isinstance(c.get("function"), dict) for c in action["tool_calls"]]
        calls = [
            {**c, "function": {**c["function"], "name": tool}} if ok else c
            for c, ok in zip(action["tool_calls"], aimable, strict=True)
        ]
        return {**action, "tool_calls": calls}
    return action


@pytest.mark.parametrize("env_id", [s.id for s in agentenv.registry.envs_list(namespaces=False)])
def test_every_registered_env_takes_the_hostile_table_at_each_of_its_tools(env_id: str) -> None:
    """Each built-in env (a new one too, once registered), the table aimed at its first
    tool and a part of it at every other (at ``submit`` where it has none): each action
    is the policy's format or tool error (in an answer-mode env, text may be a wrong
    answer instead), never infra and never rewarded; every observation is UTF-8 text
    and every episode serialises."""
    env = agentenv.make(env_id)
    try:
        env.reset(seed=0)
        episodes = 1
        for i, tool in enumerate(env.tools or ["submit"]):  # an env without tools: calls to one it lacks
            for name in HOSTILE if i == 0 else AIMED_AT_EVERY_TOOL:
                if env._ended or env.turn >= env.max_turns - 1:
                    _serialises(env)
                    env.reset(seed=episodes)
                    episodes += 1
                obs, reward, _terminated, _truncated, info = env.step(_aimed(HOSTILE[name], tool))
                where = f"{env_id}, {name} at {tool}: {info}"
                assert info["failure"] != "infra", where
                assert math.isfinite(reward) and reward <= 0, where
                assert env.answer_mode or info["error_kind"] in ("format", "tool"), where
                for message in obs:
                    message["content"].encode("utf-8")
        _serialises(env)
    finally:
        env.close()
