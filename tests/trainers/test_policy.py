"""`TransformersPolicy` driven by the rollout engine, with a tiny random Qwen2.

A random model never writes a valid tool call, and with ``max_new_tokens=8`` it
almost never reaches its end-of-turn token: these are the episodes a policy must
survive without hanging, and whose tokens must still add up exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import agentenv
from agentenv import Conversation, Failure, Generation
from agentenv.trainers.model import build_tiny, resolve_device
from agentenv.trainers.policy import TransformersPolicy
from agentenv.trainers.tokens import ChatDelta, build_tiny_tokenizer
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer

ENV = "guess-number-v0"
ENV_KWARGS = {"tool_prompt": "compact"}
MAX_TURNS = 12  # GuessNumberEnv.max_turns


@pytest.fixture(scope="module")
def tok() -> Any:
    trajs = agentenv.rollout(ENV, agentenv.spec(ENV).make_oracle(), n=20)
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
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Qwen2ForCausalLM(config)


@pytest.fixture
def model_must_not_run(model: torch.nn.Module) -> Iterator[None]:
    def refuse(*_: Any) -> None:
        raise AssertionError("the policy called the model")

    handle = model.register_forward_pre_hook(refuse)
    yield
    handle.remove()


@pytest.fixture
def always_end_turn(model: torch.nn.Module, tok: Any) -> Iterator[None]:
    """Make the end-of-turn token by far the most likely next token, at every step."""
    eot = tok.convert_tokens_to_ids(tok.eos_token)

    def boost(_module: Any, _inputs: Any, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.clone()
        logits[..., eot] += 100.0
        return logits

    handle = model.get_output_embeddings().register_forward_hook(boost)
    yield
    handle.remove()


def _concatenated(traj: agentenv.Trajectory) -> list[int]:
    return [i for g in traj.generations if g is not None for i in (g.prompt_ids or []) + g.token_ids]


def _run(policy: TransformersPolicy, n: int = 4, seed: int = 0) -> list[agentenv.Trajectory]:
    return agentenv.rollout(ENV, policy, n=n, seed=seed, env_kwargs=ENV_KWARGS)


def test_cut_turns_are_length_and_episodes_end_within_max_turns(model, tok) -> None:
    policy = TransformersPolicy(model, tok, max_new_tokens=8, seed=0)
    trajs = _run(policy)
    eot = policy.delta.end_of_turn_id
    reasons = []
    for traj in trajs:
        assert traj.failure in (Failure.FORMAT, Failure.TRUNCATED)
        assert 1 <= traj.turns <= MAX_TURNS
        assert len(traj.generations) == traj.turns
        for gen in traj.generations:
            assert isinstance(gen, Generation)
            assert len(gen.logprobs) == len(gen.token_ids) <= 8
            ended = bool(gen.token_ids) and gen.token_ids[-1] == eot
            assert gen.finish_reason == ("stop" if ended else "length")
            reasons.append(gen.finish_reason)
    assert "length" in reasons


def test_generations_concatenate_to_the_policys_ids_for_the_episode(model, tok) -> None:
    policy = TransformersPolicy(model, tok, max_new_tokens=8, seed=0)
    trajs = _run(policy)
    for i, traj in enumerate(trajs):
        assert _concatenated(traj) == policy._episodes[i].ids
    # The sequence starts with the rendered prompt: system prompt and task.
    prompt = policy.delta.prompt_ids(trajs[0].messages[:2])
    assert policy._episodes[0].ids[: len(prompt)] == prompt


def test_reset_forgets_episodes_and_a_new_rollout_starts_fresh(model, tok) -> None:
    policy = TransformersPolicy(model, tok, max_new_tokens=8, seed=0)
    _run(policy, n=2, seed=0)
    policy.reset()
    assert policy._episodes == {}
    trajs = _run(policy, n=2, seed=100)  # the engine reuses conversation ids 0 and 1
    for i, traj in enumerate(trajs):
        assert _concatenated(traj) == policy._episodes[i].ids


def test_the_same_seed_gives_the_same_episodes(model, tok) -> None:
    first = _run(TransformersPolicy(model, tok, max_new_tokens=8, seed=5), n=2)
    again = _run(TransformersPolicy(model, tok, max_new_tokens=8, seed=5), n=2)
    assert [_concatenated(t) for t in first] == [_concatenated(t) for t in again]


def test_a_turn_that_ends_with_end_of_turn_is_stop_and_its_action_excludes_it(model, tok, always_end_turn) -> None:
    policy = TransformersPolicy(model, tok, max_new_tokens=8, temperature=0)
    trajs = _run(policy, n=2)
    eot = policy.delta.end_of_turn_id
    for i, traj in enumerate(trajs):
        for gen in traj.generations:
            assert gen.token_ids == [eot]
            assert gen.finish_reason == "stop"
            assert gen.action == ""
        assert traj.failure is Failure.FORMAT  # an empty action is not a tool call
        assert _concatenated(traj) == policy._episodes[i].ids
        # After a stopped turn, no second end-of-turn token is inserted.
        for gen in traj.generations[1:]:
            assert gen.prompt_ids[0] != eot


def test_a_prompt_longer_than_the_context_gets_refused_turns_without_the_model(model, tok, model_must_not_run) -> None:
    policy = TransformersPolicy(model, tok, max_new_tokens=8, max_context_tokens=16, seed=0)
    with pytest.warns(UserWarning, match="max_context_tokens=16"):
        trajs = _run(policy, n=2)
    for i, traj in enumerate(trajs):
        assert traj.turns >= 1
        assert traj.failure is Failure.FORMAT
        assert traj.generations == [None] * traj.turns  # no Generation: nothing was sampled
        assert all(t.error_kind == "format" and "no room left" in (t.error or "") for t in traj.transitions)
        assert policy._episodes[i].ids == []  # a prompt that leaves no room is not kept


class _EmptyIsValid(SayEnv):
    """An env where any text, the empty one too, is a move, and saying "" solves the task."""

    def system_prompt(self, task: Any) -> str:
        return "word " * 300

    def verify(self, task: Any) -> float:
        return 1.0 if "" in self.state.said else 0.0


@pytest.mark.filterwarnings("ignore:an episode reached max_context_tokens")
def test_a_turn_without_room_is_a_format_error_even_where_an_empty_action_is_valid(model_must_not_run) -> None:
    toy_tok = tiny_tokenizer()
    policy = TransformersPolicy(tiny_model(toy_tok), toy_tok, max_new_tokens=8, max_context_tokens=128)
    [traj] = agentenv.rollout(_EmptyIsValid, policy, n=1)
    assert [t.error_kind for t in traj.transitions] == ["format"] * traj.turns
    assert not traj.success and traj.task_reward == 0.0


def test_rows_near_the_limit_of_a_model_with_absolute_positions_stop_at_their_room() -> None:
    """GPT-2 has no position past n_positions: a row that starts 6 tokens short of it
    samples what room it has while a short row samples its 16, in one batch."""
    from transformers import GPT2Config, GPT2LMHeadModel

    toy_tok = tiny_tokenizer()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        pad = toy_tok.pad_token_id
        config = GPT2Config(
            vocab_size=len(toy_tok), n_positions=64, n_embd=32, n_layer=1, n_head=2, bos_token_id=pad, eos_token_id=pad
        )
        gpt2 = GPT2LMHeadModel(config)
    policy = TransformersPolicy(gpt2, toy_tok, max_new_tokens=16, max_context_tokens=64, seed=0)
    short = [{"role": "user", "content": "Say something."}]
    prompts = ([{"role": "user", "content": "x " * n}] for n in range(64))
    long = next(m for m in prompts if len(policy.delta.prompt_ids(m)) >= 58)
    room = 64 - len(policy.delta.prompt_ids(long))
    assert 0 < room <= 6
    outputs = policy.act([Conversation(0, short), Conversation(1, long)])
    assert all(isinstance(g, Generation) for g in outputs)
    assert [len(g.token_ids) for g in outputs] == [16, room]  # type: ignore[union-attr]
    assert len(policy._episodes[1].ids) == 64


def test_a_huge_observation_is_tokenised_only_as_far_as_the_room_left(model, tok) -> None:
    """A 1 MB tool result where 128 tokens fit: its ids are not kept (no room for a
    reply after them), and the next turn is refused, with no Generation to hold them."""

    class Huge(SayEnv):
        max_turns = 2

        def render_result(self, outcome: Any) -> dict[str, Any]:
            return {"role": "tool", "tool_call_id": outcome.call_id, "content": "ab cd " * 170_000}

    toy_tok = tiny_tokenizer()
    seen: list[int] = []

    class Counting:  # the tokenizer, recording how many characters it is given
        def __getattr__(self, name: str) -> Any:
            return getattr(toy_tok, name)

        def __call__(self, text: str, **kwargs: Any) -> Any:
            seen.append(len(text))
            return toy_tok(text, **kwargs)

    policy = TransformersPolicy(tiny_model(toy_tok), Counting(), max_new_tokens=8, max_context_tokens=128, seed=0)
    with pytest.warns(UserWarning, match="max_context_tokens=128"):
        [traj] = agentenv.rollout(Huge, policy, n=1)
    assert max(seen) < 5_000
    first, second = traj.generations
    assert first is not None and second is None
    assert _concatenated(traj) == policy._episodes[0].ids and len(policy._episodes[0].ids) < 64
    assert traj.transitions[1].error_kind == "format"


def test_act_on_one_conversation_returns_the_prompt_ids_it_appended(model, tok) -> None:
    env = agentenv.make(ENV, **ENV_KWARGS)
    env.reset(seed=0)
    policy = TransformersPolicy(model, tok, max_new_tokens=4, seed=0)
    [gen] = policy.act([Conversation(0, list(env.messages))])
    assert gen.prompt_ids == policy.delta.prompt_ids(env.messages)
    assert len(gen.token_ids) == 4 and gen.finish_reason == "length"
    env.close()


def test_generation_leaves_the_model_in_training_mode_if_it_was(model, tok) -> None:
    model.train()
    policy = TransformersPolicy(model, tok, max_new_tokens=2, seed=0)
    _run(policy, n=1)
    assert model.training
    model.eval()
    _run(policy, n=1)
    assert not model.training


@pytest.mark.filterwarnings("ignore:an episode reached max_context_tokens")
def test_generations_still_concatenate_to_the_ids_once_the_context_is_full(model, tok) -> None:
    # Room for the prompt and one cut turn, not for the observation that follows it.
    env = agentenv.make(ENV, **ENV_KWARGS)
    env.reset(seed=0)
    prompt_len = len(ChatDelta(tok, tok.eos_token).prompt_ids(env.messages))
    env.close()
    policy = TransformersPolicy(model, tok, max_new_tokens=8, max_context_tokens=prompt_len + 10, seed=0)
    trajs = _run(policy, n=2)
    for i, traj in enumerate(trajs):
        assert traj.generations[0].token_ids  # the first turn had room
        assert any(g is None for g in traj.generations)  # a later one did not
        assert _concatenated(traj) == policy._episodes[i].ids


# --- model.py ---------------------------------------------------------------------------


def test_build_tiny_is_deterministic_in_its_seed_and_speaks_its_template() -> None:
    model_a, tok_a = build_tiny([ENV], seed=1, hidden_size=16, layers=1, vocab_size=300)
    model_b, tok_b = build_tiny([ENV], seed=1, hidden_size=16, layers=1, vocab_size=300)
    assert tok_a.get_vocab() == tok_b.get_vocab()
    for (name, a), (_, b) in zip(model_a.state_dict().items(), model_b.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert model_a.config.vocab_size == len(tok_a)
    ChatDelta(tok_a, tok_a.eos_token)  # the tokenizer's eos closes its template's assistant turns


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="device='cpu'"):
            resolve_device("cuda:0")
