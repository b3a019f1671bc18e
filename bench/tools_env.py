"""Tool calls per second through the tools env (retail domain), one episode and 16 at once,
and the reset latency.

    .venv/bin/python bench/tools_env.py [--rounds 5] [--calls 200] [--episodes 16] [--resets 200]

Every call is a ``get_order`` (a read) as a structured `ToolCall`, so what is timed is
the env's step (validation, transition, state diff) plus the HTTP round trip to the
domain's service (a separate process) and one SQLite transaction there. The
baseline row sends the same request through the service client and no env
(`Service.call`: the request signed, the answer's proof and shape checked, as every
call needs): the gap is the env's cost. The concurrent rows step 16 envs from 16
threads, each its own episode database, against the one service. Reset = copy the seed database and
build the first observation. Each figure is the median over rounds; the service is
started and warmed before timing. Left out: write calls, the verifier's golden
replay (once per task per service, then cached), model time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

from agentenv import ToolCall
from agentenv.envs.tools import ToolsEnv

DOMAIN = "agentenv.envs.tools.domains.retail:DOMAIN"
TASK = "retail-status-O1002"
CALL = ToolCall(name="get_order", arguments={"order_id": "O1002"})


def new_env(calls: int) -> ToolsEnv:
    env = ToolsEnv(DOMAIN, max_turns=calls + 1)
    env.reset(seed=0, options={"task": TASK})
    return env


def play(env: ToolsEnv, calls: int) -> float:
    """Seconds for ``calls`` steps of a fresh episode (the reset is not timed)."""
    env.reset(seed=0, options={"task": TASK})
    t0 = time.perf_counter()
    for _ in range(calls):
        _, _, _, _, info = env.step(CALL)
    elapsed = time.perf_counter() - t0
    if info["error"] is not None:
        raise RuntimeError(f"the timed call failed: {info['error']}")
    return elapsed


def service_call(env: ToolsEnv, calls: int) -> float:
    """The same requests through the service client (signed, answers checked) and nothing else."""
    body, service, episode = b'{"order_id": "O1002"}', env.service, env.episode
    t0 = time.perf_counter()
    for _ in range(calls):
        if service.call(episode, "get_order", body, 5.0).status != 200:
            raise RuntimeError("the baseline call failed")
    return time.perf_counter() - t0


def concurrent(envs: list[ToolsEnv], pool: ThreadPoolExecutor, calls: int) -> float:
    t0 = time.perf_counter()
    list(pool.map(lambda e: play(e, calls), envs))
    return time.perf_counter() - t0


def reset_times(env: ToolsEnv, n: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        env.reset(seed=i, options={"task": TASK})
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="tool calls per episode per round")
    parser.add_argument("--episodes", type=int, default=16, help="concurrent episodes")
    parser.add_argument("--resets", type=int, default=200)
    args = parser.parse_args(argv)
    if min(args.rounds, args.calls, args.episodes, args.resets) < 1:
        parser.error("every count must be >= 1")

    t_start = time.perf_counter()
    env = new_env(args.calls)
    envs = [new_env(args.calls) for _ in range(args.episodes)]
    pool = ThreadPoolExecutor(args.episodes)
    play(env, 50), service_call(env, 50), concurrent(envs, pool, 20)  # warm-up: connections, caches
    one, base, many = [], [], []
    for _ in range(args.rounds):  # interleaved so drift hits every row alike
        base.append(args.calls / service_call(env, args.calls))
        one.append(args.calls / play(env, args.calls))
        many.append(args.calls * args.episodes / concurrent(envs, pool, args.calls))
    resets = sorted(reset_times(env, args.resets))
    pool.shutdown()
    for e in (env, *envs):
        e.close()

    p50, p95 = statistics.median(resets) * 1e3, resets[int(0.95 * (len(resets) - 1))] * 1e3
    print(header("tools env: tool calls through ToolsEnv (retail, get_order) and reset latency"))
    print(
        f"{args.rounds} rounds x {args.calls} calls per episode; {args.episodes} concurrent episodes; "
        f"{args.resets} resets; {time.perf_counter() - t_start:.1f} s\n"
    )
    print(
        table(
            ["measure", "calls/s (median)", "ms per call"],
            [
                [
                    "service.call, no env (baseline)",
                    f"{statistics.median(base):.0f}",
                    f"{1e3 / statistics.median(base):.2f}",
                ],
                ["1 episode through the env", f"{statistics.median(one):.0f}", f"{1e3 / statistics.median(one):.2f}"],
                [
                    f"{args.episodes} concurrent episodes (total)",
                    f"{statistics.median(many):.0f}",
                    f"{1e3 / statistics.median(many):.2f}",
                ],
            ],
        )
    )
    print(f"\nreset (copy the seed db + first observation): p50 {p50:.2f} ms, p95 {p95:.2f} ms")
    overhead_ms = 1e3 / statistics.median(one) - 1e3 / statistics.median(base)
    print(
        f"env overhead per call over service.call: {overhead_ms:+.2f} ms; "
        f"{args.episodes} episodes vs 1: {statistics.median(many) / statistics.median(one):.2f}x the throughput"
    )
    print("targets: the issue sets none for these figures; they are reported as measured")


if __name__ == "__main__":
    main()
