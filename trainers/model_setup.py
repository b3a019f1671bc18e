"""The model a `GRPOTrainer` trains and the policies that sample from it, set up from
the trainer's arguments and config.

The model: loaded by path, hub id or known name, or built tiny, with its tokenizer;
then LoRA adapters, gradient checkpointing, lean activations and oneDNN linears as
configured, float32 master weights, and the device. The policies: the rollout one
and the held-out one, alike but for the temperature, on the configured engine (the
in-house transformers sampler, or a vLLM engine in this process).

Left out: data parallelism (`distributed.DataParallel.wrap`, which the trainer applies
after this) and what the model is built from (`model`, `policy`, `vllm_engine`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from agentenv.trainers.config import GRPOConfig
from agentenv.trainers.gemm import onednn_linear
from agentenv.trainers.model import (
    build_tiny,
    enable_gradient_checkpointing,
    lean_activations,
    load_model,
    master_weights,
)
from agentenv.trainers.policy import TokenPolicy, TransformersPolicy

if TYPE_CHECKING:
    from agentenv.trainers.vllm_engine import VLLMEngine

__all__ = ["Policies", "make_policies", "model_and_tokenizer", "prepare_model"]


def model_and_tokenizer(
    model: torch.nn.Module | str, tokenizer: Any, config: GRPOConfig, env_ids: list[str]
) -> tuple[torch.nn.Module, Any]:
    """``model`` loaded if it is a name ("tiny": ``config.model``, or the tiny model with a
    tokenizer trained on ``env_ids``' oracle episodes), with its tokenizer; refuses a model
    without one and a ``max_seq_len`` beyond the model's positions."""
    if isinstance(model, str):
        name = model if model != "tiny" or config.model == "tiny" else config.model
        if name == "tiny":
            model, tokenizer = build_tiny(env_ids or ["arithmetic-v0"], seed=config.seed)
        else:
            model, tokenizer = load_model(name)
    if tokenizer is None:
        raise ValueError("pass the model's tokenizer (or a model path, which loads it)")
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(positions, int) and config.max_seq_len > positions:
        raise ValueError(
            f"max_seq_len ({config.max_seq_len}) is beyond the model's {positions} positions; "
            f"set max_seq_len <= {positions}"
        )
    return model, tokenizer


def prepare_model(model: torch.nn.Module, config: GRPOConfig, device: torch.device) -> torch.nn.Module:
    """``model`` made ready to train as ``config`` says, on ``device`` (LoRA: the peft model)."""
    if config.lora_r > 0:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            raise ImportError("lora_r > 0 needs peft: pip install peft") from None
        model = get_peft_model(
            model,
            LoraConfig(
                r=config.lora_r, lora_alpha=config.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
            ),
        )
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if config.lean_activations:  # after peft: its wrapped layers are left alone
        # Grouped attention only helps on the CPU; elsewhere the model keeps "sdpa".
        lean_activations(model, attention=device.type == "cpu")
    if config.cpu_onednn_linear and device.type == "cpu":
        onednn_linear(model)
    return (master_weights(model) if config.master_weights else model).to(device)


@dataclass
class Policies:
    rollout: TokenPolicy
    held_out: TokenPolicy
    """The same settings but the temperature; seeded alike at every evaluation."""
    engine: VLLMEngine | None = None
    """The vLLM engine both sample through (``rollout_engine="vllm"``)."""


def make_policies(
    model: torch.nn.Module,
    tokenizer: Any,
    config: GRPOConfig,
    device: torch.device,
    *,
    bf16: bool,
    end_of_turn: str | None,
) -> Policies:
    """The rollout and held-out policies of ``model`` on the configured engine."""
    shared: dict[str, Any] = dict(
        end_of_turn=end_of_turn,
        max_new_tokens=config.max_new_tokens,
        max_context_tokens=config.max_seq_len,
        top_p=config.top_p,
        top_k=config.top_k,
        stop=config.stop,
    )
    if config.rollout_engine == "vllm":
        from agentenv.trainers.vllm_engine import VLLMEngine, VLLMPolicy

        engine = VLLMEngine(
            model,
            tokenizer,
            max_model_len=config.max_seq_len,
            device=device,
            seed=config.seed,
            **config.vllm.model_dump(),
        )
        held_out = VLLMPolicy(engine, tokenizer, temperature=config.eval_temperature, **shared)
        held_out.generator = torch.Generator(device=device)  # seeded by each evaluation
        rollout = VLLMPolicy(engine, tokenizer, temperature=config.temperature, **shared)
        return Policies(rollout, held_out, engine)
    shared.update(reuse_cache=config.reuse_kv_cache, share_prompts=config.share_prompts, bf16=bf16)
    return Policies(
        TransformersPolicy(model, tokenizer, temperature=config.temperature, **shared),
        TransformersPolicy(model, tokenizer, temperature=config.eval_temperature, seed=config.seed, **shared),
    )
