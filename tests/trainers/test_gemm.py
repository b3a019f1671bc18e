"""`gemm.onednn_linear`: a model's plain linear layers take float32 products on the CPU
from oneDNN, forward and backward, equal to `F.linear`'s up to float rounding; any
other input takes `F.linear` itself; the trainer routes its model unless told not to."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from agentenv.trainers import GRPOConfig, GRPOTrainer, gemm
from agentenv.trainers.model import lean_activations
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.skipif(not gemm.available(), reason="this PyTorch has no oneDNN linear kernel")


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5))


@pytest.mark.parametrize(("widening", "bias"), [(True, True), (False, True), (True, False)])
def test_output_and_every_gradient_match_f_linear(widening, bias):
    g = torch.Generator().manual_seed(0)
    inner, outer = (16, 48) if widening else (48, 16)  # the weight gradient's two layouts
    x = torch.randn(3, 7, inner, generator=g, requires_grad=True)
    w = torch.randn(outer, inner, generator=g, requires_grad=True)
    b = torch.randn(outer, generator=g, requires_grad=True) if bias else None
    upstream = torch.randn(3, 7, outer, generator=g)

    def run(fn):
        out = fn(x, w, b)
        grads = torch.autograd.grad(out, [t for t in (x, w, b) if t is not None], upstream)
        return out.detach(), grads

    out, grads = run(gemm.linear)
    ref_out, ref_grads = run(F.linear)
    assert out.shape == ref_out.shape and _close(out, ref_out)
    assert len(grads) == len(ref_grads) and all(_close(a, r) for a, r in zip(grads, ref_grads, strict=True))


def test_other_inputs_take_f_linear_itself():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 8, generator=g).bfloat16(), torch.randn(6, 8, generator=g).bfloat16()
    assert torch.equal(gemm.linear(x, w), F.linear(x, w))
    x64, w64 = x.double(), w.double()
    assert torch.equal(gemm.linear(x64, w64), F.linear(x64, w64))


def test_routes_plain_linear_layers_once_and_keeps_their_hooks():
    class Scaled(torch.nn.Linear):  # a subclass has a forward of its own: left alone
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 2 * super().forward(x)

    plain, sub = torch.nn.Linear(8, 4), Scaled(4, 4)
    model = torch.nn.Sequential(plain, torch.nn.ReLU(), sub)
    expected = model(torch.ones(2, 8))
    seen = []
    plain.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    assert gemm.onednn_linear(model) == 1
    assert gemm.onednn_linear(model) == 0
    assert gemm.routed(plain) and not gemm.routed(sub)
    assert _close(model(torch.ones(2, 8)), expected)
    assert seen == [torch.Size([2, 4])]


def test_nothing_changes_where_the_kernel_is_missing(monkeypatch):
    monkeypatch.setattr(gemm, "available", lambda: False)
    layer = torch.nn.Linear(8, 4)
    assert gemm.onednn_linear(layer) == 0 and not gemm.routed(layer)
    x = torch.randn(2, 8)
    assert torch.equal(gemm.linear(x, layer.weight), F.linear(x, layer.weight))


def _loss_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits
    torch.log_softmax(logits, -1)[..., 3].sum().backward()
    return logits.detach(), [p.grad.clone() for p in model.parameters()]


def test_a_routed_model_trains_as_before_and_lean_activations_keep_its_bits(tokenizer):
    plain = tiny_model(tokenizer)
    routed, lean = copy.deepcopy(plain), copy.deepcopy(plain)
    assert gemm.onednn_linear(routed) > 0
    lean_activations(lean)
    gemm.onednn_linear(lean)
    ids = torch.randint(5, len(tokenizer), (4, 48), generator=torch.Generator().manual_seed(0))
    logits, grads = _loss_and_grads(plain, ids)
    routed_logits, routed_grads = _loss_and_grads(routed, ids)
    lean_logits, lean_grads = _loss_and_grads(lean, ids)
    assert _close(routed_logits, logits)
    assert all(torch.allclose(a, b, rtol=1e-3, atol=1e-5) for a, b in zip(routed_grads, grads, strict=True))
    # The lean MLP's own backward runs the routed layer's products: the same bits.
    assert torch.equal(lean_logits, routed_logits)
    assert all(torch.equal(a, b) for a, b in zip(lean_grads, routed_grads, strict=True))


def test_the_trainer_routes_its_model_on_the_cpu_unless_told_not_to(tmp_path, tokenizer):
    def routed_layers(**kw) -> int:
        cfg = GRPOConfig(output_dir=str(tmp_path / "run"), max_new_tokens=8, max_seq_len=128, report_to=[], **kw)
        trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg)
        return sum(gemm.routed(m) for m in trainer.model.modules())

    linears = sum(type(m) is torch.nn.Linear for m in tiny_model(tokenizer).modules())
    assert routed_layers() == linears
    assert routed_layers(cpu_onednn_linear=False) == 0


CPU_GEMM = Path(__file__).resolve().parents[2] / "bench" / "cpu_gemm.py"


def test_memory_stays_bounded_over_products_of_many_shapes():
    """oneDNN caches a kernel per shape (about 0.6 MiB each, up to 1024 by default): a
    multi-turn run changes shape every turn. With the caches bounded on import, 120
    shapes cost about what they cost MKL (the default caches: ~300 MiB more)."""

    caches = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
    env = {k: v for k, v in os.environ.items() if k not in caches}

    def growth(backend: str) -> float:  # the bench's own measure, in a fresh process
        cmd = [sys.executable, str(CPU_GEMM), "--child", backend, "--shapes", "120"]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return float(out.stdout.split()[-1])

    assert growth("onednn") - growth("mkl") < 60


def test_a_gradient_broadcast_from_a_sum_gives_the_same_gradients():
    """``loss = out.sum()`` hands the layer a gradient with zero strides."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 24, generator=g, requires_grad=True)
    w = torch.randn(40, 24, generator=g, requires_grad=True)
    grads = torch.autograd.grad(gemm.linear(x, w).sum(), [x, w])
    expected = torch.autograd.grad(F.linear(x, w).sum(), [x, w])
    assert all(_close(a, b) for a, b in zip(grads, expected, strict=True))
