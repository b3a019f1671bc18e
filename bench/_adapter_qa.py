"""Hugging Face datasets adapter: scoring an answer through `QAEnv` vs comparing strings over the split,
and `qa.from_dataset` vs iterating the split's records.

    python bench/_adapter_qa.py [--steps 200]

``measure`` follows the adapters' benchmark protocol (bench/adapters.py imports it):
median microseconds per step, the library path ("direct") and agentenv's
("adapter") in the same process on the same answers. Cases:

- ``step``: direct = one row of the split read and its answer compared with the reply
  (``row["answer"].strip() == reply.strip()``); adapter = ``QAEnv.step`` on the same
  reply, which extracts the boxed answer, normalises and compares (numbers exactly),
  records the transition and ends the episode. Resets are timed apart.
- ``reset``: direct = one row read from the split; adapter = ``QAEnv.reset`` on that task.
- ``from_dataset per 1k``: direct = iterating 1,000 records of the split (what any
  loader pays); adapter = ``qa.from_dataset`` on them (validation, ids, tasks). The
  figures are microseconds per 1,000 records.

Left out: the trainer, and a real model's replies (the replies are short boxed answers).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, import_agentenv, table

import_agentenv()

ROUNDS = 21


def _split(n: int):
    import datasets

    rows = [{"question": f"What is {i} + {i + 1}?", "answer": f"{2 * i + 1:,}"} for i in range(n)]
    return datasets.Dataset.from_list(rows)


def _medians_us(direct: Callable[[], float], adapter: Callable[[], float], rounds: int = ROUNDS) -> tuple[float, float]:
    """Medians over ``rounds`` of each function's microseconds per item; rounds of the two
    alternate, so drift on a shared machine hits both alike."""
    a, b = [], []
    for _ in range(rounds):
        a.append(direct())
        b.append(adapter())
    return statistics.median(a), statistics.median(b)


def _per_item_us(fn: Callable[[], int]) -> Callable[[], float]:
    def timed() -> float:
        start = time.perf_counter()
        items = fn()
        return (time.perf_counter() - start) / items * 1e6

    return timed


def measure(steps: int = 200) -> list[dict]:
    from agentenv.envs.adapters.qa import QAEnv, from_dataset

    split = _split(max(steps, 1000))
    rows = split.select(range(steps))
    tasks = from_dataset(rows)
    replies = [f"Adding them: \\boxed{{{t.payload['reference']}}}" for t in tasks]
    env = QAEnv(tasks)

    def direct_step() -> int:
        hits = 0
        for row, reply in zip(rows, replies, strict=True):
            hits += row["answer"].strip() == reply.strip()
        return steps

    def adapter_steps() -> float:  # resets excluded: only the steps are timed
        total = 0.0
        for task, reply in zip(tasks, replies, strict=True):
            env.reset(seed=0, options={"task": task})
            start = time.perf_counter()
            env.step(reply)
            total += time.perf_counter() - start
        return total / steps * 1e6

    def direct_reset() -> int:
        for row in rows:
            row["question"]
        return steps

    def adapter_reset() -> int:
        for task in tasks:
            env.reset(seed=0, options={"task": task})
        return steps

    thousand = split.select(range(1000))

    def direct_load() -> int:
        for row in thousand:
            row["question"], row["answer"]
        return 1

    def adapter_load() -> int:
        from_dataset(thousand)
        return 1

    results = []
    for case, direct, adapter in (
        ("step", _per_item_us(direct_step), adapter_steps),
        ("reset", _per_item_us(direct_reset), _per_item_us(adapter_reset)),
        ("from_dataset per 1k", _per_item_us(direct_load), _per_item_us(adapter_load)),
    ):
        direct_us, adapter_us = _medians_us(direct, adapter)
        results.append({"adapter": "qa", "case": case, "direct_us": direct_us, "adapter_us": adapter_us})
    env.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    print(header("Hugging Face datasets adapter (qa): agentenv vs the library, same run"))
    results = measure(args.steps)
    rows = [
        (r["case"], f"{r['direct_us']:.1f}", f"{r['adapter_us']:.1f}", f"{r['adapter_us'] / r['direct_us']:.1f}x")
        for r in results
    ]
    print(table(("case", "direct µs", "adapter µs", "ratio"), rows))


if __name__ == "__main__":
    main()
