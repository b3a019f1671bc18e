"""Scaling past one process: env workers on Ray, and asynchronous rollouts.

    .venv/bin/python bench/scale.py [--part ray|async|all] [--episodes 64] [--steps 10] [--sleep-ms 20]
                                    [--threads 4] [--repeats 3]

Part ``async``: trainer step time, synchronous vs asynchronous rollouts, on the tiny
CPU model: `bench/scale_async.py` with its defaults (run that script alone for its
options and its description).

Part ``ray``: episodes/s of an I/O-bound env (every step sleeps 20 ms, the
`rollout_concurrency.SleepEnv`) through `agentenv.rollout` with the thread executor
and with 1, 2 and 4 Ray actors, on a local Ray on this machine. Two budgets: every
worker with as many threads as it has live episodes (the default), and every
worker with ``--threads`` threads (a process's share of a node), where adding
actors adds stepping capacity as adding nodes would. The policy is scripted and
instant, so the figures are the env side alone: sleeps, thread hops, and for Ray
one round trip per actor per turn with the conversations as payload.

Left out: a real cluster (the figures are one machine's), envs that do CPU work in
a step, a policy that takes time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from _common import header, table
from rollout_concurrency import SleepEnv, make_policy

from agentenv import rollout
from agentenv.rollout.ray import RayExecutor

ACTOR_COUNTS = (1, 2, 4)
ACTOR_CPUS = 0.25  # the actors wait on I/O: four share a core


class SleepFactory:
    """Makes a `SleepEnv` of ``steps`` turns (Ray ships it to the actors)."""

    def __init__(self, steps: int, sleep_s: float) -> None:
        self.steps, self.sleep_s = steps, sleep_s

    def __call__(self) -> SleepEnv:
        env = SleepEnv(max_turns=self.steps)
        env.sleep_s = self.sleep_s
        return env


def timed_rollout(args: argparse.Namespace, executor: str | RayExecutor, threads: int | None) -> float:
    """Episodes/s of one rollout of ``args.episodes`` episodes, every one checked."""
    factory = SleepFactory(args.steps, args.sleep_ms / 1e3)
    t0 = time.perf_counter()
    trajs = rollout(factory, make_policy(args.steps), n=args.episodes, max_workers=threads, executor=executor)
    wall = time.perf_counter() - t0
    bad = [t for t in trajs if not t.success or t.turns != args.steps]
    if len(trajs) != args.episodes or bad:
        why = bad[0].error if bad else "episodes missing"
        raise RuntimeError(f"{len(bad)} of {len(trajs)} episodes did not run as scripted: {why}")
    return args.episodes / wall


def median_rate(args: argparse.Namespace, executor: str | RayExecutor, threads: int | None) -> float:
    timed_rollout(args, executor, threads)  # warm-up: imports and schema caches (in each actor too)
    return statistics.median(timed_rollout(args, executor, threads) for _ in range(args.repeats))


def bench_ray(args: argparse.Namespace) -> None:
    """Episodes/s with the thread executor and with 1, 2 and 4 Ray actors, printed."""
    try:
        import ray
    except ImportError:
        sys.exit("part ray needs Ray: pip install 'agentenv[ray]'")
    cpus = os.cpu_count() or 1
    t0 = time.perf_counter()
    # Ray puts this script's folder on the actors' path: they import the env by name.
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    ray_start_s = time.perf_counter() - t0
    try:
        rows, starts = [], []
        for threads in (None, args.threads):
            label = "one per live episode" if threads is None else str(threads)
            base = median_rate(args, "thread", threads)
            rows.append(["thread executor", "-", label, f"{base:.1f}", "1.00x"])
            for n in ACTOR_COUNTS:
                t0 = time.perf_counter()
                with RayExecutor(actors=n, actor_cpus=ACTOR_CPUS) as executor:
                    starts.append((n, time.perf_counter() - t0))
                    rate = median_rate(args, executor, threads)
                rows.append(["ray actors", str(n), label, f"{rate:.1f}", f"{rate / base:.2f}x"])
    finally:
        ray.shutdown()
    ideal = args.episodes / (args.steps * args.sleep_ms / 1e3)
    print(header(f"env workers on Ray: {args.episodes} episodes of {args.steps} steps of {args.sleep_ms:g} ms I/O"))
    print(
        f"ray {ray.__version__}, a local Ray with {cpus} CPUs ({ACTOR_CPUS} CPU per actor); "
        f"median of {args.repeats} rollouts after one warm-up\n"
        f"ideal with every episode stepped at once: {ideal:.0f} episodes/s\n"
    )
    print(table(["executor", "actors", "threads per worker", "episodes/s", "vs threads"], rows))
    print(
        f"\none-time costs: ray.init {ray_start_s:.1f} s; starting the actors "
        + ", ".join(f"{n}: {s:.1f} s" for n, s in starts[: len(ACTOR_COUNTS)])
    )


def bench_async(args: argparse.Namespace) -> None:
    import scale_async  # bench/scale_async.py, beside this script

    print("\ntrainer step time, synchronous vs asynchronous rollouts (bench/scale_async.py)", flush=True)
    scale_async.main([])


PARTS = {"ray": bench_ray, "async": bench_async}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=[*PARTS, "all"], default="all", help="which measurement to run")
    parser.add_argument("--episodes", type=int, default=64, help="ray: episodes per rollout, all live at once")
    parser.add_argument("--steps", type=int, default=10, help="ray: steps per episode")
    parser.add_argument("--sleep-ms", type=float, default=20.0, help="ray: simulated I/O per step")
    parser.add_argument("--threads", type=int, default=4, help="ray: threads per worker in the fixed-budget rows")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each case (median over them)")
    args = parser.parse_args(argv)
    if min(args.episodes, args.steps, args.threads, args.repeats) < 1 or args.sleep_ms < 0:
        parser.error("--episodes, --steps, --threads and --repeats must be >= 1 and --sleep-ms >= 0")
    for name, part in PARTS.items():
        if args.part in (name, "all"):
            part(args)


if __name__ == "__main__":
    main()
