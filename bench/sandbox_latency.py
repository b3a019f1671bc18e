"""Latency of a sandboxed ``print(1)`` by route, pool acquire/reset, and throughput.

    .venv/bin/python bench/sandbox_latency.py [--runs 200] [--containers 10] [--throughput 200]

Rows (p50 and p95 over repeated calls, one process, idle machine):
  - new container + run: `DockerSandbox()` (create, attach, start, ping) then one
    ``run_python``; the container is removed outside the timing;
  - docker exec: ``python3 -c 'print(1)'`` through ``container.exec_run`` in a warm
    container, the usual way to run code in one;
  - runner round trip: ``run_python("print(1)")`` / ``run(["true"])`` in a warm
    `DockerSandbox` (a fork inside the container plus the attached-socket hop);
  - process backend: ``run_python("print(1)")`` in a `ProcessSandbox`, when
    `agentenv.sandboxes.process` is there;
  - reset of a sandbox left with 100 files and a background process, and
    ``acquire()`` from a warm pool (every sandbox back and reset).
Then the throughput of short runs across a pool of 4 driven by 4 threads, each
run on a freshly reset sandbox (acquire, run, release), in runs/s.
Needs a running engine and the image (``agentenv sandbox build``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

from agentenv.sandboxes import Limits, SandboxPool
from agentenv.sandboxes.docker import DockerSandbox, docker_client

TARGET_RUN_MS = 10.0  # warm sandboxed run, issue target (docker exec 80 ms, a new container 0.3 s)
TARGET_ACQUIRE_MS = 50.0
LIMITS = Limits(timeout_s=10)


def timed(fn: Callable[[], object], n: int, *, warmup: int = 3) -> list[float]:
    """Seconds per call of ``fn`` over ``n`` calls, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def row(name: str, samples: list[float], note: str = "") -> list[object]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return [name, f"{statistics.median(samples) * 1e3:.2f}", f"{p95 * 1e3:.2f}", len(samples), note]


def new_container_rows(client: object, n: int) -> list[list[object]]:
    samples = []
    for _ in range(n + 1):
        t0 = time.perf_counter()
        sb = DockerSandbox(limits=LIMITS, client=client)
        sb.run_python("print(1)")
        samples.append(time.perf_counter() - t0)
        sb.close()
    return [row("new container + run", samples[1:])]


def warm_rows(client: object, runs: int) -> list[list[object]]:
    with DockerSandbox(limits=LIMITS, client=client) as sb:
        exec_samples = timed(
            lambda: sb.container.exec_run(["python3", "-c", "print(1)"], user="1000"), max(20, runs // 5)
        )
        py = timed(lambda: sb.run_python("print(1)"), runs)
        true = timed(lambda: sb.run(["true"]), runs)
        resets = []
        for _ in range(max(20, runs // 5)):
            # untimed: leave 100 files and a process outside the run's group
            sb.run("setsid sleep 60 >/dev/null 2>&1 & mkdir d && for i in $(seq 100); do echo $i > d/$i; done")
            t0 = time.perf_counter()
            sb.reset()
            resets.append(time.perf_counter() - t0)
    return [
        row("docker exec python3 -c 'print(1)'", exec_samples),
        row("runner: run_python('print(1)')", py, f"target <= {TARGET_RUN_MS:g} ms"),
        row("runner: run(['true'])", true),
        row("reset (100 files, 1 process left)", resets),
    ]


def process_rows(runs: int) -> list[list[object]]:
    try:
        from agentenv.sandboxes.process import ProcessSandbox
    except ImportError as e:
        return [["process backend: run_python('print(1)')", "-", "-", 0, f"skipped: {e}"]]
    with ProcessSandbox(LIMITS) as sb:
        return [row("process backend: run_python('print(1)')", timed(lambda: sb.run_python("print(1)"), runs))]


def pool_rows(n: int) -> list[list[object]]:
    samples = []
    with SandboxPool("docker", size=4, limits=LIMITS) as pool:
        pool.wait_ready()
        for _ in range(n):
            while pool.available < 4:  # a warm pool: every sandbox back and reset
                time.sleep(0.001)
            t0 = time.perf_counter()
            lease = pool.acquire()
            samples.append(time.perf_counter() - t0)
            lease.run_python("print(1)")
            lease.close()
    return [row("pool acquire (warm)", samples, f"target <= {TARGET_ACQUIRE_MS:g} ms")]


def throughput(total: int, *, reset_each: bool) -> float:
    """Runs per second of ``total`` print(1) runs over a pool of 4 and 4 threads."""
    with SandboxPool("docker", size=4, limits=LIMITS) as pool:
        pool.wait_ready()
        if reset_each:

            def one(_: int) -> None:
                with pool.acquire() as sb:
                    sb.run_python("print(1)")
        else:
            held = [pool.acquire() for _ in range(4)]

            def one(i: int) -> None:
                held[i % 4].run_python("print(1)")

        with ThreadPoolExecutor(4) as workers:
            list(workers.map(one, range(8)))  # warm-up
            t0 = time.perf_counter()
            list(workers.map(one, range(total)))
            return total / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="timed calls per warm row")
    parser.add_argument("--containers", type=int, default=10, help="new containers timed")
    parser.add_argument("--throughput", type=int, default=200, help="runs in the throughput figure")
    args = parser.parse_args(argv)
    if min(args.runs, args.containers, args.throughput) < 1:
        parser.error("--runs, --containers and --throughput must be >= 1")

    client = docker_client()
    print(header("sandbox latency: print(1) by route") + f"\ndocker engine {client.version().get('Version')}\n")
    rows = [
        *warm_rows(client, args.runs),
        *process_rows(max(20, args.runs // 4)),
        *pool_rows(max(20, args.runs // 4)),
        *new_container_rows(client, args.containers),
    ]
    print(table(["measure", "p50 ms", "p95 ms", "n", "note"], rows))
    fresh = throughput(args.throughput, reset_each=True)
    held = throughput(args.throughput, reset_each=False)
    print(f"\nthroughput, {args.throughput} runs over a pool of 4, 4 threads:")
    print(f"  acquire + run + release (reset in background): {fresh:7.1f} runs/s")
    print(f"  4 sandboxes held, no reset between runs:       {held:7.1f} runs/s")
    run_p50 = float(rows[1][1])
    acquire_p50 = float(next(r for r in rows if r[0].startswith("pool acquire"))[1])
    print(
        f"\ntarget: warm run p50 <= {TARGET_RUN_MS:g} ms: {run_p50:.2f} ms "
        f"({'met' if run_p50 <= TARGET_RUN_MS else 'NOT met'})"
    )
    print(
        f"target: warm pool acquire p50 <= {TARGET_ACQUIRE_MS:g} ms: {acquire_p50:.3f} ms "
        f"({'met' if acquire_p50 <= TARGET_ACQUIRE_MS else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
