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
--max-turns (max_format_errors raised to match), a fixed worst-case load. On GPU the weights
(so the AdamW states) are bf16, under autocast. Left out: LoRA, checkpointing, KL, eval.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import transformers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

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
)


def import_agentenv() -> None:
    """Import agentenv.trainers; not installed, map envs/, sandboxes/, trainers/ onto agentenv's subpackages."""
    try:
        import agentenv.trainers

        return
    except ModuleNotFoundError as e:
        if e.name not in ("agentenv", "agentenv.trainers"):
            raise  # a missing dependency (torch, transformers, ...), not a missing install
    sys.path.insert(0, str(ROOT))
    import agentenv

    for sub in ("envs", "sandboxes", "trainers"):  # trainers last: it imports the others
        spec = importlib.util.spec_from_file_location(
            f"agentenv.{sub}", ROOT / sub / "__init__.py", submodule_search_locations=[str(ROOT / sub)]
        )
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        setattr(agentenv, sub, module)
        spec.loader.exec_module(module)


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
    ):
        p.add_argument(flag, type=int, default=default, help=f"{help_} (default {default})")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak (default 989: H200)")
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


def build_model(args: argparse.Namespace, tokenizer: Any, device: torch.device) -> torch.nn.Module:
    """Qwen2.5-0.5B's shape (at the default sizes), random init, built on ``device``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    heads = max(1, args.hidden // 64)
    config = Qwen2Config(
        vocab_size=max(args.vocab, len(tokenizer)),
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        intermediate_size=max(64, round(args.hidden * 4864 / 896 / 64) * 64),  # 4864 at hidden 896
        num_attention_heads=heads,
        num_key_value_heads=2 if heads % 2 == 0 else 1,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    return model.to(torch.bfloat16) if device.type == "cuda" else model  # fp32 on CPU: bf16 is slow there


def update_flops(model: torch.nn.Module, lengths: list[int], policy_tokens: int) -> float:
    """Model FLOPs of one update, recomputation not counted: 6·N_body·T + 6·V·d·T_policy + 12·L·d·Σ s_i²
    (N_body: parameters outside the tied embedding; T = Σ s_i; the lm-head runs on policy tokens only)."""
    c = model.config
    n_body = sum(p.numel() for p in model.parameters()) - c.vocab_size * c.hidden_size
    return (
        6 * n_body * sum(lengths)
        + 6 * c.vocab_size * c.hidden_size * policy_tokens
        + 12 * c.num_hidden_layers * c.hidden_size * sum(s * s for s in lengths)
    )


def measure(trainer: Any, args: argparse.Namespace) -> list[dict[str, float]]:
    """Run warm-up + measured `train_step`s; one row of figures per measured step."""
    seen: list[tuple[list[int], int]] = []  # (sequence lengths, policy tokens) of the step's update
    optimise, cuda = trainer._optimise, trainer.device.type == "cuda"

    def recording(examples: list[Any]) -> dict[str, Any]:
        seen.append(([len(e.ids) for e in examples], sum(sum(e.mask) for e in examples)))
        return optimise(examples)

    trainer._optimise = recording
    sync = (lambda: torch.cuda.synchronize(trainer.device)) if cuda else (lambda: None)  # include queued GPU work
    rows = []
    for i in range(args.warmup + args.steps):
        trainer.step = i  # train() would advance it; the sampler draws tasks and seeds from it
        seen.clear()
        if cuda:
            torch.cuda.reset_peak_memory_stats(trainer.device)
        sync()
        start = time.perf_counter()
        m = trainer.train_step()
        sync()
        wall = time.perf_counter() - start
        lengths, policy = seen[0] if seen else ([], 0)  # no update when no episode has a policy token
        train_s, tflop = m["time/train_s"], update_flops(trainer.model, lengths, policy) / 1e12
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
                "mfu": 100 * tflop / train_s / args.peak_tflops,
                "peak_gib": torch.cuda.max_memory_allocated(trainer.device) / 2**30 if cuda else 0.0,
            }
        )
        print(f"step {i}{' (warm-up)' if i < args.warmup else ''}: {wall:.2f} s", flush=True)
    return rows[args.warmup :]


def report(trainer: Any, args: argparse.Namespace, steps: list[dict[str, float]]) -> None:
    model, c, cuda = trainer.model, trainer.model.config, trainer.device.type == "cuda"
    med = lambda key: statistics.median(r[key] for r in steps)  # noqa: E731
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
        f"env: guess-number-v0 (max_format_errors={args.max_turns}), {args.warmup} warm-up + {args.steps} steps\n"
        "update FLOPs = 6*N_body*T + 6*V*d*T_policy + 12*L*d*sum(s_i^2) (N_body: params outside the embedding; "
        f"s_i: sequence lengths)\nMFU = FLOPs / train_s / {args.peak_tflops:g} TFLOP/s (--peak-tflops)\n"
    )
    rows = [
        (name, f"{med(key):{fmt}}")
        for name, key, fmt in (
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
        if cuda or key not in ("mfu", "peak_gib")
    ]
    print(table(["figure", f"median of {len(steps)} steps"], rows))


def main() -> None:
    args = parse_args()
    import_agentenv()
    import agentenv
    from agentenv.trainers import GRPOConfig, GRPOTrainer
    from agentenv.trainers.model import oracle_corpus
    from agentenv.trainers.tokens import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(oracle_corpus(["guess-number-v0"]), vocab_size=512)
    model = build_model(args, tokenizer, torch.device(args.device))

    def guess_number() -> agentenv.Env:
        env = agentenv.make("guess-number-v0", tool_prompt="compact", max_turns=args.max_turns)
        env.max_format_errors = args.max_turns  # an invalid call every turn must not end the episode early
        return env

    config = GRPOConfig(
        model="random-init/qwen2-0.5b-shape",
        envs={"guess-number-v0": 1.0},  # labels: the trainer gets both
        output_dir=tempfile.mkdtemp(prefix="train_gpu_"),
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
        tensorboard=False,
        learning_rate=1e-6,
    )
    trainer = GRPOTrainer(model, tokenizer, envs=[guess_number], config=config)
    report(trainer, args, measure(trainer, args))


if __name__ == "__main__":
    main()
