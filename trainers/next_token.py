"""What the trainer's two token samplers share: `generation.sample` (the model's
forward, or `decode.LeanDecoder`, per token) and `static_decode` (a GPU graph).

The pick of the next token (`pick`, `draw`), the test for a stop string at a row's
end (`ends_with`), whether a model's KV cache may be kept and extended across calls
(`reusable`), and the name a forward takes its cache under (`cache_argument`).

Left out: the sampling loops themselves, and the KV caches they keep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import torch

__all__ = ["cache_argument", "draw", "ends_with", "pick", "reusable"]


def reusable(model: torch.nn.Module) -> bool:
    """Whether `sample` may start from a `KVPrefix` with this model: every layer caches
    every position (no sliding window) and attention takes a mask with holes."""
    config = getattr(model, "config", None)
    if config is None:
        return False
    if str(getattr(config, "_attn_implementation", "") or "").startswith("flash"):
        return False  # flash-attention's varlen path reads a padding mask as contiguous runs
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return all(t == "full_attention" for t in layer_types)
    return getattr(config, "sliding_window", None) is None or getattr(config, "use_sliding_window", True) is False


def ends_with(decode: Callable[[list[int]], str], ids: list[int], stops: Sequence[str], longest: int) -> bool:
    """Whether a stop string now appears in the row's last tokens. Checked after every
    token, so the first appearance is in the newest token, which may go on past it
    (``"</tool_call>\n"`` as one token): the row stops there, the token kept whole.
    A token can give less than one character (one byte of "。"; a special token gives
    none), so the tokens before the newest one are read back until they give the
    longest stop string's characters and three more (a window may open inside a
    character). A token that adds no text ends no stop string: a run of special
    tokens costs a short decode each, not a read back over the whole run."""
    n = longest + 2
    before, tail = decode(ids[-n:-1]), decode(ids[-n:])
    if tail == before:
        return False
    widened = False
    while n < len(ids) and len(before) < longest + 3:
        n, widened = 2 * n, True
        before = decode(ids[-n:-1])
    if widened:
        tail = decode(ids[-n:])
    return any(s in tail for s in stops)


@runtime_checkable
class _Wrapper(Protocol):
    """A peft model: the wrapped model's forward has the real signature."""

    def get_base_model(self) -> torch.nn.Module: ...


def cache_argument(model: torch.nn.Module) -> str:
    # transformers renamed `past_key_values` to `cache` during 5.x; accept both.
    import inspect

    base = model.get_base_model() if isinstance(model, _Wrapper) else model  # peft wraps forward(**kwargs)
    forward = getattr(base, "forward", base)
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def pick(
    logits: torch.Tensor, temperature: float, top_p: float, top_k: int, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The next token of each row of ``logits`` ``[rows, vocab]`` and its log-prob under
    the sampling distribution (temperature applied, before top-k and top-p truncation,
    as the policy-gradient ratio needs); ``temperature=0`` is greedy."""
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
    token = draw(probs, generator)
    return token, logp.gather(-1, token[:, None]).squeeze(-1)


def draw(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One index per row of ``probs`` ``[rows, vocab]`` (non-negative, not necessarily
    normalised), drawn with probability proportional to its entry; an entry of 0 is
    never drawn. On the CPU by inverting each row's running sum with one uniform
    number per row, where ``torch.multinomial`` draws an exponential per entry: over
    ten times faster (bench/sampling_cpu.py). Elsewhere ``torch.multinomial``."""
    if probs.device.type != "cpu":
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    cdf = probs.cumsum(-1)  # sequential per row on the CPU: a zero entry repeats the sum before it
    total = cdf[:, -1:]
    if not bool((torch.isfinite(total) & (total > 0)).all()):
        raise ValueError("the next-token probabilities hold NaN or inf, or a row is all zero: check the logits")
    u = torch.rand(total.shape, generator=generator, dtype=cdf.dtype) * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))  # u < total: some cdf entry exceeds it
    # The first entry whose running sum exceeds u: the sum grew there, so its entry is > 0.
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)
