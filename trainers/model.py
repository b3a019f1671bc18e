"""Loading a causal LM and its tokenizer, or building the project's tiny one.

The tiny model is a Qwen2-architecture network (hidden 128, 2 layers) with random
weights, and its tokenizer a small BPE trained on the text of the envs' oracle
episodes: both are made offline, deterministically from a seed, so tests and CPU
demos need no model hub.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import agentenv
from agentenv.trainers.tokens import build_tiny_tokenizer

__all__ = ["build_tiny", "load_model", "resolve_device"]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} asked for, but torch sees no CUDA device; use device='cpu'")
    return torch.device(name)


def oracle_corpus(env_ids: Sequence[str], episodes: int = 64, seed: int = 0) -> list[str]:
    """The text of oracle episodes of each env (for a tokenizer to learn from)."""
    texts = []
    for env_id in env_ids:
        trajs = agentenv.rollout(env_id, agentenv.spec(env_id).make_oracle(), n=episodes, seed=seed)
        texts += [m["content"] for t in trajs for m in t.messages]
    return texts


def build_tiny(
    env_ids: Sequence[str], *, seed: int = 0, hidden_size: int = 128, layers: int = 2, vocab_size: int = 512
) -> tuple[torch.nn.Module, Any]:
    """The tiny Qwen2 model (random init) and its tokenizer, for the given envs."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tiny_tokenizer(oracle_corpus(env_ids, seed=seed), vocab_size=vocab_size)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 4,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    return model, tokenizer


def load_model(path: str, *, dtype: torch.dtype | None = None) -> tuple[torch.nn.Module, Any]:
    """A causal LM and its tokenizer from a local path or hub id."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = (
            AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
            if dtype
            else AutoModelForCausalLM.from_pretrained(path)
        )
    except OSError as e:
        raise FileNotFoundError(f"cannot load model {path!r}: {e}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
