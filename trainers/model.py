"""Loading a causal LM and its tokenizer, or building the project's tiny one; and what
the trainer calls on a model beyond `torch.nn.Module`.

The tiny model is a Qwen2-architecture network (hidden 128, 2 layers) with random
weights, and its tokenizer a small BPE trained on the text of the envs' oracle
episodes: both are made offline, deterministically from a seed, so tests and CPU
demos need no model hub.

The protocols (`CausalLM`, `Saveable`, ...) name the transformers methods the trainer
uses. A transformers model has them and a peft model passes them on; checking a
model against them (``isinstance``) gives a clear error for any other module.
"""

from __future__ import annotations

import re
import threading
import types
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F

import agentenv
from agentenv.trainers import gemm
from agentenv.trainers.pretrained import KNOWN_MODELS, known_model_path
from agentenv.trainers.progress_bars import quiet_progress_bars
from agentenv.trainers.tokens import build_tiny_tokenizer

__all__ = [
    "CausalLM",
    "Saveable",
    "autocast",
    "build_tiny",
    "enable_gradient_checkpointing",
    "lean_activations",
    "lean_attention",
    "lean_mlp_activations",
    "lean_norm_activations",
    "load_model",
    "prefix_then_causal_mask",
    "recomputed_norm_outputs",
    "resolve_device",
    "takes_prefix_mask",
]


@runtime_checkable
class CausalLM(Protocol):
    """A decoder and an output projection: what the chunked log-probs need."""

    def get_decoder(self) -> torch.nn.Module: ...
    def get_output_embeddings(self) -> torch.nn.Linear: ...


@runtime_checkable
class Saveable(Protocol):
    """Writes itself to a folder that ``from_pretrained`` loads (models, peft adapters, tokenizers)."""

    def save_pretrained(self, save_directory: str) -> Any: ...


@runtime_checkable
class _ActivationCheckpointing(Protocol):  # transformers >= 5
    def activation_checkpointing_enable(self, activation_checkpointing_kwargs: dict[str, Any]) -> None: ...


@runtime_checkable
class _GradientCheckpointing(Protocol):  # transformers 4
    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict[str, Any]) -> None: ...


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Recompute activations in the backward pass (non-reentrant), under either spelling."""
    kwargs = {"use_reentrant": False}
    if isinstance(model, _ActivationCheckpointing):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif isinstance(model, _GradientCheckpointing):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    else:
        raise TypeError(f"gradient_checkpointing needs a transformers model, got {type(model).__name__}")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} asked for, but torch sees no CUDA device; use device='cpu'")
    return torch.device(name)


def autocast(device: torch.device, bf16: bool) -> torch.autocast:
    """The block computes in bf16 over the float32 master weights with ``bf16`` (the
    trainer sets it on a GPU with ``GRPOConfig.bf16``); without, it changes nothing."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16)


class _SwiGLUDown(torch.autograd.Function):
    """``linear(silu(gate) * up, weight, bias)`` keeping only ``gate`` and ``up`` for the
    backward pass: ``silu(gate)`` and the product are recomputed there (two elementwise
    ops) instead of held from the forward pass. The backward computes each gradient with
    the ops autograd runs for the unfused graph, so the gradients are the same bits;
    with ``onednn``, those of a down projection routed by `gemm.onednn_linear`."""

    @staticmethod
    def forward(
        ctx: Any, gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, onednn: bool
    ) -> Any:
        ctx.save_for_backward(gate, up, weight)
        ctx.has_bias, ctx.onednn = bias is not None, onednn
        return (gemm.linear if onednn else F.linear)(F.silu(gate) * up, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        # At most two [tokens, intermediate] temporaries live at once besides the saved
        # pair, and the two gradients returned are written into them: the MLP's backward
        # is where training on a CPU peaks. In-place products are the same bits.
        gate, up, weight = ctx.saved_tensors
        act = F.silu(gate)
        grad_weight = grad_bias = None
        flat = grad.reshape(-1, grad.shape[-1])
        if ctx.needs_input_grad[2]:
            h = act * up
            if ctx.onednn:
                grad_weight = gemm.grad_weight(grad, h).to(weight.dtype)
            else:
                grad_weight = (flat.t() @ h.reshape(-1, h.shape[-1])).to(weight.dtype)
            del h
        if ctx.has_bias and ctx.needs_input_grad[3]:
            grad_bias = flat.sum(0).to(weight.dtype)
        grad_h = gemm.grad_input(grad, weight.to(grad.dtype)) if ctx.onednn else grad @ weight.to(grad.dtype)
        grad_up = act.mul_(grad_h)  # grad_h * silu(gate)
        grad_h.mul_(up)
        grad_gate = torch.ops.aten.silu_backward.grad_input(grad_h, gate, grad_input=grad_h)
        return grad_gate, grad_up, grad_weight, grad_bias, None


def _swiglu_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    gate, up, down = self.gate_proj(x), self.up_proj(x), self.down_proj
    if torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad or down.weight.requires_grad):
        out: torch.Tensor = _SwiGLUDown.apply(gate, up, down.weight, down.bias, gemm.routed(down))
        return out
    return down(self.act_fn(gate) * up)


def _swiglu_parts(module: torch.nn.Module) -> tuple[torch.nn.Linear, torch.nn.Linear, torch.nn.Linear] | None:
    """``(gate_proj, up_proj, down_proj)`` of a gated MLP of plain linear layers with a
    SiLU gate (Llama, Qwen, Mistral, ...); None for any other module."""
    gate, up, down = (getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj"))
    act = getattr(module, "act_fn", None)
    silu = isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation"
    if silu and type(gate) is type(up) is type(down) is torch.nn.Linear:
        return gate, up, down
    return None


def _computes_swiglu(module: torch.nn.Module, parts: tuple[torch.nn.Linear, ...]) -> bool:
    """Whether the module's own forward is ``down(silu(gate(x)) * up(x))``: tried on a
    small input (a private generator, so the global random stream is untouched)."""
    gate, up, down = parts
    g = torch.Generator(device=gate.weight.device).manual_seed(0)
    x = torch.randn(2, 3, gate.in_features, generator=g, device=gate.weight.device, dtype=gate.weight.dtype)
    with torch.no_grad():
        expected = module(x)
        fused = _SwiGLUDown.apply(gate(x), up(x), down.weight, down.bias, gemm.routed(down))
    return bool(torch.allclose(expected, fused, rtol=1e-4, atol=1e-5))


def lean_mlp_activations(model: torch.nn.Module) -> int:
    """Hold half as much of each gated MLP's activations for the backward pass: of the
    four ``[tokens, intermediate]`` tensors autograd would keep (gate, up, silu(gate),
    their product), keep the first two and recompute the others (`_SwiGLUDown`). The
    MLP's output and gradients are unchanged, bit for bit; its time barely moves (two
    elementwise ops). Applies to each module `_swiglu_parts` recognises whose forward
    computes exactly that (tried on a small input; any other is left alone), by
    replacing its ``forward`` on the instance: hooks on its ``down_proj`` no longer run
    in training. Idempotent; returns how many modules changed."""
    changed, verified = 0, {}
    for module in model.modules():
        parts = _swiglu_parts(module)
        if parts is None or "forward" in vars(module):  # not an MLP, or its forward already replaced
            continue
        if type(module) not in verified:
            verified[type(module)] = _computes_swiglu(module, parts)
        if verified[type(module)]:
            module.forward = types.MethodType(_swiglu_forward, module)
            changed += 1
    return changed


class _ScaleByWeight(torch.autograd.Function):
    """The end of an RMSNorm, ``weight * (x * r).to(dtype)`` with ``r`` the reciprocal
    root mean square, keeping ``x``, ``r`` and the weight for the backward pass but not
    the normalised ``x * r`` (recomputed there: one elementwise op). ``x`` is held for the
    mean square's own backward anyway. The backward runs the ops autograd runs for the
    two multiplications, in the same order, so the gradients are the same bits."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, r: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype) -> Any:
        ctx.save_for_backward(x, r, weight)
        ctx.dtype = dtype
        return weight * (x * r).to(dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        x, r, weight = ctx.saved_tensors
        grad_x = grad_r = grad_weight = None
        if ctx.needs_input_grad[2]:
            grad_weight = (grad * (x * r).to(ctx.dtype)).sum_to_size(weight.shape)
        grad_normed = (grad * weight).to(x.dtype)
        if ctx.needs_input_grad[0]:
            grad_x = grad_normed * r
        if ctx.needs_input_grad[1]:
            grad_r = (grad_normed * x).sum_to_size(r.shape)
        return grad_x, grad_r, grad_weight, None


def _rms_norm_forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """Llama's RMSNorm (Qwen2, Mistral, ... share it) with `_ScaleByWeight` at its end."""
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    r = torch.rsqrt(variance + self.variance_epsilon)
    if not (torch.is_grad_enabled() and (hidden_states.requires_grad or self.weight.requires_grad)):
        plain: torch.Tensor = self.weight * (hidden_states * r).to(input_dtype)  # nothing to hold: no Function
        return plain
    out: torch.Tensor = _ScaleByWeight.apply(hidden_states, r, self.weight, input_dtype)
    if _recipes.active:
        _recipes.remember(out, (hidden_states, r, self.weight, input_dtype))
    return out


class _NormRecipes(threading.local):
    """Within `recomputed_norm_outputs` (this thread): each lean RMSNorm's output,
    by its storage, with what recomputes it."""

    def __init__(self) -> None:
        self.active = False
        self.by_storage: dict[int, tuple[weakref.ref[torch.Tensor], tuple[Any, ...]]] = {}

    def remember(self, out: torch.Tensor, recipe: tuple[Any, ...]) -> None:
        key = out.untyped_storage().data_ptr()
        self.by_storage[key] = (weakref.ref(out, lambda _: self.by_storage.pop(key, None)), recipe)


_recipes = _NormRecipes()


class _Recompute:
    """A saved view of a lean RMSNorm's output, held as the inputs that give it again
    (detached: the recomputation needs their values, not their graph)."""

    def __init__(self, recipe: tuple[Any, ...], view: torch.Tensor) -> None:
        x, r, weight, dtype = recipe
        self.recipe = (x.detach(), r.detach(), weight.detach(), dtype)
        self.versions = [t._version for t in self.recipe[:3]]  # a detached tensor shares the counter
        self.view = (view.size(), view.stride(), view.storage_offset())

    def tensor(self) -> torch.Tensor:
        x, r, weight, dtype = self.recipe
        if [t._version for t in (x, r, weight)] != self.versions:
            raise RuntimeError("an RMSNorm's input was modified in place after the forward pass that saved it")
        with torch.no_grad():
            out = weight * (x * r).to(dtype)  # _ScaleByWeight's forward: the same bits
        return out.as_strided(*self.view)


def _pack(t: torch.Tensor) -> Any:
    """What a saved tensor is held as: a `_Recompute` for a lean norm's output, else the
    tensor detached. Never ``t`` itself: a node that saves its own output would hold a
    tensor whose ``grad_fn`` is that node, a cycle through C++ that Python's collector
    cannot see. A graph that backward never runs through (the unused last layer of a
    pass that only fills a cache) would then stay alive for good. Autograd restores the
    ``grad_fn`` on unpacking."""
    if t.layout != torch.strided:
        return t.detach()
    key = t.untyped_storage().data_ptr()
    entry = _recipes.by_storage.get(key)
    if entry is None:
        return t.detach()
    out = entry[0]()  # alive, so its storage is still the one t views
    if out is None or out.untyped_storage().data_ptr() != key or out.dtype != t.dtype:
        return t.detach()
    return _Recompute(entry[1], t)


def _unpack(packed: Any) -> torch.Tensor:
    return packed.tensor() if isinstance(packed, _Recompute) else packed


@contextmanager
def recomputed_norm_outputs() -> Iterator[None]:
    """Within: the layers that read a lean RMSNorm's output (`lean_norm_activations`;
    the attention's projections, the MLP's) do not hold it for the backward pass, but
    the norm's input and its reciprocal root mean square, which the norm holds anyway:
    the output is recomputed from them there (one elementwise op; the same bits). One
    ``[tokens, hidden]`` tensor less held per norm. For a training forward pass."""
    if _recipes.active:
        yield
        return
    _recipes.active = True
    try:
        with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack):
            yield
    finally:
        _recipes.active = False
        _recipes.by_storage.clear()


def _computes_rms_norm(module: torch.nn.Module, weight: torch.nn.Parameter) -> bool:
    """Whether the module's own forward equals `_rms_norm_forward` on a small input (a
    private generator): Gemma's ``(1 + weight)``, a bias or another epsilon placement differ."""
    g = torch.Generator(device=weight.device).manual_seed(0)
    x = torch.randn(2, 3, weight.shape[-1], generator=g, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        return bool(torch.equal(module(x), _rms_norm_forward(module, x)))


def lean_norm_activations(model: torch.nn.Module) -> int:
    """Hold one ``[tokens, hidden]`` tensor less per RMSNorm for the backward pass: the
    normalised input, recomputed there (`_ScaleByWeight`). Outputs and gradients are
    unchanged, bit for bit. Applies to each module named ``*RMSNorm`` with a ``weight``
    and a ``variance_epsilon`` whose forward computes Llama's norm (tried on a small
    input; any other is left alone), by replacing its ``forward`` on the instance.
    Idempotent; returns how many modules changed."""
    changed, verified = 0, {}
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if (
            not type(module).__name__.endswith("RMSNorm")
            or not isinstance(weight, torch.nn.Parameter)
            or not isinstance(getattr(module, "variance_epsilon", None), float)
            or "forward" in vars(module)
        ):
            continue
        if type(module) not in verified:
            verified[type(module)] = _computes_rms_norm(module, weight)
        if verified[type(module)]:
            module.forward = types.MethodType(_rms_norm_forward, module)
            changed += 1
    return changed


GROUPED_SDPA = "agentenv_grouped_sdpa"


def _grouped_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention, except that on the CPU a grouped-query layer with
    more than one query position hands sdpa its key/value heads as they are
    (``enable_gqa``) instead of repeating each for every query head of its group: the
    repeated copies are not made, nor held for the backward pass; and with a
    `prefix_then_causal_mask`, a pass after a cached prefix attends to the prefix and
    to its own keys apart (`_PrefixThenCausal`). Every other call (GPUs, decoding, position
    biases, soft-capping) is transformers' own."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    plain = (
        kwargs.get("position_bias") is None and kwargs.get("softcap") is None and not kwargs.get("output_attentions")
    )
    if attention_mask is not None and getattr(attention_mask, PREFIX_THEN_CAUSAL, False):
        width = attention_mask.shape[-1]
        if key.shape[2] != width + query.shape[2]:
            raise ValueError(
                f"a prefix-then-causal mask of {width} positions needs {width} + {query.shape[2]} keys, "
                f"got {key.shape[2]}"
            )
        if not (plain and not dropout and query.device.type == "cpu"):
            attention_mask = _full_mask(attention_mask, query.shape[2])  # the one masked pass instead
        else:
            scale = scaling if scaling is not None else query.shape[-1] ** -0.5
            k, v = key[:, :, :width], value[:, :, :width]
            merged = _PrefixThenCausal.apply(query, k, v, attention_mask, key[:, :, width:], value[:, :, width:], scale)
            return merged.transpose(1, 2).contiguous(), None
    if groups == 1 or query.device.type != "cpu" or query.shape[2] == 1 or not plain:
        out: tuple[torch.Tensor, None] = sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
        return out
    q_len = query.shape[2]
    causal = bool(
        (is_causal if is_causal is not None else getattr(module, "is_causal", True)) and attention_mask is None
    )
    if causal and key.shape[2] > q_len:  # an empty static cache's prefill, as transformers slices it
        key, value = key[:, :, :q_len], value[:, :, :q_len]
    attn = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal, enable_gqa=True
    )
    return attn.transpose(1, 2).contiguous(), None


class _PrefixThenCausal(torch.autograd.Function):
    """Attention of queries that follow a prefix of keys (a shared prompt's, read from a
    cache): every prefix position its mask allows, then their own keys causally. Two
    flash-attention passes, the prefix's with its ``[B, 1, 1, P]`` mask and their own
    with the kernel's causal mask, merged by their log-sum-exps: the one softmax over
    both, without the ``[B, 1, L, P + L]`` mask a single pass reads for every block (on
    the CPU that reading, not arithmetic, is much of its cost). The backward runs each
    pass's flash backward with the merged output and log-sum-exp, which gives each its
    share of that softmax's gradient; the query's gradient is their sum. Equal to one
    masked pass up to float rounding."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k_prefix: torch.Tensor,
        v_prefix: torch.Tensor,
        mask: torch.Tensor,
        k_own: torch.Tensor,
        v_own: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        out_prefix, lse_prefix = flash(q, k_prefix, v_prefix, 0.0, False, attn_mask=mask, scale=scale)
        out_own, lse_own = flash(q, k_own, v_own, 0.0, True, scale=scale)
        lse = torch.logaddexp(lse_prefix, lse_own)  # float32, whatever the query's dtype
        out = out_prefix * (lse_prefix - lse).exp_()[..., None] + out_own * (lse_own - lse).exp_()[..., None]
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k_prefix, v_prefix, mask, k_own, v_own, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        q, k_prefix, v_prefix, mask, k_own, v_own, out, lse = ctx.saved_tensors
        backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
        grad = grad.contiguous()
        dq, dk_prefix, dv_prefix = backward(
            grad, q, k_prefix, v_prefix, out, lse, 0.0, False, attn_mask=mask, scale=ctx.scale
        )
        dq_own, dk_own, dv_own = backward(grad, q, k_own, v_own, out, lse, 0.0, True, scale=ctx.scale)
        return dq.add_(dq_own), dk_prefix, dv_prefix, None, dk_own, dv_own, None


PREFIX_THEN_CAUSAL = "_agentenv_prefix_then_causal"


def prefix_then_causal_mask(prefix: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The attention mask, for a pass after a cached prefix, that has `lean_attention`'s
    kernel attend to the prefix and to each query's own keys apart (`_PrefixThenCausal`):
    ``prefix`` ``[B, P]`` is False at the prefix's padding, and each query sees its own
    keys up to itself. ``[B, 1, 1, P]``, additive, marked as such (transformers passes a
    4-D mask through as it is, and activation checkpointing hands the re-run layers the
    same one). For rows whose own tokens are left-aligned (padding only after them): a
    real query never reaches a padded key of its own. Only for a model `takes_prefix_mask`."""
    mask = torch.zeros(prefix.shape, dtype=dtype, device=prefix.device)
    mask = mask.masked_fill_(~prefix.bool(), float("-inf"))[:, None, None, :]
    setattr(mask, PREFIX_THEN_CAUSAL, True)
    return mask


def takes_prefix_mask(model: torch.nn.Module) -> bool:
    """Whether the model's attention is `lean_attention`'s, which reads `prefix_then_causal_mask`."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == GROUPED_SDPA


def _full_mask(prefix: torch.Tensor, length: int) -> torch.Tensor:
    """A `prefix_then_causal_mask` as the one ``[B, 1, L, P + L]`` additive mask it stands for."""
    own = torch.full((length, length), float("-inf"), dtype=prefix.dtype, device=prefix.device).triu_(1)
    return torch.cat([prefix.expand(-1, -1, length, -1), own.expand(prefix.shape[0], 1, -1, -1)], dim=-1)


def lean_attention(model: torch.nn.Module) -> int:
    """Hold half (or less) of the keys and values a grouped-query model's attention keeps
    for the backward pass on the CPU: each key/value head once, not once per query head
    (`_grouped_sdpa`, registered with transformers as ``agentenv_grouped_sdpa``). The
    CPU's sdpa kernel takes the grouping itself: outputs are the same bits. Applies
    to a model whose attention implementation is ``sdpa`` with two or more key/value
    heads, fewer than its query heads (one head's repeats are views: nothing to save);
    returns 1 if it changed the model, else 0. Idempotent.

    The kernel sums a key/value head's gradient over its query heads in an order of its
    own, so gradients match the repeated heads' up to float rounding, not bit for bit."""
    config = getattr(model, "config", None)
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:
        return 0
    heads, kv_heads = getattr(config, "num_attention_heads", 0) or 0, getattr(config, "num_key_value_heads", 0) or 0
    if getattr(config, "_attn_implementation", None) != "sdpa" or not 2 <= kv_heads < heads:
        return 0
    AttentionInterface.register(GROUPED_SDPA, _grouped_sdpa)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
    config._attn_implementation = GROUPED_SDPA  # type: ignore[union-attr]
    return 1


def lean_activations(model: torch.nn.Module, *, attention: bool = True) -> int:
    """`lean_mlp_activations`, `lean_norm_activations` and (with ``attention``, for a
    model trained on the CPU) `lean_attention`: the same outputs, and the same gradients
    (up to float rounding for grouped-query attention), with fewer activations held.
    A forward pass run within `recomputed_norm_outputs` holds less again. Returns how
    many modules changed."""
    changed = lean_mlp_activations(model) + lean_norm_activations(model)
    return changed + (lean_attention(model) if attention else 0)


KEEP_FREED_BYTES = 1 << 30


def keep_freed_cpu_memory() -> bool:
    """Ask glibc's malloc to keep freed blocks of up to 1 GiB for reuse rather than hand
    them back to the kernel (``mallopt``: M_MMAP_THRESHOLD and M_TRIM_THRESHOLD): by
    default every tensor over 32 MiB is a fresh ``mmap``, and each training step faults
    its activations' pages in again. Process-wide and idempotent; returns whether glibc
    took both settings (False on another C library, which is left as it is)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the process runs on
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, KEEP_FREED_BYTES)) and bool(mallopt(m_trim_threshold, KEEP_FREED_BYTES))


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


def master_weights(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every trainable parameter in float32, whatever dtype it was loaded
    in (a LoRA model: its adapters; the frozen base stays as it is). The optimiser's
    state follows its parameters, so AdamW's moments are float32 too. In bf16, an update
    smaller than a weight's rounding step is lost: at lr 1e-6 one AdamW step changed about
    2% of a bf16 model's weights and all of a float32 one's. Compute runs in bf16 under
    autocast where the trainer asks for it (a GPU). In place; returns ``model``."""
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad and p.is_floating_point() and p.dtype != torch.float32:
                p.data = p.data.float()
    return model


def load_model(path: str, *, dtype: torch.dtype | None = None) -> tuple[torch.nn.Module, Any]:
    """A causal LM and its tokenizer from a local path, a hub id or a known model's name
    (`agentenv.trainers.pretrained.KNOWN_MODELS`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if path in KNOWN_MODELS:
        path = str(known_model_path(path))
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        with quiet_progress_bars():
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


_PEFT_PREFIX = re.compile(r"^base_model\.model\.")


def merged_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``model``'s weights under the names of its checkpoint (what vLLM loads, what
    `static_decode` computes with). For a peft LoRA model, each adapted layer's base
    weight plus its adapters' delta (the model is not modified) and no adapter tensors."""
    base = getattr(model, "base_model", None)
    if base is None or not hasattr(model, "peft_config"):
        yield from model.state_dict().items()
        return
    modules = dict(model.named_modules())
    for name, tensor in model.state_dict().items():
        if ".lora_" in name:
            continue
        owner, _, leaf = name.rpartition(".")
        if owner.endswith(".base_layer"):
            layer = modules[owner.removesuffix(".base_layer")]
            if leaf == "weight" and not getattr(layer, "merged", False):
                tensor = tensor + sum(
                    (layer.get_delta_weight(a) for a in layer.active_adapters if a in layer.lora_A),
                    torch.zeros_like(tensor),
                )
            name = f"{owner.removesuffix('.base_layer')}.{leaf}"
        yield _PEFT_PREFIX.sub("", name), tensor
