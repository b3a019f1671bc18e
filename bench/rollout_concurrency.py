"""Rollout concurrency: 64 episodes whose steps each block 20 ms on simulated I/O,
run at once through `agentenv.rollout`, against one such episode alone.

    .venv/bin/python bench/rollout_concurrency.py [--episodes 64] [--steps 10] [--sleep-ms 20] [--repeats 5]

With perfect overlap the 64 episodes take as long as one (``steps x sleep``). The
ratio of the two wall times is the figure; the engine pays for the thread hops,
the per-turn batched policy call, the env steps themselves (under the GIL) and
building the trajectories. A reference row runs the same sleeps in a bare thread
pool, stepping in lock-step turns like the engine, with no env and no policy:
the floor this machine allows.

Left out: real I/O, policies that take time, envs that do CPU work in a step.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

from agentenv import Env, ScriptedPolicy, State, Task, TaskSet, rollout, tool, tool_call_text
from agentenv.policies import Conversation

TARGET_RATIO = 1.5  # issue floor
AIM_RATIO = 1.2  # the design aim (what the best peers reach)


class SleepState(State):
    calls: int = 0
    done: bool = False


class SleepEnv(Env[SleepState]):
    """Every tool blocks for ``sleep_s`` (a stand-in for a container exec or an HTTP call)."""

    state_type = SleepState
    sleep_s = 0.02
    max_turns = 10
    instructions = "Fetch until told to stop, then finish."

    def default_tasks(self) -> TaskSet:
        return TaskSet([Task(id="sleep-0", prompt="Fetch, then finish.")])

    @tool
    def fetch(self) -> str:
        """Wait on the (simulated) outside world."""
        if self.sleep_s:  # time.sleep(0) is still a syscall of ~50-80 us on Linux
            time.sleep(self.sleep_s)
        self.state.calls += 1
        return "ok"

    @tool(terminal=True)
    def finish(self) -> str:
        """Wait once more, then end the episode."""
        if self.sleep_s:
            time.sleep(self.sleep_s)
        self.state.calls += 1
        self.state.done = True
        return "done"

    def verify(self, task: Task) -> float:
        return float(self.state.done)


def make_policy(steps: int) -> ScriptedPolicy:
    fetch, finish = tool_call_text("fetch"), tool_call_text("finish")

    def act(conv: Conversation) -> str:
        return finish if conv.turn >= steps - 1 else fetch

    return ScriptedPolicy(act)


def run_rollout(episodes: int, steps: int, sleep_s: float) -> float:
    """Wall seconds for ``episodes`` episodes of ``steps`` steps through `rollout`."""

    def factory() -> SleepEnv:
        env = SleepEnv(max_turns=steps)
        env.sleep_s = sleep_s
        return env

    t0 = time.perf_counter()
    trajs = rollout(factory, make_policy(steps), n=episodes)
    wall = time.perf_counter() - t0
    bad = [t for t in trajs if not t.success or t.turns != steps]
    if len(trajs) != episodes or bad:
        raise RuntimeError(
            f"expected {episodes} solved {steps}-step episodes; {len(bad)} were not: "
            f"{bad[0].failure if bad else ''} {bad[0].error if bad else ''}"
        )
    return wall


def run_bare(episodes: int, steps: int, sleep_s: float) -> float:
    """The same sleeps in lock-step turns on a bare thread pool: the floor."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=episodes) as pool:
        for _ in range(steps):
            list(pool.map(lambda _: time.sleep(sleep_s) if sleep_s else None, range(episodes)))
    return time.perf_counter() - t0


def median_of(repeats: int, fn: Callable[..., float], *args: object) -> tuple[float, float]:
    """(median, min) wall seconds of ``fn(*args)`` over ``repeats`` runs."""
    walls = []
    for _ in range(repeats):
        gc.collect()
        walls.append(fn(*args))
    return statistics.median(walls), min(walls)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=64, help="concurrent episodes")
    parser.add_argument("--steps", type=int, default=10, help="steps per episode")
    parser.add_argument("--sleep-ms", type=float, default=20.0, help="simulated I/O per step")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each case (median over them)")
    args = parser.parse_args(argv)
    if min(args.episodes, args.steps, args.repeats) < 1 or args.sleep_ms < 0:
        parser.error("--episodes, --steps and --repeats must be >= 1 and --sleep-ms >= 0")
    sleep_s = args.sleep_ms / 1e3
    ideal = args.steps * sleep_s

    run_rollout(2, args.steps, sleep_s)  # warm-up: imports, pydantic schema caches
    one = median_of(args.repeats, run_rollout, 1, args.steps, sleep_s)
    many = median_of(args.repeats, run_rollout, args.episodes, args.steps, sleep_s)
    bare_one = median_of(args.repeats, run_bare, 1, args.steps, sleep_s)
    bare_many = median_of(args.repeats, run_bare, args.episodes, args.steps, sleep_s)

    def row(name: str, n: int, wall: tuple[float, float], base: float) -> list[str]:
        per_turn_ms = (wall[0] - ideal) / args.steps * 1e3
        return [
            name,
            str(n),
            f"{wall[0] * 1e3:.1f}",
            f"{wall[1] * 1e3:.1f}",
            f"{per_turn_ms:.2f}",
            f"{wall[0] / base:.2f}x",
        ]

    print(
        header(
            f"rollout concurrency: {args.episodes} episodes vs 1, {args.steps} steps of "
            f"{args.sleep_ms:g} ms simulated I/O"
        )
    )
    print(f"median of {args.repeats} runs each; ideal wall = steps x sleep = {ideal * 1e3:.0f} ms\n")
    print(
        table(
            ["case", "episodes", "wall ms (median)", "wall ms (min)", "over ideal ms/turn", "vs 1 episode"],
            [
                row("agentenv.rollout", 1, one, one[0]),
                row("agentenv.rollout", args.episodes, many, one[0]),
                row("bare thread pool (floor)", 1, bare_one, bare_one[0]),
                row("bare thread pool (floor)", args.episodes, bare_many, bare_one[0]),
            ],
        )
    )
    ratio = many[0] / one[0]
    if not sleep_s:
        print("\ntarget: n/a without simulated I/O (this run shows the engine's CPU cost alone)")
        return
    verdict = "ok" if ratio <= TARGET_RATIO else "MISSED"
    aim = "met" if ratio <= AIM_RATIO else "not met"
    print(
        f"\ntarget: {args.episodes} vs 1 <= {TARGET_RATIO}x: {ratio:.2f}x ({verdict}); "
        f"design aim <= {AIM_RATIO}x: {aim}"
    )


if __name__ == "__main__":
    main()
