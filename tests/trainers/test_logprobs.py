"""`policy_logprobs`: chunked log-probs of the policy tokens, against a plain forward pass."""

from __future__ import annotations

import copy
import dataclasses
import gc
import math
from typing import Any

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import agentenv
from agentenv.trainers.batch import Example, TrainBatch, build_examples, collate
from agentenv.trainers.logprobs import holds_logits, opening_pass, policy_logprobs
from agentenv.trainers.model import enable_gradient_checkpointing, lean_attention, lean_norm_activations
from agentenv.trainers.policy import TransformersPolicy
from agentenv.trainers.tokens import build_tiny_tokenizer
from tests.trainers.toy import same_gradient

VOCAB = 96


def _tiny(
    vocab_size: int, seed: int = 0, heads: int = 2, kv_heads: int = 1, intermediate: int = 64
) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=intermediate,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        tie_word_embeddings=True,
        initializer_range=0.3,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(config)


@pytest.fixture(scope="module")
def model() -> Qwen2ForCausalLM:
    return _tiny(VOCAB)


@pytest.fixture(scope="module")
def batch() -> TrainBatch:
    """Two right-padded sequences; the mask marks a few spans as policy tokens."""
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in (14, 9)]
    masks = [[0] * 4 + [1] * 3 + [0] * 2 + [1] * 5, [0] * 3 + [1] * 2 + [0] * 2 + [1] * 2]
    examples = [Example(i, m, [0.0] * len(i), [1.0] * len(i), [], False) for i, m in zip(ids, masks, strict=True)]
    return collate(examples, pad_id=0)


def _reference(
    model: torch.nn.Module, batch: TrainBatch, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(target) and entropy from the full logits, over every position."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float() / temperature
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, batch.targets[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@pytest.mark.parametrize("chunk_tokens", [1, 3, 10_000])
def test_logprobs_equal_log_softmax_of_the_logits_on_the_mask_and_zero_elsewhere(model, batch, chunk_tokens) -> None:
    with torch.no_grad():
        logp, entropy = policy_logprobs(model, batch, chunk_tokens=chunk_tokens)
        ref_logp, ref_entropy = _reference(model, batch)
    mask = batch.mask.bool()
    assert logp.shape == batch.mask.shape
    torch.testing.assert_close(logp[mask], ref_logp[mask], atol=1e-5, rtol=1e-5)
    assert torch.all(logp[~mask] == 0)
    assert entropy.shape == (int(mask.sum()),)
    torch.testing.assert_close(entropy, ref_entropy[mask], atol=1e-5, rtol=1e-5)


def test_entropy_is_non_negative_and_at_most_log_vocab(model, batch) -> None:
    with torch.no_grad():
        _, entropy = policy_logprobs(model, batch, chunk_tokens=3)
    assert torch.all(entropy >= 0)
    assert torch.all(entropy <= math.log(VOCAB) + 1e-4)


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_temperature_scales_the_logits(model, batch, temperature) -> None:
    with torch.no_grad():
        logp, _ = policy_logprobs(model, batch, temperature=temperature, chunk_tokens=4)
        ref, _ = _reference(model, batch, temperature)
    mask = batch.mask.bool()
    torch.testing.assert_close(logp[mask], ref[mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mlp", [64, 128], ids=["logits-recomputed", "logits-held"])
@pytest.mark.parametrize("chunk_tokens", [1, 3, 10_000])
def test_gradients_equal_those_of_the_plain_forward_pass(batch, chunk_tokens, mlp) -> None:
    chunked, plain = _tiny(VOCAB, seed=1, intermediate=mlp), _tiny(VOCAB, seed=1, intermediate=mlp)
    assert holds_logits(chunked) == (mlp >= VOCAB)
    logp, entropy = policy_logprobs(chunked, batch, chunk_tokens=chunk_tokens)
    (logp * batch.advantages).sum().backward()
    assert not entropy.requires_grad  # a diagnostic, not part of the loss
    ref, _ = _reference(plain, batch)
    (ref * batch.mask * batch.advantages).sum().backward()
    for (name, a), (_, b) in zip(chunked.named_parameters(), plain.named_parameters(), strict=True):
        assert a.grad is not None, name
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4, msg=name)
    assert chunked.model.embed_tokens.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("mlp", [64, 128], ids=["vocabulary-wider-than-the-mlp", "vocabulary-no-wider"])
def test_a_chunks_logits_are_projected_again_in_the_backward_pass_only_for_a_wide_vocabulary(batch, mlp) -> None:
    """A real LLM's vocabulary (wider than its MLP) is projected again in the backward
    pass, so its logits are never held; a small model's are held instead."""
    model = _tiny(VOCAB, intermediate=mlp)
    calls: list[int] = []
    model.get_output_embeddings().register_forward_hook(lambda _m, _i, out: calls.append(out.shape[0]))
    logp, _ = policy_logprobs(model, batch, chunk_tokens=3)
    chunks = len(calls)
    (logp * batch.mask).sum().backward()
    assert chunks == math.ceil(int(batch.mask.sum()) / 3)
    assert len(calls) == (2 * chunks if mlp < VOCAB else chunks)


def test_an_all_zero_mask_gives_zero_logprobs_and_no_entropies(model, batch) -> None:
    empty = TrainBatch(
        batch.input_ids,
        batch.attention_mask,
        batch.targets,
        torch.zeros_like(batch.mask),
        batch.old_logp,
        batch.advantages,
        batch.lag,
    )
    with torch.no_grad():
        logp, entropy = policy_logprobs(model, empty)
    assert torch.all(logp == 0) and entropy.numel() == 0


# --- the sampler and the trainer agree ---------------------------------------------------------


@pytest.fixture(scope="module")
def tok() -> Any:
    trajs = agentenv.rollout("guess-number-v0", agentenv.spec("guess-number-v0").make_oracle(), n=20)
    return build_tiny_tokenizer([m["content"] for t in trajs for m in t.messages])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recomputed_logprobs_equal_the_sampling_logprobs_of_a_rollout(tok, temperature) -> None:
    # On-policy, the importance ratio exp(logp - old_logp) must be 1 on every policy token.
    model = _tiny(len(tok), seed=2)
    policy = TransformersPolicy(model, tok, max_new_tokens=6, temperature=temperature, seed=0)
    trajs = agentenv.rollout("guess-number-v0", policy, n=2, env_kwargs={"tool_prompt": "compact", "max_turns": 3})
    examples = build_examples(trajs, [[1.0] * t.turns for t in trajs], max_seq_len=4096)
    batch = collate(examples, pad_id=policy.pad_id)
    model.eval()
    with torch.no_grad():
        logp, _ = policy_logprobs(model, batch, temperature=temperature, chunk_tokens=7)
    mask = batch.mask.bool()
    assert int(mask.sum()) == sum(len(g.token_ids) for t in trajs for g in t.generations)
    torch.testing.assert_close(logp[mask], batch.old_logp[mask], atol=1e-4, rtol=1e-4)


def _family(name: str) -> torch.nn.Module:
    """A tiny model of a family whose logits are more than ``hidden @ weight``."""
    from transformers import CohereConfig, CohereForCausalLM, Gemma2Config, Gemma2ForCausalLM

    small = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        initializer_range=0.3,
    )
    torch.manual_seed(0)
    if name == "a biased output head":
        model = _tiny(VOCAB)
        model.config.tie_word_embeddings = False
        model.lm_head = torch.nn.Linear(32, VOCAB, bias=True)
        torch.nn.init.normal_(model.lm_head.bias, std=2.0)
        return model
    if name == "logit soft-capping (Gemma 2)":
        return Gemma2ForCausalLM(Gemma2Config(**small, final_logit_softcapping=0.5))
    return CohereForCausalLM(CohereConfig(**small, logit_scale=3.0))  # "logit scale (Cohere)"


@pytest.mark.parametrize("family", ["a biased output head", "logit soft-capping (Gemma 2)", "logit scale (Cohere)"])
def test_logprobs_are_those_of_the_logits_the_model_samples_from(batch, family) -> None:
    model = _family(family).eval()
    with torch.no_grad():
        logp, _ = policy_logprobs(model, batch, chunk_tokens=4)
        ref, _ = _reference(model, batch)
    mask = batch.mask.bool()
    torch.testing.assert_close(logp[mask], ref[mask], atol=1e-5, rtol=1e-5)


# --- rows that share a prompt run it once ---------------------------------------------------


def _grouped_batch() -> TrainBatch:
    """Two groups of three multi-turn rows: each group opens with one prompt (of 7 and of 4
    tokens), then the rows differ; masks mark two turns of policy tokens per row."""
    g = torch.Generator().manual_seed(1)
    examples = []
    for prompt_len in (7, 4):
        prompt = torch.randint(1, VOCAB, (prompt_len,), generator=g).tolist()
        for turn_a, obs, turn_b in ((3, 2, 4), (5, 3, 1), (2, 2, 6)):
            rest = torch.randint(1, VOCAB, (turn_a + obs + turn_b,), generator=g).tolist()
            mask = [0] * prompt_len + [1] * turn_a + [0] * obs + [1] * turn_b
            ids = prompt + rest
            examples.append(Example(ids, mask, [0.0] * len(ids), [1.0] * len(ids), [], False))
    return collate(examples, pad_id=0)


def _grouped_query_model() -> Qwen2ForCausalLM:
    """Four query heads on two key/value heads, attention held lean as the trainer has it."""
    model = _tiny(VOCAB, heads=4, kv_heads=2)
    assert lean_attention(model) == 1
    return model


@pytest.mark.parametrize("attention", ["multi-query", "grouped-query, lean"])
def test_rows_sharing_a_prompt_get_the_log_probs_and_gradients_of_a_full_pass(model, attention) -> None:
    if attention != "multi-query":
        model = _grouped_query_model()
    batch = _grouped_batch()
    results = {}
    for share in (True, False):
        model.zero_grad()
        logp, entropy = policy_logprobs(model, batch, chunk_tokens=5, share_prompts=share)
        (logp * batch.mask).sum().backward()
        results[share] = logp.detach(), entropy, [p.grad.clone() for p in model.parameters()]
    (shared, shared_entropy, shared_grads), (full, full_entropy, full_grads) = results[True], results[False]
    assert torch.allclose(shared, full, atol=1e-5)
    assert torch.allclose(shared_entropy, full_entropy, atol=1e-5)
    assert torch.allclose(full, _reference(model, batch)[0] * batch.mask, atol=1e-5)
    for a, b in zip(shared_grads, full_grads, strict=True):
        assert same_gradient(a, b)


def _unscored_tail(batch: TrainBatch) -> int:
    """How many of the rows' tokens come after their last scored position (each scores
    nothing: a shared pass need not run them)."""
    mask = batch.mask.bool()
    ends = mask.shape[1] - mask.flip(-1).int().argmax(-1)
    return int((batch.attention_mask.sum(-1) - ends).sum())


def test_a_shared_prompt_runs_once(model) -> None:
    batch = _grouped_batch()
    fed, handle = _fed_tokens(model)
    try:
        with torch.no_grad():
            policy_logprobs(model, batch, share_prompts=True)
            shared = sum(fed)
            fed.clear()
            policy_logprobs(model, batch, share_prompts=False)
    finally:
        handle.remove()
    assert sum(fed) == int(batch.attention_mask.sum())
    # Each group's prompt once instead of three times, and no row's unscored last tokens.
    assert shared == sum(fed) - 2 * 7 - 2 * 4 - _unscored_tail(batch)


@pytest.mark.parametrize("attention", ["multi-query", "grouped-query, lean"])
def test_with_activation_checkpointing_a_shared_prompt_still_runs_once_with_the_same_gradients(attention) -> None:
    plain = _tiny(VOCAB) if attention == "multi-query" else _grouped_query_model()
    checkpointed = copy.deepcopy(plain)
    enable_gradient_checkpointing(checkpointed)
    batch = _grouped_batch()
    fed, handle = _fed_tokens(checkpointed)
    results = [_trained_pass(model, batch, share=model is checkpointed) for model in (plain, checkpointed)]
    handle.remove()
    assert sum(fed) == int(batch.attention_mask.sum()) - 2 * 7 - 2 * 4 - _unscored_tail(batch)  # each prompt once
    (full, full_entropy, full_grads), (shared, shared_entropy, shared_grads) = results
    assert torch.allclose(shared, full, atol=1e-5)
    assert torch.allclose(shared_entropy, full_entropy, atol=1e-5)
    for a, b in zip(shared_grads, full_grads, strict=True):
        assert same_gradient(a, b)
    decoder = checkpointed.get_decoder()
    assert all(m.gradient_checkpointing for m in decoder.layers)  # restored after the prompt pass
    assert not any("_can_checkpoint_with_cache" in vars(m) for m in decoder.modules())


OPENING = 20  # a system prompt every task opens with, past generation.COMMON_MIN_TOKENS


def _opening_batch(group: int = 2) -> TrainBatch:
    """Three distinct prompts that open with the same ``OPENING`` ids and go on
    differently (1, 3 and 6 ids of their own), ``group`` rows each, two policy turns
    per row around an observation."""
    g = torch.Generator().manual_seed(2)
    opening = torch.randint(1, VOCAB, (OPENING,), generator=g).tolist()
    examples = []
    for tail in (1, 3, 6):
        prompt = opening + torch.randint(1, VOCAB, (tail,), generator=g).tolist()
        for k in range(group):
            turn_a, obs, turn_b = 2 + k, 2, 3 + tail % 4
            rest = torch.randint(1, VOCAB, (turn_a + obs + turn_b,), generator=g).tolist()
            mask = [0] * len(prompt) + [1] * turn_a + [0] * obs + [1] * turn_b
            ids = prompt + rest
            examples.append(Example(ids, mask, [0.0] * len(ids), [1.0] * len(ids), [], False))
    return collate(examples, pad_id=0)


def _trained_pass(model: torch.nn.Module, batch: TrainBatch, share: bool) -> tuple[Any, ...]:
    """In training mode: the log-probs (detached), the entropies and each parameter's
    gradient after a backward pass of the masked log-probs' sum."""
    model.train()
    logp, entropy = policy_logprobs(model, batch, chunk_tokens=5, share_prompts=share)
    (logp * batch.mask).sum().backward()
    return logp.detach(), entropy, [p.grad for p in model.parameters()]


def _fed_tokens(model: torch.nn.Module) -> tuple[list[int], Any]:
    """The real (unmasked) tokens each decoder pass is fed, and the hook's handle. A pass
    given a prefix-then-causal mask (4-D: its rows' own padding is not in it) counts its
    ids that are not padding: these batches' ids are never 0, the padding id."""
    fed: list[int] = []

    def count(_m: Any, _a: Any, kw: dict[str, Any]) -> None:
        mask, ids = kw["attention_mask"], kw["input_ids"]
        fed.append(int(mask[:, -ids.shape[1] :].sum()) if mask.dim() == 2 else int((ids != 0).sum()))

    handle = model.get_decoder().register_forward_pre_hook(count, with_kwargs=True)
    return fed, handle


@pytest.mark.parametrize("group", [2, 1], ids=["groups", "no-two-rows-alike"])
@pytest.mark.parametrize("attention", ["multi-query", "grouped-query, lean", "checkpointed"])
def test_an_opening_all_prompts_share_runs_once_with_the_log_probs_and_gradients_of_a_full_pass(
    attention, group
) -> None:
    """A system prompt every task opens with runs once for the batch, then each
    distinct prompt's own ids, then each row's rest: a full pass's numbers, fewer tokens."""
    plain = _tiny(VOCAB) if attention == "multi-query" else _grouped_query_model()
    shared = copy.deepcopy(plain)
    if attention == "checkpointed":
        enable_gradient_checkpointing(shared)
    batch = _opening_batch(group)
    fed, handle = _fed_tokens(shared)
    results = [_trained_pass(model, batch, share=model is shared) for model in (plain, shared)]
    handle.remove()
    # The opening once, each prompt's own ids once, then every row's rest.
    assert fed[0] == OPENING
    own_prompts = (group - 1) * (1 + 3 + 6)
    assert sum(fed) == int(batch.attention_mask.sum()) - (3 * group - 1) * OPENING - own_prompts - _unscored_tail(batch)
    (full, full_entropy, full_grads), (mine, mine_entropy, mine_grads) = results
    assert torch.allclose(full, _reference(plain, batch)[0] * batch.mask, atol=1e-5)
    assert torch.allclose(mine, full, atol=1e-5)
    assert torch.allclose(mine_entropy, full_entropy, atol=1e-5)
    for a, b in zip(mine_grads, full_grads, strict=True):
        assert same_gradient(a, b)


@pytest.mark.parametrize("attention", ["multi-query", "grouped-query, lean", "checkpointed"])
def test_a_step_opening_runs_once_for_all_micro_batches_with_the_gradients_of_full_passes(attention) -> None:
    """An optimiser step over micro-batches whose prompts share a system prompt runs it
    once (`opening_pass`), and its gradient reaches the weights through
    `Opening.backward` after the micro-batches' own: the gradients of full passes."""
    plain = _tiny(VOCAB) if attention == "multi-query" else _grouped_query_model()
    shared = copy.deepcopy(plain)
    if attention == "checkpointed":
        enable_gradient_checkpointing(shared)
    whole = _opening_batch()
    micro = [
        dataclasses.replace(whole, **{f.name: getattr(whole, f.name)[rows] for f in dataclasses.fields(whole)})
        for rows in (torch.tensor([0, 2, 4]), torch.tensor([1, 3, 5]))  # each holds all three prompts
    ]
    for model in (plain, shared):
        model.train()
    fed, handle = _fed_tokens(shared)
    opening = opening_pass(shared, micro)
    assert opening is not None and len(opening.ids) == OPENING
    mine, full = [], []
    for batch in micro:
        logp, _ = policy_logprobs(shared, batch, chunk_tokens=5, opening=opening)
        (logp * batch.mask).sum().backward()
        mine.append(logp.detach())
        logp, _ = policy_logprobs(plain, batch, chunk_tokens=5, share_prompts=False)
        (logp * batch.mask).sum().backward()
        full.append(logp.detach())
    opening.backward()
    handle.remove()
    assert fed.count(OPENING) == 1 and fed[0] == OPENING  # once, for both micro-batches
    for a, b in zip(mine, full, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    for a, b in zip(shared.parameters(), plain.parameters(), strict=True):
        assert same_gradient(a.grad, b.grad)
    assert not opening.outputs  # the opening's graph is let go


def test_without_a_shared_opening_there_is_no_step_opening(model) -> None:
    whole = _opening_batch()
    other = collate([Example([5, 6, 7, 8], [0, 0, 1, 0], [0.0] * 4, [1.0] * 4, [], False)], pad_id=0)
    assert opening_pass(model, [whole, other]) is None


@pytest.mark.parametrize("shape", ["closing observations", "one policy token each"])
def test_a_shared_pass_runs_no_token_after_a_rows_last_scored_one(model, shape) -> None:
    """Tokens after a row's last scored position (a closing observation, the last token)
    are not run, and the log-probs and gradients are a full pass's; where every row
    scores only the token after its prompt, no pass runs past the prompts."""
    g = torch.Generator().manual_seed(4)
    examples = []
    for prompt_len in (6, 9):
        prompt = torch.randint(1, VOCAB, (prompt_len,), generator=g).tolist()
        for k in range(3):
            turns = [(1, 0, 0)] if shape == "one policy token each" else [(2 + k, 2, 1 + k), (0, 3 * k, 0)]
            mask, rest = [0] * prompt_len, []
            for policy, obs, more in turns:
                mask += [1] * policy + [0] * obs + [1] * more
                rest += torch.randint(1, VOCAB, (policy + obs + more,), generator=g).tolist()
            examples.append(Example(prompt + rest, mask, [0.0] * len(mask), [1.0] * len(mask), [], False))
    batch = collate(examples, pad_id=0)
    plain = copy.deepcopy(model)  # the module's model, no gradient of another test's in it
    plain.zero_grad(set_to_none=True)
    shared = copy.deepcopy(plain)
    fed, handle = _fed_tokens(shared)
    (full, _, full_grads), (mine, _, mine_grads) = (_trained_pass(m, batch, share=m is shared) for m in (plain, shared))
    handle.remove()
    tail = _unscored_tail(batch)
    assert tail >= 6  # each row's last token, and the closing observations
    assert sum(fed) == int(batch.attention_mask.sum()) - 2 * (6 + 9) - tail  # each prompt once; no tail
    if shape == "one policy token each":
        assert len(fed) == 1  # the prompts' pass alone
    assert torch.allclose(mine, full, atol=1e-5)
    for a, b in zip(mine_grads, full_grads, strict=True):
        assert same_gradient(a, b)


def _graph_tensors() -> set[int]:
    """The ids of every live tensor that carries an autograd graph (by type(): isinstance
    reads __class__, which some module objects warn on)."""
    gc.collect()
    return {id(o) for o in gc.get_objects() if issubclass(type(o), torch.Tensor) and o.grad_fn is not None}


@pytest.mark.parametrize("lean", [False, True], ids=["transformers-norms", "lean-norms"])
def test_a_training_pass_leaves_no_graph_alive_after_its_backward(lean) -> None:
    """Of the opening's pass only the keys and values are read: its last layer's
    attention, MLP and final norm never see a backward pass. Their graph must still be
    freed with the rest, or every training step keeps its own and memory grows for
    good."""
    model = _grouped_query_model()
    if lean:
        lean_norm_activations(model)
    batch = _opening_batch()
    before = _graph_tensors()
    for _ in range(2):
        _trained_pass(model, batch, share=True)
    assert _graph_tensors() - before == set()


def test_an_opening_shorter_than_the_minimum_is_run_with_each_prompt(model) -> None:
    """Prompts that share only a few opening ids run whole, once each: a separate pass
    for a handful of tokens costs more than it saves."""
    from agentenv.trainers.generation import COMMON_MIN_TOKENS

    batch = _grouped_batch()  # two prompts (7 and 4 ids) sharing nothing
    ids = batch.input_ids.clone()
    ids[:, :1] = 5  # now both open with one id in common
    batch = TrainBatch(**{**batch.__dict__, "input_ids": ids})
    fed, handle = _fed_tokens(model)
    with torch.no_grad():
        shared, _ = policy_logprobs(model, batch, share_prompts=True)
        full, _ = policy_logprobs(model, batch, share_prompts=False)
    handle.remove()
    assert COMMON_MIN_TOKENS > 1
    assert fed[0] == 7 + 4  # both prompts in one pass, the shared id in each
    assert torch.allclose(shared, full, atol=1e-5)


def test_with_checkpointing_a_cache_of_another_shape_falls_back_to_the_full_pass(monkeypatch) -> None:
    import agentenv.trainers.logprobs as logprobs

    plain = _tiny(VOCAB)
    checkpointed = copy.deepcopy(plain)
    enable_gradient_checkpointing(checkpointed)
    monkeypatch.setattr(logprobs, "_kv_layers", lambda cache: None)  # as a cache transformers may change
    batch = _grouped_batch()
    results = []
    for model in (plain, checkpointed):
        model.train()
        logp, _ = policy_logprobs(model, batch, share_prompts=model is checkpointed)
        (logp * batch.mask).sum().backward()
        results.append((logp.detach(), [p.grad for p in model.parameters()]))
    (full, full_grads), (shared, shared_grads) = results
    assert torch.allclose(shared, full, atol=1e-5)
    for a, b in zip(shared_grads, full_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_prompt_lengths_share_a_prompt_shorter_than_the_first_policy_token(model) -> None:
    """Rows that differ before their first policy token (RLPR's reasoning) still share
    what they open with, when told where it ends; the log-probs stay those of a full pass."""
    batch = _grouped_batch()
    late = batch.mask.clone()
    late[:, :10] = 0  # the first policy token moves past the rows' differences
    batch = TrainBatch(**{**batch.__dict__, "mask": late})
    lengths = [7] * 3 + [4] * 3
    with torch.no_grad():
        shared, _ = policy_logprobs(model, batch, prompt_lengths=lengths)
        full, _ = policy_logprobs(model, batch, share_prompts=False)
    assert torch.allclose(shared, full, atol=1e-5)
    assert torch.allclose(full, _reference(model, batch)[0] * late, atol=1e-5)
    with pytest.raises(ValueError, match="prompt_lengths must give each row a length from 1"):
        policy_logprobs(model, batch, prompt_lengths=[12] * 6)


def test_a_model_with_learned_positions_shares_prompts_of_unequal_length_up_to_its_limit() -> None:
    """GPT-2 has no position past n_positions. A long prompt with a short reply beside a
    short prompt with a long reply: every row fits, but the long prompt's padding would
    run past the limit if it took positions beyond its row's end."""
    from transformers import GPT2Config, GPT2LMHeadModel

    with torch.random.fork_rng():
        torch.manual_seed(0)
        gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=1, n_head=2)).eval()
    g = torch.Generator().manual_seed(1)
    examples = []
    for prompt_len, reply_len in ((20, 3), (2, 25)):  # rows of 23 and 27 tokens, both within 32
        prompt = torch.randint(1, VOCAB, (prompt_len,), generator=g).tolist()
        for _ in range(2):
            ids = prompt + torch.randint(1, VOCAB, (reply_len,), generator=g).tolist()
            examples.append(
                Example(ids, [0] * prompt_len + [1] * reply_len, [0.0] * len(ids), [1.0] * len(ids), [], False)
            )
    batch = collate(examples, pad_id=0)
    with torch.no_grad():
        shared, _ = policy_logprobs(gpt2, batch, share_prompts=True)
        full, _ = policy_logprobs(gpt2, batch, share_prompts=False)
    assert torch.allclose(shared, full, atol=1e-5)
    assert torch.allclose(full, _reference(gpt2, batch)[0] * batch.mask, atol=1e-5)
