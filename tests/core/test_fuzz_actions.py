"""Generated actions never escape `Env.step`, never pass for infra, and always serialise.

A seeded hypothesis fuzz suite over the built-in envs (one of each kind, browser
ones aside: a TextArena game stands for its namespace, qa-v0 for the envs in
answer mode; world envs with their scripted model): at least 2,000 generated
actions per env (see `tests.fuzz_strategies`: text with tags anywhere, broken and
deep JSON, huge numbers, NaN, lone surrogates, odd OpenAI messages, odd
`ToolCall`s, non-text objects, and valid calls with random arguments), played as
episodes. After every step: `step` returned, ``failure`` is not ``infra``, every
observation is UTF-8 text, and an action that cannot be valid is a format error.
After every episode: its `Trajectory` serialises and round-trips. A short
`rollout` of generated actions writes every trajectory to its JSONL file.

Seeded (``derandomize=True``): every run plays the same actions, so a failure
reproduces; hypothesis shrinks it to a minimal action. `tests/core/test_hostile_actions.py`
holds the hand-written cases this generalises; `HOSTILE_OBJECTS` at the end, Python
objects the generated mix leaves out.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentenv
from agentenv import Conversation, Env, ScriptedPolicy, ToolCall, Trajectory, rollout
from agentenv.core.types import Action, Failure
from agentenv.envs.code import CodeEnv
from tests.fuzz_strategies import KINDS, ActionStrategies, Fuzzed

ENV_IDS = (
    "arithmetic-v0",
    "guess-number-v0",
    "guess-number-opening-v0",
    "code-v0",
    "retail-v0",
    "calendar-v0",
    "qa-v0",
    "world-fs-v0",
    "world-bank-v0",
    "mcp-notes-v0",
    "textarena/TicTacToe-v0",
)
REQUIRES = {
    "world-fs-v0": "jsonpatch",
    "world-bank-v0": "jsonpatch",
    "mcp-notes-v0": "mcp",
    "textarena/TicTacToe-v0": "textarena",
}
"""The module of the extra an env needs; without it the env's cases are skipped."""
MIN_ACTIONS = 2000
EPISODE_ACTIONS = (8, 12)  # actions per example: min, max
EXAMPLES = -(-MIN_ACTIONS // EPISODE_ACTIONS[0])  # enough examples for MIN_ACTIONS at the minimum size
VALID_WEIGHT = {"code-v0": 8}
"""Weight (against ~100) of valid calls with random arguments; the code env's run code in a sandbox."""
DEFAULT_VALID_WEIGHT = 15
MIN_PER_KIND = 1
"""Every kind of action is played (a strategy that stopped producing would show). Not more: the mix
per kind shifts with what else ran in the process (hypothesis's generation is not isolated per test)."""
ERROR_KINDS = (None, "format", "tool")
ROLES = ("user", "tool", "assistant", "system")

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=EXAMPLES,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.filter_too_much,
    ],
)


@pytest.fixture(scope="module", params=ENV_IDS)
def env_id(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def env(env_id: str) -> Iterator[Env]:
    if env_id in REQUIRES:
        pytest.importorskip(REQUIRES[env_id])
    made = agentenv.make(env_id)  # code-v0: Docker when an engine answers, else processes
    if isinstance(made, CodeEnv) and os.environ.get("AGENTENV_REQUIRE_DOCKER") == "1":
        assert made.sandboxes.kind == "docker", "AGENTENV_REQUIRE_DOCKER=1 but code-v0 fell back to processes"
    made.reset(seed=0)  # an MCP env learns its tools from the server on reset: the strategies read them
    yield made
    made.close()


def _strategy(env: Env, env_id: str) -> st.SearchStrategy[Fuzzed]:
    return ActionStrategies(env, valid_weight=VALID_WEIGHT.get(env_id, DEFAULT_VALID_WEIGHT)).actions


def _check_step(env: Env, fuzzed: Fuzzed, result: tuple) -> dict:
    obs, reward, terminated, truncated, info = result
    where = f"after {fuzzed!r}"
    assert info["failure"] != "infra", f"{where}: an action passed for infra: {info['error']}"
    assert info["error_kind"] in ERROR_KINDS, f"{where}: error_kind {info['error_kind']!r}"
    assert type(reward) is float and math.isfinite(reward), f"{where}: reward {reward!r}"
    assert all(math.isfinite(v) for v in info["rewards"].values()), f"{where}: rewards {info['rewards']}"
    if fuzzed.invalid:  # junk is penalised and earns nothing
        assert info["error_kind"] == "format", f"{where}: not a format error: {info}"
        assert info["rewards"]["format"] == -env.format_penalty and reward <= 0, f"{where}: {info}"
    assert type(terminated) is bool and type(truncated) is bool
    assert (info["failure"] is not None) == (terminated or truncated), f"{where}: {info}"
    for message in obs:
        assert message["role"] in ROLES, f"{where}: {message!r:.300}"
        assert type(message["content"]) is str, f"{where}: content of type {type(message['content']).__name__}"
        message["content"].encode("utf-8")
    return info


def _check_trajectory(env: Env, failure: str) -> None:
    traj = Trajectory(
        task=env.task,
        messages=env.messages,
        transitions=env.transitions,  # type: ignore[arg-type]
        failure=Failure(failure),
    )
    line = traj.model_dump_json()
    line.encode("utf-8")
    json.loads(line)
    back = Trajectory.model_validate_json(line)
    assert back.turns == len(env.transitions)
    assert back.model_dump_json() == line  # the round trip is stable


def _play(env: Env, seed: int, episode: list[Fuzzed], kinds: Counter[str]) -> None:
    """Step every action of ``episode`` (counted in ``kinds``), resetting when an episode ends."""
    env.reset(seed=seed)
    ended, failure = False, "truncated"
    for i, fuzzed in enumerate(episode):
        if ended:
            _check_trajectory(env, failure)
            env.reset(seed=seed + i)
        info = _check_step(env, fuzzed, env.step(fuzzed.action))
        kinds[fuzzed.kind] += 1
        ended = info["failure"] is not None
        failure = info["failure"] or "truncated"
    _check_trajectory(env, failure)


@pytest.mark.slow
def test_generated_actions_never_escape_step_nor_pass_for_infra(env: Env, env_id: str) -> None:
    kinds: Counter[str] = Counter()
    start = time.perf_counter()

    @FUZZ
    @given(
        seed=st.integers(0, 2**16),
        episode=st.lists(_strategy(env, env_id), min_size=EPISODE_ACTIONS[0], max_size=EPISODE_ACTIONS[1]),
    )
    def fuzz(seed: int, episode: list[Fuzzed]) -> None:
        _play(env, seed, episode, kinds)

    fuzz()
    stepped = sum(kinds.values())
    print(f"\n{env_id}: {stepped} actions in {time.perf_counter() - start:.1f} s; by kind: {dict(kinds)}")
    assert stepped >= MIN_ACTIONS
    assert {kind: kinds[kind] for kind in KINDS if kinds[kind] < MIN_PER_KIND} == {}


@pytest.mark.slow  # starts the env's sandboxes or services
def test_a_rollout_of_generated_actions_writes_every_trajectory(env: Env, env_id: str, tmp_path: Path) -> None:
    episodes = 3
    runs = iter(range(1000))
    # The code env's episodes share the fixture's sandboxes (no second set of containers),
    # one at a time: the fixture's env holds one of the pool's two workspaces.
    env_kwargs = {"sandboxes": env.sandboxes} if isinstance(env, CodeEnv) else None
    concurrency = 1 if isinstance(env, CodeEnv) else episodes

    @settings(FUZZ, max_examples=2)
    @given(
        scripts=st.lists(st.lists(_strategy(env, env_id), min_size=1, max_size=8), min_size=episodes, max_size=episodes)
    )
    def fuzz(scripts: list[list[Fuzzed]]) -> None:
        def act(conv: Conversation) -> Action:
            script = scripts[conv.id]
            # After its script an episode gets text with no tool call: three of them end it.
            return script[conv.turn].action if conv.turn < len(script) else "no tool call here"

        out = tmp_path / f"rollout-{next(runs)}.jsonl"
        trajs = rollout(
            env_id, ScriptedPolicy(act), n=episodes, seed=7, out=out, concurrency=concurrency, env_kwargs=env_kwargs
        )
        # Split on "\n" only: a line may hold U+0085 or U+2028, which str.splitlines splits on.
        lines = out.read_text(encoding="utf-8").removesuffix("\n").split("\n")
        assert len(trajs) == len(lines) == episodes
        for traj, script in zip(trajs, scripts, strict=True):
            assert traj.failure != "infra", f"{traj.error}; script {script!r}"
            assert traj.turns >= 1 and len(traj.rewards) == traj.turns
        # Lines come in the order episodes finish; each is the trajectory as it is, not
        # spelled out by the rollout's fallback for what the encoder refuses.
        assert sorted(lines) == sorted(traj.model_dump_json() for traj in trajs)
        for line in lines:
            json.loads(line)
        read = sorted(Trajectory.read_jsonl(out), key=lambda t: t.model_dump_json())
        assert [t.model_dump_json() for t in read] == sorted(lines)

    fuzz()


# -- Python objects a policy's own code could hand over, which the generated mix leaves out:
# each was a bug (an exception out of step, or a trajectory that did not serialise) until
# the action boundary (agentenv.core._admit) checked every part of a ToolCall and stopped
# calling methods of a message it refused.


def _forged(**fields: object) -> ToolCall:
    call = ToolCall("submit", {"answer": 1})
    for name, value in fields.items():
        object.__setattr__(call, name, value)  # past ToolCall.__post_init__'s checks
    return call


class _GetRaises(dict):
    def get(self, *args: object) -> object:
        raise RuntimeError("no get for you")


class _EqRaises(str):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparison for you")

    __hash__ = str.__hash__


class _ToDictRaises(ToolCall):
    def to_dict(self) -> dict:
        raise RuntimeError("no to_dict for you")


HOSTILE_OBJECTS = {
    "ToolCall id with a lone surrogate": ToolCall("submit", {"answer": 1}, "\ud800"),
    "ToolCall name with a lone surrogate": ToolCall("\udc80", {}),
    "forged ToolCall name=[]": _forged(name=[]),
    "forged ToolCall arguments=[]": _forged(arguments=[]),
    "forged ToolCall id=5": _forged(id=5),
    "dict subclass whose get raises": _GetRaises(role="assistant", content="x"),
    "message key whose __eq__ raises": {"role": "assistant", _EqRaises("content"): "x"},
    "ToolCall subclass whose to_dict raises": _ToDictRaises("submit", {"answer": 1}),
}


@pytest.mark.parametrize("action", list(HOSTILE_OBJECTS.values()), ids=list(HOSTILE_OBJECTS))
def test_a_hostile_python_object_is_data_that_serialises(action: object) -> None:
    env = agentenv.make("arithmetic-v0")
    try:
        env.reset(seed=0)
        env.step(action)  # type: ignore[arg-type]
        _check_trajectory(env, "truncated")
    finally:
        env.close()
