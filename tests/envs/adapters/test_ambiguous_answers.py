r"""More than one answer is a format error in every adapter: the same hostile replies, the same outcome.

Every adapter reads a reply by the rule of `agentenv.envs.answers` (the question-answer
env and reasoning-gym's with `extract_answer`, TextArena's with `extract_move`). The
table holds replies built from a task's right answer R and wrong ones W and W2, each
written as the adapter reads an answer (as it is, or a TextArena move in brackets), and
the outcome every adapter must give:

- ``FORMAT``: more than one answer, or markup that does not pair up. A format error (an
  error observation, the format penalty), nothing scored or played, not solved.
- ``LIST``: one answer holding a list of candidates. Read as that one answer, never as
  its right member: scored or played, not solved, no format error.
- ``SOLVED``: one answer, the right one (the controls: the table can fail).

The reasoning-gym env is gsm_symbolic's, whose scorer reads an answer's first number:
there ``<answer>R, W</answer>`` scored 1 before the list-of-candidates check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from agentenv import Env, Task, TaskSet
from agentenv.envs.adapters.qa import QAEnv

FORMAT, LIST, SOLVED = "format", "list", "solved"

TABLE: dict[str, tuple[str, str]] = {
    "two tags, the right one first": ("<answer>{R}</answer> <answer>{W}</answer>", FORMAT),
    "two tags, the right one last": ("<answer>{W}</answer> <answer>{R}</answer>", FORMAT),
    "the right answer twice": ("<answer>{R}</answer> <answer>{R}</answer>", FORMAT),
    "tags in different case": ("<answer>{W}</answer> <ANSWER>{R}</Answer>", FORMAT),
    "an unclosed tag beside a closed one": ("<answer>{W} <answer>{R}</answer>", FORMAT),
    "a closed tag, then an unclosed one": ("<answer>{R}</answer> or <answer>{W}", FORMAT),
    "nested tags": ("<answer><answer>{R}</answer></answer>", FORMAT),
    "two boxes inside a tag": ("<answer>\\boxed{{{R}}} \\boxed{{{W}}}</answer>", FORMAT),
    "two boxes, the right one last": ("\\boxed{{{W}}} then \\boxed{{{R}}}", FORMAT),
    "a box and a tag": ("\\boxed{{{W}}} and <answer>{R}</answer>", FORMAT),
    "a closing tag without its opening": ("{R}</answer>", FORMAT),
    "markers that cross": ("<answer>\\boxed{{{R}</answer>}}", FORMAT),
    "candidates in a list, the right one first": ("<answer>{LIST_R_FIRST}</answer>", LIST),
    "candidates in a list, the right one last": ("<answer>{LIST_R_LAST}</answer>", LIST),
    "candidates joined by or": ("<answer>{OR_LIST}</answer>", LIST),
    "one tag": ("<answer>{R}</answer>", SOLVED),
    "one tag, in capitals": ("<ANSWER>{R}</ANSWER>", SOLVED),
    "a box inside a tag": ("<answer>\\boxed{{{R}}}</answer>", SOLVED),
    "candidates in the reasoning, one answer after it": (
        "<think><answer>{W}</answer> or <answer>{R}</answer>?</think> <answer>{R}</answer>",
        SOLVED,
    ),
    "a quoted empty box, then the answer": ("You asked for \\boxed{{}}: <answer>{R}</answer>", SOLVED),
}


@dataclass(frozen=True)
class Adapter:
    """How the table reaches one adapter: its env, the task's answers, and what it consumed."""

    make: Callable[[], Env]
    answers: Callable[[Env], tuple[str, str, str]]
    """The right answer and two wrong ones, as plain values."""
    mark: Callable[[str], str]
    """A value written as one answer of this adapter (a TextArena move is in brackets)."""
    consumed: Callable[[Env], bool]
    """Whether the env scored or played the reply."""


def _qa() -> Env:
    return QAEnv(TaskSet([Task(id="q", prompt="What is 6 * 7?", payload={"reference": "42"})]))


def _reasoning_gym() -> Env:
    pytest.importorskip("reasoning_gym")
    from agentenv.envs.adapters.reasoning_gym import ReasoningGymEnv

    return ReasoningGymEnv("gsm_symbolic", size=8)


def _reasoning_gym_answers(env: Env) -> tuple[str, str, str]:
    right = env.task.payload["answer"]
    wrong = [t.payload["answer"] for t in env.tasks if t.payload["answer"] != right]
    return right, wrong[0], wrong[1]


def _textarena() -> Env:
    pytest.importorskip("textarena")
    from agentenv.envs.adapters.textarena_games import TextArenaEnv

    return TextArenaEnv(game="GuessTheNumber-v0", num_tasks=4)


def _secret_number(env: Env) -> tuple[str, str, str]:
    secret = env._live.env.state.game_state["game_number"]  # the game's own state: what the agent must guess
    wrong = [n for n in range(1, 21) if n != secret]
    return str(secret), str(wrong[0]), str(wrong[1])


ADAPTERS = {
    "qa": Adapter(_qa, lambda env: ("42", "41", "43"), str, lambda env: env.state.answer is not None),
    "reasoning-gym": Adapter(_reasoning_gym, _reasoning_gym_answers, str, lambda env: env.state.attempts > 0),
    "textarena": Adapter(_textarena, _secret_number, lambda v: f"[{v}]", lambda env: env.state.moves > 0),
}


@pytest.fixture(scope="module", params=sorted(ADAPTERS))
def adapter(request: pytest.FixtureRequest) -> Iterator[tuple[Adapter, Env]]:
    spec = ADAPTERS[request.param]
    env = spec.make()
    yield spec, env
    env.close()


def _reply(template: str, spec: Adapter, env: Env) -> str:
    right, wrong, wrong2 = spec.answers(env)
    return template.format(
        R=spec.mark(right),
        W=spec.mark(wrong),
        LIST_R_FIRST=spec.mark(f"{right}, {wrong}, {wrong2}"),
        LIST_R_LAST=spec.mark(f"{wrong}, {wrong2}, {right}"),
        OR_LIST=spec.mark(f"{right} or {wrong}"),
    )


@pytest.mark.parametrize("case", list(TABLE))
def test_every_adapter_gives_a_hostile_reply_the_same_outcome(adapter: tuple[Adapter, Env], case: str) -> None:
    spec, env = adapter
    template, outcome = TABLE[case]
    env.reset(seed=0)
    reply = _reply(template, spec, env)
    obs, reward, _terminated, _truncated, info = env.step(reply)
    where = f"{type(env).__name__}, {case}: {reply!r} -> {info}"
    if outcome == FORMAT:
        assert info["error_kind"] == "format" and info["error"], where
        assert obs and obs[0]["content"].startswith("Error:"), where
        assert reward == pytest.approx(-env.format_penalty), where
        assert not spec.consumed(env) and info["success"] is not True, where
    elif outcome == LIST:
        assert info["error_kind"] is None and spec.consumed(env), where
        assert info["success"] is not True and reward <= 0.0, where
    else:
        assert info["error_kind"] is None and info["success"] is True, where
