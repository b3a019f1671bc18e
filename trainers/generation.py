"""Batched sampling with a KV cache, keeping the log-prob of every sampled token.

A small loop of our own rather than `model.generate`: it returns the exact token
ids and their log-probs under the sampling distribution (temperature applied,
before top-p/top-k truncation, as the policy-gradient ratio needs) while holding
only one step of full-vocabulary logits at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["Sampled", "sample"]


@dataclass
class Sampled:
    token_ids: list[list[int]]
    logprobs: list[list[float]]
    stopped: list[bool]
    """True where the row ended with a stop token, False where it hit max_new_tokens."""


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    stop_ids: Sequence[int],
    pad_id: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    generator: torch.Generator | None = None,
) -> Sampled:
    """Sample continuations of ``prompts`` (left-padded into one batch) until a stop
    token or ``max_new_tokens``. ``temperature=0`` is greedy."""
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        attention[row, width - len(prompt):] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    stops = torch.tensor(list(stop_ids), device=device)

    cache_arg = _cache_argument(model)
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True,
                logits_to_keep=1)
    past, logits = getattr(out, cache_arg), out.logits[:, -1, :]
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    tokens, logps = [], []
    next_pos = positions[:, -1] + 1
    for _ in range(max_new_tokens):
        token, logp = _pick(logits.float(), temperature, top_p, top_k, generator)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        tokens.append(token)
        logps.append(logp)
        done |= torch.isin(token, stops)
        if bool(done.all()):
            break
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
        out = model(input_ids=token[:, None], attention_mask=attention, position_ids=next_pos[:, None],
                    use_cache=True, **{cache_arg: past})
        past, logits = getattr(out, cache_arg), out.logits[:, -1, :]
        next_pos = next_pos + 1
    return _unpack(torch.stack(tokens, 1).tolist(), torch.stack(logps, 1).tolist(), set(stop_ids))


def _cache_argument(model: torch.nn.Module) -> str:
    # transformers renamed `past_key_values` to `cache` during 5.x; accept both.
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft wraps forward(**kwargs)
    forward = getattr(base, "forward", base)
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def _pick(
    logits: torch.Tensor, temperature: float, top_p: float, top_k: int, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    if temperature == 0:
        logp = torch.log_softmax(logits, -1)
        token = logits.argmax(-1)
        return token, logp.gather(-1, token[:, None]).squeeze(-1)
    logp = torch.log_softmax(logits / temperature, -1)
    probs = logp.exp()
    if top_k > 0:
        kth = torch.topk(probs, min(top_k, probs.shape[-1]), dim=-1).values[:, -1:]
        probs = torch.where(probs < kth, torch.zeros_like(probs), probs)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(-1) - sorted_probs < top_p  # always keeps the top token
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs * keep)
    token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return token, logp.gather(-1, token[:, None]).squeeze(-1)


def _unpack(tokens: list[list[int]], logps: list[list[float]], stops: set[int]) -> Sampled:
    out = Sampled([], [], [])
    for row_tokens, row_logps in zip(tokens, logps, strict=True):
        end = next((i + 1 for i, t in enumerate(row_tokens) if t in stops), None)
        out.stopped.append(end is not None)
        end = end or len(row_tokens)
        out.token_ids.append(row_tokens[:end])
        out.logprobs.append(row_logps[:end])
    return out
