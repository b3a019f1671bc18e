"""`check_env`: the conformance checker env authors run on their env.

It checks the contract the trainer and the failure miner rely on: seeded resets
are deterministic, snapshot/restore replays exactly, bad actions come back as
error observations (never exceptions), rewards are finite and add up, info keys
are present, and an ended episode refuses more steps. It leaves the env open
(the caller made it, the caller closes it) and returns a `CheckReport` of what
passed; ``close()`` is the base class's own (final), so it is not exercised.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentenv.core.env import Env, Snapshot, collecting_hook_failures
from agentenv.core.errors import EnvCheckError, EnvStateError
from agentenv.core.parsers import tool_call_text
from agentenv.core.types import Action, ToolCall

__all__ = ["CheckReport", "check_env"]

STEP_INFO_KEYS = ("task_id", "turn", "rewards", "task_reward", "success", "failure", "error", "error_kind")
_EXAMPLES: dict[str, Any] = {"integer": 1, "number": 1.0, "string": "a", "boolean": True, "array": [], "object": {}}


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What `check_env` checked on an env that passed (a failing env raises `EnvCheckError`)."""

    env: str
    """The env's class name."""
    seed: int
    """The reset seed the checks used."""
    actions: int
    """How many actions the determinism and snapshot checks played."""
    passed: tuple[str, ...]
    """The checks, by name, in the order they ran."""

    def __str__(self) -> str:
        return f"{self.env} passes {', '.join(self.passed)} (seed {self.seed}, {self.actions} actions)"


def check_env(
    env: Env,
    *,
    seed: int = 0,
    actions: Sequence[Action] | Callable[[Env], Sequence[Action]] | None = None,
) -> CheckReport:
    """Check ``env`` against the contract; `EnvCheckError` lists every way it breaks it.

    ``actions`` drive the determinism and snapshot checks: valid actions for the
    task a reset with ``seed`` draws (or a function of the reset env returning
    them). By default one call of each tool with arguments made up from its
    schema is used. The env is reset and stepped many times and left open; reset
    it before using it again, and close it when done.
    """
    env.reset(seed=seed)
    plan = list(actions(env) if callable(actions) else actions) if actions is not None else _default_actions(env)
    checks: dict[str, Callable[[], None]] = {
        "determinism": lambda: _check_determinism(env, seed, plan),
        "snapshot": lambda: _check_snapshot(env, seed, plan),
        "bad actions": lambda: _check_bad_actions(env, seed),
        "episode end": lambda: _check_episode_end(env, seed, plan),
    }
    problems: list[str] = []
    for name, check in checks.items():
        # step swallows a reward hook's failure (an action must not crash it): collect them.
        with collecting_hook_failures() as hooks:
            try:
                check()
            except EnvCheckError as e:
                problems.append(f"{name}: {e}")
            except Exception as e:  # noqa: BLE001 - report, don't crash the checker
                problems.append(f"{name}: raised {type(e).__name__}: {e}")
        problems.extend(f"{name}: {failure}" for failure in dict.fromkeys(hooks))
    if problems:
        raise EnvCheckError(f"{type(env).__name__} fails {len(problems)} check(s):\n- " + "\n- ".join(problems))
    return CheckReport(type(env).__name__, seed, len(plan), tuple(checks))


def _fail(message: str) -> None:
    raise EnvCheckError(message)


def _default_actions(env: Env) -> list[Action]:
    plan: list[Action] = []
    for spec in sorted(env.tools.values(), key=lambda s: s.terminal):  # terminal tools last
        params = spec.schema["function"]["parameters"]
        args = {}
        for name in params.get("required", []):
            prop = params["properties"].get(name, {})
            if "enum" in prop:
                args[name] = prop["enum"][0]
            elif "const" in prop:
                args[name] = prop["const"]
            else:
                args[name] = _EXAMPLES.get(prop.get("type", "string"), "a")
        plan.append(tool_call_text(spec.name, **args))
    return plan


def _run(env: Env, seed: int, plan: Sequence[Action]) -> list[tuple[Any, ...]]:
    obs, _ = env.reset(seed=seed)
    record: list[tuple[Any, ...]] = [("reset", _dump(obs), _dump(env.state.model_dump(mode="json")))]
    for action in plan:
        obs, reward, terminated, truncated, info = _checked_step(env, action)
        record.append(
            (_dump(obs), reward, terminated, truncated, _dump(info), _dump(env.state.model_dump(mode="json")))
        )
        if terminated or truncated:
            break
    return record


def _checked_step(env: Env, action: Action) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    result = env.step(action)
    if not isinstance(result, tuple) or len(result) != 5:
        _fail(f"step() must return a 5-tuple, got {result!r:.200}")
    obs, reward, terminated, truncated, info = result
    if not env.observation_space.contains(obs):
        _fail(f"observation is not in the observation space: {obs!r:.200}")
    if not isinstance(reward, float) or not math.isfinite(reward):
        _fail(f"reward must be a finite float, got {reward!r}")
    if not isinstance(terminated, bool) or not isinstance(truncated, bool):
        _fail(f"terminated and truncated must be bools, got {terminated!r}, {truncated!r}")
    missing = [k for k in STEP_INFO_KEYS if k not in info]
    if missing:
        _fail(f"info lacks keys {missing}")
    rewards = info["rewards"]
    if not all(isinstance(v, float) and math.isfinite(v) for v in rewards.values()):
        _fail(f"reward components must be finite floats, got {rewards}")
    total = sum(env.reward_weights.get(k, 1.0) * v for k, v in rewards.items())
    if not math.isclose(total, reward, rel_tol=1e-9, abs_tol=1e-9):
        _fail(f"reward {reward} is not the weighted sum of its components {rewards} ({total})")
    if (terminated or truncated) != (info["failure"] is not None):
        _fail(f"info['failure'] must be set exactly when the episode ends, got {info['failure']!r}")
    return result


def _check_determinism(env: Env, seed: int, plan: Sequence[Action]) -> None:
    first, second = _run(env, seed, plan), _run(env, seed, plan)
    if first != second:
        turn = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
        _fail(f"two runs with seed={seed} and the same actions differ at turn {turn}")
    obs_a, _ = env.reset(seed=seed, options={"task": env.task})
    obs_b, _ = env.reset(seed=seed, options={"task": env.task})
    if _dump(obs_a) != _dump(obs_b):
        _fail("reset with the same seed and task gives different observations")


def _check_snapshot(env: Env, seed: int, plan: Sequence[Action]) -> None:
    for k in range(len(plan)):
        env.reset(seed=seed)
        for action in plan[:k]:
            *_, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                return
        blob = env.snapshot().model_dump_json()
        rest = _play_rest(env, plan[k:])
        restored = env.restore(Snapshot.model_validate_json(blob))
        if _dump(restored) != _dump(json.loads(blob)["messages"]):
            _fail(f"restore at turn {k} does not return the saved conversation")
        again = _play_rest(env, plan[k:])
        if rest != again:
            _fail(f"restoring the snapshot taken at turn {k} and replaying the same actions gives different results")


def _play_rest(env: Env, actions: Sequence[Action]) -> list[tuple[Any, ...]]:
    """Step ``actions`` until the episode ends (a plan may end it early: an infra failure,
    a streak of invalid actions); what each step returned, and the state after it."""
    record: list[tuple[Any, ...]] = []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        record.append(
            (_dump(obs), reward, terminated, truncated, _dump(info), _dump(env.state.model_dump(mode="json")))
        )
        if terminated or truncated:
            break
    return record


def _check_bad_actions(env: Env, seed: int) -> None:
    name = next(iter(env.tools), "tool")
    bad: list[Any] = [
        "",
        "just some words",
        "<tool_call>{not json</tool_call>",
        '<tool_call>{"arguments": {}}</tool_call>',
        tool_call_text("no_such_tool_xyz"),
        '<tool_call>{"name": "' + name + '", "arguments": {"__bogus__": 1}}</tool_call>',
        '{"name": "' + name + '", "arguments": "[1, 2"}',
        "x" * (env.max_action_chars + 1),
        "\x00\udcff\ufffe binary",
        12345,
        None,
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": "{oops"}}],
        },
        ToolCall(name="no_such_tool_xyz"),
    ]
    if env.answer_mode:  # there text without tool-call markup is an answer, not a bad action
        bad = [
            a
            for a in bad
            if not (isinstance(a, str) and "tool_call" not in a and a.isprintable() and len(a) <= env.max_action_chars)
        ]
    for action in bad:
        env.reset(seed=seed)
        try:
            obs, _, _, _, info = _checked_step(env, action)
        except EnvCheckError:
            raise
        except Exception as e:  # noqa: BLE001
            _fail(f"bad action {action!r:.60} raised {type(e).__name__}: {e}")
        if info["error_kind"] != "format" or not obs:
            _fail(
                f"bad action {action!r:.60} must give an error observation of kind 'format', got {info['error_kind']!r}"
            )
        if env.format_penalty > 0 and not info["rewards"].get("format", 0.0) < 0:
            _fail(f"bad action {action!r:.60} got no format penalty: {info['rewards']}")


def _check_episode_end(env: Env, seed: int, plan: Sequence[Action]) -> None:
    """An ended episode refuses another step (`EnvStateError`)."""
    env.reset(seed=seed)
    ended = False
    for _ in range(min(env.max_turns, 200)):  # an env with a huge max_turns is not walked to its end
        *_, terminated, truncated, _ = env.step(plan[0] if plan else "")
        if terminated or truncated:
            ended = True
            break
    if ended:
        _expect_state_error(lambda: env.step(plan[0] if plan else ""), "step() after the episode ended")


def _expect_state_error(fn: Callable[[], Any], what: str) -> None:
    try:
        fn()
    except EnvStateError:
        return
    except Exception as e:  # noqa: BLE001
        _fail(f"{what} must raise EnvStateError, raised {type(e).__name__}")
    _fail(f"{what} must raise EnvStateError")


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
