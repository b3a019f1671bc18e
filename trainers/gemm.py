"""A model's linear layers on the CPU through oneDNN's matrix product instead of MKL's.

PyTorch runs a float32 `F.linear` on the CPU as MKL's sgemm. On AMD CPUs MKL takes a
code path that reaches about half of what the cores can do: on 2 cores of an AMD EPYC,
~160 GFLOP/s for a layer of a small model, where oneDNN (which PyTorch also ships, and
uses for bfloat16) reaches ~330 in float32, the same precision (bench/cpu_gemm.py). A
CPU training step is mostly these products, forward and backward.

`onednn_linear(model)` routes each plain `torch.nn.Linear` of a model through oneDNN
(`linear`, and `_OneDNNLinear` for the backward pass) for float32 inputs on the CPU;
any other input (a GPU, bfloat16) takes `F.linear` as before, so the choice follows
the tensors, not the model's device at the time. The results are float32 products
like MKL's, summed in another order: equal up to float rounding, not bit for bit.
Where PyTorch lacks the oneDNN kernel, or it disagrees with `F.linear` on a probe,
nothing changes (`available`). oneDNN makes a kernel per shape of a product and caches
it: importing this module bounds its caches (`CACHED_KERNELS`), or a multi-turn run's
memory would grow with every new shape.
"""

from __future__ import annotations

import functools
import os
import types
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["available", "grad_input", "grad_weight", "linear", "onednn_linear", "routed"]

CACHED_KERNELS = 16
"""How many of its kernels (each made for one shape of a product) oneDNN keeps, in each
of its two caches (oneDNN's own and PyTorch's ideep layer's: ``ONEDNN_PRIMITIVE_CACHE_CAPACITY``
and ``LRU_CACHE_CAPACITY``), unless the process sets them itself. A cached kernel holds
about 0.6 MiB, and at their default of 1024 each, memory grows by hundreds of MiB over a
multi-turn run, whose products change shape every turn (bench/cpu_gemm.py ``--shapes``);
making a kernel again costs a fraction of a millisecond. oneDNN reads them when it
first runs in the process: they are set on importing this module, so a process that
ran oneDNN before (a bfloat16 product on the CPU) keeps its defaults."""

for _name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
    os.environ.setdefault(_name, str(CACHED_KERNELS))


@functools.cache
def available() -> bool:
    """Whether this PyTorch has oneDNN's linear kernel and it agrees with `F.linear`."""
    op = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
    if op is None or not torch.backends.mkldnn.is_available():
        return False
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*shape, generator=g) for shape in ((5, 16), (8, 16), (8,)))
    try:
        return bool(torch.allclose(op(x, w, b, "none", [], ""), F.linear(x, w, b), rtol=1e-4, atol=1e-5))
    except RuntimeError:
        return False


def _takes(*tensors: torch.Tensor) -> bool:
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors) and available()


def _product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` by oneDNN, ``x`` of any rank; either operand may be strided."""
    out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return out


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear`, by oneDNN for float32 tensors on the CPU (differentiable)."""
    if not _takes(x, weight) or weight.dim() != 2:
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        out: torch.Tensor = _OneDNNLinear.apply(x, weight, bias)
        return out
    return _product(x, weight, bias)


def grad_input(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``grad @ weight``: a linear layer's gradient for its input."""
    if not _takes(grad, weight):
        return grad @ weight
    return _product(grad.contiguous(), weight.t())


def grad_weight(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``grad.T @ x`` over all leading dimensions: a linear layer's gradient for its
    weight. oneDNN's kernel sums over its input's rows, so it takes a transposed copy of
    one operand (the weight operand it reads strided): the narrower one, ``x`` when the
    layer widens (the result is then the transpose, ``x.T @ grad``, returned as a view)."""
    flat_grad, flat_x = grad.reshape(-1, grad.shape[-1]), x.reshape(-1, x.shape[-1])
    if not _takes(flat_grad, flat_x):
        return flat_grad.t() @ flat_x
    # A gradient broadcast from a sum has zero strides, which oneDNN reads as a weight
    # element by element: hundreds of times slower than copying it first.
    flat_grad, flat_x = flat_grad.contiguous(), flat_x.contiguous()
    if flat_x.shape[-1] < flat_grad.shape[-1]:
        return _product(flat_x.t(), flat_grad.t()).t()
    return _product(flat_grad.t(), flat_x.t())


class _OneDNNLinear(torch.autograd.Function):
    """`F.linear` whose three products, forward and backward, run on oneDNN."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> Any:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _product(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = grad_input(grad, weight)
        if ctx.needs_input_grad[1]:
            grad_w = grad_weight(grad, x)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.reshape(-1, grad.shape[-1]).sum(0)
        return grad_x, grad_w, grad_b


def _forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return linear(x, self.weight, self.bias)


def routed(module: torch.nn.Module) -> bool:
    """Whether `onednn_linear` routed this linear layer."""
    forward = vars(module).get("forward")
    return isinstance(forward, types.MethodType) and forward.__func__ is _forward


def onednn_linear(model: torch.nn.Module) -> int:
    """Route every plain `torch.nn.Linear` of ``model`` (not a subclass: a quantised or
    LoRA layer keeps its own forward; the plain layer a LoRA wraps is routed) through
    oneDNN for float32 inputs on the CPU, by replacing its ``forward`` on the instance:
    its hooks still run. A no-op where oneDNN is not `available`. Idempotent; returns
    how many layers changed."""
    if not available():
        return 0
    changed = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear and "forward" not in vars(module):
            module.forward = types.MethodType(_forward, module)  # type: ignore[method-assign]
            changed += 1
    return changed
