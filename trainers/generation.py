"""Batched sampling with a KV cache, keeping the log-prob of every sampled token.

A small loop of our own rather than `model.generate`: it returns the exact token
ids and their log-probs under the sampling distribution (temperature applied,
before top-p/top-k truncation, as the policy-gradient ratio needs) while holding
only one step of full-vocabulary logits at a time.

Across turns, `sample` can start from the cache a previous call left (`KVPrefix`):
each row then feeds only the tokens that follow what the cache holds (the last
observation), not the whole conversation again. Rows are left-padded per call, so a
row's cached sequence has holes of padding that the attention mask hides; positions
are given explicitly, so a token's position is its index among the row's real
tokens either way, and the logits are the same as a full prefill's up to float
rounding. Needs an attention implementation that takes an arbitrary 2-D padding
mask (eager, sdpa; not flash-attention's varlen path) and a model whose cache keeps
every position (no sliding window): `reusable` says whether a model qualifies. For
such a model the cache's layers grow into spare room (`_growable_cache`): a decoded
token is written in place, where transformers' `DynamicLayer` copies the whole cache.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentenv.trainers.decode import SharedHeads, lean_decoder
from agentenv.trainers.next_token import cache_argument, draw, ends_with, pick, reusable

# `reusable`, `cache_argument` and `draw` live in `next_token` (static_decode shares them)
# and are named here too, where the sampler that needs them is.
__all__ = ["KVPrefix", "Sampled", "cache_argument", "common_opening", "draw", "reusable", "sample"]


@dataclass
class KVPrefix:
    """A batch's KV cache after `sample`: row i holds the keys and values of ``ids[i]``."""

    cache: Any
    attention: torch.Tensor
    """[rows, cached positions]: 1 where a real token is, 0 at padding."""
    ids: list[list[int]]
    shared: SharedHeads | None = None
    """The prompts runs of rows open with, as `sample` prefilled them when it shared
    them: every later call from this cache reads them once per run of rows too."""

    @property
    def tokens(self) -> int:
        """Cached positions over all rows (padding included): what the cache's memory scales with."""
        return int(self.attention.numel())

    def select(self, rows: Sequence[int | None]) -> KVPrefix:
        """The cache of rows ``rows``, in that order; None is an empty row (nothing cached,
        its whole prompt fed next). Rows left out are freed. Consumes this prefix."""
        index = torch.tensor([r if r is not None else 0 for r in rows], device=self.attention.device)
        self.cache.batch_select_indices(index)  # an empty row holds a copy of row 0, masked out
        attention = self.attention[index]
        attention[[i for i, r in enumerate(rows) if r is None]] = 0
        ids = [self.ids[r] if r is not None else [] for r in rows]
        return KVPrefix(self.cache, attention, ids, _reshared(self.shared, rows))


@dataclass
class Sampled:
    token_ids: list[list[int]]
    logprobs: list[list[float]]
    stopped: list[bool]
    """True where the row ended with a stop token or string, False where it hit its max_new_tokens."""
    prefix: KVPrefix | None = None
    """With ``keep_cache=True``: the cache of every row's prompt and generated tokens (the
    last token of a row may be left out: ``prefix.ids`` says)."""


@torch.inference_mode()
def sample(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    stop_ids: Sequence[int],
    pad_id: int,
    max_new_tokens: int | Sequence[int],
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    generator: torch.Generator | None = None,
    stop_strings: Sequence[str] = (),
    decode: Callable[[list[int]], str] | None = None,
    prefix: KVPrefix | None = None,
    keep_cache: bool = False,
    share_prompts: bool = False,
    lean: bool = True,
) -> Sampled:
    """Sample continuations of ``prompts`` (left-padded into one batch) until a stop
    token, a stop string (matched on the decoded text, so any split of it into tokens
    counts, and a token that ends past it too; needs ``decode``) or ``max_new_tokens``
    (one for all rows, or one per row: a row near the model's context limit stops at
    its own room while the others go on, so no row is fed a position past it).
    ``temperature=0`` is greedy. With ``prefix`` (row i's ``prefix.ids[i]`` a proper
    prefix of ``prompts[i]``), only the rest of each prompt is fed; with ``keep_cache``
    the result carries the cache for the next call. ``share_prompts`` (without a
    prefix): rows with the same prompt (a GRPO group) prefill it once, after the opening
    all prompts share (a system prompt: `common_opening`), prefilled once for all; the
    lean step then reads a group's prompt once per token for the group, and so does a
    later call from the kept cache (its ``prefix``) while its rows still come in
    groups. ``lean``: decode with `decode.LeanDecoder` where the model qualifies (the
    same logits up to float rounding, faster on the CPU)."""
    if stop_strings and decode is None:
        raise ValueError("stop_strings needs decode")
    limits = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(limits) != len(prompts) or min(limits, default=1) < 1:
        raise ValueError(f"max_new_tokens must be at least 1 for each of the {len(prompts)} rows, got {max_new_tokens}")
    device = next(model.parameters()).device
    cache_arg = cache_argument(model)
    shared = prefix.shared if prefix is not None and share_prompts else None
    if prefix is None and share_prompts:
        prefix, shared = _shared_prompts(model, prompts, pad_id, cache_arg) or (None, None)
    past, attention, count, logits = _extend(model, prefix, prompts, pad_id, cache_arg)
    decoder = lean_decoder(model) if lean and hasattr(past, "update") else None
    if decoder is not None:
        decoder.shared = shared
    stops = torch.tensor(list(stop_ids), device=device)
    fed = [list(p) for p in prompts]  # per row, what the cache holds
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    tokens, logps = [], []
    rows: list[list[int]] = [[] for _ in prompts]
    ends: list[int | None] = [None] * len(prompts)
    stopped = [False] * len(prompts)
    longest = max((len(s) for s in stop_strings), default=0)
    for step in range(max(limits)):
        token, logp = pick(logits.float(), temperature, top_p, top_k, generator)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        tokens.append(token)
        logps.append(logp)
        hit = (torch.isin(token, stops) & ~done).tolist()  # a list: indexing a tensor per row costs a dispatch
        live = [e is None for e in ends]  # rows whose token this is
        for row, t in enumerate(token.tolist()):
            if not live[row]:
                continue
            rows[row].append(t)
            if hit[row] or (longest and ends_with(decode, rows[row], stop_strings, longest)):  # type: ignore[arg-type]
                ends[row], stopped[row] = step + 1, True
            elif len(rows[row]) == limits[row]:
                ends[row] = step + 1
        done |= torch.tensor([e is not None for e in ends], device=device)
        if bool(done.all()):
            break
        feed = torch.tensor(live, dtype=torch.long, device=device)
        attention = torch.cat([attention, feed[:, None]], dim=1)  # a finished row's padding stays out
        # A finished row's padding (masked out) sits at its last position, not past it:
        # a model with learned absolute positions has none beyond its limit.
        positions = (count + feed - 1).clamp(min=0)
        if decoder is not None:
            logits = decoder(token, positions, attention, past)
        else:
            out = model(
                input_ids=token[:, None],
                attention_mask=attention,
                position_ids=positions[:, None],
                use_cache=True,
                **{cache_arg: past},
            )
            past, logits = getattr(out, cache_arg), out.logits[:, -1, :]
        count = count + feed
        for row, alive in enumerate(live):
            if alive:
                fed[row].append(rows[row][-1])
    all_logps = torch.stack(logps, 1).tolist()
    result = Sampled([], [], [])
    for row, end in enumerate(ends):
        n = end if end is not None else len(tokens)
        result.token_ids.append(rows[row][:n])
        result.logprobs.append(all_logps[row][:n])
        result.stopped.append(stopped[row])
    if keep_cache:
        result.prefix = KVPrefix(past, attention, fed, shared)
    return result


def _extend(
    model: torch.nn.Module, prefix: KVPrefix | None, prompts: Sequence[Sequence[int]], pad_id: int, cache_arg: str
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Feed each row what follows its cached ids: ``(cache, attention, real tokens per
    row, last logits)``, the cache then holding every prompt whole."""
    device = next(model.parameters()).device
    cached = prefix.ids if prefix is not None else [[] for _ in prompts]
    if len(cached) != len(prompts):
        raise ValueError(f"the prefix has {len(cached)} rows for {len(prompts)} prompts")
    for row, (p, c) in enumerate(zip(prompts, cached, strict=True)):
        if len(c) >= len(p) or list(p[: len(c)]) != c:
            raise ValueError(f"row {row}: the cached ids are not a proper prefix of the prompt")
    fresh = [list(p[len(c) :]) for p, c in zip(prompts, cached, strict=True)]
    width = max(len(f) for f in fresh)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    chunk = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(fresh):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        chunk[row, width - len(ids) :] = 1
    input_ids, chunk = input_ids.to(device), chunk.to(device)
    count = torch.tensor([len(c) for c in cached], dtype=torch.long, device=device)
    attention = chunk if prefix is None else torch.cat([prefix.attention, chunk], dim=1)
    cache = prefix.cache if prefix is not None else _growable_cache(model)
    out = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=(count[:, None] + chunk.cumsum(-1) - 1).clamp(min=0),
        use_cache=True,
        logits_to_keep=1,
        **({} if cache is None else {cache_arg: cache}),
    )
    return getattr(out, cache_arg), attention, count + chunk.sum(-1), out.logits[:, -1, :]


def _shared_prompts(
    model: torch.nn.Module, prompts: Sequence[Sequence[int]], pad_id: int, cache_arg: str
) -> tuple[KVPrefix, SharedHeads | None] | None:
    """The cache of every prompt but its last token, each distinct prompt prefilled once
    and copied to its rows, after the opening all of them share (`common_opening`),
    prefilled once for all; None when rows share neither a prompt nor an opening. With
    it, the distinct prompts' own cache when runs of two or more rows each open with one
    (a GRPO batch: a group's rows together), for decoding to read once per prompt."""
    index: dict[tuple[int, ...], int] = {}
    rows = [index.setdefault(tuple(p), len(index)) for p in prompts]
    if min(len(p) for p in index) < 2:
        return None
    heads = [list(p[:-1]) for p in index]
    common = common_opening(heads)
    if len(index) == len(rows) and not common:
        return None
    base = None
    if common:  # what every prompt opens with (a system prompt), prefilled once for all
        opening = [heads[0][:common]]
        cache, attention, _, _ = _extend(model, None, opening, pad_id, cache_arg)
        base = KVPrefix(cache, attention, opening).select([0] * len(heads))
    cache, attention, _, _ = _extend(model, base, heads, pad_id, cache_arg)
    shared = _shared_heads(cache, rows)  # before `select` replaces the cache's tensors with the rows'
    return KVPrefix(cache, attention, heads).select(rows), shared


def _shared_heads(cache: Any, rows: list[int]) -> SharedHeads | None:
    """The prompts' keys and values (``cache``, one row per distinct prompt, before it is
    copied to ``rows``) for blocks of ``n >= 2`` consecutive rows that each open with
    one prompt (a GRPO batch: a group's rows are consecutive; two groups of one task
    are two blocks); None when rows come in no such blocks."""
    layers = getattr(cache, "layers", None) or []
    if not layers or not all(hasattr(layer, "keys") for layer in layers):
        return None
    keys, values = [layer.keys for layer in layers], [layer.values for layer in layers]
    return _in_blocks(keys, values, rows)


def _in_blocks(keys: list[torch.Tensor], values: list[torch.Tensor], rows: list[int]) -> SharedHeads | None:
    """`SharedHeads` for ``rows`` (the prompt each row opens with: an index into the
    prompts' ``keys`` and ``values``), or None when they come in no blocks of two or more."""
    starts = [0] + [r for r in range(1, len(rows)) if rows[r] != rows[r - 1]] + [len(rows)]
    each = math.gcd(*(b - a for a, b in itertools.pairwise(starts)))
    if each < 2:
        return None
    block = rows[::each]
    if block == list(range(keys[0].shape[0])):  # each prompt one block, in order: its own keys
        return SharedHeads(keys, values, each)
    index = torch.tensor(block, device=keys[0].device)
    return SharedHeads([k.index_select(0, index) for k in keys], [v.index_select(0, index) for v in values], each)


def _reshared(shared: SharedHeads | None, rows: Sequence[int | None]) -> SharedHeads | None:
    """``shared`` for a cache's rows ``rows`` (`KVPrefix.select`): the same prompts, in
    the blocks the selected rows make; None when a row is new (None) or no blocks remain
    (episodes of a group ended at different turns)."""
    if shared is None or not rows or any(r is None for r in rows):
        return None
    return _in_blocks(shared.keys, shared.values, [r // shared.rows_each for r in rows if r is not None])


COMMON_MIN_TOKENS = 16
"""The shortest opening that every distinct prompt of a batch shares (a system prompt,
a tool list) run once for all of them rather than once each: below it, the extra
pass's own overhead can outweigh the tokens it saves."""


def common_opening(prompts: Sequence[Sequence[int]]) -> int:
    """How many opening ids two or more distinct ``prompts`` all share, each keeping at
    least one of its own after it; 0 for a single prompt or an opening shorter than
    `COMMON_MIN_TOKENS`."""
    if len(prompts) < 2:
        return 0
    first, limit = prompts[0], min(len(p) for p in prompts) - 1
    n = 0
    while n < limit and all(p[n] == first[n] for p in prompts[1:]):
        n += 1
    return n if n >= COMMON_MIN_TOKENS else 0


def _growable_cache(model: torch.nn.Module) -> Any:
    """An empty transformers cache whose layers append into a buffer with room to spare
    (`_GrowableLayer`), for a model whose every layer caches every position; None (the
    model makes its own) for any other model or a transformers without cache layers."""
    layer = _growable_layer_class()
    if layer is None or not reusable(model):
        return None
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.layer_class_to_replicate = layer
    return cache


@functools.cache
def _growable_layer_class() -> type | None:
    """`_GrowableLayer`, built once on transformers' `DynamicLayer` (5.x); None before it."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:
        return None
    if not hasattr(DynamicCache(), "layer_class_to_replicate"):
        return None

    class _GrowableLayer(DynamicLayer):
        """A `DynamicLayer` whose keys and values are views of a buffer that grows by half
        again when full, so decoding one token writes one position instead of copying the
        whole cache (`torch.cat`, every token, in `DynamicLayer`). Whatever replaces
        ``keys`` (`batch_select_indices`, `crop`, `reset`) is seen at the next `update`,
        which then starts a new buffer from it."""

        keys: torch.Tensor
        values: torch.Tensor
        _k: torch.Tensor | None = None
        _v: torch.Tensor | None = None

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            k, v = self._k, self._v
            n, add = (self.keys.shape[-2] if self.keys.numel() else 0), key_states.shape[-2]
            if (
                k is None
                or v is None
                or n == 0
                or self.keys.data_ptr() != k.data_ptr()  # replaced since the last update
                or self.keys.shape[0] != k.shape[0]
                or n + add > k.shape[-2]  # full
            ):
                shape = (*key_states.shape[:-2], n + add + max(64, (n + add) // 2), key_states.shape[-1])
                k, v = key_states.new_empty(shape), value_states.new_empty(shape)
                if n:
                    k[..., :n, :], v[..., :n, :] = self.keys, self.values
                self._k, self._v = k, v
            k[..., n : n + add, :], v[..., n : n + add, :] = key_states, value_states
            self.keys, self.values = k[..., : n + add, :], v[..., : n + add, :]
            return self.keys, self.values

    return _GrowableLayer
