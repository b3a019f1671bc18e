"""GRPO trainer speed on the CPU: the KV cache kept across turns, on and off.

    .venv/bin/python bench/train_cpu.py                  # ~2-4 min on a 2-core machine
    .venv/bin/python bench/train_cpu.py --turns 5 --steps 3
    .venv/bin/python bench/train_cpu.py --turns 5,10,15,20 --steps 3   # the curve, ~20 min

Three `GRPOTrainer`s in one process, each with its own copy of one random-init
Qwen2 (hidden 256, 4 layers): "kept" keeps each episode's KV cache across turns
(``reuse_kv_cache``); "off" does not, and shares prompts as "kept" does
(``share_prompts``: a group's prompt runs once, in sampling and in the update); the
target is kept over off. "neither" shares nothing either: both settings off, for
the whole of what computing keys and values once saves. All on guess-number-v0
with its tools shown as JSON schemas. A random model never makes a valid call, so
every episode runs ``--turns`` turns of ``--max-new-tokens`` tokens (the format
ending is raised to match): a fixed load, the same for all. The format penalty is
0.1 or 0.2 by a hash of the action, so groups differ and every step updates. Steps
alternate between the trainers so that drift hits all alike; figures are
medians over the measured steps. Sampling is the same with and without the cache
(tests/trainers/test_kv_reuse.py), so the trainers train on the same episodes.

Kept over off is 1 + S/K: S is the prefill the kept cache saves (each turn, the whole
conversation before it again), which grows about with the square of the turns; K is
the kept step, mostly its update (the same work in both), which grows more slowly.
So the ratio rises with the turns: ``--turns`` takes a list, and prints the curve.

Left out: the single-turn comparison with TRL (bench/train_vs_trl.py), GPUs (bench/train_gpu.py).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

import agentenv
from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trainers.model import oracle_corpus
from agentenv.trainers.tokens import build_tiny_tokenizer

ENV = "guess-number-v0"
TARGET = 2.0  # steps/s with the cache kept across turns, over without (prompts shared in both)
ARMS = {"kept": (True, True), "off": (False, True), "neither": (False, False)}  # (reuse_kv_cache, share_prompts)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, default, help_ in (
        ("--steps", 4, "measured steps per trainer"),
        ("--warmup", 1, "steps per trainer run first, not measured"),
        ("--max-new-tokens", 16, "tokens per turn"),
        ("--batch-size", 16, "episodes per step"),
        ("--group-size", 4, "episodes per task"),
        ("--hidden", 256, "hidden size (heads of 64 dims)"),
        ("--layers", 4, "decoder layers"),
        ("--threads", 0, "torch threads (0: torch's default)"),
    ):
        p.add_argument(flag, type=int, default=default, help=f"{help_} (default {default})")
    p.add_argument(
        "--turns", type=_turn_counts, default=[10], help="turns per episode, or a comma-separated list (default 10)"
    )
    p.add_argument("--tool-prompt", default="json", choices=["json", "compact"], help="how the tools are shown")
    return p.parse_args(argv)


def _turn_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a turn count or a comma-separated list, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"every turn count must be at least 1, got {text!r}")
    return counts


def build_model(tokenizer: Any, hidden: int, layers: int) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 128),
        tie_word_embeddings=True,
        max_position_embeddings=4096,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config)


def make_env(args: argparse.Namespace) -> agentenv.Env:
    env = agentenv.make(ENV, tool_prompt=args.tool_prompt, max_turns=args.turns)
    env.max_format_errors = args.turns  # an invalid call every turn must not end the episode early
    step = env.step

    def varied_step(action: Any) -> Any:
        env.format_penalty = 0.1 * (1 + zlib.crc32(repr(action).encode()) % 2)
        return step(action)

    env.step = varied_step  # type: ignore[method-assign]
    return env


def make_trainer(model: torch.nn.Module, tokenizer: Any, args: argparse.Namespace, out: str, arm: str) -> Any:
    reuse, share = ARMS[arm]
    config = GRPOConfig(
        model="random-init/qwen2",
        envs={ENV: 1.0},
        output_dir=out,
        device="cpu",
        steps=args.warmup + args.steps,
        batch_size=args.batch_size,
        group_size=args.group_size,
        max_turns=args.turns,
        tool_prompt=args.tool_prompt,
        max_new_tokens=args.max_new_tokens,
        max_seq_len=4096,
        micro_batch_size=args.batch_size,
        eval_episodes=0,
        report_to=[],
        learning_rate=1e-6,
        reuse_kv_cache=reuse,
        share_prompts=share,
    )
    return GRPOTrainer(model, tokenizer, envs=[lambda: make_env(args)], config=config)


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = build_tiny_tokenizer(oracle_corpus([ENV]), vocab_size=512)
    model = build_model(tokenizer, args.hidden, args.layers)
    curve = []
    for turns in args.turns:
        run = argparse.Namespace(**{**vars(args), "turns": turns})
        curve.append((turns, report(run, model, measure(run, model, tokenizer))))
    if len(curve) > 1:
        print("\nsteps/s, kept over off, by turns per episode: " + ", ".join(f"{t}: {r:.2f}x" for t, r in curve))


def measure(args: argparse.Namespace, model: torch.nn.Module, tokenizer: Any) -> dict[str, list[dict[str, float]]]:
    """Each trainer's measured steps at ``args.turns`` turns, steps alternating between them."""
    print(
        f"{len(ARMS) * (args.warmup + args.steps)} steps of {args.batch_size} episodes x {args.turns} turns; "
        f"about {0.45 * args.turns:.0f}-{max(args.turns, args.turns**2 / 12):.0f} s a step on an idle 2-core machine",
        flush=True,
    )
    rows: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="train_cpu_") as out:
        trainers = {arm: make_trainer(copy.deepcopy(model), tokenizer, args, f"{out}/{arm}", arm) for arm in ARMS}
        for i in range(args.warmup + args.steps):
            for arm, trainer in trainers.items():
                trainer.step = i  # the sampler draws tasks and seeds from it: the same for all
                start = time.perf_counter()
                m = trainer.train_step()
                wall = time.perf_counter() - start
                print(f"step {i} {arm:7s}: {wall:6.2f} s", flush=True)
                if i >= args.warmup:
                    rows[arm].append(
                        {
                            "wall": wall,
                            "gen": m["time/generate_s"],
                            "train": m["time/train_s"],
                            "turns": m["turns/mean"],
                            "tokens": m["gen_tokens_per_s"] * m["time/generate_s"],
                        }
                    )
    return rows


def report(args: argparse.Namespace, model: torch.nn.Module, rows: dict[str, list[dict[str, float]]]) -> float:
    """Print the figures; returns steps/s, kept over off."""
    med = {arm: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for arm, rs in rows.items()}
    c = model.config
    print("\n" + header("bench/train_cpu.py: GRPOTrainer.train_step, KV cache across turns kept vs off"))
    print(
        f"torch {torch.__version__} ({torch.get_num_threads()} threads); model: Qwen2 random init, "
        f"{model.num_parameters() / 1e6:.1f} M params, hidden {c.hidden_size}, {c.num_hidden_layers} layers, "
        f"vocab {c.vocab_size}; env {ENV} (tool prompt {args.tool_prompt}), {args.batch_size} episodes of "
        f"{args.turns} turns x {args.max_new_tokens} tokens per step; median of {args.steps} steps each"
    )
    body = []
    for name, key, fmt in (
        ("step time (s)", "wall", ".2f"),
        ("  generate (s)", "gen", ".2f"),
        ("  train (s)", "train", ".2f"),
        ("turns per episode", "turns", ".1f"),
        ("generated tokens per step", "tokens", ".0f"),
    ):
        body.append((name, *(f"{med[arm][key]:{fmt}}" for arm in ARMS)))
    body.append(("steps/s", *(f"{1 / med[arm]['wall']:.3f}" for arm in ARMS)))
    print(table(["figure", "kept", "off", "neither"], body))
    print("kept: cache kept across turns; off: not kept, prompts shared; neither: not kept, nothing shared")
    for other in ("off", "neither"):
        speedup = med[other]["wall"] / med["kept"]["wall"]
        gen_speedup = med[other]["gen"] / med["kept"]["gen"]
        target = f" (target >= {TARGET:g}x: {'met' if speedup >= TARGET else 'MISSED'})" if other == "off" else ""
        print(
            f"steps/s, kept over {other}: {speedup:.2f}x{target}; generation alone: {gen_speedup:.2f}x; "
            f"update: {med[other]['train'] / med['kept']['train']:.2f}x"
        )
    return float(med["off"]["wall"] / med["kept"]["wall"])


if __name__ == "__main__":
    main()
