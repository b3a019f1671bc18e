"""A real pretrained model learns, measured against a control: SmolLM2-135M-Instruct on
arithmetic with a calculator, RL against a shuffled-reward control, held-out by content.

    .venv/bin/python bench/learn_real.py               # 3 seeds, about 2 hours on a 2-core machine
    .venv/bin/python bench/learn_real.py --seeds 0     # one seed, about 40 minutes
    .venv/bin/python bench/learn_real.py --smoke       # checks the script in a few minutes

Model: SmolLM2-135M-Instruct (``model = "smollm2-135m-instruct"``, the smollm2 extra),
float32 masters, sampled by vLLM in the trainer's process (``rollout_engine = "vllm"``).
Env: ``arithmetic-v0`` with its tools in one line each (``tool_prompt = "compact"``):
an expression of 1 to 3 operations, evaluated one operation per ``calculate`` call,
then ``submit``; a multi-turn episode of 2 to 4 turns. The held-out tasks are split by
content: no held-out expression is in training.

1. Warm start (shared by every seed and arm, cached under ``$AGENTENV_CACHE/learn_real``):
   the oracle plays the training tasks and ``--sft-steps`` supervised steps imitate it.
   The warm-started model calls the tools well but often submits before the last
   operation or copies an operand wrongly: about half the held-out episodes succeed,
   with headroom at 2 and 3 operations.
2. Per seed, two arms of ``--steps`` GRPO steps from that warm start, the same seeds and
   data order: RL, and a control whose task rewards are permuted across each batch
   before the advantages (``shuffle_rewards``): everything RL does but for the
   information in the reward. Held-out success (sampled at temperature 1, the same tasks
   and episode seeds for both arms) at every evaluation, with 95% bootstrap intervals
   over tasks.
3. The claim: RL minus control at the last evaluation, per seed, with a paired 95%
   bootstrap interval over the held-out tasks (`agentenv.eval.evaluation.compare`).

The last line reads
``real model: RL minus control +X.X points held-out (mean of 3 seeds), smallest +Y.Y``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

from agentenv.core.trajectory import Trajectory
from agentenv.eval.evaluation import compare, score
from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trainers.pretrained import cache_dir

MODEL = "smollm2-135m-instruct"
ENV = "arithmetic-v0"


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The config every run shares (the warm start's too)."""
    return dict(
        envs={ENV: 1.0},
        env_kwargs={ENV: {"difficulties": args.difficulties}},
        tool_prompt="compact",
        stop=["</tool_call>"],
        max_new_tokens=48,
        max_seq_len=768,
        test_fraction=0.2,
        split_seed=0,  # one held-out set for every seed: the shared warm start never saw it
        report_to=[],
        resume=False,
    )


def warm_start(args: argparse.Namespace) -> Path:
    """The warm-started model's folder, made once for these settings."""
    fields = {**settings(args), "sft_steps": args.sft_steps, "sft_learning_rate": args.sft_lr, "model": MODEL}
    key = hashlib.blake2b(json.dumps(fields, sort_keys=True).encode(), digest_size=6).hexdigest()
    folder = cache_dir() / "learn_real" / key
    if (folder / "agentenv-warm-start.json").exists():
        print(f"warm start: cached in {folder}")
        return folder
    start = time.perf_counter()
    # eval_episodes > 0: the same split as the runs', so the oracle plays only training tasks.
    config = GRPOConfig(model=MODEL, **fields_without(fields, "model"), output_dir=str(folder) + ".run")
    trainer = GRPOTrainer(config=config, model=MODEL)
    losses = trainer.warm_start()
    trainer.model.save_pretrained(str(folder))
    trainer.tokenizer.save_pretrained(str(folder))
    record = {"settings": fields, "losses": losses, "seconds": time.perf_counter() - start}
    (folder / "agentenv-warm-start.json").write_text(json.dumps(record))
    print(f"warm start: {record['seconds']:.0f} s, saved in {folder}")
    return folder


def fields_without(fields: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in names}


def run(arm: str, seed: int, warm: Path, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One arm's GRPO run; its history and its held-out episodes per evaluation."""
    folder = out / f"{arm}-seed{seed}"
    config = GRPOConfig(
        model=str(warm), **settings(args), seed=seed, steps=args.steps, eval_every=args.eval_every,
        eval_episodes=args.eval_episodes, eval_temperature=1.0, batch_size=args.batch_size,
        group_size=args.group_size, learning_rate=args.lr, step_advantage="none", micro_batch_size=8,
        rollout_engine="vllm", shuffle_rewards=arm == "control", output_dir=str(folder),
        eval_first=arm == "rl",  # the control starts where RL does: measured once
    )  # fmt: skip
    start = time.perf_counter()
    history = GRPOTrainer(config=config, model=str(warm)).train()
    evals = {
        int(path.stem.split("-")[1]): Trajectory.load_jsonl(path) for path in sorted((folder / "evals").glob("*.jsonl"))
    }
    print(f"{arm}, seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
    return {"history": history, "evals": evals, "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-episodes", type=int, default=240)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--sft-steps", type=int, default=40)
    parser.add_argument("--sft-lr", type=float, default=5e-5)
    parser.add_argument("--difficulties", default="0,1,2", help="arithmetic difficulties: operations minus one")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument("--runs", default=None, help="keep the run folders here (default: a temporary folder)")
    parser.add_argument("--smoke", action="store_true", help="one seed, 2 steps, small evaluations")
    args = parser.parse_args()
    if args.smoke:
        args.seeds, args.steps, args.eval_every, args.eval_episodes = "0", 2, 0, 24
        args.batch_size, args.group_size, args.sft_steps = 8, 4, 4
    args.difficulties = [int(d) for d in args.difficulties.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    torch.set_num_threads(args.threads)
    print(header("bench/learn_real.py: SmolLM2-135M-Instruct on arithmetic-v0, RL against a shuffled-reward control"))
    began = time.perf_counter()
    warm = warm_start(args)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="learn_real_") as tmp:
        out = Path(args.runs or tmp)
        results = {(arm, seed): run(arm, seed, warm, args, out) for seed in seeds for arm in ("rl", "control")}
    rows, gaps, figures = [], [], []
    for seed in seeds:
        rl, control = results["rl", seed], results["control", seed]
        for step in sorted(rl["evals"]):
            cells = [seed, step]
            for arm in (rl, control):
                evaluated = [r for r in arm["history"] if r["step"] == step and "eval/success_rate" in r]
                h = evaluated[0] if evaluated else next(r for r in rl["history"] if r["step"] == step)
                rate, low, high = h["eval/success_rate"], h["eval/success_low"], h["eval/success_high"]
                cells.append(f"{100 * rate:.1f}% [{100 * low:.1f}, {100 * high:.1f}]")
            rows.append(cells)
        last = max(rl["evals"])
        diff = compare(
            score(control["evals"][last], label="control"), score(rl["evals"][last], label="rl"), k=1
        ).differences["pass@1"]
        gaps.append(100 * (diff.value or 0.0))
        figures.append(
            {
                "seed": seed,
                "step": last,
                "rl_minus_control": diff.model_dump(),
                "seconds": {arm: results[arm, seed]["seconds"] for arm in ("rl", "control")},
            }
        )
        rows.append(
            [seed, f"RL - control at {last}", f"{gaps[-1]:+.1f} points", f"[{100 * (diff.low or 0):+.1f}, "
             f"{100 * (diff.high or 0):+.1f}] (paired, {diff.tasks} tasks)"]
        )  # fmt: skip
    print()
    print(table(["seed", "step", "RL held-out [95%]", "control held-out [95%]"], rows))
    print(f"\n{len(seeds)} seeds x 2 arms x {args.steps} steps in {time.perf_counter() - began:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "seeds": figures}, indent=1))
    print(
        f"real model: RL minus control {statistics.mean(gaps):+.1f} points held-out (mean of {len(seeds)} seeds), "
        f"smallest {min(gaps):+.1f}"
    )


if __name__ == "__main__":
    main()
