"""Framework overhead per env step: agentenv envs vs the same envs as bare
`gymnasium.Env`s, in one process, on the same pre-built actions.

    .venv/bin/python bench/env_overhead.py [--rounds 15] [--steps 2000] [--profile 25]

Two cases. ``arithmetic``: `ArithmeticEnv` (two tools, a list-valued state, a
sub-goal step reward, a verifier). ``counter``: the least an env can do, one tool
``add(n: int) -> int`` over a state of one int, so that what is left is the
framework's own cost per step (the case outside comparisons of env frameworks use).

agentenv's step always parses the action, validates the arguments against the
tool signature, records a `Transition` with a JSON diff of the state and keeps the
conversation (lean mode, ``Env(lean=True)``, skips the diff and the observation in
the transition); each bare env parses the same ``<tool_call>{json}</tool_call>``
text with a regex and `json.loads`, computes the same result (and, for arithmetic,
rewards), and does nothing else. The arithmetic envs replay gold actions (every
episode is solved) and the counter envs add until truncated, so the step path
measured is the successful one. Resets are timed apart from steps.

Each round plays episodes until ``--steps`` steps have run; the per-step time of
a round is its total step time over its step count; the figure is the median
over rounds. Rounds of all the envs alternate so drift hits them alike.
Left out: invalid actions, snapshots, the rollout engine (bench/rollout_concurrency.py).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

from agentenv import AutoParser, Env, State, Task, TaskSet, ToolCall, tool, tool_call_text
from agentenv.envs.arithmetic import OPS, ArithmeticEnv, make_tasks

TARGET_US = 100.0  # issue floor, arithmetic with tracking on
AIM_US = 20.0  # the design aim (what the best peers reach)
TARGET_RATIO = 3.0  # tracking on (the default), vs the bare env in the same run; both cases
TARGET_LEAN_RATIO = 2.2


@dataclass(frozen=True, slots=True)
class Episode:
    task: Task
    actions: tuple[Any, ...]  # one action per step, in order


def gold_episodes(tasks: TaskSet, *, as_tool_calls: bool = False) -> list[Episode]:
    """The oracle's actions (envs/arithmetic.py ``oracle()``), built from the payload."""
    episodes = []
    for task in tasks:
        calls = [("calculate", {"a": a, "op": op, "b": b}) for a, op, b, _ in task.payload["steps"]]
        calls.append(("submit", {"answer": task.payload["answer"]}))
        episodes.append(Episode(task, _actions(calls, as_tool_calls)))
    return episodes


def _actions(calls: list[tuple[str, dict[str, Any]]], as_tool_calls: bool) -> tuple[Any, ...]:
    if as_tool_calls:
        return tuple(ToolCall(name=name, arguments=args) for name, args in calls)
    return tuple(tool_call_text(name, **args) for name, args in calls)


class BareArithmeticEnv(gym.Env):
    """The arithmetic env with no framework: parse, compute, reward, return. Its rewards
    are `ArithmeticEnv`'s (0.1 for a gold step done for the first time, the task reward
    on submit); `check_same_rewards` holds it to that."""

    _call = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
    max_turns = ArithmeticEnv.max_turns

    def __init__(self, tasks: TaskSet, system_prompt: str) -> None:
        self.tasks = tasks
        self.system_prompt = system_prompt

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.task: Task = options["task"] if options else self.tasks.sample(self.np_random)
        self.results: list[int] = []
        self.done_steps: list[int] = []
        self.answer: int | None = None
        self.turn = 0
        obs = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": self.task.prompt}]
        return obs, {"task_id": self.task.id}

    def step(self, action: str):
        self.turn += 1
        match = self._call.search(action)
        if match is None:
            return [{"role": "user", "content": "Error: no tool call"}], -0.1, False, self.turn >= self.max_turns, {}
        call = json.loads(match.group(1))
        name, args = call["name"], call["arguments"]
        rewards = {"format": 0.0}
        terminated = False
        if name == "calculate":
            a, op, b = args["a"], args["op"], args["b"]
            result: Any = OPS[op](a, b)
            self.results.append(result)
            gold = self._gold_step(a, op, b)
            if gold is not None:
                self.done_steps.append(gold)
            rewards["progress"] = 0.1 if gold is not None else 0.0
        else:
            self.answer = args["answer"]
            result = "submitted"
            rewards["progress"] = 0.0
            rewards["task"] = float(self.answer == self.task.payload["answer"])
            terminated = True
        content = result if isinstance(result, str) else json.dumps(result)
        obs = [{"role": "tool", "tool_call_id": f"call_{self.turn - 1}_0", "name": name, "content": content}]
        truncated = not terminated and self.turn >= self.max_turns
        return obs, sum(rewards.values()), terminated, truncated, {"rewards": rewards}

    def _gold_step(self, a: int, op: str, b: int) -> int | None:
        """The first gold step not yet done that this calculation is: written as
        `ArithmeticEnv.calculate` writes it, so that the author's code costs both the same."""
        steps = self.task.payload["steps"]
        return next((i for i, s in enumerate(steps) if i not in self.done_steps and _same_step(s, a, op, b)), None)


def _same_step(step: list, a: int, op: str, b: int) -> bool:
    """envs/arithmetic.py's: the step's operands and operator (either order for + and *)."""
    x, step_op, y = step[0], step[1], step[2]
    return op == step_op and ((a, b) == (x, y) or (op != "-" and (a, b) == (y, x)))


class CounterState(State):
    value: int = 0


class CounterEnv(Env[CounterState]):
    """The least an agentenv env can be: one tool that adds to an int."""

    max_turns = 16
    instructions = "Add numbers to the counter."

    @tool
    def add(self, n: int) -> int:
        """Add ``n`` to the counter; returns the new value.

        Args:
            n: What to add.
        """
        self.state.value += n
        return self.state.value


class BareCounterEnv(gym.Env):
    """The counter env with no framework: parse, add, return."""

    _call = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
    max_turns = CounterEnv.max_turns

    def __init__(self, system_prompt: str) -> None:
        self.system_prompt = system_prompt

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.task: Task = options["task"] if options else Task(id="default", prompt="Begin.")
        self.value = 0
        self.turn = 0
        obs = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": self.task.prompt}]
        return obs, {"task_id": self.task.id}

    def step(self, action: str):
        self.turn += 1
        truncated = self.turn >= self.max_turns
        match = self._call.search(action)
        if match is None:
            return [{"role": "user", "content": "Error: no tool call"}], -0.1, False, truncated, {}
        call = json.loads(match.group(1))
        if call["name"] != "add":
            return [{"role": "user", "content": "Error: unknown tool"}], -0.1, False, truncated, {}
        self.value += call["arguments"]["n"]
        obs = [{"role": "tool", "tool_call_id": f"call_{self.turn - 1}_0", "name": "add", "content": str(self.value)}]
        return obs, 0.0, False, truncated, {"value": self.value}


def counter_episodes(count: int, *, as_tool_calls: bool = False) -> list[Episode]:
    """``count`` episodes of `CounterEnv.max_turns` additions of 1 to 9 (seed 0)."""
    rng = np.random.default_rng(0)
    task = Task(id="default", prompt="Begin.")
    episodes = []
    for _ in range(count):
        calls = [("add", {"n": int(n)}) for n in rng.integers(1, 10, CounterEnv.max_turns)]
        episodes.append(Episode(task, _actions(calls, as_tool_calls)))
    return episodes


def schedule(episodes: Sequence[Episode], steps: int) -> list[Episode]:
    """Episodes (cycling through ``episodes``) until at least ``steps`` steps."""
    out, total, i = [], 0, 0
    while total < steps:
        ep = episodes[i % len(episodes)]
        out.append(ep)
        total += len(ep.actions)
        i += 1
    return out


def play_round(env: gym.Env, episodes: Sequence[Episode]) -> tuple[float, float]:
    """(ns per step, ns per reset) over one round."""
    step_ns = reset_ns = n_steps = 0
    clock = time.perf_counter_ns
    for ep in episodes:
        t0 = clock()
        env.reset(seed=0, options={"task": ep.task})
        t1 = clock()
        for action in ep.actions:
            env.step(action)
        t2 = clock()
        reset_ns += t1 - t0
        step_ns += t2 - t1
        n_steps += len(ep.actions)
    return step_ns / n_steps, reset_ns / len(episodes)


def check_solved(env: gym.Env, episodes: Sequence[Episode]) -> None:
    """The arithmetic actions must be the gold ones, or the figures measure an error path."""
    for ep in episodes:
        env.reset(seed=0, options={"task": ep.task})
        for action in ep.actions:
            _, _, terminated, truncated, info = env.step(action)
        ok = info.get("success", info.get("rewards", {}).get("task") == 1.0)
        if not (terminated and not truncated and ok):
            raise RuntimeError(f"{type(env).__name__}: gold actions did not solve {ep.task.id}: {info}")


def check_counted(env: gym.Env, episodes: Sequence[Episode]) -> None:
    """Every counter step must add (no error path), and the episode end by truncation."""
    for ep in episodes:
        env.reset(seed=0, options={"task": ep.task})
        for action in ep.actions:
            obs, _, terminated, truncated, info = env.step(action)
            if info.get("error") is not None or obs[-1]["role"] != "tool":
                raise RuntimeError(f"{type(env).__name__}: a counter step failed: {obs} {info}")
        calls = [a if isinstance(a, ToolCall) else AutoParser().parse(a)[0] for a in ep.actions]
        expected = sum(call.arguments["n"] for call in calls)
        if int(obs[-1]["content"]) != expected or terminated or not truncated:
            raise RuntimeError(f"{type(env).__name__}: counted {obs[-1]['content']}, expected {expected}, truncated")


def check_same_rewards(env: gym.Env, bare: gym.Env, episodes: Sequence[Episode]) -> None:
    """The bare env must pay what the agentenv env pays, step by step: the same work."""
    for ep in episodes:
        env.reset(seed=0, options={"task": ep.task})
        bare.reset(seed=0, options={"task": ep.task})
        for action in ep.actions:
            ours, theirs = env.step(action)[1], bare.step(action)[1]
            if abs(ours - theirs) > 1e-9:
                raise RuntimeError(f"{ep.task.id}: agentenv paid {ours}, the bare env {theirs}, for {action}")


Players = dict[str, tuple[gym.Env, list[Episode]]]


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    players: Players  # the bare env last
    check: Callable[[gym.Env, Sequence[Episode]], None]


def arithmetic_case(n_tasks: int, steps: int) -> Case:
    tasks = make_tasks(n_tasks, seed=0)
    text_eps = schedule(gold_episodes(tasks), steps)
    call_eps = schedule(gold_episodes(tasks, as_tool_calls=True), steps)
    env = ArithmeticEnv(tasks)
    env.reset(seed=0)
    bare = BareArithmeticEnv(tasks, env.system_prompt(env.task))
    players = {
        "agentenv, text actions": (env, text_eps),
        "agentenv, ToolCall actions": (env, call_eps),
        "agentenv lean, text actions": (ArithmeticEnv(tasks, lean=True), text_eps),
        "bare gymnasium.Env": (bare, text_eps),
    }
    return Case("arithmetic", players, check_solved)


def counter_case(steps: int) -> Case:
    text_eps = schedule(counter_episodes(64), steps)
    call_eps = schedule(counter_episodes(64, as_tool_calls=True), steps)
    env = CounterEnv()
    env.reset(seed=0)
    players = {
        "agentenv, text actions": (env, text_eps),
        "agentenv, ToolCall actions": (env, call_eps),
        "agentenv lean, text actions": (CounterEnv(lean=True), text_eps),
        "bare gymnasium.Env": (BareCounterEnv(env.system_prompt(env.task)), text_eps),
    }
    return Case("counter", players, check_counted)


def measure(cases: Sequence[Case], rounds: int) -> dict[tuple[str, str], dict[str, float]]:
    players = {(case.name, name): player for case in cases for name, player in case.players.items()}
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {key: [] for key in players}
    for env, eps in players.values():  # warm-up: caches, branch predictors, lazy imports
        play_round(env, eps[: max(1, len(eps) // 4)])
    for _ in range(rounds):
        for key, (env, eps) in players.items():
            gc.collect()
            samples[key].append(play_round(env, eps))
    return {
        key: {
            "step_us": statistics.median(s for s, _ in rows) / 1e3,
            "step_min_us": min(s for s, _ in rows) / 1e3,
            "reset_us": statistics.median(r for _, r in rows) / 1e3,
        }
        for key, rows in samples.items()
    }


def report(case: Case, res: dict[tuple[str, str], dict[str, float]]) -> str:
    """The case's table and its target line."""
    base = res[case.name, "bare gymnasium.Env"]["step_us"]
    rows = []
    for name in case.players:
        r = res[case.name, name]
        rows.append(
            [
                f"{case.name}: {name}",
                f"{r['step_us']:.1f}",
                f"{r['step_min_us']:.1f}",
                f"{r['step_us'] - base:+.1f}",
                f"{r['step_us'] / base:.2f}x",
                f"{r['reset_us']:.1f}",
            ]
        )
    ratio = res[case.name, "agentenv, text actions"]["step_us"] / base
    lean_ratio = res[case.name, "agentenv lean, text actions"]["step_us"] / base
    ratio_ok = "ok" if ratio <= TARGET_RATIO else "MISSED"
    lean_ok = "ok" if lean_ratio <= TARGET_LEAN_RATIO else "MISSED"
    head = ["env", "step us (median)", "step us (min)", "vs bare us", "vs bare", "reset us"]
    return (
        f"{table(head, rows)}\n"
        f"target {case.name}: tracking on <= {TARGET_RATIO:g}x bare: {ratio:.2f}x ({ratio_ok}); "
        f"lean <= {TARGET_LEAN_RATIO:g}x bare: {lean_ratio:.2f}x ({lean_ok})"
    )


def profile(env: gym.Env, episodes: Sequence[Episode], top: int) -> None:
    """cProfile of the step calls only (resets run outside the profiler)."""
    prof = cProfile.Profile()
    for ep in episodes:
        env.reset(seed=0, options={"task": ep.task})
        prof.enable()
        for action in ep.actions:
            env.step(action)
        prof.disable()
    print(f"\ncProfile of {sum(len(e.actions) for e in episodes)} {type(env).__name__} steps (resets excluded)")
    for key in ("tottime", "cumulative"):
        print(f"\n--- top {top} by {key} ---")
        pstats.Stats(prof).strip_dirs().sort_stats(key).print_stats(top)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per env (median over them)")
    parser.add_argument("--steps", type=int, default=2000, help="env steps per round")
    parser.add_argument("--tasks", type=int, default=200, help="distinct arithmetic tasks cycled through")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="after timing, cProfile the agentenv steps (text actions, tracking on) of each case; print the top N",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1 or args.tasks < 1:
        parser.error("--rounds, --steps and --tasks must be >= 1")

    cases = [arithmetic_case(args.tasks, args.steps), counter_case(args.steps)]
    for case in cases:
        for env, eps in case.players.values():
            case.check(env, eps[:200])
        env, eps = case.players["agentenv, text actions"]
        check_same_rewards(env, case.players["bare gymnasium.Env"][0], eps[:200])

    t0 = time.perf_counter()
    res = measure(cases, args.rounds)
    elapsed = time.perf_counter() - t0

    n_steps = {case.name: sum(len(e.actions) for e in case.players["bare gymnasium.Env"][1]) for case in cases}
    print(header("env step overhead: agentenv envs vs the same envs as bare gymnasium.Envs"))
    shown = ", ".join(f"{n} {name} steps" for name, n in n_steps.items())
    print(f"{args.rounds} rounds x ({shown}) per env, rounds alternating, median over rounds; {elapsed:.1f} s\n")
    print("\n\n".join(report(case, res) for case in cases))
    ours = res["arithmetic", "agentenv, text actions"]["step_us"]
    step_ok = "ok" if ours <= TARGET_US else "MISSED"
    aim_ok = "met" if ours <= AIM_US else "not met"
    print(f"\narithmetic: step <= {TARGET_US:.0f} us: {ours:.1f} us ({step_ok}); aim <= {AIM_US:.0f} us: {aim_ok}")

    if args.profile:
        for case in cases:
            env, eps = case.players["agentenv, text actions"]
            profile(env, eps, args.profile)


if __name__ == "__main__":
    main()
