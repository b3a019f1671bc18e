"""`StaticDecoder`: the GPU sampler (static cache, graphs, stops on the device), checked on
the CPU without graphs against `generation.sample` through the model's forward: the same
tokens and log-probs for each model family, with stop ids, stop strings and per-row
limits, rows moved into a narrower cache as others finish, a LoRA model's merged
weights, and weights that change between calls. The CUDA twin runs where a GPU is."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from agentenv.trainers import static_decode
from agentenv.trainers.generation import sample
from agentenv.trainers.static_decode import StaticDecoder, static_decoder
from tests.trainers.test_decode import FAMILIES, PROMPTS, VOCAB, _model

TOLERANCE = 1e-4


def _both(model: torch.nn.Module, decoder: StaticDecoder, **kw: Any) -> tuple[Any, Any]:
    kw = {"prompts": PROMPTS, "stop_ids": [], "pad_id": 0, "max_new_tokens": 16, **kw}
    seed = kw.pop("seed", 7)
    prompts = kw.pop("prompts")
    forward = sample(model, prompts, generator=torch.Generator().manual_seed(seed), lean=False, **kw)
    static = decoder.sample(prompts, generator=torch.Generator().manual_seed(seed), **kw)
    return forward, static


def _same(a: Any, b: Any) -> None:
    assert a.token_ids == b.token_ids
    assert a.stopped == b.stopped
    for x, y in zip(a.logprobs, b.logprobs, strict=True):
        assert x == pytest.approx(y, rel=TOLERANCE, abs=TOLERANCE)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_it_samples_what_the_forward_samples(family: str, temperature: float) -> None:
    model = _model(family)
    decoder = static_decoder(model)
    assert decoder is not None and not decoder.graphs  # on the CPU: the same step, no graph
    _same(*_both(model, decoder, temperature=temperature))


def test_stop_ids_stop_strings_and_per_row_limits_end_rows_as_the_forward_does(monkeypatch) -> None:
    model = _model("qwen2")
    decoder = StaticDecoder(model, sync_every=3)  # several looks, stop strings found between them
    decode = lambda ids: "".join(chr(65 + t % 26) for t in ids)  # noqa: E731 - a toy detokeniser
    forward, static = _both(
        model, decoder, temperature=1.0, stop_ids=[3, 11], stop_strings=["Q", "XY"], decode=decode,
        max_new_tokens=[16, 5, 12, 9], seed=3,
    )  # fmt: skip
    _same(forward, static)
    assert any(forward.stopped) and not all(forward.stopped)


def test_finished_rows_are_dropped_and_the_rest_sample_on_unchanged(monkeypatch) -> None:
    model = _model("llama")
    decoder = StaticDecoder(model, sync_every=2)
    narrowed: list[int] = []
    narrow = decoder._narrow

    def spy(shape, keep):
        narrowed.append(len(keep))
        return narrow(shape, keep)

    monkeypatch.setattr(decoder, "_narrow", spy)
    prompts = [PROMPTS[i % 4] + [i + 1] for i in range(8)]
    limits = [2, 2, 2, 2, 2, 3, 16, 24]  # rows end at 2, 3 and 16 tokens: 8 rows, then 4, 2, 1
    _same(*_both(model, decoder, prompts=prompts, temperature=0.0, max_new_tokens=limits))
    assert narrowed == [4, 2, 1]


def test_a_lora_model_samples_with_its_adapters_merged() -> None:
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(_model("qwen3"), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    decoder = static_decoder(lora)
    assert decoder is not None
    _same(*_both(lora, decoder, temperature=1.0))


def test_weights_changed_between_calls_are_the_ones_sampled_from() -> None:
    model = _model("mistral")
    decoder = StaticDecoder(model)
    _same(*_both(model, decoder, temperature=0.0))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    _same(*_both(model, decoder, temperature=0.0))


def test_models_it_cannot_run_exactly_are_refused() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, MistralConfig, MistralForCausalLM

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2))
    windowed = MistralForCausalLM(
        MistralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, sliding_window=8)
    )  # fmt: skip
    assert static_decoder(gpt2) is None and static_decoder(windowed) is None


def test_cache_lengths_are_rounded_so_calls_share_one_shape() -> None:
    model = _model("qwen2")
    decoder = StaticDecoder(model)
    decoder.sample([[1, 2, 3]] * 2, stop_ids=[], pad_id=0, max_new_tokens=4, temperature=0.0)
    decoder.sample([[1, 2, 3, 4, 5, 6]] * 2, stop_ids=[], pad_id=0, max_new_tokens=9, temperature=0.0)
    assert list(decoder._shapes) == [(2, static_decode.LENGTH_STEP)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_captured_step_samples_what_the_eager_step_samples() -> None:
    model = _model("qwen2").cuda()
    graphed = StaticDecoder(model, sync_every=4)
    eager = StaticDecoder(model, sync_every=4)
    eager.graphs = False
    kw: dict[str, Any] = dict(stop_ids=[3], pad_id=0, max_new_tokens=[20, 5, 12, 30], temperature=0.0)
    a = graphed.sample(PROMPTS, **kw)
    b = eager.sample(PROMPTS, **kw)
    assert all(s.graph is not None for s in graphed._shapes.values())
    assert a.token_ids == b.token_ids and a.stopped == b.stopped
    for x, y in zip(a.logprobs, b.logprobs, strict=True):
        assert x == pytest.approx(y, abs=1e-3)
    again = copy.deepcopy(a)
    assert graphed.sample(PROMPTS, **kw).token_ids == again.token_ids  # the graph replays on a second call
