"""Report: build time and size for synthetic runs of 1k, 10k and 100k episodes, and the
time to first render in Chromium.

    .venv/bin/python bench/report.py [--episodes 1000 10000 100000] [--repeats 3] [--no-browser]

Each run is written with the trainer's own writers (`MetricsLogger` for metrics.jsonl,
one JSONL of `Trajectory` lines per step, as `GRPOTrainer` writes them): 64 episodes a
step, 2 to 6 turns each, tool calls, observations, state diffs, reward components and
32-token generations with log-probs (which the trainer saves and the report leaves
out), over two envs, five task families and four difficulties, with the failure miner's
figures in the metrics. Rows: the report's build time (median of ``--repeats``), the
HTML file's size, the sidecar pages' count and total size, the episodes embedded,
and the time from navigation to the viewer's first render in headless Chromium
(median of ``--repeats`` page loads, one browser). The issue's bound: the HTML under
~20 MB at 100k episodes. Left out: opening an episode from a sidecar page (one
``<script>`` of ~1 MB: a few ms).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, import_agentenv, table

import_agentenv()

from agentenv import Task, TaskMeta, ToolCall, Trajectory
from agentenv.core.env import Transition
from agentenv.core.types import Failure
from agentenv.policies import Generation
from agentenv.report import build_report
from agentenv.trainers.metrics import MetricsLogger, rollout_metrics

EPISODES_PER_STEP = 64
FAMILIES = ("search", "arith", "lookup", "edit", "plan")
SYSTEM = (
    "You are an agent. Solve the task by calling the tools.\nTools:\n"
    + "\n".join(f"tool_{i}(a: integer, b: string) -> string: does thing {i} to the state" for i in range(8))
    + '\nTo call a tool, write <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>.'
)


def synthetic_episode(rng: random.Random, step: int, i: int) -> Trajectory:
    """One plausible training episode: a few tool calls, observations, diffs and rewards."""
    env = "guess-number-v0" if i % 3 else "arithmetic-v0"
    family = FAMILIES[(i * 7 + step) % len(FAMILIES)]
    difficulty = rng.randrange(4)
    task = Task(
        id=f"{family}-{difficulty}-{rng.randrange(400)}",
        prompt=f"Find the value for case {rng.randrange(10**6)}.",
        metadata=TaskMeta(family=family, difficulty=difficulty),
    )
    p_success = min(0.9, 0.1 + step / 400 + 0.1 * (3 - difficulty))
    success = rng.random() < p_success
    turns = rng.randint(2, 6)
    messages: list[dict[str, object]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": task.prompt},
    ]
    transitions, generations, rewards = [], [], []
    for turn in range(turns):
        args = {"a": rng.randrange(100), "b": f"value {rng.randrange(1000)}"}
        call = {"name": f"tool_{turn % 8}", "arguments": args}
        action = f"<tool_call>{json.dumps(call)}</tool_call>"
        observation = [
            {"role": "tool", "content": f"result {rng.random():.6f} for {args['b']}", "name": f"tool_{turn % 8}"}
        ]
        last = turn == turns - 1
        step_rewards = {"format": 0.0 if rng.random() < 0.9 else -0.1, "progress": round(rng.random() * 0.1, 3)}
        task_rewards = {"task": float(success)} if last else {}
        messages += [{"role": "assistant", "content": action}, *observation]
        transitions.append(
            Transition(
                turn=turn,
                action=action,
                calls=[ToolCall(name=f"tool_{turn % 8}", arguments=args)],
                observation=observation,
                rewards=step_rewards,
                task_rewards=task_rewards,
                state_diff=[{"op": "replace", "path": f"/slot/{turn}", "value": args["a"]}],
                duration_s=rng.random() * 0.01,
            )
        )
        generations.append(
            Generation(
                action=action,
                token_ids=[rng.randrange(32000) for _ in range(32)],
                logprobs=[-rng.random() for _ in range(32)],
                finish_reason="stop",
            )
        )
        rewards.append(sum(step_rewards.values()) + sum(task_rewards.values()))
    failure = Failure.NONE if success else rng.choice([Failure.POLICY, Failure.FORMAT, Failure.TRUNCATED])
    return Trajectory(
        env_id=env,
        task=task,
        seed=rng.randrange(10**9),
        messages=messages,
        transitions=transitions,
        generations=generations,
        rewards=rewards,
        task_reward=float(success),
        success=success,
        failure=failure,
        duration_s=rng.random(),
    )


def write_synthetic_run(run_dir: Path, episodes: int, seed: int = 0) -> None:
    """A run directory of ``episodes`` episodes, 64 a step, written as the trainer writes one."""
    rng = random.Random(seed)
    (run_dir / "trajectories").mkdir(parents=True, exist_ok=True)
    steps = max(1, episodes // EPISODES_PER_STEP)
    config = {"model": "synthetic", "steps": steps, "group_size": 8, "batch_size": EPISODES_PER_STEP}
    (run_dir / "config.json").write_text(json.dumps(config))
    logger = MetricsLogger(run_dir, total_steps=steps, stream=open("/dev/null", "w"))
    try:
        for step in range(1, steps + 1):
            n = EPISODES_PER_STEP if step < steps else episodes - EPISODES_PER_STEP * (steps - 1)
            trajs = [synthetic_episode(rng, step, i) for i in range(n)]
            path = run_dir / "trajectories" / f"step-{step:06d}.jsonl"
            path.write_text("".join(t.to_json() + "\n" for t in trajs), encoding="utf-8")
            metrics = rollout_metrics(trajs)
            metrics.update(
                {
                    "loss": rng.gauss(0, 0.05), "approx_kl": abs(rng.gauss(0.002, 0.001)), "entropy": 2 - step / steps,
                    "clipfrac": rng.random() * 0.1, "adv/mean": 0.0, "adv/std": 0.8, "adv/min": -1.5, "adv/max": 1.5,
                    "grad_norm": rng.random(), "lr": 3e-4, "time/generate_s": 4 + rng.random(), "time/env_s": 0.5,
                    "time/train_s": 2 + rng.random(), "gen_tokens_per_s": 800 + 50 * rng.random(),
                    "train_tokens_per_s": 5000.0, "miner/pool/active": 400 - step % 400, "miner/pool/solved": step,
                    "miner/informative_frac": rng.random(),
                }
            )  # fmt: skip
            if step % 10 == 0 or step == steps:
                rate = sum(t.success for t in trajs) / len(trajs)
                metrics.update(
                    {"eval/success_rate": rate, "eval/success_low": rate - 0.05, "eval/success_high": rate + 0.05}
                )
            logger.log(step, metrics)
    finally:
        logger.close()


def first_render_s(page: object, path: Path) -> float:
    """Navigation start to the viewer's first render (the page sets data-ready), as the page measured it."""
    page.goto(path.as_uri())  # type: ignore[attr-defined]
    page.wait_for_selector("html[data-ready='1']", timeout=120_000)  # type: ignore[attr-defined]
    return page.evaluate("performance.now()") / 1000  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-browser", action="store_true", help="skip the time to first render")
    args = parser.parse_args()
    print(header("report: build time, file size, time to first render"))
    browser = None
    if not args.no_browser:
        from playwright.sync_api import sync_playwright

        from agentenv.envs.browser.driver import CHROMIUM_ARGS

        playwright = sync_playwright().start()
        browser = playwright.chromium.launch(
            executable_path=shutil.which("chromium"), headless=True, args=list(CHROMIUM_ARGS)
        )
    rows = []
    try:
        for episodes in args.episodes:
            with tempfile.TemporaryDirectory(prefix="agentenv-report-bench-") as tmp:
                run = Path(tmp) / "run"
                start = time.perf_counter()
                write_synthetic_run(run, episodes)
                written = time.perf_counter() - start
                jsonl = sum(p.stat().st_size for p in (run / "trajectories").iterdir())
                builds = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    report = build_report(run)
                    builds.append(time.perf_counter() - start)
                render = "-"
                if browser is not None:
                    page = browser.new_page()
                    times = [first_render_s(page, report.path) for _ in range(args.repeats)]
                    page.close()
                    render = f"{statistics.median(times):.2f} s"
                rows.append(
                    [
                        f"{episodes:,}",
                        f"{jsonl / 1e6:.0f} MB ({written:.0f} s to write)",
                        f"{statistics.median(builds):.2f} s",
                        f"{report.size_bytes / 1e6:.1f} MB",
                        f"{report.embedded:,}",
                        f"{report.pages} ({report.sidecar_bytes / 1e6:.0f} MB)",
                        render,
                    ]
                )
                print(table(HEADERS, rows[-1:]).splitlines()[-1], flush=True)
    finally:
        if browser is not None:
            browser.close()
            playwright.stop()
    print()
    print(table(HEADERS, rows))
    print("\nbound: the HTML file under ~20 MB at 100k episodes (issue 16)")


HEADERS = ["episodes", "run's JSONL", "build", "HTML", "embedded", "sidecar pages", "first render"]

if __name__ == "__main__":
    main()
