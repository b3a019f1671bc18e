"""GRPO trainer on one GPU, Qwen2.5-0.5B-shaped model: generation and training
tokens/s, the generate/env/train split of a step, peak memory and the MFU of the update.

On the GPU machine (no network), from the repo root; without the install the script
maps agentenv.envs/.sandboxes/.trainers onto the top-level folders itself:

    pip install --no-deps --no-build-isolation -e .   # optional; needs setuptools>=77
    python bench/train_gpu.py                          # ~2 min on an H200; --help for the knobs
    python bench/train_gpu.py --smoke --device cpu     # checks the script on a CPU in seconds

A step is one `GRPOTrainer.train_step()` on guess-number-v0 (compact tool prompt) with a
random-init Qwen2 whose vocabulary is padded to --vocab rows (the tiny tokenizer uses
~450) so that the embedding and lm-head cost what the real ones do. It never makes a valid
call and almost never ends a turn: each turn runs to --max-new-tokens, each episode to
--max-turns (max_format_errors raised to match), a fixed worst-case load. Such episodes all
score the same, and the trainer skips the update of a step without an advantage; so the
env's format penalty here is 0.1 or 0.2 by a hash of the action's text, which gives every
group different rewards and every step an update. On GPU the weights (so the AdamW
states) are float32 masters over the bf16 checkpoint, computed under bf16 autocast; a
second run of the same steps with master_weights=false (the bf16 weights trained
themselves, as before) gives the memory the masters cost. Before the steps, sampling
alone: the static decoder against the forward loop. --out writes the figures as JSON.
Left out: LoRA, checkpointing, KL, eval; bench/gpu_e2e.py runs the whole path (warm start, eval, GRPO, checkpoint).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import zlib
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

SMOKE = dict(
    steps=1,
    warmup=0,
    batch_size=4,
    group_size=2,
    max_new_tokens=8,
    max_turns=2,
    micro_batch_size=4,
    layers=2,
    hidden=64,
    vocab=1000,
    sampling_rows=4,
    sampling_tokens=8,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, default, help_ in (
        ("--steps", 5, "measured steps (medians are over these)"),
        ("--warmup", 2, "steps run first, not measured"),
        ("--batch-size", 64, "episodes per step"),
        ("--group-size", 8, "episodes per task"),
        ("--max-new-tokens", 128, "tokens generated per turn"),
        ("--max-turns", 4, "turns per episode"),
        ("--micro-batch-size", 16, "sequences per forward/backward"),
        ("--layers", 24, "decoder layers"),
        ("--hidden", 896, "hidden size (heads of 64 dims)"),
        ("--vocab", 151936, "embedding rows, padded"),
        ("--sampling-rows", 64, "conversations sampled at once in the sampling comparison"),
        ("--sampling-tokens", 256, "tokens per conversation in the sampling comparison"),
    ):
        p.add_argument(flag, type=int, default=default, help=f"{help_} (default {default})")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    p.add_argument(
        "--peak-tflops", type=float, default=H200_BF16_TFLOPS, help="the device's bf16 dense peak (default 989: H200)"
    )
    p.add_argument("--out", help="write the figures (medians) to this JSON file")
    p.add_argument("--smoke", action="store_true", help="2 layers, hidden 64, vocab 1000, tiny batch, 1 step")
    args = p.parse_args(argv)
    if args.smoke:  # smoke sizes become the defaults; flags given explicitly still win
        p.set_defaults(**SMOKE)
        args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        p.error(f"expected --steps >= 1 and --warmup >= 0, got {args.steps} and {args.warmup}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(
            f"--device {args.device}, but torch {torch.__version__} sees no CUDA device; this benchmark needs "
            "a GPU (to check the script on a CPU: --smoke --device cpu)"
        )
    return args


def sampling(model: Any, tokenizer: Any, args: argparse.Namespace) -> dict[str, float]:
    """Tokens/s of one turn for --sampling-rows conversations of --sampling-tokens tokens
    (a random model rarely ends its turn: about rows x tokens), sampled by the static
    decoder (`static_decode`: CUDA graphs, no host sync per token) and by the forward loop
    (`generation.sample`), each after an untimed call of its own (the graph capture)."""
    import agentenv
    from agentenv.policies import Conversation
    from agentenv.trainers.policy import TransformersPolicy

    env = agentenv.make("guess-number-v0", tool_prompt="compact")
    conversations = []
    for i in range(args.sampling_rows):
        obs, _ = env.reset(seed=i)
        conversations.append(Conversation(i, list(obs)))
    env.close()
    figures: dict[str, float] = {}
    for name, static in (("static", True), ("forward", False)):
        policy = TransformersPolicy(
            model, tokenizer, max_new_tokens=args.sampling_tokens, max_context_tokens=4096, static=static, seed=0
        )
        policy.act(conversations[:8])  # warm-up (and, for the static decoder, its graphs)
        policy.reset()
        sync(model.device)
        start = time.perf_counter()
        out = policy.act(conversations)
        sync(model.device)
        seconds = time.perf_counter() - start
        tokens = sum(len(g.token_ids) for g in out if hasattr(g, "token_ids"))
        figures[f"{name}_tps"] = tokens / seconds
        figures[f"{name}_tokens"] = tokens
        print(f"sampling, {name}: {tokens} tokens in {seconds:.2f} s", flush=True)
    figures["ratio"] = figures["static_tps"] / figures["forward_tps"]
    return figures


def measure(trainer: Any, args: argparse.Namespace) -> list[dict[str, float | None]]:
    """Run warm-up + measured `train_step`s; one row of figures per measured step."""
    seen: list[tuple[list[int], int]] = []  # (sequence lengths, policy tokens) of the step's update
    optimise, device = trainer.updater.optimise, trainer.device

    def recording(examples: list[Any], **kwargs: Any) -> dict[str, Any]:
        seen.append(([len(e.ids) for e in examples], sum(sum(e.mask) for e in examples)))
        return optimise(examples, **kwargs)

    trainer.updater.optimise = recording
    rows = []
    for i in range(args.warmup + args.steps):
        trainer.step = i  # train() would advance it; the sampler draws tasks and seeds from it
        seen.clear()
        reset_peak_memory(device)
        sync(device)
        start = time.perf_counter()
        m = trainer.train_step()
        sync(device)
        wall = time.perf_counter() - start
        lengths, policy = seen[0] if seen else ([], 0)  # no update when no episode has a policy token
        flops = train_flops(
            trainer.model, tokens=sum(lengths), policy_tokens=policy, squared_lengths=sum(s * s for s in lengths)
        )
        train_s, tflop = m["time/train_s"], flops / 1e12
        rows.append(
            {
                "gen": m["time/generate_s"],
                "env": m["time/env_s"],
                "train": train_s,
                "wall": wall,
                "gen_tok": m["gen_tokens_per_s"] * m["time/generate_s"],
                "gen_tps": m["gen_tokens_per_s"],
                "train_tok": sum(lengths),
                "policy_tok": policy,
                "train_tps": m["train_tokens_per_s"],
                "seq_len": statistics.mean(lengths or [0]),
                "turns": m["turns/mean"],
                "tflop": tflop,
                "tflops": tflop / train_s,
                "mfu": 100 * tflop / train_s / args.peak_tflops if device.type == "cuda" else None,
                "peak_gib": peak_memory_gib(device),
            }
        )
        print(f"step {i}{' (warm-up)' if i < args.warmup else ''}: {wall:.2f} s", flush=True)
    return rows[args.warmup :]


FIGURES = (  # (name, key, format); the table's rows and the JSON's keys
    ("time / step: generate (s)", "gen", ".3f"),
    ("time / step: env (s)", "env", ".3f"),
    ("time / step: train = update (s)", "train", ".3f"),
    ("time / step: wall (s)", "wall", ".3f"),
    ("turns per episode (mean)", "turns", ".2f"),
    ("generated tokens / step", "gen_tok", ".0f"),
    ("generation tokens/s", "gen_tps", ",.0f"),
    ("training tokens / step", "train_tok", ".0f"),
    ("  of which policy tokens", "policy_tok", ".0f"),
    ("training sequence length (mean)", "seq_len", ".0f"),
    ("training tokens/s", "train_tps", ",.0f"),
    ("update TFLOP / step", "tflop", ".3f"),
    ("update TFLOP/s achieved", "tflops", ".3f"),
    ("MFU of the update (%)", "mfu", ".1f"),
    ("peak GPU memory allocated in a step (GiB)", "peak_gib", ".2f"),
)


def medians(steps: list[dict[str, float | None]]) -> dict[str, float | None]:
    """The median of each figure over the steps; None where a figure does not apply (a CPU's memory)."""
    return {key: None if steps[0][key] is None else statistics.median(r[key] for r in steps) for _, key, _ in FIGURES}


def report(trainer: Any, args: argparse.Namespace, figures: dict[str, float | None], steps: int) -> None:
    model, c, cuda = trainer.model, trainer.model.config, trainer.device.type == "cuda"
    print("\n" + header("bench/train_gpu.py: GRPOTrainer.train_step on one device"))
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, device {trainer.device}, GPU "
        f"{torch.cuda.get_device_name(trainer.device) if cuda else 'none (CPU run: the figures mean nothing)'}"
    )
    print(
        f"model: Qwen2 random init, {model.num_parameters() / 1e6:.1f} M params, {c.num_hidden_layers} layers, "
        f"hidden {c.hidden_size}, {c.num_attention_heads} heads ({c.num_key_value_heads} KV), intermediate "
        f"{c.intermediate_size}, vocab {c.vocab_size} (padded: the tokenizer uses ids 0..{len(trainer.tokenizer) - 1}"
        f"), tied embeddings, {model.dtype}, attention {c._attn_implementation}"
    )
    print(repr(trainer.config))
    print(
        f"env: guess-number-v0 (max_format_errors={args.max_turns}, format penalty 0.1 or 0.2 by the action's "
        f"hash), {args.warmup} warm-up + {args.steps} steps\n{FLOPS_FORMULA}\n"
        f"MFU = FLOPs / train_s / {args.peak_tflops:g} TFLOP/s (--peak-tflops: the device's bf16 dense peak)\n"
    )
    rows = [(name, f"{v:{fmt}}" if (v := figures[key]) is not None else "n/a (CPU)") for name, key, fmt in FIGURES]
    print(table(["figure", f"median of {steps} steps"], rows))


def varied_penalty(env: Any) -> Any:
    """``env`` with a format penalty of 0.1 or 0.2 by a hash of each action's text: a
    random-init model's episodes then score differently, and every step updates."""
    step = env.step

    def varied_step(action: Any) -> Any:
        env.format_penalty = 0.1 * (1 + zlib.crc32(repr(action).encode()) % 2)
        return step(action)

    env.step = varied_step
    return env


def main() -> None:
    args = parse_args()
    import_agentenv()
    import agentenv
    from agentenv.trainers import GRPOConfig, GRPOTrainer
    from agentenv.trainers.model import oracle_corpus
    from agentenv.trainers.tokens import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(oracle_corpus(["guess-number-v0"]), vocab_size=512)
    device = torch.device(args.device)
    model = build_qwen2(tokenizer, device, layers=args.layers, hidden=args.hidden, vocab=args.vocab)

    def guess_number() -> agentenv.Env:
        env = agentenv.make("guess-number-v0", tool_prompt="compact", max_turns=args.max_turns)
        env.max_format_errors = args.max_turns  # an invalid call every turn must not end the episode early
        return varied_penalty(env)

    speeds = sampling(model, tokenizer, args)
    with tempfile.TemporaryDirectory(prefix="train_gpu_") as output_dir:
        config = GRPOConfig(
            model="random-init/qwen2-0.5b-shape",
            envs={"guess-number-v0": 1.0},  # labels: the trainer gets both
            output_dir=output_dir,
            device=args.device,
            steps=args.warmup + args.steps,
            batch_size=args.batch_size,
            group_size=args.group_size,
            max_turns=args.max_turns,
            tool_prompt="compact",
            max_new_tokens=args.max_new_tokens,
            max_seq_len=max(4096, 2 * args.max_turns * args.max_new_tokens),
            micro_batch_size=args.micro_batch_size,
            bf16=True,
            eval_episodes=0,
            report_to=[],
            learning_rate=1e-6,
        )
        trainer = GRPOTrainer(model, tokenizer, envs=[guess_number], config=config)
        steps = measure(trainer, args)
        figures = medians(steps)
        report(trainer, args, figures, len(steps))
        # Before float32 master weights: the same steps training the bf16 weights themselves.
        model_dtype = str(next(trainer.model.parameters()).dtype).removeprefix("torch.")
        del trainer
        if device.type == "cuda":
            torch.cuda.empty_cache()
        bf16_model = build_qwen2(tokenizer, device, layers=args.layers, hidden=args.hidden, vocab=args.vocab)
        before = GRPOTrainer(
            bf16_model,
            tokenizer,
            envs=[guess_number],
            config=config.model_copy(update={"master_weights": False, "output_dir": output_dir + "/bf16"}),
        )
        memory = {
            "float32_masters": figures["peak_gib"],
            "checkpoint_dtype": medians(measure(before, args))["peak_gib"],
        }
    print(
        f"\npeak memory of a step: {memory['float32_masters']} GiB with float32 master weights ({model_dtype}), "
        f"{memory['checkpoint_dtype']} GiB training the bf16 checkpoint's own weights (master_weights=false)"
    )
    print(
        f"\nsampling {args.sampling_rows} conversations x {args.sampling_tokens} tokens: static decoder "
        f"{speeds['static_tps']:,.0f} tokens/s, forward loop {speeds['forward_tps']:,.0f} tokens/s "
        f"({speeds['ratio']:.1f}x; target >= 10,000 tokens/s for a 0.5B-class model)"
    )
    write_json(
        args.out,
        {
            "script": "bench/train_gpu.py",
            "device": str(device),
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "dtype": str(model.dtype).removeprefix("torch."),
            "params": model.num_parameters(),
            "peak_tflops": args.peak_tflops,
            "settings": {k: v for k, v in vars(args).items() if k != "out"},
            "steps_measured": len(steps),
            "medians": figures,
            "sampling": speeds,
            "peak_gib_by_weights": memory,
        },
    )


if __name__ == "__main__":
    main()
