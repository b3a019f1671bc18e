"""`LeanDecoder`: a decoding step with the model's own logits, for the families it takes.

Tiny random models of each family (Qwen2 with biases and grouped-query attention,
Llama with one key/value head per query head and scaled rotary angles, Qwen3 with
its query/key norms, Mistral without a sliding window) sample the same tokens with
the same log-probs through the lean step as through their forward pass; any model
it cannot run exactly falls back to the forward.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from agentenv.trainers import decode, gemm
from agentenv.trainers.decode import lean_decoder
from agentenv.trainers.generation import sample

VOCAB = 96
COMMON = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "initializer_range": 0.3,
    "max_position_embeddings": 256,
}
FAMILIES = {
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**COMMON, num_key_value_heads=2, tie_word_embeddings=True)),
    "llama": lambda: LlamaForCausalLM(
        LlamaConfig(
            **COMMON,
            num_key_value_heads=4,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        )
    ),
    "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**COMMON, num_key_value_heads=2, head_dim=16)),
    "mistral": lambda: MistralForCausalLM(MistralConfig(**COMMON, num_key_value_heads=1, sliding_window=None)),
}


def _model(family: str) -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = FAMILIES[family]().eval()
        with torch.no_grad():
            for module in model.modules():  # biases start at zero: make them count
                if isinstance(module, torch.nn.Linear) and module.bias is not None:
                    module.bias.normal_(0, 0.3)
        return model


PROMPTS = [[5, 17, 33, 2, 9, 41, 8], [12, 7, 7, 60], [3, 88, 21, 14, 5], [12, 7, 7, 60]]


def _sample(model: torch.nn.Module, *, lean: bool, temperature: float = 1.0, **kw: Any) -> Any:
    return sample(
        model,
        kw.pop("prompts", PROMPTS),
        stop_ids=kw.pop("stop_ids", []),
        pad_id=0,
        max_new_tokens=kw.pop("max_new_tokens", 16),
        temperature=temperature,
        generator=torch.Generator().manual_seed(7),
        lean=lean,
        **kw,
    )


def _same(a: Any, b: Any, tolerance: float = 1e-5) -> None:
    # Float rounding grows with the log-prob's size: a relative term as well (transformers
    # 5.19's forward differs from the lean step by 1.4e-5 on a log-prob of -4).
    assert a.token_ids == b.token_ids
    for x, y in zip(a.logprobs, b.logprobs, strict=True):
        assert x == pytest.approx(y, rel=tolerance, abs=tolerance)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "one-by-one"])
@pytest.mark.parametrize("onednn", [False, True], ids=["mkl", "onednn"])
def test_the_lean_step_samples_what_the_forward_samples(
    family: str, temperature: float, fused: bool, onednn: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the projections' weights concatenated (a small model) and one by one (a
    model past `FUSE_MAX_BYTES`, where the copies would cost memory and save nothing);
    with the linear layers' products on MKL and on oneDNN (`gemm.onednn_linear`, as the
    trainer has them on the CPU: the lean step's fused products follow)."""
    if not fused:
        monkeypatch.setattr(decode, "FUSE_MAX_BYTES", 0)
    model = _model(family)
    if onednn and not gemm.onednn_linear(model):
        pytest.skip("this PyTorch has no oneDNN linear kernel")
    step = lean_decoder(model)
    assert step is not None, f"{family} should take the lean step"
    assert (step.layers[0].qkv is not None) is fused
    assert all(layer.linear is (gemm.linear if onednn else F.linear) for layer in step.layers)
    lean, forward = (
        _sample(model, lean=True, temperature=temperature),
        _sample(model, lean=False, temperature=temperature),
    )
    _same(lean, forward)
    assert len({t for row in lean.token_ids for t in row}) > 4, "a model that repeats one token makes this test weak"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_lean_steps_logprobs_are_those_of_a_full_forward_pass(family: str) -> None:
    model = _model(family)
    out = _sample(model, lean=True)
    for prompt, generated, logps in zip(PROMPTS, out.token_ids, out.logprobs, strict=True):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + generated])).logits[0].float()
        full = torch.log_softmax(logits, -1)
        expected = [full[len(prompt) - 1 + k, t].item() for k, t in enumerate(generated)]
        assert logps == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_a_kept_cache_goes_on_alike_through_either_step(family: str) -> None:
    """Shared prompts, then a second call from the first's cache with an observation
    appended to each row (the next turn): the same tokens either way."""
    model = _model(family)
    runs = []
    for lean in (True, False):
        first = _sample(model, lean=lean, keep_cache=True, share_prompts=True)
        assert first.prefix is not None
        nxt = [p + ids + [4, 19] for p, ids in zip(PROMPTS, first.token_ids, strict=True)]
        runs.append((first, _sample(model, lean=lean, prompts=nxt, prefix=first.prefix, max_new_tokens=8)))
    (lean_first, lean_next), (fwd_first, fwd_next) = runs
    _same(lean_first, fwd_first)
    _same(lean_next, fwd_next)


GROUPED = {  # rows as a batch lays them out: which prompt each opens with
    "a block per prompt": [0, 0, 0, 1, 1, 1],
    "a prompt in two blocks": [1, 1, 0, 0, 1, 1],
    "no blocks": [0, 1, 0, 1],
}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("layout", list(GROUPED))
def test_rows_sharing_prompts_sample_what_the_forward_samples(family: str, layout: str, monkeypatch) -> None:
    """Rows in blocks that open with one prompt (a GRPO batch) read each prompt's keys and
    values once per block: the same tokens and log-probs as the forward, rows that stop
    early included."""
    model = _model(family)
    prompts = [PROMPTS[0] + PROMPTS[2], PROMPTS[1]]  # of unequal length: the shorter is left-padded
    batch = [prompts[i] for i in GROUPED[layout]]
    calls: list[int] = []
    shared_attention = decode.LeanDecoder._shared_attention
    monkeypatch.setattr(
        decode.LeanDecoder, "_shared_attention", lambda self, *a: calls.append(1) or shared_attention(self, *a)
    )
    forward = _sample(model, lean=False, prompts=batch, share_prompts=True)
    stop = forward.token_ids[1][2]  # a token one row samples early on: it stops there, the others may go on
    runs = [_sample(model, lean=lean, prompts=batch, share_prompts=True, stop_ids=[stop]) for lean in (True, False)]
    _same(*runs)
    assert any(len(ids) < 16 for ids in runs[0].token_ids)
    assert bool(calls) is (layout != "no blocks")


KEPT = {  # the rows of the first call the next one goes on with
    "every row": [0, 1, 2, 3, 4, 5],
    "one group left": [3, 4, 5],
    "groups swapped": [3, 4, 5, 0, 1, 2],
    "a row gone": [0, 1, 3, 4, 5],
    "a new row": [0, 1, 2, 3, 4, None],
}


@pytest.mark.parametrize("family", ["qwen2", "llama"])
@pytest.mark.parametrize("kept", list(KEPT))
def test_a_kept_cache_reads_shared_prompts_once_per_block_in_later_calls(family: str, kept: str, monkeypatch) -> None:
    """A call from a kept cache (the next turn) reads the prompts its rows share once per
    block while the rows still come in blocks, after episodes end or move, and reads
    every row whole when they do not: the same tokens and log-probs as the forward."""
    model = _model(family)
    prompts = [PROMPTS[0] + PROMPTS[2], PROMPTS[1]]
    batch = [prompts[i] for i in (0, 0, 0, 1, 1, 1)]
    calls: list[int] = []
    shared_attention = decode.LeanDecoder._shared_attention
    monkeypatch.setattr(
        decode.LeanDecoder, "_shared_attention", lambda self, *a: calls.append(1) or shared_attention(self, *a)
    )
    rows = KEPT[kept]
    runs = []
    for lean in (True, False):
        first = _sample(model, lean=lean, prompts=batch, share_prompts=True, keep_cache=True, max_new_tokens=6)
        prefix = first.prefix.select(rows)
        nxt = [batch[r] + first.token_ids[r] + [4, 19] if r is not None else PROMPTS[2] for r in rows]
        calls.clear()
        runs.append(_sample(model, lean=lean, prompts=nxt, prefix=prefix, share_prompts=True, max_new_tokens=8))
        if lean:
            assert bool(calls) is (kept in ("every row", "one group left", "groups swapped"))
    _same(*runs, tolerance=1e-4)  # float rounding, over the longer sequences of a second call


def test_rows_that_stop_early_leave_the_others_unchanged() -> None:
    model = _model("qwen2")
    whole = _sample(model, lean=True, temperature=0.0)
    stop = whole.token_ids[0][3]
    stopped = sample(model, PROMPTS, stop_ids=[stop], pad_id=0, max_new_tokens=16, temperature=0.0, lean=True)
    forward = sample(model, PROMPTS, stop_ids=[stop], pad_id=0, max_new_tokens=16, temperature=0.0, lean=False)
    _same(stopped, forward)
    assert stopped.stopped[0] and len(stopped.token_ids[0]) <= 4


class _Lora(torch.nn.Linear):
    """A linear layer whose forward is not F.linear of its weight (an adapter's, say)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 1.5


def _with_lora(model: torch.nn.Module) -> torch.nn.Module:
    attn = model.model.layers[0].self_attn  # type: ignore[union-attr]
    lora = _Lora(attn.q_proj.in_features, attn.q_proj.out_features, bias=attn.q_proj.bias is not None)
    lora.load_state_dict(attn.q_proj.state_dict())
    attn.q_proj = lora
    return model


def _hooked(model: torch.nn.Module) -> torch.nn.Module:
    model.model.layers[1].mlp.register_forward_hook(lambda _m, _a, out: out * 0.5)  # type: ignore[union-attr]
    return model


def _gpt2() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=64)).eval()


def _sliding() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return MistralForCausalLM(MistralConfig(**COMMON, num_key_value_heads=2, sliding_window=8)).eval()


@pytest.mark.parametrize(
    "make",
    [
        lambda: _with_lora(_model("qwen2")),
        lambda: _hooked(_model("llama")),
        _gpt2,
        _sliding,
        lambda: _model("qwen2").train(),
    ],
    ids=["adapter-layer", "forward-hook", "gpt2", "sliding-window", "training-with-attention-dropout"],
)
def test_models_the_lean_step_cannot_run_exactly_sample_through_their_forward(make: Any) -> None:
    model = make()
    if isinstance(model, Qwen2ForCausalLM) and model.training:
        model.config.attention_dropout = 0.5
    assert lean_decoder(model) is None
    with torch.random.fork_rng():
        torch.manual_seed(1)  # the dropout case draws from the global generator
        lean = _sample(model, lean=True, max_new_tokens=6)
    with torch.random.fork_rng():
        torch.manual_seed(1)
        forward = _sample(model, lean=False, max_new_tokens=6)
    _same(lean, forward)


def test_hooks_on_modules_the_lean_step_calls_run_in_it_too() -> None:
    """Activation checkpointing hooks the input embeddings; a hook on an output
    projection or a norm changes the logits. The lean step calls those modules as the
    forward does, so it keeps them, and samples what the forward samples."""
    from agentenv.trainers.model import enable_gradient_checkpointing

    plain = _sample(_model("qwen2"), lean=False)
    model = _model("qwen2")
    enable_gradient_checkpointing(model)
    model.eval()
    attn = model.model.layers[0].self_attn  # type: ignore[union-attr]
    attn.o_proj.register_forward_hook(lambda _m, _a, out: out * 1.5)
    model.model.norm.register_forward_pre_hook(lambda _m, args: (args[0] * 0.8,))  # type: ignore[union-attr]
    assert model.model.embed_tokens._forward_hooks  # type: ignore[union-attr]
    assert lean_decoder(model) is not None
    lean, forward = _sample(model, lean=True), _sample(model, lean=False)
    _same(lean, forward)
    assert forward.logprobs != plain.logprobs  # the hooks count


def test_an_adapter_layer_changes_what_the_forward_samples() -> None:
    """The fallback matters: a lean step over the plain weights would sample otherwise."""
    plain, adapted = _sample(_model("qwen2"), lean=False), _sample(_with_lora(_model("qwen2")), lean=True)
    assert plain.token_ids != adapted.token_ids
