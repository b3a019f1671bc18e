"""`sample`: batched KV-cache sampling that returns the exact ids and their log-probs.

A tiny random Qwen2 stands in for a model. Its weights are drawn wider than the
default (initializer_range 0.3) so greedy decoding does not repeat one token
forever and the logits have a clear argmax.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import agentenv
from agentenv.trainers.generation import draw, sample
from agentenv.trainers.tokens import build_tiny_tokenizer

MAX_NEW = 12


@pytest.fixture(scope="module")
def tok() -> Any:
    trajs = agentenv.rollout("guess-number-v0", agentenv.spec("guess-number-v0").make_oracle(), n=20)
    return build_tiny_tokenizer([m["content"] for t in trajs for m in t.messages])


@pytest.fixture(scope="module")
def model(tok: Any) -> torch.nn.Module:
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
        initializer_range=0.3,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="module")
def prompts(tok: Any) -> list[list[int]]:
    """A long prompt and a short one (the short one is left-padded in a batch)."""
    long = tok("Find the secret integer. After each guess you are told", add_special_tokens=False)["input_ids"]
    short = tok("I am thinking of a number", add_special_tokens=False)["input_ids"]
    assert len(long) > len(short)
    return [list(long), list(short)]


def _greedy(model, prompts, tok, **kw):
    return sample(
        model,
        prompts,
        stop_ids=[tok.eos_token_id],
        pad_id=tok.pad_token_id,
        max_new_tokens=MAX_NEW,
        temperature=0,
        **kw,
    )


def _full_forward_logprobs(model, prompt, generated, temperature) -> list[float]:
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    if temperature not in (0, 1):
        logits = logits / temperature
    logp = torch.log_softmax(logits, -1)
    start = len(prompt) - 1  # the logits at position t predict token t + 1
    return [logp[start + k, t].item() for k, t in enumerate(generated)]


def test_greedy_is_the_same_alone_and_inside_a_left_padded_batch(model, tok, prompts) -> None:
    long, short = prompts
    alone = _greedy(model, [short], tok)
    batched = _greedy(model, [long, short], tok)
    assert batched.token_ids[1] == alone.token_ids[0]
    assert batched.logprobs[1] == pytest.approx(alone.logprobs[0], abs=1e-4)
    assert len(set(alone.token_ids[0])) > 1, "a model that repeats one token makes this test weak"


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_logprobs_equal_a_full_forward_pass_over_prompt_and_generation(model, tok, prompts, temperature) -> None:
    out = sample(
        model,
        prompts,
        stop_ids=[tok.eos_token_id],
        pad_id=tok.pad_token_id,
        max_new_tokens=MAX_NEW,
        temperature=temperature,
        generator=torch.Generator().manual_seed(1),
    )
    for prompt, generated, logps in zip(prompts, out.token_ids, out.logprobs, strict=True):
        assert len(logps) == len(generated) > 0
        expected = _full_forward_logprobs(model, prompt, generated, temperature)
        assert logps == pytest.approx(expected, abs=1e-4)


def test_rows_stop_at_a_stop_id_and_otherwise_run_to_max_new_tokens(model, tok, prompts) -> None:
    reference = _greedy(model, prompts, tok)
    assert reference.stopped == [False, False]
    assert [len(r) for r in reference.token_ids] == [MAX_NEW, MAX_NEW]
    row0, row1 = reference.token_ids
    # A token row 0 first produces a few steps in, and row 1 never produces.
    candidates = [t for k, t in enumerate(row0) if k >= 2 and row0.index(t) == k and t not in row1]
    assert candidates, "pick other prompts: no usable stop token"
    stop = candidates[0]
    at = row0.index(stop)

    out = sample(model, prompts, stop_ids=[stop], pad_id=tok.pad_token_id, max_new_tokens=MAX_NEW, temperature=0)
    assert out.token_ids[0] == row0[: at + 1]  # the stop token is kept
    assert out.stopped[0] is True
    assert len(out.logprobs[0]) == at + 1
    assert out.token_ids[1] == row1
    assert out.stopped[1] is False


def test_each_row_stops_at_its_own_max_new_tokens_and_is_fed_no_position_past_it(model, tok, prompts) -> None:
    """A row near the model's context limit stops at its own room while the others go on:
    a model with learned absolute positions has no position past its limit."""
    reference = _greedy(model, prompts, tok)
    positions: list[torch.Tensor] = []
    handle = model.register_forward_pre_hook(
        lambda _m, _a, kw: positions.append(kw["position_ids"].clone()), with_kwargs=True
    )
    try:
        out = sample(model, prompts, stop_ids=[], pad_id=tok.pad_token_id, max_new_tokens=[3, MAX_NEW], temperature=0)
    finally:
        handle.remove()
    assert out.token_ids == [reference.token_ids[0][:3], reference.token_ids[1]]
    assert out.stopped == [False, False] and [len(lp) for lp in out.logprobs] == [3, MAX_NEW]
    # Row 0's last token is fed (the cache keeps it while row 1 runs on), at the last
    # position its room has; row 1's is never fed (no row samples after it).
    assert max(int(p[0].max()) for p in positions) == len(prompts[0]) + 3 - 1
    assert max(int(p[1].max()) for p in positions) == len(prompts[1]) + MAX_NEW - 2


def test_a_seeded_generator_reproduces_the_samples(model, tok, prompts) -> None:
    def run(seed: int):
        return sample(
            model,
            prompts,
            stop_ids=[tok.eos_token_id],
            pad_id=tok.pad_token_id,
            max_new_tokens=MAX_NEW,
            temperature=1.0,
            generator=torch.Generator().manual_seed(seed),
        )

    first, again, other = run(7), run(7), run(8)
    assert first.token_ids == again.token_ids
    assert first.logprobs == again.logprobs
    assert first.token_ids != other.token_ids


def test_top_k_1_is_greedy(model, tok, prompts) -> None:
    greedy = _greedy(model, prompts, tok)
    top1 = sample(
        model,
        prompts,
        stop_ids=[tok.eos_token_id],
        pad_id=tok.pad_token_id,
        max_new_tokens=MAX_NEW,
        temperature=1.0,
        top_k=1,
        generator=torch.Generator().manual_seed(3),
    )
    assert top1.token_ids == greedy.token_ids


def test_a_tiny_top_p_keeps_only_the_most_likely_token(model, tok, prompts) -> None:
    greedy = _greedy(model, prompts, tok)
    nucleus = sample(
        model,
        prompts,
        stop_ids=[tok.eos_token_id],
        pad_id=tok.pad_token_id,
        max_new_tokens=MAX_NEW,
        temperature=1.0,
        top_p=1e-6,
        generator=torch.Generator().manual_seed(3),
    )
    assert nucleus.token_ids == greedy.token_ids


def test_logprobs_are_of_the_untruncated_distribution(model, tok, prompts) -> None:
    # top-k changes which tokens can be drawn, not the log-prob a drawn token is scored with.
    top1 = sample(
        model,
        prompts,
        stop_ids=[tok.eos_token_id],
        pad_id=tok.pad_token_id,
        max_new_tokens=MAX_NEW,
        temperature=1.0,
        top_k=1,
        generator=torch.Generator().manual_seed(3),
    )
    for prompt, generated, logps in zip(prompts, top1.token_ids, top1.logprobs, strict=True):
        expected = _full_forward_logprobs(model, prompt, generated, 1.0)
        assert logps == pytest.approx(expected, abs=1e-4)
        assert all(lp < 0 for lp in logps)  # not log(1) of the truncated distribution


def test_a_stop_string_ends_the_row_whatever_its_token_split(model, tok, prompts) -> None:
    free = sample(model, prompts, stop_ids=[], pad_id=tok.pad_token_id, max_new_tokens=12, temperature=0.0)
    text = tok.decode(free.token_ids[0][:5])  # what greedy decoding writes first, as a stop string
    stopped = sample(
        model,
        prompts,
        stop_ids=[],
        pad_id=tok.pad_token_id,
        max_new_tokens=12,
        temperature=0.0,
        stop_strings=[text[-3:]],
        decode=tok.decode,
    )
    assert stopped.stopped[0] and tok.decode(stopped.token_ids[0]).endswith(text[-3:])
    assert len(stopped.token_ids[0]) <= 5 and stopped.token_ids[0] == free.token_ids[0][: len(stopped.token_ids[0])]
    assert len(stopped.logprobs[0]) == len(stopped.token_ids[0])
    with pytest.raises(ValueError, match="needs decode"):
        sample(model, prompts, stop_ids=[], pad_id=0, max_new_tokens=2, stop_strings=["x"])


def test_a_stop_string_that_ends_inside_a_token_ends_the_row_at_that_token(model, tok, prompts) -> None:
    # Every token reads "ab": the stop string "ba" first appears across tokens 1 and 2,
    # ending inside token 2 ("</tool_call>" inside a token "</tool_call>\n" is the real case).
    stopped = sample(
        model,
        prompts,
        stop_ids=[],
        pad_id=tok.pad_token_id,
        max_new_tokens=12,
        temperature=0.0,
        stop_strings=["ba"],
        decode=lambda ids: "ab" * len(ids),
    )
    assert stopped.stopped == [True] * len(prompts)
    assert [len(ids) for ids in stopped.token_ids] == [2] * len(prompts)


@pytest.mark.parametrize("spelled", ["bytes", "special"])
def test_a_stop_string_is_found_whatever_each_of_its_tokens_decodes_to(model, tok, prompts, spelled) -> None:
    # A token can give less than a character: "答案" is six byte tokens to the tiny
    # tokenizer, and a special token the model slips inside "</tool_call>" decodes to
    # nothing. The stop string still ends the row, at the token that completes it.
    def ids(text: str) -> list[int]:
        return list(tok(text, add_special_tokens=False)["input_ids"])

    special = tok.convert_tokens_to_ids("<|im_start|>")
    stop, script = {
        "bytes": ("答案", ids("x 答案") + ids(" and more text after it")),
        "special": ("</tool_call>", ids("x </tool_") + [special] * 16 + ids("call>") + ids(" and more text after it")),
    }[spelled]
    upto = next(n for n in range(1, len(script) + 1) if stop in tok.decode(script[:n], skip_special_tokens=True))
    calls = iter(range(len(script) + 1))

    def force(_module: Any, _inputs: Any, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.clone()
        logits[:, -1, script[min(next(calls), len(script) - 1)]] += 1e4
        return logits

    handle = model.get_output_embeddings().register_forward_hook(force)
    try:
        out = sample(
            model,
            prompts[:1],
            stop_ids=[],
            pad_id=tok.pad_token_id,
            max_new_tokens=len(script),
            stop_strings=[stop],
            decode=lambda i: tok.decode(i, skip_special_tokens=True),
        )
    finally:
        handle.remove()
    assert out.stopped == [True] and out.token_ids[0] == script[:upto]


def test_decoding_writes_into_the_cache_in_place_and_samples_as_the_copying_cache(
    model, tok, prompts, monkeypatch
) -> None:
    """The cache `sample` starts grows into spare room: a decoded token is written into
    the buffer the cache already holds (no copy of the whole cache per token), and the
    tokens and log-probs are those of transformers' own cache, which copies."""
    from agentenv.trainers import generation

    def run() -> Any:
        return sample(
            model,
            prompts,
            stop_ids=[],
            pad_id=tok.pad_token_id,
            max_new_tokens=MAX_NEW,
            temperature=1.0,
            generator=torch.Generator().manual_seed(3),
            keep_cache=True,
        )

    storage: list[int] = []

    def record(_m: Any, _a: Any, out: Any) -> None:
        keys = getattr(out, generation.cache_argument(model)).layers[0].keys
        storage.append(keys.untyped_storage().data_ptr())

    handle = model.register_forward_hook(record)
    try:
        grown = run()
    finally:
        handle.remove()
    # The prefill, then every token fed but the last (no row samples after it): one buffer.
    assert len(storage) == MAX_NEW and len(set(storage)) == 1
    assert grown.prefix is not None and grown.prefix.cache.layers[0].keys.shape[-2] == grown.prefix.attention.shape[1]

    monkeypatch.setattr(generation, "_growable_cache", lambda _model: None)
    copied = run()
    assert grown.token_ids == copied.token_ids
    for row, want in zip(grown.logprobs, copied.logprobs, strict=True):
        assert row == pytest.approx(want, abs=1e-5)


def test_draw_follows_the_probabilities_and_never_draws_a_zero_entry() -> None:
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3, 0.0]]).repeat(20000, 1) * 3.0  # unnormalised is fine
    counts = torch.bincount(draw(probs, torch.Generator().manual_seed(0)), minlength=5).double() / 20000
    assert counts[1] == counts[4] == 0
    # three standard errors of a share estimated from 20000 draws
    assert torch.allclose(counts, torch.tensor([0.1, 0.0, 0.6, 0.3, 0.0], dtype=torch.double), atol=0.011)


def test_draw_at_the_ends_of_the_uniform_range_lands_on_entries_above_zero(monkeypatch) -> None:
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0, 0.0]] * 2)
    ends = torch.tensor([[0.0], [1.0]])  # 0, and a uniform that rounds up to the total
    monkeypatch.setattr(torch, "rand", lambda *a, **k: ends.clone())
    assert draw(probs).tolist() == [1, 3]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_draw_refuses_probabilities_that_are_not_finite(bad) -> None:
    probs = torch.tensor([[0.5, 0.5], [bad, 0.5]])
    with pytest.raises(ValueError, match="NaN or inf"):
        draw(probs)
    with pytest.raises(ValueError, match="all zero"):
        draw(torch.zeros(1, 3))
