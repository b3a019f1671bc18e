"""What the GPU benchmarks (train_gpu.py, gpu_e2e.py) share: the Qwen2.5-0.5B-shaped
model they build from a config (random init: no hub, no network), the model FLOPs of a
training pass, the device's peak memory, and the JSON file of figures.

MFU is model FLOPs (recomputation not counted) over the time, divided by the bf16 dense
peak the user states (``--peak-tflops``): the scripts cannot read a device's peak, so
they print the one they divide by. Left out: FLOPs of the sampler, of no-grad passes
(the update's KL probe) and of the optimiser.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "FLOPS_FORMULA",
    "H200_BF16_TFLOPS",
    "build_qwen2",
    "peak_memory_gib",
    "reset_peak_memory",
    "sync",
    "train_flops",
    "write_json",
]

H200_BF16_TFLOPS = 989.0
"""NVIDIA's dense bf16 tensor-core peak of the H200 (and H100 SXM), without sparsity."""


def build_qwen2(tokenizer: Any, device: torch.device, *, layers: int, hidden: int, vocab: int) -> torch.nn.Module:
    """Qwen2.5-0.5B's shape at layers=24, hidden=896, vocab=151936; random init (seed 0),
    built on ``device``: bf16 weights on a GPU (so AdamW's states are bf16 too), fp32 on
    a CPU, where bf16 is slow. The vocabulary is padded to ``vocab`` rows (the tiny
    tokenizer uses ~500) so that the embedding and the lm-head cost what the real ones do."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    heads = max(1, hidden // 64)
    config = Qwen2Config(
        vocab_size=max(vocab, len(tokenizer)),
        hidden_size=hidden,
        num_hidden_layers=layers,
        intermediate_size=max(64, round(hidden * 4864 / 896 / 64) * 64),  # 4864 at hidden 896
        num_attention_heads=heads,
        num_key_value_heads=2 if heads % 2 == 0 else 1,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        with torch.device(device):
            model = Qwen2ForCausalLM(config)
    return model.to(torch.bfloat16) if device.type == "cuda" else model


FLOPS_FORMULA = (
    "train FLOPs = 6*N_body*T + 6*V*d*T_policy + 12*L*d*sum(s_i^2) (N_body: params outside the embedding; "
    "s_i: sequence lengths, T their sum; the lm-head runs on policy tokens only; recomputation not counted)"
)


def train_flops(model: torch.nn.Module, *, tokens: float, policy_tokens: float, squared_lengths: float) -> float:
    """Model FLOPs of a forward and backward pass (`FLOPS_FORMULA`): ``tokens`` real
    tokens in sequences whose squared lengths sum to ``squared_lengths``, the lm-head
    on ``policy_tokens`` of them."""
    c: Any = model.config
    n_body = sum(p.numel() for p in model.parameters()) - c.vocab_size * c.hidden_size
    return float(
        6 * n_body * tokens
        + 6 * c.vocab_size * c.hidden_size * policy_tokens
        + 12 * c.num_hidden_layers * c.hidden_size * squared_lengths
    )


def sync(device: torch.device) -> None:
    """Wait for the queued GPU work, so that a timer includes it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gib(device: torch.device) -> float | None:
    """``torch.cuda.max_memory_allocated`` since the last reset, in GiB; None on a CPU."""
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def write_json(path: str | None, figures: dict[str, Any]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
        print(f"figures written to {path}")
