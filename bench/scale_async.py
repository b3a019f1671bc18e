"""Trainer step time on the CPU, synchronous vs asynchronous rollouts (`async_rollouts`).

    .venv/bin/python bench/scale_async.py                      # ~2.5 min on a 2-core machine
    .venv/bin/python bench/scale_async.py --steps 4 --rounds 1 --threads 1

`GRPOTrainer.train()` with the project's tiny model (random-init Qwen2, hidden 128,
2 layers) on guess-number-v0, one run per condition, each from its own copy of the
same weights: synchronous, and asynchronous with max_staleness 1 and 2 (policy
"wait") and 1 (policy "drop"). A random model never makes a valid call, so every
episode runs ``--turns`` turns of ``--max-new-tokens`` tokens: a fixed load, the same
for all. The step time is the wall time between two consecutive steps' ``on_step``
calls (rollouts or the wait for them, the update, the weight hand-off, logging),
after ``--warmup`` steps; the asynchronous run's first step always waits for a whole
batch. Conditions run one after the other, ``--rounds`` times round-robin, so that
drift hits all alike; figures are medians over every measured step.

The generator thread and the learner share the machine's cores and, on a CPU, torch's
intra-op threads: the overlap pays only where one side leaves cores idle (Python
per-token overhead in generation, the env's steps). The CPU column (this process's
CPU time per step, all threads) tells overlap from a larger share of a busy machine:
on a loaded machine two busy threads take more of it than one. Left out: GPUs, where generation
and update share one device; several processes or machines (an inference server).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, import_agentenv, table

import_agentenv()

# After import_agentenv, which may put the repository on the path:
import agentenv
from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trainers.model import build_tiny

ENV = "guess-number-v0"


@dataclass
class Condition:
    name: str
    settings: dict[str, Any]
    rows: list[dict[str, float]] = field(default_factory=list)


CONDITIONS = [
    Condition("sync", {}),
    Condition("async wait k=1", {"async_rollouts": True, "max_staleness": 1}),
    Condition("async wait k=2", {"async_rollouts": True, "max_staleness": 2}),
    Condition("async drop k=1", {"async_rollouts": True, "max_staleness": 1, "staleness_policy": "drop"}),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, default, help_ in (
        ("--steps", 6, "measured steps per run"),
        ("--warmup", 2, "steps per run first, not measured"),
        ("--rounds", 2, "runs per condition, round-robin"),
        ("--turns", 4, "turns per episode"),
        ("--max-new-tokens", 16, "tokens per turn"),
        ("--batch-size", 16, "episodes per step"),
        ("--group-size", 4, "episodes per task"),
        ("--threads", 0, "torch threads (0: torch's default)"),
    ):
        p.add_argument(flag, type=int, default=default, help=f"{help_} (default {default})")
    return p.parse_args(argv)


def make_env(args: argparse.Namespace) -> agentenv.Env:
    env = agentenv.make(ENV, tool_prompt="compact", max_turns=args.turns)
    env.max_format_errors = args.turns  # an invalid call every turn must not end the episode early
    step = env.step

    def varied_step(action: Any) -> Any:  # rewards that differ within a group: every step updates
        env.format_penalty = 0.1 * (1 + zlib.crc32(repr(action).encode()) % 2)
        return step(action)

    env.step = varied_step  # type: ignore[method-assign]
    return env


def run(condition: Condition, model: torch.nn.Module, tokenizer: Any, args: argparse.Namespace, out: str) -> None:
    config = GRPOConfig(
        output_dir=out,
        device="cpu",
        steps=args.warmup + args.steps,
        batch_size=args.batch_size,
        group_size=args.group_size,
        max_turns=args.turns,
        max_new_tokens=args.max_new_tokens,
        max_seq_len=1024,
        micro_batch_size=args.batch_size,
        eval_episodes=0,
        save_every=10_000,
        save_trajectories=False,
        report_to=[],
        resume=False,
        learning_rate=1e-3,  # large enough for stale tokens to show an importance weight away from 1
        **condition.settings,
    )
    stamps: list[tuple[float, float]] = []  # wall clock, this process's CPU time
    metrics: list[dict[str, Any]] = []

    def on_step(step: int, m: dict[str, Any]) -> None:
        stamps.append((time.perf_counter(), time.process_time()))
        metrics.append(m)

    trainer = GRPOTrainer(model, tokenizer, envs=[lambda: make_env(args)], config=config, on_step=on_step)
    trainer.train()
    for i in range(args.warmup, len(stamps)):
        m = metrics[i]
        condition.rows.append(
            {
                "wall": stamps[i][0] - stamps[i - 1][0],
                "cpu": stamps[i][1] - stamps[i - 1][1],
                "gen": m["time/generate_s"],
                "train": m["time/train_s"],
                "wait": m.get("time/wait_s", 0.0),
                "lag": m.get("async/lag_mean", 0.0),
                "dropped": m.get("async/dropped_groups", 0.0),
                "weight": m.get("off_policy/weight_mean", 1.0),
                "trunc": m.get("off_policy/truncated_frac", 0.0),
            }
        )
    wall = statistics.median(r["wall"] for r in condition.rows[-args.steps :])
    print(f"  {condition.name}: median step {wall:.2f} s", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.warmup < 1:
        raise SystemExit("--warmup must be >= 1: a step's time is measured from the step before")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = build_tiny([ENV], seed=0)
    print(f"{len(CONDITIONS)} conditions x {args.rounds} rounds x {args.warmup + args.steps} steps", flush=True)
    with tempfile.TemporaryDirectory(prefix="scale_async_") as out:
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", flush=True)
            for i, condition in enumerate(CONDITIONS):
                run(condition, copy.deepcopy(model), tokenizer, args, f"{out}/{r}-{i}")
    report(args, model)


def report(args: argparse.Namespace, model: torch.nn.Module) -> None:
    print("\n" + header("bench/scale_async.py: GRPOTrainer step time, synchronous vs asynchronous rollouts"))
    c = model.config
    print(
        f"torch {torch.__version__} ({torch.get_num_threads()} threads); model: Qwen2 random init, "
        f"{model.num_parameters() / 1e6:.2f} M params, hidden {c.hidden_size}, {c.num_hidden_layers} layers; "
        f"env {ENV}, {args.batch_size} episodes of {args.turns} turns x {args.max_new_tokens} tokens per step; "
        f"medians over {args.steps} steps x {args.rounds} rounds"
    )
    med = [{k: statistics.median(r[k] for r in cond.rows) for k in cond.rows[0]} for cond in CONDITIONS]
    mean_dropped = [statistics.fmean(r["dropped"] for r in cond.rows) for cond in CONDITIONS]
    sync = med[0]["wall"]
    rows = [
        (
            cond.name,
            f"{m['wall']:.2f}",
            f"{sync / m['wall']:.2f}x",
            f"{m['cpu']:.2f}",
            f"{m['gen']:.2f}",
            f"{m['train']:.2f}",
            f"{m['wait']:.2f}",
            f"{m['lag']:.2f}",
            f"{dropped:.2f}",
            f"{m['weight']:.3f}",
            f"{m['trunc']:.3f}",
        )
        for cond, m, dropped in zip(CONDITIONS, med, mean_dropped, strict=True)
    ]
    headers = ["condition", "step (s)", "vs sync", "CPU (s)", "generate (s)", "train (s)", "wait (s)", "lag", "dropped"]
    print(table([*headers, "IS weight", "truncated"], rows))
    print(
        "\nstep: wall time between steps; CPU: this process's CPU time in it (all threads);\n"
        "generate: the batch's generation (overlapped when async); train: the update; "
        "wait: the learner waiting for a batch;\nlag: mean versions behind of the trained turns; "
        "dropped: groups per step (mean); IS weight, truncated: mean importance weight and share "
        "of tokens truncated at importance_cap"
    )


if __name__ == "__main__":
    main()
