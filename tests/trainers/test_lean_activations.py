"""`lean_activations`: gated MLPs keep half their intermediate activations for the
backward pass and RMSNorms drop their normalised input, with the same output and the
same gradients, bit for bit (and the layers reading a norm's output recompute it, within
`recomputed_norm_outputs`); grouped-query attention holds each key/value head once,
with the same output and the same gradients up to float rounding."""

from __future__ import annotations

import copy

import pytest
import torch

from agentenv.trainers import GRPOConfig, GRPOTrainer, gemm
from agentenv.trainers import model as model_module
from agentenv.trainers.model import (
    GROUPED_SDPA,
    enable_gradient_checkpointing,
    lean_activations,
    lean_attention,
    lean_mlp_activations,
    lean_norm_activations,
    prefix_then_causal_mask,
    recomputed_norm_outputs,
)
from tests.trainers.toy import SayEnv, same_gradient, tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _loss_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits
    loss = torch.log_softmax(logits, -1)[..., 3].sum()
    loss.backward()
    return logits.detach(), [p.grad.clone() for p in model.parameters()]


def _saved_bytes(model: torch.nn.Module, ids: torch.Tensor) -> int:
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids).logits.sum()
    return sum(storages.values())


def test_same_logits_and_gradients_bit_for_bit_with_less_held_for_backward(tokenizer):
    plain = tiny_model(tokenizer)
    lean = copy.deepcopy(plain)
    layers = plain.config.num_hidden_layers
    assert lean_activations(lean) == layers + 2 * layers + 1  # the MLPs; two norms a layer and the final one
    ids = torch.randint(5, len(tokenizer), (4, 48), generator=torch.Generator().manual_seed(0))
    logits, grads = _loss_and_grads(plain, ids)
    lean_logits, lean_grads = _loss_and_grads(lean, ids)
    assert torch.equal(logits, lean_logits)
    assert all(torch.equal(a, b) for a, b in zip(grads, lean_grads, strict=True))
    # Two [tokens, intermediate] float32 tensors fewer per layer, one [tokens, hidden] per
    # norm (without a padding mask transformers' sdpa does not repeat keys: see below).
    c = plain.config
    fewer = 2 * ids.numel() * c.intermediate_size * 4 * layers + (2 * layers + 1) * ids.numel() * c.hidden_size * 4
    assert _saved_bytes(plain, ids) - _saved_bytes(lean, ids) == fewer


def _grouped_model(tokenizer) -> torch.nn.Module:
    """Four query heads sharing two key/value heads."""
    return tiny_model(tokenizer, hidden=64, layers=2, heads=4, kv_heads=2)


def test_norm_outputs_are_recomputed_for_the_backward_pass_with_the_same_gradients(tokenizer):
    lean = tiny_model(tokenizer)
    lean_activations(lean)
    ids = torch.randint(5, len(tokenizer), (4, 48), generator=torch.Generator().manual_seed(0))
    logits, grads = _loss_and_grads(lean, ids)
    with recomputed_norm_outputs():
        again, recomputed = _loss_and_grads(lean, ids)
    assert torch.equal(logits, again)
    assert all(torch.equal(a, b) for a, b in zip(grads, recomputed, strict=True))

    held: dict[int, int] = {}

    def pack(t: torch.Tensor) -> object:  # what the context would hold, counted
        packed = model_module._pack(t)
        if isinstance(packed, torch.Tensor):
            held[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return packed

    with recomputed_norm_outputs(), torch.autograd.graph.saved_tensors_hooks(pack, model_module._unpack):
        lean(input_ids=ids).logits.sum()
    # The three projections of each attention read one norm's output, the MLP another,
    # the output head the final norm's: one [tokens, hidden] float32 tensor less each.
    config = lean.config
    norms = 2 * config.num_hidden_layers + 1
    assert _saved_bytes(lean, ids) - sum(held.values()) == norms * ids.numel() * config.hidden_size * 4


def test_grouped_attention_holds_each_key_value_head_once_with_the_same_output(tokenizer):
    # With a padding mask (every training batch has one), transformers' sdpa repeats each
    # key/value head for its query heads and the backward pass holds the copies.
    plain = _grouped_model(tokenizer)
    lean = copy.deepcopy(plain)
    c = plain.config
    assert lean_attention(lean) == 1
    assert lean_attention(lean) == 0  # idempotent
    ids = torch.randint(5, len(tokenizer), (4, 48), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :7] = mask[2, :30] = 0  # left padding

    def run(model: torch.nn.Module) -> tuple[torch.Tensor, list[torch.Tensor], int]:
        model.zero_grad(set_to_none=True)
        storages: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logits = model(input_ids=ids, attention_mask=mask).logits
        (torch.log_softmax(logits, -1)[..., 3] * mask).sum().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters()], sum(storages.values())

    logits, grads, held = run(plain)
    lean_logits, lean_grads, lean_held = run(lean)
    assert torch.equal(logits * mask[..., None], lean_logits * mask[..., None])
    # The kernel sums a key/value head's gradient over its query heads in its own order.
    for a, b in zip(grads, lean_grads, strict=True):
        assert float((a - b).abs().max()) <= 1e-5 * float(a.abs().max())
    head_dim = c.hidden_size // c.num_attention_heads
    repeated = 2 * ids.numel() * (c.num_attention_heads - c.num_key_value_heads) * head_dim * 4
    assert held - lean_held == repeated * c.num_hidden_layers


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("heads", [(4, 2), (4, 1)], ids=["grouped", "multi-query"])
def test_prefix_attention_equals_one_masked_pass_in_output_and_gradients(heads, dtype):
    """Queries after a padded prefix of keys, their own keys right-padded: the prefix's
    pass and the causal pass, merged, give one masked pass's output and gradients, in
    the query's dtype."""
    from agentenv.trainers.model import _grouped_sdpa

    q_heads, kv_heads = heads
    g = torch.Generator().manual_seed(0)
    rows, width, own, dim = 3, 9, 7, 16
    query = torch.randn(rows, q_heads, own, dim, generator=g).to(dtype).requires_grad_()
    key = torch.randn(rows, kv_heads, width + own, dim, generator=g).to(dtype).requires_grad_()
    value = torch.randn(rows, kv_heads, width + own, dim, generator=g).to(dtype).requires_grad_()
    atol = 1e-5 if dtype == torch.float32 else 3e-2
    prefix = torch.ones(rows, width, dtype=torch.bool)
    prefix[0, :3] = prefix[2, 4:6] = False  # left padding; padding between an opening and a prompt
    lengths = torch.tensor([own, 4, 6])  # each row's own tokens, then its padding
    own_mask = torch.arange(own)[None] < lengths[:, None]
    causal = torch.ones(own, own, dtype=torch.bool).tril()
    full = torch.cat([prefix[:, None, :].expand(rows, own, width), causal.expand(rows, own, own)], -1)
    full = full[:, None]  # a padded query's output is never read: only real ones are compared
    module = torch.nn.Module()
    module.num_key_value_groups = q_heads // kv_heads
    upstream = (torch.randn(rows, own, q_heads, dim, generator=g) * own_mask[:, :, None, None]).to(dtype)

    def run(mask: torch.Tensor, dropout: float = 0.0) -> list[torch.Tensor]:
        for t in (query, key, value):
            t.grad = None
        with torch.random.fork_rng():
            torch.manual_seed(0)
            out, _ = _grouped_sdpa(module, query, key, value, mask, dropout=dropout, scaling=0.3)
        (out * upstream).sum().backward()
        return [out.detach() * own_mask[:, :, None, None], query.grad, key.grad, value.grad]

    masked, split = run(full), run(prefix_then_causal_mask(prefix, dtype))
    for a, b in zip(masked, split, strict=True):
        assert a.dtype == b.dtype == dtype
        assert torch.allclose(a.float(), b.float(), atol=atol), float((a - b).abs().max())
    # With attention dropout the two passes cannot be merged: the mask it stands for is made.
    dropped, dropped_split = run(full, 0.5), run(prefix_then_causal_mask(prefix, dtype), 0.5)
    for a, b in zip(dropped, dropped_split, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("checkpointed", [False, True], ids=["plain", "checkpointed"])
def test_a_long_pass_after_a_shared_prompt_attends_to_the_prompt_and_its_own_keys_apart(
    tokenizer, monkeypatch, checkpointed
):
    """Rows that run long enough after their shared prompt (`SPLIT_ATTENTION_MIN_REST`,
    lowered here) read the prompt's keys apart from their own, in every layer and in the
    layers activation checkpointing re-runs, with the log-probs and gradients of the
    masked pass; shorter ones take the masked pass."""
    from agentenv.trainers import logprobs
    from agentenv.trainers import model as m
    from agentenv.trainers.batch import Example, collate

    calls: list[int] = []
    apply = m._PrefixThenCausal.apply
    monkeypatch.setattr(m._PrefixThenCausal, "apply", lambda *a: (calls.append(a[0].shape[2]), apply(*a))[1])
    prompt = list(range(5, 17))
    examples = [
        Example(prompt + [20 + i] * (3 + i), [0] * 12 + [1] * (3 + i), [0.0] * (15 + i), [1.0] * (15 + i), [], False)
        for i in range(3)
    ]
    batch = collate(examples, pad_id=0)
    rest = 3 + 2 - 1  # the longest row's own tokens but its last, which scores nothing
    model = _grouped_model(tokenizer)
    lean_activations(model)
    if checkpointed:
        enable_gradient_checkpointing(model)
    model.train()
    runs = {}
    for threshold in (rest + 1, rest):
        monkeypatch.setattr(logprobs, "SPLIT_ATTENTION_MIN_REST", threshold)
        model.zero_grad(set_to_none=True)
        calls.clear()
        logp, _ = logprobs.policy_logprobs(model, batch)
        (logp * batch.mask).sum().backward()
        runs[threshold] = logp.detach(), [p.grad.clone() for p in model.parameters()], list(calls)
    (masked, masked_grads, masked_calls), (split, split_grads, split_calls) = runs[rest + 1], runs[rest]
    layers = model.config.num_hidden_layers
    assert masked_calls == []
    assert split_calls == [rest] * layers * (2 if checkpointed else 1)  # the backward re-runs each layer
    assert torch.allclose(split, masked, atol=1e-5)
    for a, b in zip(split_grads, masked_grads, strict=True):
        assert same_gradient(a, b)


def test_grouped_attention_leaves_other_models_alone(tokenizer):
    model = tiny_model(tokenizer)  # one key/value head: its repeats are views, nothing to save
    assert lean_attention(model) == 0
    assert model.config._attn_implementation == "sdpa"
    model.config._attn_implementation = "eager"
    model.config.num_attention_heads, model.config.num_key_value_heads = 4, 2
    assert lean_attention(model) == 0
    assert model.config._attn_implementation == "eager"


def test_lean_norms_give_the_same_bits_in_bfloat16_too(tokenizer):
    plain = tiny_model(tokenizer).to(torch.bfloat16)
    lean = copy.deepcopy(plain)
    assert lean_norm_activations(lean) == 2 * plain.config.num_hidden_layers + 1
    ids = torch.randint(5, len(tokenizer), (2, 24), generator=torch.Generator().manual_seed(2))
    logits, grads = _loss_and_grads(plain, ids)
    lean_logits, lean_grads = _loss_and_grads(lean, ids)
    assert torch.equal(logits, lean_logits)
    assert all(torch.equal(a, b) for a, b in zip(grads, lean_grads, strict=True))
    with recomputed_norm_outputs():
        _, recomputed = _loss_and_grads(lean, ids)
    assert all(torch.equal(a, b) for a, b in zip(grads, recomputed, strict=True))


def test_applying_twice_changes_nothing_more_and_inference_takes_the_plain_path(tokenizer):
    model = tiny_model(tokenizer)
    assert lean_activations(model) > 0
    assert lean_activations(model) == 0
    ids = torch.randint(5, len(tokenizer), (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(input_ids=ids).logits
    assert torch.equal(out, tiny_model(tokenizer)(input_ids=ids).logits.detach())


class _ScaledMLP(torch.nn.Module):
    """The gated MLP's shape with another computation: must be left alone."""

    def __init__(self) -> None:
        super().__init__()
        self.gate_proj, self.up_proj = torch.nn.Linear(8, 16, bias=False), torch.nn.Linear(8, 16, bias=False)
        self.down_proj = torch.nn.Linear(16, 8, bias=False)
        self.act_fn = torch.nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def test_a_module_of_the_same_shape_computing_something_else_is_left_alone():
    mlp = _ScaledMLP()
    state = torch.random.get_rng_state()
    assert lean_mlp_activations(torch.nn.Sequential(mlp)) == 0
    assert torch.equal(torch.random.get_rng_state(), state)  # the check draws from a private generator
    assert "forward" not in vars(mlp)


class GemmaLikeRMSNorm(torch.nn.Module):
    """An RMSNorm scaling by ``1 + weight`` (Gemma's): must be left alone."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(8))
        self.variance_epsilon = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (1 + self.weight) * x


def test_an_rms_norm_computing_something_else_is_left_alone():
    norm = GemmaLikeRMSNorm()
    assert lean_norm_activations(torch.nn.Sequential(norm)) == 0
    assert "forward" not in vars(norm)


def test_the_trainer_applies_it_unless_told_not_to(tmp_path, tokenizer):
    def trainer(**kw):
        cfg = GRPOConfig(output_dir=str(tmp_path / "run"), max_new_tokens=8, max_seq_len=128, report_to=[], **kw)
        return GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg)

    def lean_modules(t: GRPOTrainer) -> int:  # linear layers routed to oneDNN are not lean ones
        return sum("forward" in vars(m) and not gemm.routed(m) for m in t.model.modules())

    layers = tiny_model(tokenizer).config.num_hidden_layers
    assert lean_modules(trainer()) == layers + 2 * layers + 1
    assert lean_modules(trainer(lean_activations=False)) == 0
    cfg = GRPOConfig(output_dir=str(tmp_path / "run"), max_new_tokens=8, max_seq_len=128, report_to=[])
    grouped = GRPOTrainer(_grouped_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg)
    assert grouped.model.config._attn_implementation == GROUPED_SDPA
    plain = GRPOTrainer(
        _grouped_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg.model_copy(update={"lean_activations": False})
    )
    assert plain.model.config._attn_implementation == "sdpa"


def test_lora_wrapped_layers_are_left_alone(tmp_path, tokenizer):
    pytest.importorskip("peft")
    cfg = GRPOConfig(output_dir=str(tmp_path / "run"), max_new_tokens=8, max_seq_len=128, report_to=[], lora_r=4)
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg)
    # The MLPs' linear layers are wrapped: left alone. The norms are not wrapped: made lean.
    lean = [type(m).__name__ for m in trainer.model.modules() if "forward" in vars(m) and not gemm.routed(m)]
    assert lean and all(name.endswith("RMSNorm") for name in lean)
