"""Sampling on a GPU without a host sync per token: a static KV cache, each decoding step
replayed as one CUDA graph, stops tracked on the device, finished rows dropped.

`generation.sample` decodes in Python, one token per step, and reads every step's
tokens back to the host (three syncs a token); on a GPU each step also launches the
forward's few hundred kernels one by one, so a 0.5B model sampled at about 1,900
tokens/s on an H200. `StaticDecoder` instead:

- prefills the prompts with the model's forward (left-padded, the compute dtype),
  then copies their keys and values into a preallocated cache ``[rows, kv heads,
  length, head dim]`` per layer;
- decodes with the arithmetic of one Llama-family step written over that cache (the
  new token's keys and values written at one column for every row, attention over
  the whole length under a padding mask), captured once per shape as a CUDA graph
  and replayed: a step is one launch;
- keeps each row's tokens, log-probs, stop and end on the device, and looks at them
  every ``sync_every`` steps: one sync per that many tokens. Stop strings are matched
  there too (on the text of the tokens since the last look), so a row may run up to
  ``sync_every - 1`` tokens past one; they are dropped;
- when at a look half the rows or more have finished, moves the live ones into a
  cache half as wide (rows come in powers of two), so finished rows stop costing
  compute.

The weights it computes with are copies in the compute dtype (bf16 on a GPU; a LoRA
model's adapters merged), refreshed in place before every call, so a graph captured
once stays valid across optimiser steps. Samples follow `generation.sample`'s
contract and, on the CPU (where it runs without graphs, for tests), equal its
samples up to float rounding. Left out: the KV cache kept across turns (each call
prefills its prompts whole; on a GPU the prefill is a small share of a turn),
sliding-window and non-Llama models (`static_decoder` returns None for them).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from agentenv.trainers.decode import FAMILIES
from agentenv.trainers.generation import Sampled
from agentenv.trainers.model import merged_weights
from agentenv.trainers.next_token import cache_argument, ends_with, pick, reusable

__all__ = ["StaticDecoder", "static_decoder"]

LENGTH_STEP = 256
"""Cache lengths are rounded up to a multiple of this, so calls of similar lengths reuse
one captured graph."""


def static_decoder(model: torch.nn.Module, dtype: torch.dtype | None = None) -> StaticDecoder | None:
    """A `StaticDecoder` for ``model`` (or a peft model over one), or None where the model
    is not a stock Llama, Mistral, Qwen2 or Qwen3 causal LM with a RoPE of fixed
    frequencies and every layer attending to every position."""
    unwrap = getattr(model, "get_base_model", None)
    base = unwrap() if callable(unwrap) else model
    if type(base).__name__ not in FAMILIES or not type(base).__module__.startswith("transformers.models."):
        return None
    config: Any = base.config
    if not reusable(base) or getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None
    if (getattr(config, "pretraining_tp", 1) or 1) != 1:
        return None
    rotary = base.get_decoder().rotary_emb  # type: ignore[operator]
    if getattr(rotary, "rope_type", "default") in ("dynamic", "longrope") or not hasattr(rotary, "inv_freq"):
        return None  # frequencies that change with the length
    return StaticDecoder(model, dtype=dtype)


class StaticDecoder:
    """Samples from ``model`` with a static cache and (on a GPU) CUDA graphs; see the module
    docstring. One per model: it keeps its weight copies, caches and graphs across calls."""

    def __init__(self, model: torch.nn.Module, *, dtype: torch.dtype | None = None, sync_every: int = 16) -> None:
        self.model = model
        unwrap = getattr(model, "get_base_model", None)
        self.base: Any = unwrap() if callable(unwrap) else model
        config: Any = self.base.config
        param = next(model.parameters())
        self.device = param.device
        self.graphs = self.device.type == "cuda"
        self.dtype = dtype or (torch.bfloat16 if self.graphs else param.dtype)
        self.sync_every = sync_every
        self.layers = int(config.num_hidden_layers)
        decoder: Any = self.base.get_decoder()  # type: ignore[operator]
        attn = decoder.layers[0].self_attn
        self.heads, self.kv_heads = int(config.num_attention_heads), int(config.num_key_value_heads)
        self.head_dim = int(attn.head_dim)
        self.scaling = float(attn.scaling)
        self.rotary = decoder.rotary_emb
        self.apply_rotary: Callable[..., Any] = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        norm = decoder.norm
        self.eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
        self.act: Callable[[torch.Tensor], torch.Tensor] = decoder.layers[0].mlp.act_fn
        self.w: dict[str, torch.Tensor] = {}
        self._shapes: dict[tuple[int, int], _Shape] = {}
        self._pool: Any = None

    # -- the weights -------------------------------------------------------------------

    @torch.no_grad()
    def load(self) -> None:
        """Copy the model's current weights into the compute-dtype copies (in place, so
        captured graphs read the new values)."""
        for name, tensor in merged_weights(self.model):
            name = name.removeprefix("model.") if name.startswith("model.") else name
            held = self.w.get(name)
            if held is None:
                self.w[name] = tensor.detach().to(self.device, self.dtype, copy=True)
            else:
                held.copy_(tensor)
        if "lm_head.weight" not in self.w:  # tied to the input embeddings
            self.w["lm_head.weight"] = self.w["embed_tokens.weight"]

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.w[f"{name}.weight"], self.w.get(f"{name}.bias"))

    def _rms(self, x: torch.Tensor, name: str) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.w[f"{name}.weight"] * h.to(x.dtype)

    # -- one step -------------------------------------------------------------------------

    def _step(self, shape: _Shape) -> None:
        """One token per row: reads ``shape.tokens``, ``positions``, ``column`` and
        ``attention``, writes the new keys and values at ``column`` and the next-token
        logits into ``shape.logits``. Device operations only (capturable)."""
        rows, d = shape.rows, self.head_dim
        groups = self.heads // self.kv_heads
        x = F.embedding(shape.tokens[:, None], self.w["embed_tokens.weight"])  # [rows, 1, hidden]
        freqs = shape.positions[:, None, None].float() * self.rotary.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        scale = float(getattr(self.rotary, "attention_scaling", 1.0))
        cos, sin = (emb.cos() * scale).to(self.dtype), (emb.sin() * scale).to(self.dtype)
        bias = torch.zeros(shape.attention.shape, dtype=self.dtype, device=self.device)
        bias = bias.masked_fill_(shape.attention == 0, torch.finfo(self.dtype).min)[:, None, None, :]
        for i in range(self.layers):
            p = f"layers.{i}"
            h = self._rms(x, f"{p}.input_layernorm")
            q = self._linear(h, f"{p}.self_attn.q_proj").view(rows, 1, -1, d)
            k = self._linear(h, f"{p}.self_attn.k_proj").view(rows, 1, -1, d)
            v = self._linear(h, f"{p}.self_attn.v_proj").view(rows, 1, -1, d)
            if f"{p}.self_attn.q_norm.weight" in self.w:
                q, k = self._rms(q, f"{p}.self_attn.q_norm"), self._rms(k, f"{p}.self_attn.k_norm")
            q, k = self.apply_rotary(q.transpose(1, 2), k.transpose(1, 2), cos, sin)  # [rows, heads, 1, d]
            shape.keys[i].index_copy_(2, shape.column, k)
            shape.values[i].index_copy_(2, shape.column, v.transpose(1, 2))
            q = q.reshape(rows, self.kv_heads, groups, d)
            scores = torch.matmul(q, shape.keys[i].transpose(-1, -2)).mul_(self.scaling).add_(bias)
            weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(self.dtype)
            out = torch.matmul(weights, shape.values[i]).reshape(rows, 1, self.heads * d)
            x = x + self._linear(out, f"{p}.self_attn.o_proj")
            h = self._rms(x, f"{p}.post_attention_layernorm")
            gate, up = self._linear(h, f"{p}.mlp.gate_proj"), self._linear(h, f"{p}.mlp.up_proj")
            x = x + self._linear(self.act(gate) * up, f"{p}.mlp.down_proj")
        shape.logits.copy_(self._linear(self._rms(x, "norm"), "lm_head")[:, -1].float())

    def _shape(self, rows: int, length: int) -> _Shape:
        """The buffers (and, on a GPU, the captured step) for ``rows`` x ``length``."""
        key = (rows, length)
        if key not in self._shapes:
            shape = _Shape(rows, length, self.layers, self.kv_heads, self.head_dim, self.w, self.dtype, self.device)
            if self.graphs:
                shape.graph = self._capture(shape)
            self._shapes = {key: shape, **{k: v for k, v in self._shapes.items() if k[1] == length}}
        return self._shapes[key]

    def _capture(self, shape: _Shape) -> Any:
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm-up runs, as CUDA graph capture requires
                self._step(shape)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            self._step(shape)
        shape.keys_zero()
        return graph

    def _run(self, shape: _Shape) -> None:
        if shape.graph is not None:
            shape.graph.replay()
        else:
            self._step(shape)

    # -- sampling ---------------------------------------------------------------------------

    @torch.inference_mode()
    def sample(
        self,
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
    ) -> Sampled:
        """`generation.sample`'s contract (without a prefix or a kept cache)."""
        if stop_strings and decode is None:
            raise ValueError("stop_strings needs decode")
        n = len(prompts)
        limits = [max_new_tokens] * n if isinstance(max_new_tokens, int) else list(max_new_tokens)
        if len(limits) != n or min(limits, default=1) < 1:
            raise ValueError(f"max_new_tokens must be at least 1 for each of the {n} rows, got {max_new_tokens}")
        self.load()
        width = max(len(p) for p in prompts)
        most = max(limits)
        length = LENGTH_STEP * math.ceil((width + most) / LENGTH_STEP)
        shape = self._shape(1 << max(n - 1, 0).bit_length(), length)
        logits = self._prefill(shape, prompts, pad_id)
        dev, total = self.device, shape.rows
        # Per row of the first shape (the original rows, then padding rows): what it sampled.
        out_ids = torch.full((total, most), pad_id, dtype=torch.long, device=dev)
        out_logp = torch.zeros((total, most), dtype=torch.float32, device=dev)
        ends = torch.full((total,), most, dtype=torch.long, device=dev)
        stopped = torch.zeros(total, dtype=torch.bool, device=dev)
        limit = torch.tensor(limits + [1] * (total - n), device=dev)
        stops = torch.tensor(list(stop_ids), device=dev)
        # Per row of the current shape: its original row, and whether it has finished.
        index = torch.arange(total, device=dev)
        done = index >= n
        watch = _StopStrings(stop_strings, decode, n) if stop_strings else None
        for step in range(most):
            token, logp = pick(logits, temperature, top_p, top_k, generator)
            token = torch.where(done, pad_id, token)
            out_ids[index, step], out_logp[index, step] = token, logp
            hit = torch.isin(token, stops) & ~done
            ended = hit | ((step + 1 >= limit[index]) & ~done)
            ends[index] = torch.where(ended, step + 1, ends[index])
            stopped[index] = stopped[index] | hit
            done = done | ended
            if (step + 1) % self.sync_every == 0 or step + 1 == most:
                if watch is not None:
                    done = watch.look(out_ids, ends, stopped, index, done, step + 1)
                live = int((~done).sum())
                if live == 0 or step + 1 == most:
                    break
                if live <= shape.rows // 2:
                    keep = torch.cat([(~done).nonzero().squeeze(-1), done.nonzero().squeeze(-1)])
                    keep = keep[: 1 << max(live - 1, 0).bit_length()]
                    shape = self._narrow(shape, keep)
                    index, done, token = index[keep], done[keep], token[keep]
            # Every row is fed its token: a finished row's outputs are no longer read.
            shape.tokens.copy_(token)
            shape.positions.copy_(shape.counts)
            shape.column.fill_(width + step)
            shape.attention[:, width + step] = 1
            shape.counts += 1
            self._run(shape)
            logits = shape.logits
        result = Sampled([], [], [])
        ends_host, stopped_host = ends[:n].tolist(), stopped[:n].tolist()
        ids_host, logp_host = out_ids[:n].tolist(), out_logp[:n].tolist()
        for row in range(n):
            result.token_ids.append(ids_host[row][: ends_host[row]])
            result.logprobs.append(logp_host[row][: ends_host[row]])
            result.stopped.append(bool(stopped_host[row]))
        return result

    def _prefill(self, shape: _Shape, prompts: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
        """Run the prompts (left-padded) through the model's forward and copy their keys and
        values into ``shape``'s cache; returns the next-token logits ``[rows, vocab]``."""
        width = max(len(p) for p in prompts)
        rows, dev = shape.rows, self.device
        ids = torch.full((rows, width), pad_id, dtype=torch.long)
        att = torch.zeros((rows, width), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, width - len(p) :] = torch.tensor(list(p))
            att[r, width - len(p) :] = 1
        att[len(prompts) :, -1] = 1  # padding rows: one position, so softmax has a column to read
        ids, att = ids.to(dev), att.to(dev)
        half = self.dtype in (torch.bfloat16, torch.float16)
        autocast = torch.autocast(device_type=dev.type, dtype=self.dtype, enabled=self.graphs and half)
        with autocast:
            out = self.model(
                input_ids=ids,
                attention_mask=att,
                position_ids=(att.cumsum(-1) - 1).clamp(min=0),
                use_cache=True,
                logits_to_keep=1,
            )
        cache = getattr(out, cache_argument(self.model))
        for i, layer in enumerate(cache.layers):
            shape.keys[i].zero_()
            shape.values[i].zero_()
            shape.keys[i][:, :, :width] = layer.keys
            shape.values[i][:, :, :width] = layer.values
        shape.attention.zero_()
        shape.attention[:, :width] = att
        shape.counts.copy_(att.sum(-1))
        return out.logits[:, -1].float()

    def _narrow(self, shape: _Shape, keep: torch.Tensor) -> _Shape:
        """The shape of ``len(keep)`` rows holding rows ``keep`` of ``shape``'s cache."""
        smaller = self._shape(len(keep), shape.length)
        for i in range(self.layers):
            smaller.keys[i].copy_(shape.keys[i].index_select(0, keep))
            smaller.values[i].copy_(shape.values[i].index_select(0, keep))
        smaller.attention.copy_(shape.attention.index_select(0, keep))
        smaller.counts.copy_(shape.counts.index_select(0, keep))
        return smaller


class _StopStrings:
    """Stop strings, matched at each look on the tokens sampled since the last one."""

    def __init__(self, stops: Sequence[str], decode: Callable[[list[int]], str] | None, rows: int) -> None:
        if decode is None:
            raise ValueError("stop_strings needs decode")
        self.stops, self.decode = list(stops), decode
        self.longest = max(len(s) for s in stops)
        self.ids: list[list[int]] = [[] for _ in range(rows)]
        self.seen = 0

    def look(
        self,
        out_ids: torch.Tensor,
        ends: torch.Tensor,
        stopped: torch.Tensor,
        index: torch.Tensor,
        done: torch.Tensor,
        upto: int,
    ) -> torch.Tensor:
        """Rows whose text now holds a stop string end at the token completing it (ends
        and stopped updated in place); returns ``done`` with them finished."""
        rows = len(self.ids)
        window = out_ids[:rows, self.seen : upto].tolist()
        end_of = ends[:rows].tolist()
        found: dict[int, int] = {}
        for row in range(rows):
            for j in range(self.seen, min(upto, end_of[row])):
                self.ids[row].append(window[row][j - self.seen])
                if ends_with(self.decode, self.ids[row], self.stops, self.longest):
                    found[row] = j + 1
                    break
        self.seen = upto
        if not found:
            return done
        where = {int(r): k for k, r in enumerate(index.tolist())}
        rows_t = torch.tensor(list(found), device=ends.device)
        ends[rows_t] = torch.tensor(list(found.values()), device=ends.device)
        stopped[rows_t] = True
        done = done.clone()
        done[torch.tensor([where[r] for r in found], device=done.device)] = True
        return done


class _Shape:
    """The buffers of one (rows, length) shape: what a captured step reads and writes."""

    def __init__(
        self,
        rows: int,
        length: int,
        layers: int,
        kv_heads: int,
        head_dim: int,
        weights: dict[str, torch.Tensor],
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.rows, self.length = rows, length
        self.keys = [torch.zeros((rows, kv_heads, length, head_dim), dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.attention = torch.zeros((rows, length), dtype=torch.long, device=device)
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)
        self.positions = torch.zeros(rows, dtype=torch.long, device=device)
        self.counts = torch.zeros(rows, dtype=torch.long, device=device)
        self.column = torch.zeros(1, dtype=torch.long, device=device)
        vocab = weights["lm_head.weight"].shape[0]
        self.logits = torch.zeros((rows, vocab), dtype=torch.float32, device=device)
        self.graph: Any = None

    def keys_zero(self) -> None:
        """Clear what the warm-up and capture runs wrote."""
        for k, v in zip(self.keys, self.values, strict=True):
            k.zero_()
            v.zero_()
