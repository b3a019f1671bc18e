"""The whole training path on one GPU, in bf16: a Qwen2.5-0.5B-shaped model built from a
config (random init), a supervised warm start on oracle episodes, then GRPO on two
multi-turn envs, through `GRPOTrainer.train()` as a user runs it (evaluation,
checkpoint and export included). Per phase it prints what the path costs: generation
and training tokens/s, peak GPU memory, and the MFU of the training passes against the
bf16 dense peak it states.

On the GPU machine (no network), from the repo root; without the install the script
maps agentenv's subpackages onto the top-level folders itself:

    python bench/gpu_e2e.py                        # ~3-4 min on an H200 (estimated); --help for the knobs
    python bench/gpu_e2e.py --smoke --device cpu   # the same code on a CPU in seconds, a tiny model

The envs are guess-number-opening-v0 (16 secrets, 4 guesses) and arithmetic-v0 (one
calculator call per operation), with compact tool prompts and one call per turn. The
tokenizer is the project's tiny BPE learnt from the envs' oracle text; the model's
vocabulary is padded to --vocab rows so that the embedding and lm-head cost what the
real ones do. Held-out success (greedy, fixed tasks and seeds) is measured at random
init, after the warm start and after GRPO: from random init, a warm start of a few
hundred steps leaves a 0.5B model near 0, so these figures say that the path runs, not
that it learns (bench/learn_cpu.py is the learning demonstration). A GRPO step whose
groups all scored alike makes no update (the trainer skips it): a truncation penalty
(--truncation-penalty, the share of an episode's turns cut at --max-new-tokens) makes
episodes that end their turns score apart before any succeeds, and the training
figures are medians over the steps that updated, saying so when none did. --out writes
the figures as JSON. Left out: LoRA, gradient checkpointing, the KL reference model.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, import_agentenv, table
from _gpu import (
    FLOPS_FORMULA,
    H200_BF16_TFLOPS,
    build_qwen2,
    peak_memory_gib,
    reset_peak_memory,
    sync,
    train_flops,
    write_json,
)

ENVS = {"guess-number-opening-v0": 1.0, "arithmetic-v0": 1.0}
SMOKE = dict(
    layers=2,
    hidden=64,
    vocab=1000,
    sft_steps=20,
    sft_learning_rate=3e-3,
    grpo_steps=2,
    batch_size=8,
    group_size=4,
    max_new_tokens=32,
    micro_batch_size=8,
    eval_episodes=4,
)
# Behind the bound printed up front: an H200 at the default sizes measured a decode step of a
# 64-row batch at 34 ms (train_gpu.py) and a warm-start step at 0.31 s; the whole run took 188 s.
DECODE_STEP_S, SFT_STEP_S, FIXED_S = 0.035, 0.31, 60.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, kind, default, help_ in (
        ("--layers", int, 24, "decoder layers"),
        ("--hidden", int, 896, "hidden size (heads of 64 dims)"),
        ("--vocab", int, 151936, "embedding rows, padded"),
        ("--sft-steps", int, 150, "supervised warm-start steps (batches of 16 oracle episodes)"),
        ("--sft-learning-rate", float, 5e-4, "learning rate of the warm start"),
        ("--grpo-steps", int, 6, "GRPO steps"),
        ("--batch-size", int, 32, "episodes per GRPO step"),
        ("--group-size", int, 8, "episodes per task"),
        ("--max-new-tokens", int, 48, "tokens generated per turn at most"),
        ("--micro-batch-size", int, 16, "sequences per forward/backward"),
        ("--learning-rate", float, 1e-5, "GRPO learning rate"),
        ("--truncation-penalty", float, 0.1, "times the share of an episode's turns cut at --max-new-tokens"),
        ("--eval-episodes", int, 32, "held-out episodes per evaluation, split over the envs"),
    ):
        p.add_argument(flag, type=kind, default=default, help=f"{help_} (default {default})")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    p.add_argument(
        "--peak-tflops", type=float, default=H200_BF16_TFLOPS, help="the device's bf16 dense peak (default 989: H200)"
    )
    p.add_argument("--out", help="write the figures to this JSON file")
    p.add_argument("--smoke", action="store_true", help="a tiny model and run: checks the script in seconds")
    args = p.parse_args(argv)
    if args.smoke:  # smoke sizes become the defaults; flags given explicitly still win
        p.set_defaults(**SMOKE)
        args = p.parse_args(argv)
    if args.sft_steps < 2 or args.grpo_steps < 1 or args.eval_episodes < len(ENVS):
        p.error(
            f"expected --sft-steps >= 2, --grpo-steps >= 1 and --eval-episodes >= {len(ENVS)}, got "
            f"{args.sft_steps}, {args.grpo_steps} and {args.eval_episodes}"
        )
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(
            f"--device {args.device}, but torch {torch.__version__} sees no CUDA device; this benchmark needs "
            "a GPU (to check the script on a CPU: --smoke --device cpu)"
        )
    return args


def expected_seconds(args: argparse.Namespace, max_turns: int) -> float:
    """A rough bound for a GPU run: every episode of every env as long as it may be
    (``max_turns`` turns in all, one env after the other), three evaluations, and a
    fixed part for start-up, checkpoint and export."""
    decode_steps = max_turns * args.max_new_tokens
    return (
        FIXED_S
        + (3 + args.grpo_steps) * decode_steps * DECODE_STEP_S
        + args.sft_steps * SFT_STEP_S
        + args.grpo_steps * 2.0
    )


@dataclass
class SftLoad:
    """What one warm-start step trains on, in expectation: `sft` draws ``batch`` of the
    oracle episodes uniformly each step."""

    batch: int
    tokens: float  # per step: the batch's real tokens...
    policy_tokens: float  # ...the assistant tokens among them...
    squared_lengths: float  # ...and the sum of their squared lengths
    episodes: int


def sft_load(trainer: Any) -> SftLoad:
    """The oracle episodes the warm start trains on (those of `sft.oracle_episodes`:
    the oracle's successful episodes of each env's training tasks), as `sft` builds them."""
    import agentenv
    from agentenv.trainers.sft import sft, trajectory_example
    from agentenv.trainers.tokens import ChatDelta

    delta = ChatDelta(trainer.tokenizer, trainer.policy.delta.end_of_turn)
    examples = []
    for source in trainer.sources:
        oracle = agentenv.spec(source.env_id).make_oracle()
        trajs = agentenv.rollout(source.factory, oracle, tasks=list(source.train))
        examples += [trajectory_example(delta, t, trainer.config.max_seq_len) for t in trajs if t.success]
    batch = min(inspect.signature(sft).parameters["batch_size"].default, len(examples))
    return SftLoad(
        batch=batch,
        tokens=batch * statistics.mean(len(e.ids) for e in examples),
        policy_tokens=batch * statistics.mean(sum(e.mask) for e in examples),
        squared_lengths=batch * statistics.mean(len(e.ids) ** 2 for e in examples),
        episodes=len(examples),
    )


@dataclass
class Meter:
    """Measures the phases of `GRPOTrainer.train()` from inside it: it stands in for
    three hooks (the trainer's ``on_sft_step`` and ``train_step``, and its updater's
    ``optimise``), records, and calls the originals."""

    trainer: Any
    peak_tflops: float
    started: float = field(default_factory=time.perf_counter)
    sft_times: list[float] = field(default_factory=list)  # after each warm-start step (its loss.item() syncs)
    sft_losses: list[float] = field(default_factory=list)
    sft_peak_gib: float | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    _update: tuple[list[int], int] | None = None  # sequence lengths and policy tokens of the step's update

    def __post_init__(self) -> None:
        t = self.trainer
        self._on_sft, self._train_step, self._optimise = t.on_sft_step, t.train_step, t.updater.optimise
        t.on_sft_step, t.train_step, t.updater.optimise = self.sft_step, self.grpo_step, self.optimise

    def elapsed(self) -> str:
        return f"[{time.perf_counter() - self.started:5.0f} s]"

    def sft_step(self, step: int, row: dict[str, Any]) -> None:
        loss = row["sft/loss"]
        self.sft_times.append(time.perf_counter())
        self.sft_losses.append(loss)
        if self._on_sft is not None:
            self._on_sft(step, row)
        if step == self.trainer.config.sft_steps:  # steps count from 1
            self.sft_peak_gib = peak_memory_gib(self.trainer.device)
            print(f"{self.elapsed()} warm start: {step} steps done, loss {loss:.3f}", flush=True)

    def grpo_step(self) -> dict[str, Any]:
        device = self.trainer.device
        self._update = None
        reset_peak_memory(device)
        sync(device)
        start = time.perf_counter()
        m = self._train_step()
        sync(device)
        wall = time.perf_counter() - start
        row = {
            "wall_s": wall,
            "generate_s": m["time/generate_s"],
            "train_s": m["time/train_s"],
            "gen_tokens_per_s": m["gen_tokens_per_s"],
            "success_rate": m["success_rate"],
            "turns": m["turns/mean"],
            "peak_gib": peak_memory_gib(device),
            "updated": self._update is not None,
        }
        if self._update is not None:
            lengths, policy = self._update
            flops = train_flops(
                self.trainer.model,
                tokens=sum(lengths),
                policy_tokens=policy,
                squared_lengths=sum(s * s for s in lengths),
            )
            row |= {
                "train_tokens": sum(lengths),
                "train_tokens_per_s": m["train_tokens_per_s"],
                "tflops": flops / 1e12 / m["time/train_s"],
            }
        self.steps.append(row)
        update = "updated" if row["updated"] else "no update: every group scored alike"
        print(
            f"{self.elapsed()} GRPO step {len(self.steps)}/{self.trainer.config.steps}: {wall:.1f} s, "
            f"{row['gen_tokens_per_s']:,.0f} generated tokens/s, training success {row['success_rate']:.2f}, {update}",
            flush=True,
        )
        return m

    def optimise(self, examples: list[Any], **kwargs: Any) -> dict[str, Any]:
        self._update = ([len(e.ids) for e in examples], sum(sum(e.mask) for e in examples))
        return self._optimise(examples, **kwargs)

    def warm_start(self, load: SftLoad) -> dict[str, Any]:
        """Figures of the warm start; the first step (allocation, kernel choice) is not timed."""
        steps = len(self.sft_times) - 1
        seconds = self.sft_times[-1] - self.sft_times[0]
        flops = steps * train_flops(
            self.trainer.model,
            tokens=load.tokens,
            policy_tokens=load.policy_tokens,
            squared_lengths=load.squared_lengths,
        )
        return {
            "steps": len(self.sft_times),
            "oracle_episodes": load.episodes,
            "batch": load.batch,
            "step_s": seconds / steps,
            "train_tokens_per_s": steps * load.tokens / seconds,
            "tflops": flops / 1e12 / seconds,
            "mfu_pct": self.mfu(flops / 1e12 / seconds),
            "peak_gib": self.sft_peak_gib,
            "loss_first": self.sft_losses[0],
            "loss_last": self.sft_losses[-1],
        }

    def grpo(self) -> dict[str, Any]:
        """Medians over the GRPO steps; the training figures over those that updated."""
        updated = [r for r in self.steps if r["updated"]]
        med = lambda rows, key: statistics.median(r[key] for r in rows) if rows else None  # noqa: E731
        tflops = med(updated, "tflops")
        return {
            "steps": len(self.steps),
            "updated_steps": len(updated),
            "step_s": med(self.steps, "wall_s"),
            "generate_s": med(self.steps, "generate_s"),
            "gen_tokens_per_s": med(self.steps, "gen_tokens_per_s"),
            "train_s": med(updated, "train_s"),
            "train_tokens": med(updated, "train_tokens"),
            "train_tokens_per_s": med(updated, "train_tokens_per_s"),
            "tflops": tflops,
            "mfu_pct": self.mfu(tflops),
            "peak_gib": None if self.steps[0]["peak_gib"] is None else max(r["peak_gib"] for r in self.steps),
            "turns": med(self.steps, "turns"),
        }

    def mfu(self, tflops: float | None) -> float | None:
        """Percent of the stated bf16 peak; None on a CPU, where that peak means nothing."""
        if tflops is None or self.trainer.device.type != "cuda":
            return None
        return 100 * tflops / self.peak_tflops


def report(trainer: Any, args: argparse.Namespace, figures: dict[str, Any]) -> None:
    c = trainer.model.config
    print("\n" + header("bench/gpu_e2e.py: warm start then GRPO on one device, end to end"))
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, device {trainer.device}, GPU "
        f"{figures['gpu'] or 'none (CPU run: the figures mean nothing)'}"
    )
    print(
        f"model: Qwen2 random init, {figures['params'] / 1e6:.1f} M params, {c.num_hidden_layers} layers, "
        f"hidden {c.hidden_size}, vocab {c.vocab_size} (padded: the tokenizer uses {len(trainer.tokenizer)}), "
        f"{figures['dtype']} weights, {figures['compute_dtype']} compute, attention {c._attn_implementation}"
    )
    print(f"envs: {', '.join(ENVS)}; {FLOPS_FORMULA}")
    print(f"MFU = train FLOPs / seconds / {args.peak_tflops:g} TFLOP/s (--peak-tflops: the device's bf16 dense peak)\n")
    sft, grpo, success = figures["warm_start"], figures["grpo"], figures["success"]

    def cell(value: float | None, fmt: str, missing: str = "n/a") -> str:
        return missing if value is None else f"{value:{fmt}}"

    none = "none: no step updated"
    rows = [
        ("step time (s, median)", cell(sft["step_s"], ".3f"), cell(grpo["step_s"], ".2f")),
        ("generation tokens/s", "-", cell(grpo["gen_tokens_per_s"], ",.0f")),
        ("training tokens/s", cell(sft["train_tokens_per_s"], ",.0f"), cell(grpo["train_tokens_per_s"], ",.0f", none)),
        ("training TFLOP/s", cell(sft["tflops"], ".2f"), cell(grpo["tflops"], ".2f", none)),
        (f"MFU (% of {args.peak_tflops:g})", cell(sft["mfu_pct"], ".1f"), cell(grpo["mfu_pct"], ".1f")),
        ("peak GPU memory (GiB)", cell(sft["peak_gib"], ".2f"), cell(grpo["peak_gib"], ".2f")),
    ]
    print(table(["figure", f"warm start ({sft['steps']} steps)", f"GRPO ({grpo['steps']} steps)"], rows))
    print(
        f"\nwarm start: {sft['oracle_episodes']} oracle episodes, batches of {sft['batch']} (tokens per step "
        f"in expectation), loss {sft['loss_first']:.3f} -> {sft['loss_last']:.3f}\n"
        f"GRPO: {grpo['updated_steps']} of {grpo['steps']} steps updated"
        f"{'' if grpo['updated_steps'] == grpo['steps'] else ' (in the others every group scored alike)'}; "
        f"{grpo['train_tokens'] or 0:,.0f} training tokens per update (median), {grpo['turns']:.1f} turns per episode"
    )
    print(
        f"held-out success ({success['episodes']} greedy episodes): random init {success['random_init']:.1%}, "
        f"after the warm start {success['after_warm_start']:.1%}, after GRPO {success['after_grpo']:.1%} "
        "(near 0 is expected from random init: this run shows the path works, not that it learns)\n"
        f"wall time {figures['wall_s']:.0f} s"
    )


def grpo_config(args: argparse.Namespace, output_dir: str) -> Any:
    from agentenv.trainers import GRPOConfig

    return GRPOConfig(
        model="random-init/qwen2-0.5b-shape",
        envs=ENVS,
        output_dir=output_dir,
        device=args.device,
        steps=args.grpo_steps,
        batch_size=args.batch_size,
        group_size=args.group_size,
        tool_prompt="compact",
        stop=["</tool_call>"],  # one call per turn
        max_new_tokens=args.max_new_tokens,
        max_seq_len=2048,
        micro_batch_size=args.micro_batch_size,
        learning_rate=args.learning_rate,
        truncation_penalty=args.truncation_penalty,
        bf16=True,
        sft_steps=args.sft_steps,
        sft_learning_rate=args.sft_learning_rate,
        eval_every=0,  # held-out success after the warm start and at the end
        eval_episodes=args.eval_episodes,
        save_every=args.grpo_steps,  # one checkpoint, at the end
        keep_checkpoints=1,
        resume=False,
        report_to=[],
    )


def announce(args: argparse.Namespace, trainer: Any) -> None:
    """What the run does, and how long it should take."""
    max_turns = 0
    for source in trainer.sources:
        env = source.factory()
        max_turns += env.max_turns
        env.close()
    expected = (
        f"expected at most ~{expected_seconds(args, max_turns) / 60:.0f} min on an H200 (188 s measured there)"
        if trainer.device.type == "cuda"
        else "on a CPU: seconds at --smoke sizes"
    )
    print(
        f"gpu_e2e: {args.sft_steps} warm-start steps, then {args.grpo_steps} GRPO steps of {args.batch_size} "
        f"episodes on {', '.join(ENVS)}, {trainer.config.eval_episodes} held-out episodes per evaluation, "
        f"on {trainer.device}; {expected}",
        flush=True,
    )


def main() -> None:
    started = time.perf_counter()
    args = parse_args()
    import_agentenv()
    from agentenv.trainers import GRPOTrainer
    from agentenv.trainers.model import oracle_corpus
    from agentenv.trainers.tokens import build_tiny_tokenizer

    device = torch.device(args.device)
    if args.smoke and device.type == "cpu":
        torch.set_num_threads(1)  # a tiny model's tensors gain nothing from threads, and lose on a busy machine
    tokenizer = build_tiny_tokenizer(oracle_corpus(list(ENVS)), vocab_size=512)
    model = build_qwen2(tokenizer, device, layers=args.layers, hidden=args.hidden, vocab=args.vocab)
    with tempfile.TemporaryDirectory(prefix="gpu_e2e_") as output_dir:
        trainer = GRPOTrainer(model, tokenizer, config=grpo_config(args, output_dir))
        announce(args, trainer)
        load = sft_load(trainer)
        meter = Meter(trainer, args.peak_tflops, started=started)
        random_init = trainer.evaluate()
        print(f"{meter.elapsed()} held-out success at random init: {random_init:.1%}", flush=True)
        reset_peak_memory(device)
        history = trainer.train()
    figures = {
        "script": "bench/gpu_e2e.py",
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "dtype": str(model.dtype).removeprefix("torch."),  # the trained weights: float32 masters
        "compute_dtype": "bfloat16" if device.type == "cuda" else "float32",
        "params": sum(p.numel() for p in model.parameters()),
        "peak_tflops": args.peak_tflops,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "success": {
            "episodes": trainer.config.eval_episodes,
            "random_init": random_init,
            "after_warm_start": history[0]["eval/success_rate"],
            "after_grpo": history[-1]["eval/success_rate"],
        },
        "warm_start": meter.warm_start(load),
        "grpo": meter.grpo(),
        "wall_s": time.perf_counter() - started,
    }
    report(trainer, args, figures)
    write_json(args.out, figures)


if __name__ == "__main__":
    main()
