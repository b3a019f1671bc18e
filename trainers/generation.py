"""Batched sampling with a KV cache, keeping the log-prob of every sampled token.

A small loop of our own rather than `model.generate`: it returns the exact token
ids and their log-probs under the sampling distribution (temperature applied,
before top-p/top-k truncation, as the policy-gradient ratio needs) while holding
only one step of full-vocabulary logits at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

__all__ = ["Sampled", "sample"]


@dataclass
class Sampled:
    token_ids: list[list[int]]
    logprobs: list[list[float]]
    stopped: list[bool]
    """True where the row ended with a stop token or string, False where it hit max_new_tokens."""


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
    stop_strings: Sequence[str] = (),
    decode: Callable[[list[int]], str] | None = None,
) -> Sampled:
    """Sample continuations of ``prompts`` (left-padded into one batch) until a stop
    token, a stop string (matched on the decoded text, so any split of it into tokens
    counts, and a token that ends past it too; needs ``decode``) or ``max_new_tokens``.
    ``temperature=0`` is greedy."""
    if stop_strings and decode is None:
        raise ValueError("stop_strings needs decode")
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention[row, width - len(prompt) :] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    stops = torch.tensor(list(stop_ids), device=device)

    cache_arg = _cache_argument(model)
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True, logits_to_keep=1)
    past, logits = getattr(out, cache_arg), out.logits[:, -1, :]
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    tokens, logps = [], []
    rows: list[list[int]] = [[] for _ in prompts]
    ends: list[int | None] = [None] * len(prompts)
    next_pos = positions[:, -1] + 1
    longest = max((len(s) for s in stop_strings), default=0)
    for step in range(max_new_tokens):
        token, logp = _pick(logits.float(), temperature, top_p, top_k, generator)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        tokens.append(token)
        logps.append(logp)
        hit = torch.isin(token, stops) & ~done
        for row, t in enumerate(token.tolist()):
            if ends[row] is not None:
                continue
            rows[row].append(t)
            if hit[row] or (longest and _ends_with(decode, rows[row], stop_strings, longest)):  # type: ignore[arg-type]
                ends[row] = step + 1
        done |= torch.tensor([e is not None for e in ends], device=device)
        if bool(done.all()):
            break
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
        out = model(
            input_ids=token[:, None],
            attention_mask=attention,
            position_ids=next_pos[:, None],
            use_cache=True,
            **{cache_arg: past},
        )
        past, logits = getattr(out, cache_arg), out.logits[:, -1, :]
        next_pos = next_pos + 1
    all_logps = torch.stack(logps, 1).tolist()
    out = Sampled([], [], [])
    for row, end in enumerate(ends):
        n = end if end is not None else len(tokens)
        out.token_ids.append(rows[row][:n])
        out.logprobs.append(all_logps[row][:n])
        out.stopped.append(end is not None)
    return out


def _ends_with(decode: Callable[[list[int]], str], ids: list[int], stops: Sequence[str], longest: int) -> bool:
    """Whether a stop string now appears in the row's last tokens. Checked after every
    token, so the first appearance is in the newest token, which may go on past it
    (``"</tool_call>\n"`` as one token): the row stops there, the token kept whole."""
    tail = decode(ids[-(longest + 2) :])  # a few tokens more than the longest stop string's characters
    return any(s in tail for s in stops)


@runtime_checkable
class _Wrapper(Protocol):
    """A peft model: the wrapped model's forward has the real signature."""

    def get_base_model(self) -> torch.nn.Module: ...


def _cache_argument(model: torch.nn.Module) -> str:
    # transformers renamed `past_key_values` to `cache` during 5.x; accept both.
    import inspect

    base = model.get_base_model() if isinstance(model, _Wrapper) else model  # peft wraps forward(**kwargs)
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
