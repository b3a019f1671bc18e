"""Framework overhead per env step: agentenv's `ArithmeticEnv` vs the same env as a
bare `gymnasium.Env`, in one process, on the same pre-built actions.

    .venv/bin/python bench/env_overhead.py [--rounds 15] [--steps 2000] [--profile 25]

agentenv's step always parses the action, validates the arguments against the
tool signature, records a `Transition` with a JSON diff of the state and keeps the
conversation (lean mode, ``ArithmeticEnv(lean=True)``, skips the diff and the
observation in the transition); the bare env parses the same ``<tool_call>{json}</tool_call>`` text
with a regex and `json.loads`, computes the same result and rewards, and does
nothing else. Both replay gold actions (every episode is solved), so the step
path measured is the successful one. Resets are timed apart from steps.

Each round plays episodes until ``--steps`` steps have run; the per-step time of
a round is its total step time over its step count; the figure is the median
over rounds. Rounds of the two envs alternate so drift hits both alike.
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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

from agentenv import Task, TaskSet, ToolCall, tool_call_text
from agentenv.envs.arithmetic import OPS, ArithmeticEnv, make_tasks

TARGET_US = 100.0  # issue floor
AIM_US = 20.0  # the design aim (what the best peers reach)
TARGET_RATIO = 2.5  # tracking on (the default), vs the bare env in the same run
TARGET_LEAN_RATIO = 1.5


@dataclass(frozen=True, slots=True)
class Episode:
    task: Task
    actions: tuple[Any, ...]  # one action per step, gold order, ending with submit


def gold_episodes(tasks: TaskSet, *, as_tool_calls: bool = False) -> list[Episode]:
    """The oracle's actions (envs/arithmetic.py ``oracle()``), built from the payload."""
    episodes = []
    for task in tasks:
        calls = [("calculate", {"a": a, "op": op, "b": b}) for a, op, b, _ in task.payload["steps"]]
        calls.append(("submit", {"answer": task.payload["answer"]}))
        if as_tool_calls:
            actions = tuple(ToolCall(name=name, arguments=args) for name, args in calls)
        else:
            actions = tuple(tool_call_text(name, **args) for name, args in calls)
        episodes.append(Episode(task, actions))
    return episodes


class BareArithmeticEnv(gym.Env):
    """The arithmetic env with no framework: parse, compute, reward, return."""

    _call = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
    max_turns = ArithmeticEnv.max_turns

    def __init__(self, tasks: TaskSet, system_prompt: str) -> None:
        self.tasks = tasks
        self.system_prompt = system_prompt

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.task: Task = options["task"] if options else self.tasks.sample(self.np_random)
        self.results: list[int] = []
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
            result: Any = OPS[args["op"]](args["a"], args["b"])
            self.results.append(result)
            fresh = result in self.task.payload["intermediates"] and self.results.count(result) == 1
            rewards["progress"] = 0.1 * fresh
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
    """The actions must be the gold ones, or the figures measure an error path."""
    for ep in episodes:
        env.reset(seed=0, options={"task": ep.task})
        for action in ep.actions:
            _, _, terminated, truncated, info = env.step(action)
        ok = info.get("success", info.get("rewards", {}).get("task") == 1.0)
        if not (terminated and not truncated and ok):
            raise RuntimeError(f"{type(env).__name__}: gold actions did not solve {ep.task.id}: {info}")


def measure(players: dict[str, tuple[gym.Env, list[Episode]]], rounds: int) -> dict[str, dict[str, float]]:
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in players}
    for env, eps in players.values():  # warm-up: caches, branch predictors, lazy imports
        play_round(env, eps[: max(1, len(eps) // 4)])
    for _ in range(rounds):
        for name, (env, eps) in players.items():
            gc.collect()
            samples[name].append(play_round(env, eps))
    return {
        name: {
            "step_us": statistics.median(s for s, _ in rows) / 1e3,
            "step_min_us": min(s for s, _ in rows) / 1e3,
            "reset_us": statistics.median(r for _, r in rows) / 1e3,
        }
        for name, rows in samples.items()
    }


def profile(env: gym.Env, episodes: Sequence[Episode], top: int) -> None:
    """cProfile of the step calls only (resets run outside the profiler)."""
    prof = cProfile.Profile()
    for ep in episodes:
        env.reset(seed=0, options={"task": ep.task})
        prof.enable()
        for action in ep.actions:
            env.step(action)
        prof.disable()
    print(f"\ncProfile of {sum(len(e.actions) for e in episodes)} agentenv steps (resets excluded)")
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
        help="after timing, cProfile the agentenv steps and print the top N functions",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1 or args.tasks < 1:
        parser.error("--rounds, --steps and --tasks must be >= 1")

    tasks = make_tasks(args.tasks, seed=0)
    text_eps = schedule(gold_episodes(tasks), args.steps)
    call_eps = schedule(gold_episodes(tasks, as_tool_calls=True), args.steps)
    env = ArithmeticEnv(tasks)
    lean = ArithmeticEnv(tasks, lean=True)
    env.reset(seed=0)
    bare = BareArithmeticEnv(tasks, env.system_prompt(env.task))
    for e, eps in ((env, text_eps), (env, call_eps), (lean, text_eps), (bare, text_eps)):
        check_solved(e, eps[: len(tasks)])

    players = {
        "agentenv, text actions": (env, text_eps),
        "agentenv, ToolCall actions": (env, call_eps),
        "agentenv lean, text actions": (lean, text_eps),
        "bare gymnasium.Env": (bare, text_eps),
    }
    t0 = time.perf_counter()
    res = measure(players, args.rounds)
    elapsed = time.perf_counter() - t0

    base = res["bare gymnasium.Env"]["step_us"]
    rows = []
    for name, r in res.items():
        ratio = r["step_us"] / base
        over = r["step_us"] - base
        rows.append(
            [
                name,
                f"{r['step_us']:.1f}",
                f"{r['step_min_us']:.1f}",
                f"{over:+.1f}",
                f"{ratio:.2f}x",
                f"{r['reset_us']:.1f}",
            ]
        )
    n_steps = sum(len(e.actions) for e in text_eps)
    print(header("env step overhead: ArithmeticEnv (agentenv) vs bare gymnasium.Env"))
    print(
        f"{args.rounds} rounds x {n_steps} steps ({len(text_eps)} episodes) per env, "
        f"median over rounds; {elapsed:.1f} s\n"
    )
    print(table(["env", "step us (median)", "step us (min)", "vs bare us", "vs bare", "reset us"], rows))
    ours = res["agentenv, text actions"]
    lean_ratio = res["agentenv lean, text actions"]["step_us"] / base
    step_ok = "ok" if ours["step_us"] <= TARGET_US else "MISSED"
    ratio_ok = "ok" if ours["step_us"] / base <= TARGET_RATIO else "MISSED"
    lean_ok = "ok" if lean_ratio <= TARGET_LEAN_RATIO else "MISSED"
    aim_ok = "met" if ours["step_us"] <= AIM_US else "not met"
    print(
        f"\ntarget: step <= {TARGET_US:.0f} us: {ours['step_us']:.1f} us ({step_ok}); "
        f"tracking on <= {TARGET_RATIO:g}x bare: {ours['step_us'] / base:.2f}x ({ratio_ok}); "
        f"lean <= {TARGET_LEAN_RATIO:g}x bare: {lean_ratio:.2f}x ({lean_ok}); "
        f"design aim <= {AIM_US:.0f} us: {aim_ok}"
    )

    if args.profile:
        profile(env, text_eps, args.profile)


if __name__ == "__main__":
    main()
