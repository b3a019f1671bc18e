"""Guess the number: find a secret integer from higher/lower feedback.

The reference env for interaction: the agent must read each observation to act
well. Step reward: the share of the search interval each guess eliminates. One guess per
turn: an action with more is a format error.

Its tasks are not distinct in what the agent sees: every task of a range has the same
prompt, and only the hidden secret (the payload) differs. So there are as many distinct
tasks as secrets, whatever the number of ids (``guess-number-opening-v0``: 400 ids over 16
secrets), and a held-out split by content (`TaskSet.split`) holds out whole secrets: the
held-out episodes ask for secrets never searched for in training, under the same prompt.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentenv import (
    CallOutcome,
    Env,
    HermesParser,
    ScriptedPolicy,
    State,
    Task,
    TaskSet,
    ToolError,
    tool,
    tool_call_text,
)
from agentenv.core.task import curriculum_slice


class GuessPayload(BaseModel):
    """The ``payload`` of a guessing task: the secret is in 1..high."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    high: int = Field(ge=2, description="the top of the range; below 2 the first guess is the answer")
    secret: int = Field(ge=1)

    @model_validator(mode="after")
    def _in_range(self) -> GuessPayload:
        if self.secret > self.high:
            raise ValueError(f"expected a secret in 1..{self.high}, got {self.secret}")
        return self


class GuessState(State):
    low: int
    high: int
    widths: list[int]  # width of the interval still consistent with the feedback, after each guess
    solved: bool = False


class GuessNumberEnv(Env[GuessState]):
    max_turns = 12
    max_calls_per_action = 1  # the budget is guesses: sixteen in one turn would sweep 1..16
    instructions = "Find the secret integer. After each guess you are told if the secret is higher or lower."
    payload_type = GuessPayload

    def __init__(
        self,
        tasks: TaskSet | None = None,
        *,
        difficulties: Sequence[int] | None = None,
        show_range: bool = False,
        **kwargs,
    ) -> None:
        """``show_range``: the feedback also names the interval still possible
        ("higher: 9..16"), so the next guess needs only the last observation."""
        if tasks is None and difficulties is not None:  # a curriculum slice of the default tasks
            tasks = curriculum_slice(_default_tasks(), difficulties, env=type(self).__name__)
        self.show_range = show_range
        super().__init__(tasks, **kwargs)

    def default_tasks(self) -> TaskSet:
        return _default_tasks()

    def initial_state(self, task: Task) -> GuessState:
        high = self.payload.high  # validated here: a task given to reset is not in the task set
        return GuessState(low=1, high=high, widths=[high])

    @tool
    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: Your guess.
        """
        s, secret, top = self.state, self.task.payload["secret"], self.task.payload["high"]
        if not 1 <= number <= top:
            raise ToolError(f"the secret is between 1 and {top}; {number} is outside")
        if number == secret:
            s.solved, s.low, s.high = True, number, number
        elif number < secret:
            s.low = max(s.low, number + 1)
        else:
            s.high = min(s.high, number - 1)
        s.widths.append(0 if s.solved else s.high - s.low + 1)
        if s.solved:
            return "correct"
        feedback = "higher" if number < secret else "lower"
        return f"{feedback}: {s.low}..{s.high}" if self.show_range else feedback

    def step_rewards(self, outcomes: list[CallOutcome]) -> dict[str, float]:
        w = self.state.widths
        return {"progress": (w[-2] - w[-1]) / w[0] if len(w) >= 2 and any(o.ok for o in outcomes) else 0.0}

    def is_done(self) -> bool:
        return self.state.solved

    def verify(self, task: Task) -> float:
        return float(self.state.solved)

    def mutate(self, task: Task, rng: np.random.Generator) -> Task | None:
        """The same range with a new secret, under the prompt `make_tasks` writes: a
        proposal's prompt may have named its secret, which the new one is not."""
        high = GuessPayload.model_validate(task.payload).high
        return task.model_copy(
            update={
                "id": f"{task.id}~v{int(rng.integers(1 << 30)):08x}",
                "prompt": _prompt(high),
                "payload": {"high": high, "secret": int(rng.integers(1, high + 1))},
            }
        )


@functools.cache
def _default_tasks() -> TaskSet:
    return make_tasks(400, seed=0)  # made once per process: a TaskSet is immutable


def make_tasks(n: int, *, seed: int = 0, difficulties: tuple[int, ...] = (0, 1, 2, 3)) -> TaskSet:
    """Difficulty d hides the secret in 1..16·4^d (16, 64, 256, 1024)."""
    rng = np.random.default_rng(seed)
    tasks = []
    for i in range(n):
        d = difficulties[i % len(difficulties)]
        high = 16 * 4**d
        tasks.append(
            Task(
                id=f"guess-{seed}-{i}",
                prompt=_prompt(high),
                payload={"high": high, "secret": int(rng.integers(1, high + 1))},
                metadata={"family": "guess-number", "difficulty": d},
            )
        )
    return TaskSet(tasks)


def _prompt(high: int) -> str:
    return f"I am thinking of an integer between 1 and {high}. Find it."


def oracle() -> ScriptedPolicy:
    """Binary search, reading the feedback from the conversation."""
    return ScriptedPolicy(_binary_search)


_PARSER = HermesParser()


def _binary_search(conv) -> str:
    low, high, last = 1, conv.task.payload["high"], None
    for message in conv.messages:
        if message["role"] == "assistant":
            calls = _PARSER.parse(message["content"])
            last = calls[0].arguments["number"] if calls else None
        elif message["role"] == "tool" and last is not None:
            if message["content"].startswith("higher"):
                low = last + 1
            elif message["content"].startswith("lower"):
                high = last - 1
    return tool_call_text("guess", number=(low + high) // 2)


def mixed_oracle(waste: float = 0.75) -> ScriptedPolicy:
    """The binary search of `oracle`, opening with a wasted guess (1, the lowest value) in
    a ``waste`` share of the episodes, chosen by task id. Both openings read the feedback
    the same way after it; only the first move differs. A warm start on its successful
    episodes samples both openings, and the one that wastes a guess fails more often
    when guesses are few: RL has one thing to learn (see bench/learn_cpu.py)."""
    if not 0.0 <= waste <= 1.0:
        raise ValueError(f"waste must be a share in [0, 1], got {waste}")

    def act(conv) -> str:
        opening = not any(m["role"] == "assistant" for m in conv.messages)
        if opening and _share(conv.task.id) < waste:
            return tool_call_text("guess", number=1)
        return _binary_search(conv)

    return ScriptedPolicy(act)


def _share(key: str) -> float:
    """A fixed number in [0, 1) for ``key``: the same episodes waste their opening every run."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64


def opening_env(**kwargs) -> GuessNumberEnv:
    """The learning demonstration's env (``guess-number-opening-v0``): secrets 1..16 in
    4 guesses, the feedback naming the interval left, warm-started on `mixed_oracle`.
    Binary search solves 15 of 16 secrets in 4 guesses; after a wasted opening, about
    half. Held-out success rises only if RL learns to open well."""
    kwargs = {"max_turns": 4, "show_range": True, **kwargs}
    return GuessNumberEnv(kwargs.pop("tasks", None) or _opening_tasks(), **kwargs)


@functools.cache
def _opening_tasks() -> TaskSet:
    return make_tasks(400, seed=1, difficulties=(0,))
