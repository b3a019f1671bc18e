"""One decoding step of a Llama-family model on the CPU, without the forward's overhead.

`generation.sample` feeds one token per row per step. On the CPU, at the batch
sizes RL samples, a transformers forward spends as long around its matrix products
as in them: it builds a 4-D mask per call, runs q, k and v, and gate and up, as
separate products, and hands attention to sdpa, whose CPU kernel is slow for a
single query position. `LeanDecoder` does the same arithmetic for that one position
with less around it: q, k and v in one product, gate and up in one (from weights
concatenated once per `sample` call, for a model small enough that the calls around
its products weigh: `FUSE_MAX_BYTES`), the padding mask made once per step for every
layer, and attention as two batched products over the cache, each key/value head
read once for its group of query heads. Where blocks of rows open with one prompt (a
GRPO batch: `SharedHeads`), that prompt's keys and values are read once per block
rather than once per row: on a CPU, attention over the cache costs what reading it
costs. The norms, the rotary angles, the activation and the output head are the
model's own modules. The logits are the forward's up to float rounding
(tests/trainers/test_decode.py).

For the stock Llama, Mistral, Qwen2 and Qwen3 causal LMs on the CPU, with no hook on
a module the lean step does not call itself (activation checkpointing's hook on the
input embeddings runs in both), no soft-capping or logit scale, and a cache that
keeps every position (`next_token.reusable`); `lean_decoder` returns None for any
other model (a peft wrapper, a quantised or hooked layer, a GPU, where the forward's
own kernels are the fast path), and `sample` uses the model's forward.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from agentenv.trainers import gemm
from agentenv.trainers.next_token import reusable

__all__ = ["LeanDecoder", "SharedHeads", "lean_decoder"]

FAMILIES = {  # causal LM class: its module's attention class
    "LlamaForCausalLM": "LlamaAttention",
    "MistralForCausalLM": "MistralAttention",
    "Qwen2ForCausalLM": "Qwen2Attention",
    "Qwen3ForCausalLM": "Qwen3Attention",
}


def lean_decoder(model: torch.nn.Module) -> LeanDecoder | None:
    """A `LeanDecoder` for ``model``, or None where the model's forward must run."""
    name = type(model).__name__
    module = type(model).__module__
    if name not in FAMILIES or not module.startswith("transformers.models.") or not reusable(model):
        return None
    config: Any = model.config
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None
    if (getattr(config, "pretraining_tp", 1) or 1) != 1:
        return None
    if next(model.parameters()).device.type != "cpu":
        return None
    if model.training and getattr(config, "attention_dropout", None):
        return None  # the forward would drop attention weights
    decoder: Any = model.get_decoder()  # type: ignore[operator]
    head: Any = model.get_output_embeddings()  # type: ignore[operator]
    layers: list[Any] = list(decoder.layers[: config.num_hidden_layers])
    if _hooked(model, _called(decoder, head, layers)):
        return None
    linears = [head] + [
        getattr(part, proj)
        for layer in layers
        for part, projs in ((layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")), (layer.mlp, _MLP))
        for proj in projs
    ]
    if type(decoder.embed_tokens) is not torch.nn.Embedding or any(type(x) is not torch.nn.Linear for x in linears):
        return None  # a LoRA, quantised or otherwise changed layer: its forward is not F.linear
    if any(type(layer.self_attn).__name__ != FAMILIES[name] for layer in layers):
        return None
    return LeanDecoder(model, decoder, head, layers)


_MLP = ("gate_proj", "up_proj", "down_proj")


def _called(decoder: Any, head: Any, layers: list[Any]) -> set[torch.nn.Module]:
    """The modules the lean step calls as the forward does, with the same inputs: their
    hooks run either way. Any other module's (a layer's, attention's, a projection it
    fuses) would not run in the lean step."""
    called = {decoder.embed_tokens, decoder.rotary_emb, decoder.norm, head}
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        parts = (layer.input_layernorm, layer.post_attention_layernorm, attn.o_proj, mlp.down_proj, mlp.act_fn)
        called.update(parts)
        called.update(m for m in (getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)) if m is not None)
    return called


def _hooked(model: torch.nn.Module, called: set[torch.nn.Module]) -> bool:
    """Whether a forward hook would run in the model's forward and not in the lean step:
    a global one, or one on a module the lean step does not call (`_called`). Activation
    checkpointing's hook on the input embeddings, say, runs in both."""
    from torch.nn.modules import module as nn_module

    if any(
        getattr(nn_module, g, None)
        for g in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_forward_hooks_always_called")
    ):
        return True
    return any((m._forward_hooks or m._forward_pre_hooks) and m not in called for m in model.modules())


def _biases(projs: list[torch.nn.Linear]) -> torch.Tensor | None:
    """The projections' biases end to end (zeros for one without), or None if none has one."""
    if all(p.bias is None for p in projs):
        return None
    return torch.cat([p.bias if p.bias is not None else p.weight.new_zeros(p.out_features) for p in projs])


FUSE_MAX_BYTES = 64 << 20
"""The most the concatenated weights of all layers may take: past it (a model whose
products outweigh the calls around them) each projection runs alone, with no copy."""


class _Layer:
    """One decoder layer's modules and, with ``fuse``, its concatenated weights."""

    def __init__(self, layer: Any, fuse: bool, onednn: bool) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.input_norm, self.post_norm = layer.input_layernorm, layer.post_attention_layernorm
        self.q_norm, self.k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        self.o_proj, self.down_proj, self.act = attn.o_proj, mlp.down_proj, mlp.act_fn
        self.scaling = float(attn.scaling)
        self.rotary: Callable[..., Any] = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        self.projs = [attn.q_proj, attn.k_proj, attn.v_proj]
        self.gate_proj, self.up_proj = mlp.gate_proj, mlp.up_proj
        self.qkv = self.gate_up = self.qkv_bias = self.gate_up_bias = None
        self.linear: Callable[..., torch.Tensor] = gemm.linear if onednn else F.linear
        if fuse:
            self.qkv = torch.cat([p.weight for p in self.projs])
            self.qkv_bias = _biases(self.projs)
            self.gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
            self.gate_up_bias = _biases([mlp.gate_proj, mlp.up_proj])

    def qkv_of(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.qkv is None:
            return tuple(p(h) for p in self.projs)
        return self.linear(h, self.qkv, self.qkv_bias).split([p.out_features for p in self.projs], dim=-1)

    def gate_up_of(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.gate_up is None:
            return self.gate_proj(h), self.up_proj(h)
        return self.linear(h, self.gate_up, self.gate_up_bias).split(self.gate_proj.out_features, dim=-1)

    @staticmethod
    def fused_bytes(layer: Any) -> int:
        parts = [layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj]
        parts += [layer.mlp.gate_proj, layer.mlp.up_proj]
        return sum(p.weight.numel() * p.weight.element_size() for p in parts)


@dataclass
class SharedHeads:
    """Prompts that runs of rows share, as `sample` prefilled them: ``keys[i]`` and
    ``values[i]`` are layer i's ``[prompts, kv heads, width, dim]``, and rows
    ``j * rows_each`` to ``(j + 1) * rows_each - 1`` open with prompt j, whose keys and
    values are the first ``width`` positions of each of those rows' cache."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    rows_each: int

    @property
    def width(self) -> int:
        return int(self.keys[0].shape[-2])


class LeanDecoder:
    """``decoder(tokens, positions, attention, cache) -> logits``: the model's next-token
    logits ``[rows, vocab]`` for one new token per row, written to ``cache`` (a
    transformers cache, through its ``update``) as the forward would. Made from the
    weights as they are: make a new one after the weights change."""

    def __init__(self, model: torch.nn.Module, decoder: Any, head: Any, layers: list[Any]) -> None:
        config: Any = model.config
        self.decoder, self.head = decoder, head
        self.heads, self.kv_heads = int(config.num_attention_heads), int(config.num_key_value_heads)
        self.head_dim = int(layers[0].self_attn.head_dim)
        fuse = sum(_Layer.fused_bytes(layer) for layer in layers) <= FUSE_MAX_BYTES
        with torch.no_grad():
            self.layers = [_Layer(layer, fuse, gemm.routed(layer.self_attn.q_proj)) for layer in layers]
        self.shared: SharedHeads | None = None
        """Set by `sample` when rows share prompts: each prompt's keys and values are then
        read once for all its rows, not once per row (decoding reads the whole cache every
        token, and on a CPU that reading, not arithmetic, is what attention costs)."""

    @torch.inference_mode()
    def __call__(
        self, tokens: torch.Tensor, positions: torch.Tensor, attention: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        rows, d = tokens.shape[0], self.head_dim
        groups = self.heads // self.kv_heads
        x = self.decoder.embed_tokens(tokens[:, None])  # [rows, 1, hidden]
        cos, sin = self.decoder.rotary_emb(x, positions[:, None])
        # Padding (0 in ``attention``) gets the dtype's lowest value, as transformers' eager masks do.
        bias = torch.zeros(attention.shape, dtype=x.dtype, device=x.device)
        bias = bias.masked_fill_(attention == 0, torch.finfo(x.dtype).min)[:, None, None, :]
        for i, layer in enumerate(self.layers):
            h = layer.input_norm(x)
            q, k, v = layer.qkv_of(h)
            q, k, v = q.view(rows, 1, -1, d), k.view(rows, 1, -1, d), v.view(rows, 1, -1, d)
            if layer.q_norm is not None and layer.k_norm is not None:
                q, k = layer.q_norm(q), layer.k_norm(k)
            q, k = layer.rotary(q.transpose(1, 2), k.transpose(1, 2), cos, sin)  # [rows, heads, 1, d]
            keys, values = cache.update(k, v.transpose(1, 2), i)  # [rows, kv heads, length, d]
            q = q.reshape(rows, self.kv_heads, groups, d)
            if self.shared is None:
                scores = torch.matmul(q, keys.transpose(-1, -2))
                scores = scores.mul_(layer.scaling).add_(bias)
                weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
                out = torch.matmul(weights, values)
            else:
                out = self._shared_attention(i, q, keys, values, bias, layer.scaling)
            x = x + layer.o_proj(out.reshape(rows, 1, self.heads * d))
            h = layer.post_norm(x)
            gate, up = layer.gate_up_of(h)
            x = x + layer.down_proj(layer.act(gate) * up)
        return self.head(self.decoder.norm(x))[:, -1]

    def _shared_attention(
        self, i: int, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scaling: float
    ) -> torch.Tensor:
        """Layer ``i``'s attention ``[rows, kv heads, groups, d]`` with each shared prompt's
        keys and values read once for the rows that open with it: their queries in one
        product against the prompt's, then each row's own positions; one softmax over both."""
        shared = self.shared
        assert shared is not None
        rows, kv, groups, _ = q.shape
        prompts, each, width = rows // shared.rows_each, shared.rows_each, shared.width

        def by_prompt(t: torch.Tensor) -> torch.Tensor:  # [rows, kv, groups, n] -> [prompts, kv, each * groups, n]
            return t.reshape(prompts, each, kv, groups, -1).transpose(1, 2).reshape(prompts, kv, each * groups, -1)

        def by_row(t: torch.Tensor) -> torch.Tensor:  # the inverse
            return t.reshape(prompts, kv, each, groups, -1).transpose(1, 2).reshape(rows, kv, groups, -1)

        head = by_row(torch.matmul(by_prompt(q), shared.keys[i].transpose(-1, -2)))
        own = torch.matmul(q, keys[:, :, width:].transpose(-1, -2))
        scores = torch.cat([head, own], dim=-1).mul_(scaling).add_(bias)
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
        out = by_row(torch.matmul(by_prompt(weights[..., :width]), shared.values[i]))
        return out.add_(torch.matmul(weights[..., width:], values[:, :, width:]))
