"""Failure miner vs uniform task sampling: the same tiny-model GRPO run twice.

A procedural guess-the-number family spanning easy to hard (secrets in 1..16,
1..64, 1..256, 1..1024; 10 turns, so the hardest are out of reach of anything
but a perfect binary search; 48 tasks, so the miner has seen every training task
after a few steps and replays by learnability for the rest), the tiny Qwen2 with a supervised warm start on the
oracle's episodes (as in examples/tiny.toml), the same seeds and number of
steps; only the sampler differs. Prints, per sampler, the mean fraction of
informative groups per batch (rewards not all equal: the groups GRPO learns
from) and the held-out success rate at the end.

    .venv/bin/python bench/miner_vs_uniform.py                  # ~10 min on 2 CPU cores
    .venv/bin/python bench/miner_vs_uniform.py --steps 30 --device cuda

The figures are one seed each: differences of a few points are noise.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from _common import header, table

import agentenv
from agentenv.envs.guess_number import GuessNumberEnv, make_tasks

ENV_ID = "bench-guess-ladder-v0"


def _env(**kwargs):
    return GuessNumberEnv(tasks=make_tasks(48, seed=11), **kwargs)


def _run(sampler: str, args: argparse.Namespace, out: Path) -> dict[str, float]:
    from agentenv.trainers import GRPOConfig, GRPOTrainer

    config = GRPOConfig(
        model="tiny",
        envs={ENV_ID: 1.0},
        output_dir=str(out / sampler),
        seed=args.seed,
        device=args.device,
        tool_prompt="compact",
        max_turns=10,
        max_new_tokens=32,
        stop=["</tool_call>"],
        max_seq_len=1024,
        steps=args.steps,
        group_size=args.group_size,
        batch_size=args.batch_size,
        learning_rate=5e-4,
        micro_batch_size=16,
        sft_steps=args.sft_steps,
        eval_every=0,
        eval_episodes=args.eval_episodes,
        eval_temperature=1.0,
        save_every=args.steps,
        report_to=[],
        resume=False,
        save_trajectories=False,
        miner={} if sampler == "miner" else None,
    )
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        history = GRPOTrainer("tiny", envs=config.envs, config=config).train()
    steps = [h for h in history if "zero_variance_frac" in h]
    return {
        "informative": float(np.mean([1 - h["zero_variance_frac"] for h in steps])),
        "train_success": float(np.mean([h["success_rate"] for h in steps])),
        "held_out_start": history[0].get("eval/success_rate", float("nan")),
        "held_out_end": history[-1].get("eval/success_rate", float("nan")),
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--sft-steps", type=int, default=120)
    parser.add_argument("--eval-episodes", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    agentenv.register(
        ENV_ID,
        entry_point=_env,
        oracle="agentenv.envs.guess_number:oracle",
        description="guess-number, difficulties 0-3 (bench)",
    )
    print(header("failure miner vs uniform sampling (tiny model, GRPO)"))
    print(
        f"guess-number difficulties 0-3, {args.steps} steps x {args.batch_size // args.group_size} groups "
        f"of {args.group_size}, {args.sft_steps} SFT steps, {args.eval_episodes} held-out episodes, "
        f"seed {args.seed}, device {args.device}\n"
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for sampler in ("uniform", "miner"):
            r = _run(sampler, args, Path(tmp))
            rows.append(
                [
                    sampler,
                    f"{r['informative']:.1%}",
                    f"{r['train_success']:.1%}",
                    f"{r['held_out_start']:.1%}",
                    f"{r['held_out_end']:.1%}",
                    f"{r['seconds']:.0f}",
                ]
            )
    print(table(["sampler", "informative groups", "train success", "held-out start", "held-out end", "s"], rows))


if __name__ == "__main__":
    main()
