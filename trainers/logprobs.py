"""Log-probs of policy tokens, computed in chunks.

Only the positions whose next token is a policy token are projected onto the
vocabulary, and at most ``chunk_tokens`` of them at a time, each chunk under
activation checkpointing: the full-vocabulary logits of the whole batch never
exist at once, in the forward or the backward pass. A model whose vocabulary is no
wider than its MLP (`holds_logits`: small test and demo models, not a real LLM) keeps
each chunk's logits for the backward pass instead of projecting again there.

The projection is the model's own: its output head's forward (a bias included),
then what the model's forward does to the logits after it, read from its config:
``logit_scale`` (Cohere) and ``final_logit_softcapping`` (Gemma 2 and 3). So these
log-probs are those of the logits the sampler draws from. A family that changes
its logits some other way is not covered: compare with its forward pass first.

Rows that open with the same prompt (a GRPO group: one task, one seed) share its
forward pass: the distinct prompts run once, their KV cache is copied to every row
that opens with them, and each row runs only what follows. The gradient reaches
the prompt through the cache, so the log-probs and the gradient are those of the
full forward pass up to float rounding, for ``1 / group_size`` of the prompt's
cost. Before them, the opening every distinct prompt shares (a system prompt, a
tool list: `generation.common_opening`) runs once for all of them, the same way;
a trainer whose optimiser step spans several micro-batches runs it once for all of
them (`opening_pass`, then `Opening.backward` after their backward passes).
Each row reads its prompt's keys and values through a cache that never grows
(`_FixedPrefix`), so with activation checkpointing, the layers re-run in the
backward pass read the same cache again: the prompt pass runs without checkpointing
(its rows are few), the rest with it. Not for models whose cache or attention cannot
take it (`next_token.reusable`), nor, with checkpointing, for a cache of another
shape than transformers' dynamic layers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from agentenv.trainers.batch import TrainBatch
from agentenv.trainers.generation import common_opening
from agentenv.trainers.model import CausalLM, prefix_then_causal_mask, recomputed_norm_outputs, takes_prefix_mask
from agentenv.trainers.next_token import cache_argument, reusable

__all__ = ["Opening", "opening_pass", "policy_logprobs"]

SPLIT_ATTENTION_MIN_REST = 640
"""The fewest positions the longest row runs after its shared prompt for the update's
attention to read the prompt's keys apart from the rows' own (`model.prefix_then_causal_mask`)
on the CPU: below it the second kernel pass costs more than the mask it spares, above it
reading the mask dominates (bench/split_attention.py: 0.71x at 64 positions, 0.95x at
512, 1.11x at 640, 1.28x at 768, 16 rows after a 165-position prompt)."""


def _chunk(
    hidden: torch.Tensor,
    head: torch.nn.Module,
    targets: torch.Tensor,
    temperature: float,
    scale: float | None,
    softcap: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float()
    if scale is not None:
        logits = logits * scale
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - lse
    with torch.no_grad():
        entropy = lse - (torch.softmax(logits, -1) * logits).sum(-1)
    return logp, entropy


def policy_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    *,
    temperature: float = 1.0,
    chunk_tokens: int = 1024,
    share_prompts: bool = True,
    prompt_lengths: list[int] | None = None,
    opening: Opening | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, entropy)``: ``[B, T]`` log-probs of the targets (0 off the mask) and
    the per-token entropies of the masked positions (detached). ``share_prompts``:
    rows opening with the same prompt run it once (see the module docstring); a row's
    prompt is its ids up to its first policy token, or its first ``prompt_lengths[i]``
    ids (at least 1, at most up to that token) when given: rows that differ before
    their first scored token can still share what they open with. ``opening`` (from
    `opening_pass`, with ``share_prompts``): rows whose prompt opens with its ids read
    its keys and values instead of running it."""
    if not isinstance(model, CausalLM):
        raise TypeError(
            f"expected a transformers causal LM (get_decoder, get_output_embeddings), got {type(model).__name__}"
        )
    decoder = model.get_decoder()
    opening = opening if share_prompts else None
    can_share = share_prompts and _can_share(model, decoder)
    prompts = _shared_prompts(batch, prompt_lengths, opening) if can_share else None
    # Without gradients nothing is re-run: checkpointing is off for the pass (a model in
    # training mode with it on would otherwise drop the prompts' cache: transformers 5.19).
    idle = [] if torch.is_grad_enabled() or not decoder.training else _checkpointing(decoder)
    with (
        recomputed_norm_outputs() if torch.is_grad_enabled() else contextlib.nullcontext(),
        _setting(idle, "gradient_checkpointing", False),
    ):
        hidden = _hidden_sharing_prompts(decoder, batch, *prompts, opening) if prompts is not None else None
        if hidden is None:
            out = decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
            hidden = _last_hidden(out)
    head = model.get_output_embeddings()
    config = getattr(model, "config", None)
    scale, softcap = getattr(config, "logit_scale", None), getattr(config, "final_logit_softcapping", None)
    selected = batch.mask.bool()
    h, targets = hidden[selected], batch.targets[selected]
    logps, entropies = [], []
    recompute = torch.is_grad_enabled() and not holds_logits(model)
    for start in range(0, h.shape[0], chunk_tokens):
        sl = slice(start, start + chunk_tokens)
        if recompute:
            lp, ent = checkpoint(_chunk, h[sl], head, targets[sl], temperature, scale, softcap, use_reentrant=False)
        else:
            lp, ent = _chunk(h[sl], head, targets[sl], temperature, scale, softcap)
        logps.append(lp)
        entropies.append(ent)
    flat = torch.cat(logps) if logps else h.new_zeros(0, dtype=torch.float32)
    logp = torch.zeros(batch.mask.shape, dtype=torch.float32, device=flat.device).masked_scatter(selected, flat)
    return logp, torch.cat(entropies) if entropies else flat.detach()


def holds_logits(model: torch.nn.Module) -> bool:
    """Whether a chunk's logits are kept for the backward pass rather than recomputed
    there: where the vocabulary is no wider than the MLP (``intermediate_size``), they
    weigh no more than one more layer's MLP activations for the same tokens. A real
    LLM's vocabulary (32k-256k ids over an MLP of 2k-30k) is recomputed."""
    config = getattr(model, "config", None)
    vocab, width = getattr(config, "vocab_size", None), getattr(config, "intermediate_size", None)
    return isinstance(vocab, int) and isinstance(width, int) and vocab <= width


def _last_hidden(out: object) -> torch.Tensor:
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]  # type: ignore[index]


def _can_share(model: torch.nn.Module, decoder: torch.nn.Module) -> bool:
    return reusable(model) and (not _checkpointed(decoder) or _fixed_prefix_layer() is not None)


def _checkpointed(decoder: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder's modules that activation checkpointing re-runs in this pass (none
    without gradients or outside training)."""
    if not (torch.is_grad_enabled() and decoder.training):
        return []
    return _checkpointing(decoder)


def _checkpointing(decoder: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder's modules (itself included) with activation checkpointing on."""
    return [m for m in decoder.modules() if getattr(m, "gradient_checkpointing", False) is True]


@contextlib.contextmanager
def _setting(modules: list[torch.nn.Module], name: str, value: bool) -> Iterator[None]:
    """``module.name = value`` on each module for the duration (the instance's own)."""
    before = [vars(m).get(name, _UNSET) for m in modules]
    for m in modules:
        setattr(m, name, value)
    try:
        yield
    finally:
        for m, old in zip(modules, before, strict=True):
            if old is _UNSET:
                delattr(m, name)
            else:
                setattr(m, name, old)


_UNSET = object()


def _fixed_prefix_layer() -> type | None:
    """`_FixedPrefix`'s class, made on first use; None where transformers' cache has no
    dynamic layers (4.x)."""
    global _FIXED_PREFIX
    if _FIXED_PREFIX is None:
        try:
            from transformers.cache_utils import DynamicLayer
        except ImportError:
            return None

        class _FixedPrefix(DynamicLayer):
            """One layer's prompt keys and values ``[prompts, heads, length, dim]``, read by
            row i as prompt ``index[i]``'s. ``update`` returns them followed by the new
            keys and values and keeps nothing: reading it twice gives the same."""

            def __init__(
                self, keys: torch.Tensor, values: torch.Tensor, index: torch.Tensor, record: bool = False
            ) -> None:
                super().__init__()
                self.keys, self.values, self.index = keys, values, index  # what the mask and length read
                self.prefix, self.record = (keys, values), record
                self.returned: tuple[torch.Tensor, torch.Tensor] | None = None
                self.device, self.is_initialized = keys.device, True

            def update(
                self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
            ) -> tuple[torch.Tensor, torch.Tensor]:
                keys, values = (
                    torch.cat([p.index_select(0, self.index), new], dim=-2)
                    for p, new in zip(self.prefix, (key_states, value_states), strict=True)
                )
                if self.record:  # the next level's prefix: see `_prompt_pass`
                    self.returned = keys, values
                return keys, values

        _FIXED_PREFIX = _FixedPrefix
    return _FIXED_PREFIX


_FIXED_PREFIX: type | None = None


def _row_starts(batch: TrainBatch, lengths: list[int] | None = None) -> list[int] | None:
    """Where each row's prompt ends: its first policy token, or ``lengths[i]``; None when a
    row has no policy token."""
    mask = batch.mask.bool()
    if not bool(mask.any(-1).all()):
        return None
    starts = (mask.int().argmax(-1) + 1).tolist()  # mask[t] scores token t + 1
    if lengths is not None:
        if len(lengths) != len(starts) or not all(1 <= n <= s for n, s in zip(lengths, starts, strict=False)):
            raise ValueError(
                f"prompt_lengths must give each row a length from 1 to its first policy token, got {lengths} "
                f"for first policy tokens at {starts}"
            )
        starts = list(lengths)
    return starts


def _shared_prompts(
    batch: TrainBatch, lengths: list[int] | None = None, opening: Opening | None = None
) -> tuple[list[list[int]], list[int], list[int]] | None:
    """``(distinct prompts, each row's prompt index, each row's prompt length)``, or None
    when rows share neither a prompt nor an opening (`common_opening`, or ``opening``),
    or a row has no policy token. A row's prompt is its ids up to its first policy
    token, or its first ``lengths[i]`` ids."""
    starts = _row_starts(batch, lengths)
    if starts is None:
        return None
    ids = batch.input_ids.tolist()
    index: dict[tuple[int, ...], int] = {}
    rows = [index.setdefault(tuple(row[:start]), len(index)) for row, start in zip(ids, starts, strict=True)]
    prompts = [list(p) for p in index]
    if len(index) == len(rows) and not common_opening(prompts) and not _opens_with(prompts, opening):
        return None
    return prompts, rows, starts


def _opens_with(prompts: list[list[int]], opening: Opening | None) -> bool:
    """Whether every prompt opens with ``opening``'s ids and has one of its own after them."""
    if opening is None:
        return False
    n = len(opening.ids)
    return all(len(p) > n and p[:n] == opening.ids for p in prompts)


@dataclass
class Opening:
    """What every prompt of an optimiser step opens with (a system prompt, a tool list),
    run once for all the step's micro-batches (`opening_pass`) rather than once in each.
    ``leaves``: each layer's keys and values ``[1, kv heads, len(ids), dim]``, detached,
    which the micro-batches' passes read (``policy_logprobs(opening=...)``) and whose
    gradients their backward passes sum; ``outputs``: the same as the opening's pass
    made them, through which `backward` takes that sum to the weights, once."""

    ids: list[int]
    leaves: list[tuple[torch.Tensor, torch.Tensor]]
    outputs: list[tuple[torch.Tensor, torch.Tensor]]

    def backward(self) -> None:
        """The opening's share of the gradient, after the micro-batches' backward passes:
        the gradient the leaves gathered, through the opening's pass to the weights."""
        pairs = [
            (out, leaf.grad)
            for outs, leaves in zip(self.outputs, self.leaves, strict=True)
            for out, leaf in zip(outs, leaves, strict=True)
            if leaf.grad is not None and out.requires_grad
        ]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        self.outputs = []  # the graph, freed


def opening_pass(model: torch.nn.Module, batches: Sequence[TrainBatch]) -> Opening | None:
    """The opening (`common_opening`) that the prompts of all ``batches`` share, run once
    with the gradient on when it is on; None where there is none, or the model cannot
    share prompts (`policy_logprobs`' conditions). Call `Opening.backward` after the
    batches' own backward passes. Equivalent to each batch running the opening itself,
    up to float rounding (the gradients are summed in the keys and values first)."""
    if not isinstance(model, CausalLM):
        return None
    decoder = model.get_decoder()
    if not _can_share(model, decoder) or _fixed_prefix_layer() is None:
        return None
    distinct: dict[tuple[int, ...], None] = {}
    for batch in batches:
        starts = _row_starts(batch)
        if starts is None:
            return None
        for row, start in zip(batch.input_ids.tolist(), starts, strict=True):
            distinct.setdefault(tuple(row[:start]))
    prompts = list(distinct)
    n = common_opening(prompts)
    if not n:
        return None
    grad = torch.is_grad_enabled()
    with (
        recomputed_norm_outputs() if grad else contextlib.nullcontext(),
        _setting(_checkpointed(decoder), "gradient_checkpointing", False),  # it writes the cache
    ):
        cache = _opening_cache(decoder, prompts[0][:n], cache_argument(decoder), batches[0].input_ids.device)
    layers = _kv_layers(cache)
    if layers is None:
        return None
    leaves = [(k.detach().requires_grad_(grad), v.detach().requires_grad_(grad)) for k, v in layers]
    return Opening(list(prompts[0][:n]), leaves, layers)


def _kv_layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Each layer's (keys, values) of a transformers dynamic cache (5.x: ``layers``; 4.x:
    ``key_cache``/``value_cache``), or None for a cache of another shape."""
    layers = getattr(cache, "layers", None)
    if layers is not None and all(hasattr(layer, "keys") for layer in layers):
        return [(layer.keys, layer.values) for layer in layers]
    if hasattr(cache, "key_cache") and hasattr(cache, "value_cache"):
        return list(zip(cache.key_cache, cache.value_cache, strict=True))
    return None


def _expanded(cache: Any, index: torch.Tensor, record: bool = False) -> Any:
    """A cache whose row i reads row ``index[i]`` of ``cache`` and never grows
    (`_FixedPrefix` layers), by ``index_select``: its backward (``index_add_``) sums a
    prompt's row gradients in a fixed order. The cache's own ``batch_select_indices``
    indexes, and on a CPU that backward adds with atomics across threads, in an order
    that changes from run to run; it is the fallback for caches of another shape.
    ``record``: each layer keeps what its next pass reads (`_recorded`)."""
    layers = _kv_layers(cache)
    if layers is None or _fixed_prefix_layer() is None:
        cache.batch_select_indices(index)
        return cache
    return _fixed_cache(layers, index, record)


def _fixed_cache(layers: list[tuple[torch.Tensor, torch.Tensor]], index: torch.Tensor, record: bool) -> Any:
    """A transformers cache of `_FixedPrefix` layers over ``layers``' keys and values."""
    from transformers import DynamicCache

    fixed = _fixed_prefix_layer()
    assert fixed is not None
    out = DynamicCache()
    out.layers = [fixed(keys, values, index, record) for keys, values in layers]
    return out


def _recorded(cache: Any) -> Any:
    """After a pass through an `_expanded` cache made with ``record``: the cache of what
    that pass read, the prefix's keys and values followed by its own (a cache that grew
    instead, the fallback's, already holds them)."""
    for layer in getattr(cache, "layers", ()):
        returned = getattr(layer, "returned", None)
        if returned is not None:
            layer.keys, layer.values = returned
    return cache


def _hidden_sharing_prompts(
    decoder: torch.nn.Module,
    batch: TrainBatch,
    prompts: list[list[int]],
    rows: list[int],
    starts: list[int],
    opening: Opening | None = None,
) -> torch.Tensor | None:
    """The decoder's last hidden states ``[B, T, H]`` at every position a policy token is
    scored from (others are 0), running each distinct prompt once; None when activation
    checkpointing is on and the prompt's cache is not transformers' dynamic layers."""
    device = batch.input_ids.device
    cache_arg = cache_argument(decoder)
    checkpointed = _checkpointed(decoder)
    with _setting(checkpointed, "gradient_checkpointing", False):  # it writes the cache: not to be re-run
        prompt_hidden, cache, prompt_att = _prompt_pass(decoder, prompts, cache_arg, device, opening)
    if checkpointed and _kv_layers(cache) is None:
        return None  # the re-run layers would write to a cache of this shape a second time
    index = torch.tensor(rows, device=device)
    cache = _expanded(cache, index)
    lengths = batch.attention_mask.sum(-1).tolist()
    # Each row runs up to its last scored position: what follows it (an episode's last
    # token, a closing observation) scores nothing, and nothing scored reads it.
    mask = batch.mask.bool()
    ends = (mask.shape[1] - mask.flip(-1).int().argmax(-1)).tolist()
    rest = max(e - s for e, s in zip(ends, starts, strict=True))
    rest_ids = torch.zeros((len(rows), rest), dtype=torch.long, device=device)
    rest_att = torch.zeros((len(rows), rest), dtype=torch.long, device=device)
    for i, (e, s) in enumerate(zip(ends, starts, strict=True)):
        rest_ids[i, : e - s] = batch.input_ids[i, s:e]
        rest_att[i, : e - s] = 1
    starts_t = torch.tensor(starts, device=device)
    arange = torch.arange(len(rows), device=device)
    # Position start - 1 (the prompt's last token) scores the first policy token; the
    # rest of each row's positions come from its own pass.
    hidden = prompt_hidden.new_zeros((*batch.input_ids.shape, prompt_hidden.shape[-1]))
    hidden = hidden.index_put((arange, starts_t - 1), prompt_hidden.index_select(0, index))
    if rest == 0:  # every row scores one token, from its prompt's last position
        return hidden
    # A row's padding (masked out) sits at its last position, not past it: a model with
    # learned absolute positions (GPT-2) has none beyond its limit, and a short row's
    # padding runs as far as the longest row's rest.
    last = torch.tensor(lengths, device=device) - 1
    positions = torch.minimum(starts_t[:, None] + torch.arange(rest, device=device)[None, :], last[:, None])
    if rest >= SPLIT_ATTENTION_MIN_REST and device.type == "cpu" and takes_prefix_mask(decoder):
        # Each layer reads the prompt's keys apart from the row's own, causally, rather
        # than through one [rows, 1, rest, prompt + rest] mask (`model.prefix_then_causal_mask`).
        attention = prefix_then_causal_mask(prompt_att[index], prompt_hidden.dtype)
    else:
        attention = torch.cat([prompt_att[index], rest_att], dim=1)
    # transformers drops the cache of a checkpointed layer unless the layer only reads it,
    # as each does from a fixed prefix.
    with _setting(checkpointed, "_can_checkpoint_with_cache", True):
        out = decoder(
            input_ids=rest_ids,
            attention_mask=attention,
            position_ids=positions,
            use_cache=True,
            **{cache_arg: cache},
        )
    rest_hidden = _last_hidden(out)
    columns = starts_t[:, None] + torch.arange(rest, device=device)[None, :]
    valid = rest_att.bool()
    return hidden.index_put((arange[:, None].expand_as(columns)[valid], columns[valid]), rest_hidden[valid])


def _opening_cache(decoder: torch.nn.Module, ids: Sequence[int], cache_arg: str, device: torch.device) -> Any:
    """The cache of one pass over an opening's ``ids`` (one row, no padding)."""
    head = torch.tensor([list(ids)], device=device)
    out = decoder(
        input_ids=head,
        attention_mask=torch.ones_like(head),
        position_ids=torch.arange(head.shape[1], device=device)[None],
        use_cache=True,
    )
    return getattr(out, cache_arg)


def _prompt_pass(
    decoder: torch.nn.Module,
    prompts: list[list[int]],
    cache_arg: str,
    device: torch.device,
    opening: Opening | None = None,
) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """Each distinct prompt through the decoder, left-padded, after the opening they all
    share (``opening``'s, already run, where they all open with it; else
    `common_opening`: a system prompt), which runs once for all of them: ``(hidden state
    at each prompt's last token [P, H], the prompts' cache, its attention mask [P, W])``."""
    cache = None
    if _opens_with(prompts, opening):
        assert opening is not None
        common = len(opening.ids)
        cache = _fixed_cache(opening.leaves, torch.zeros(len(prompts), dtype=torch.long, device=device), True)
    else:
        common = common_opening(prompts)
    head_att = torch.ones((len(prompts), common), dtype=torch.long, device=device)
    if common and cache is None:
        opened = _opening_cache(decoder, prompts[0][:common], cache_arg, device)
        cache = _expanded(opened, torch.zeros(len(prompts), dtype=torch.long, device=device), True)
    width = max(len(p) for p in prompts) - common
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    att = torch.zeros((len(prompts), width), dtype=torch.long)
    for j, p in enumerate(prompts):  # left-padded: every prompt ends in the last column
        ids[j, width - len(p) + common :] = torch.tensor(p[common:])
        att[j, width - len(p) + common :] = 1
    attention = torch.cat([head_att, att.to(device)], dim=1)  # padding between opening and rest: masked
    out = decoder(
        input_ids=ids.to(device),
        attention_mask=attention,
        position_ids=(attention.cumsum(-1) - 1).clamp(min=0)[:, common:],
        use_cache=True,
        **({} if cache is None else {cache_arg: cache}),
    )
    return _last_hidden(out)[:, -1], _recorded(getattr(out, cache_arg)), attention
