"""Append-only token sequences: the ids built turn by turn equal a one-shot tokenisation.

The trainer learns from ids assembled incrementally (prompt, then per turn the
generated ids and the observation's ids). These tests hold that sequence against
the chat template's rendering of the whole conversation, for each built-in template,
on oracle episodes of both built-in envs.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

import agentenv
from agentenv import tool_call_text
from agentenv.trainers import tokens
from agentenv.trainers.tokens import ChatDelta, build_tiny_tokenizer

TEMPLATE_NAMES = tuple(tokens.TEMPLATES)


@pytest.fixture(scope="module")
def trajectories() -> list[agentenv.Trajectory]:
    guess = agentenv.rollout("guess-number-v0", agentenv.spec("guess-number-v0").make_oracle(), n=20)
    arith = agentenv.rollout("arithmetic-v0", agentenv.spec("arithmetic-v0").make_oracle(), n=20)
    # One action with two tool calls: two consecutive tool messages (one shared user turn in qwen).
    two_calls = tool_call_text("calculate", a=2, op="+", b=3) + tool_call_text("calculate", a=4, op="*", b=5)
    replay = agentenv.ScriptedPolicy.replay([two_calls, tool_call_text("submit", answer=3)])
    multi = agentenv.rollout("arithmetic-v0", replay, n=2, env_kwargs={"max_turns": 3})
    return guess + arith + multi


@pytest.fixture(scope="module")
def tokenizers(trajectories: list[agentenv.Trajectory]) -> dict[str, Any]:
    corpus = [m["content"] for t in trajectories for m in t.messages]
    return {name: build_tiny_tokenizer(corpus, template=name) for name in TEMPLATE_NAMES}


def _delta(tokenizers: dict[str, Any], name: str) -> ChatDelta:
    return ChatDelta(tokenizers[name], tokens.END_OF_TURN[name])


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _next_assistant(messages: Sequence[dict[str, Any]], start: int) -> int:
    return next((j for j in range(start, len(messages)) if messages[j]["role"] == "assistant"), len(messages))


def incremental_ids(
    delta: ChatDelta, messages: Sequence[dict[str, Any]], *, stopped: Sequence[bool] | None = None
) -> tuple[list[int], list[dict[str, Any]]]:
    """The ids a policy appends, turn by turn, for ``messages``; and the messages they
    cover (up to the last assistant turn). ``stopped[k]`` False: turn k was cut before
    its end-of-turn token, as a length-limited generation is."""
    i = _next_assistant(messages, 0)
    ids = delta.prompt_ids(messages[:i])
    turn = 0
    while True:
        ids += _encode(delta.tokenizer, messages[i]["content"])
        stop = stopped is None or stopped[turn]
        if stop:
            ids.append(delta.end_of_turn_id)
        j = _next_assistant(messages, i + 1)
        if j == len(messages):
            if not stop:
                ids.append(delta.end_of_turn_id)  # the one-shot text closes every turn
            return ids, list(messages[: i + 1])
        ids += delta.observation_ids(messages[i + 1 : j], stopped=stop)
        i, turn = j, turn + 1


# --- incremental == one shot ---------------------------------------------------------


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_incremental_ids_equal_the_one_shot_tokenisation(name, tokenizers, trajectories) -> None:
    delta = _delta(tokenizers, name)
    envs = {t.env_id for t in trajectories}
    assert envs == {"guess-number-v0", "arithmetic-v0"}
    pairs = [(a, b) for t in trajectories for a, b in zip(t.messages, t.messages[1:], strict=False)]
    assert any(a["role"] == b["role"] == "tool" for a, b in pairs), (
        "the fixture should hold an action with two tool calls"
    )
    mismatches = {}
    for k, traj in enumerate(trajectories):
        ids, covered = incremental_ids(delta, traj.messages)
        mismatches[k] = delta.mismatch(covered, ids)
    assert {k: m for k, m in mismatches.items() if m} == {}


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_a_turn_cut_before_its_end_of_turn_still_matches_the_one_shot_ids(name, tokenizers, trajectories) -> None:
    # A length-limited generation has no end-of-turn token; stopped=False adds it.
    delta = _delta(tokenizers, name)
    traj = trajectories[0]
    stopped = [k % 2 == 1 for k in range(traj.turns)]
    ids, covered = incremental_ids(delta, traj.messages, stopped=stopped)
    assert delta.mismatch(covered, ids) == 0


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_a_non_canonical_split_of_an_assistant_turn_is_detected(name, tokenizers, trajectories) -> None:
    delta = _delta(tokenizers, name)
    tok = tokenizers[name]
    messages = trajectories[0].messages
    first = _next_assistant(messages, 0)
    content = messages[first]["content"]
    canonical = _encode(tok, content)
    char_by_char = [i for ch in content for i in _encode(tok, ch)]
    assert tok.decode(char_by_char) == tok.decode(canonical) == content
    assert char_by_char != canonical

    prompt = delta.prompt_ids(messages[:first])
    ids = prompt + char_by_char + [delta.end_of_turn_id]
    diverge = next(k for k, (a, b) in enumerate(zip(char_by_char, canonical, strict=False)) if a != b)
    # mismatch() is the 1-based position of the first differing token
    assert delta.mismatch(messages[: first + 1], ids) == len(prompt) + diverge + 1
    canonical_ids = prompt + canonical + [delta.end_of_turn_id]
    assert delta.mismatch(messages[: first + 1], canonical_ids) == 0


# --- ChatDelta pieces ------------------------------------------------------------------


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_stopped_false_prepends_the_end_of_turn_id(name, tokenizers) -> None:
    delta = _delta(tokenizers, name)
    observation = [{"role": "tool", "tool_call_id": "call_0_0", "name": "guess", "content": "higher"}]
    stopped = delta.observation_ids(observation, stopped=True)
    assert delta.observation_ids(observation, stopped=False) == [delta.end_of_turn_id, *stopped]
    assert stopped[:1] != [delta.end_of_turn_id]


@pytest.mark.parametrize(("name", "bridge"), [("chatml", "\n"), ("qwen", "\n"), ("llama3", "")])
def test_bridge_is_the_text_between_end_of_turn_and_the_next_message(name, bridge, tokenizers) -> None:
    assert _delta(tokenizers, name).bridge == bridge


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_prompt_ids_end_with_the_generation_prompt(name, tokenizers, trajectories) -> None:
    delta = _delta(tokenizers, name)
    tok = tokenizers[name]
    messages = trajectories[0].messages[:2]
    text = tok.decode(delta.prompt_ids(messages))
    header = {
        "chatml": "<|im_start|>assistant\n",
        "qwen": "<|im_start|>assistant\n",
        "llama3": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    }[name]
    assert text.endswith(header)
    assert messages[1]["content"] in text


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_text_that_spells_a_special_token_never_becomes_one(name, tokenizers) -> None:
    """An env echoes what the agent wrote (an unknown tool's name): turn markers in that
    text must not forge turn boundaries in the sequence the policy is trained on."""
    delta, tok = _delta(tokenizers, name), tokenizers[name]
    forged = "".join(tokens.SPECIAL_TOKENS) + " done"
    observation = [{"role": "tool", "tool_call_id": "c", "name": "x", "content": f"unknown tool {forged!r}"}]
    honest = [{"role": "tool", "tool_call_id": "c", "name": "x", "content": "unknown tool 'x'"}]
    special_ids = set(tok.all_special_ids)
    count = lambda ids: sum(i in special_ids for i in ids)  # noqa: E731
    assert count(delta.observation_ids(observation, stopped=True)) == count(delta.observation_ids(honest, stopped=True))
    prompt = [{"role": "user", "content": forged}]
    assert count(delta.prompt_ids(prompt)) == count(delta.prompt_ids([{"role": "user", "content": "x"}]))
    assert "done" in tok.decode(delta.observation_ids(observation, stopped=True))  # the rest of the text is kept
    # Wherever a template may print text: content parts, and a tool message's name.
    parts = [{"role": "tool", "tool_call_id": "c", "name": "x", "content": [{"type": "text", "text": forged}]}]
    honest_parts = [{"role": "tool", "tool_call_id": "c", "name": "x", "content": [{"type": "text", "text": "x"}]}]
    assert count(delta.observation_ids(parts, stopped=True)) == count(delta.observation_ids(honest_parts, stopped=True))
    assert not any(
        s in str(m)
        for m in tokens._defused([*parts, {**honest[0], "name": forged}], tokens.SPECIAL_TOKENS)
        for s in tokens.SPECIAL_TOKENS
    )


def test_a_template_that_is_not_append_only_is_refused(tokenizers) -> None:
    tok = copy.deepcopy(tokenizers["chatml"])
    # Renders only the last message: earlier text changes as messages are added.
    tok.chat_template = (
        "{% set m = messages[-1] %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(ValueError, match="append-only"):  # when made, not at an episode's first observation
        ChatDelta(tok, "<|im_end|>")


# Qwen3's own template (abridged): it opens an assistant turn with an empty think block
# only when that turn is the last message, never once an observation follows it.
QWEN3_LIKE_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "\n<tool_response>\n{{ m['content'] }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>\n{% endif %}"
    "{% elif m['role'] == 'assistant' and loop.last %}"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n{{ m['content'] }}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_that_renders_the_last_assistant_turn_apart_still_gives_append_only_ids(
    tokenizers, trajectories
) -> None:
    """A turn the policy builds on always has an observation after it, so the ids are
    those of the template's rendering with one there: no think block, as with the
    plain Qwen template, and every multi-turn episode goes through."""
    tok = copy.deepcopy(tokenizers["qwen"])
    tok.chat_template = QWEN3_LIKE_TEMPLATE
    delta, plain = ChatDelta(tok, "<|im_end|>"), _delta(tokenizers, "qwen")
    observation = [{"role": "tool", "tool_call_id": "c", "name": "guess", "content": "higher"}]
    for stop in (True, False):
        assert delta.observation_ids(observation, stopped=stop) == plain.observation_ids(observation, stopped=stop)
    assert delta.bridge == "\n"
    for traj in trajectories:
        ids, covered = incremental_ids(delta, traj.messages)
        assert ids == incremental_ids(plain, traj.messages)[0]
        assert delta.mismatch(covered, ids) == 0


def test_a_limit_tokenises_only_the_start_of_a_huge_observation(tokenizers) -> None:
    """A 1 MB tool result with room for 50 ids: 50 ids, the whole text's first ones,
    and the tokenizer never sees more than a few hundred characters of it."""
    tok = tokenizers["chatml"]
    seen: list[int] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(tok, name)

        def __call__(self, text: str, **kwargs: Any) -> Any:
            seen.append(len(text))
            return tok(text, **kwargs)

    delta = ChatDelta(Counting(), "<|im_end|>")
    huge = [{"role": "tool", "content": "ab cd 12 " * 120_000}]
    cut = delta.observation_ids(huge, stopped=False, limit=50)
    assert len(cut) == 50 and cut[0] == delta.end_of_turn_id
    assert max(seen) < 2_000
    medium = [{"role": "tool", "content": "ab cd 12 " * 200}]
    assert cut == delta.observation_ids(medium, stopped=False)[:50]
    assert delta.observation_ids(medium, stopped=True, limit=10_000) == delta.observation_ids(medium, stopped=True)
    assert len(delta.prompt_ids(huge, limit=30)) == 30 and max(seen) < 2_000


def test_an_end_of_turn_token_missing_from_the_vocabulary_is_refused(tokenizers) -> None:
    with pytest.raises(ValueError, match="not in the tokenizer's vocabulary"):
        ChatDelta(tokenizers["chatml"], "<|no_such_token|>")


def test_an_end_of_turn_token_the_template_does_not_use_is_refused(tokenizers) -> None:
    # <|eot_id|> is in the vocabulary, but ChatML closes turns with <|im_end|>.
    with pytest.raises(ValueError, match="end-of-turn token"):
        ChatDelta(tokenizers["chatml"], "<|eot_id|>")


# --- the tiny tokenizer --------------------------------------------------------------------


def test_tiny_tokenizer_splits_digits_one_per_token(tokenizers) -> None:
    tok = tokenizers["chatml"]
    ids = _encode(tok, "90210")
    assert [tok.decode([i]) for i in ids] == list("90210")


def test_tiny_tokenizer_round_trips_text_it_never_saw(tokenizers) -> None:
    tok = tokenizers["chatml"]
    text = "héllo wörld ✓ 中文\n\ttabs"
    assert tok.decode(_encode(tok, text)) == text


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_tiny_tokenizer_uses_the_templates_end_of_turn_as_eos(name, tokenizers) -> None:
    tok = tokenizers[name]
    assert tok.eos_token == tokens.END_OF_TURN[name]
    assert tok.pad_token_id is not None and tok.pad_token_id != tok.eos_token_id
