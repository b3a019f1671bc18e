"""Per-step overhead of the reasoning-gym adapter over calling reasoning-gym directly.

    .venv/bin/python bench/_adapter_rgym.py [--steps 200]

Direct: get the entry (``dataset[i]``) and ``dataset.score_answer(answer, entry)``, in
this process. Adapter: ``env.step("<answer>…</answer>")`` on a reset env (the reset is
not timed), which extracts the answer, sends it to the scoring process, scores it
there against the entry and, since the answer scores, against ``decoys`` other entries
(the hedge check), and runs agentenv's step (transition, rewards, verifier). The same
reference answers in both. The "reset" case times ``dataset[i]`` against
``env.reset``. Figures: median microseconds over ``steps`` calls; `measure` returns
them for bench/adapters.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, import_agentenv, table

CASES = (
    ("leg_counting", 2),
    ("leg_counting", 0),
    ("polynomial_multiplication", 2),
)
"""(dataset, decoys): a cheap scorer with and without the hedge check, and a sympy one."""
SIZE = 32


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def _step_case(dataset: str, decoys: int, steps: int) -> dict[str, Any]:
    from reasoning_gym import create_dataset

    from agentenv.envs.adapters.reasoning_gym import ReasoningGymEnv

    env = ReasoningGymEnv(dataset, size=SIZE, decoys=decoys)
    direct = create_dataset(dataset, seed=0, size=SIZE)
    # The scoring process's entries (its hash seed is fixed); the direct dataset scores its own.
    answers = [direct[i]["answer"] for i in range(SIZE)]
    tasks = list(env.tasks)
    env.reset(seed=0, options={"task": tasks[0]})
    env.step(f"<answer>{tasks[0].payload['answer']}</answer>")  # the scoring process is up and warm
    direct_s, adapter_s = [], []
    for i in range(steps):
        k = i % SIZE
        start = time.perf_counter()
        entry = direct[k]
        direct.score_answer(answers[k], entry)
        direct_s.append(time.perf_counter() - start)
        env.reset(seed=i, options={"task": tasks[k]})
        action = f"<answer>{tasks[k].payload['answer']}</answer>"
        start = time.perf_counter()
        env.step(action)
        adapter_s.append(time.perf_counter() - start)
    env.close()
    return {
        "adapter": "reasoning-gym",
        "case": f"{dataset} step (decoys={decoys})",
        "direct_us": _median_us(direct_s),
        "adapter_us": _median_us(adapter_s),
    }


def _reset_case(dataset: str, steps: int) -> dict[str, Any]:
    from reasoning_gym import create_dataset

    from agentenv.envs.adapters.reasoning_gym import ReasoningGymEnv

    env = ReasoningGymEnv(dataset, size=SIZE)
    direct = create_dataset(dataset, seed=0, size=SIZE)
    direct_s, adapter_s = [], []
    for i in range(steps):
        start = time.perf_counter()
        direct[i % SIZE]
        direct_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        env.reset(seed=i)
        adapter_s.append(time.perf_counter() - start)
    env.close()
    return {
        "adapter": "reasoning-gym",
        "case": "reset",
        "direct_us": _median_us(direct_s),
        "adapter_us": _median_us(adapter_s),
    }


def measure(steps: int = 200) -> list[dict[str, Any]]:
    """Median microseconds per step, direct vs through the env, for each case."""
    import_agentenv()
    rows = [_step_case(dataset, decoys, steps) for dataset, decoys in CASES]
    rows.append(_reset_case("leg_counting", steps))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    rows = measure(args.steps)
    print(header("reasoning-gym adapter: per-step time, direct vs through agentenv (median us)"))
    print(
        table(
            ["case", "direct us", "adapter us", "adapter/direct"],
            [
                [
                    r["case"],
                    f"{r['direct_us']:.1f}",
                    f"{r['adapter_us']:.1f}",
                    f"{r['adapter_us'] / r['direct_us']:.1f}x",
                ]
                for r in rows
            ],
        )
    )


if __name__ == "__main__":
    main()
