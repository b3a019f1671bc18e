"""Policies: map a batch of conversations to a batch of actions.

A `Policy` is anything with ``act(conversations) -> actions``; the rollout engine
calls it once per turn with every live episode. It may return plain actions or
`Generation`s, which also carry the token ids and log-probs a trainer needs.
Built in here: `ScriptedPolicy` (tests, demos, oracles) and `HumanPolicy` (the
terminal). `agentenv.OpenAIPolicy` speaks to any OpenAI-compatible endpoint; the
transformers policy lives with the trainer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol, TextIO, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat

from agentenv._admit import Refused
from agentenv.errors import message_of
from agentenv.parsers import tool_call_text
from agentenv.task import Task
from agentenv.types import Action, Message

__all__ = ["Conversation", "Generation", "HumanPolicy", "Policy", "PolicyFailure", "ScriptedPolicy"]


@dataclass(slots=True)
class Conversation:
    """One live episode as a policy sees it."""

    id: int
    """Stable for the episode within a rollout; lets a policy keep per-episode caches."""
    messages: list[Message]
    """The whole conversation so far, system prompt first."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """The env's tools as OpenAI "tools" schemas."""
    task: Task | None = None
    """The task. Only scripted oracles may read it; a model policy must not."""

    @property
    def turn(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "assistant")


TokenId = Annotated[int, Field(ge=0, lt=2**32)]


class Generation(BaseModel):
    """An action together with what the model generated to produce it. Token ids are
    vocabulary indices and log-probs finite: a trajectory holding anything else would
    not read back from its file, nor train."""

    model_config = ConfigDict(extra="forbid")

    action: str | dict[str, Any]
    prompt_ids: list[TokenId] | None = None
    token_ids: list[TokenId] = []
    logprobs: list[FiniteFloat] = []
    finish_reason: str | None = None
    """"stop" (end of turn), "length" (cut at the token limit), or the server's word."""
    full_prompt: bool = False
    """True when ``prompt_ids`` hold the whole context the turn was sampled from, not only
    what came after the turn before: a server rendered the conversation so that the
    episode's earlier ids are not a prefix of it (`agentenv.OpenAIPolicy`). A trainer
    starts a new sequence at such a turn."""
    policy_version: int | None = None
    """The version of the weights that sampled every token of this turn: the learner's
    step count when they were published (asynchronous training); None when not tracked."""


class PolicyFailure(BaseModel):
    """Returned in place of an action when the policy's backend failed for one
    conversation (an API error after retries). The episode ends as ``infra``."""

    model_config = ConfigDict(extra="forbid")

    error: str


PolicyOutput = Action | Generation | PolicyFailure | Refused
"""What a policy answers a conversation with. `Refused` is a turn the policy declines
to take (no room left in its context): the env counts it as a format error."""


@runtime_checkable
class Policy(Protocol):
    def act(self, conversations: Sequence[Conversation]) -> list[PolicyOutput]: ...


class ScriptedPolicy:
    """A policy written as a function of one conversation (or a fixed list of actions)."""

    def __init__(self, fn: Callable[[Conversation], Action]) -> None:
        self.fn = fn

    @classmethod
    def replay(cls, actions: Sequence[Action]) -> ScriptedPolicy:
        """Play ``actions`` in order, one per turn, then repeat the last one."""
        if not actions:
            raise ValueError("replay needs at least one action")
        return cls(lambda conv: actions[min(conv.turn, len(actions) - 1)])

    @classmethod
    def golden(cls, key: str = "actions") -> ScriptedPolicy:
        """Replay each task's golden tool calls, ``task.payload[key]`` (a list of
        ``{"name": ..., "arguments": {...}}``), as tool-call text, one per turn, then
        repeat the last one: the oracle of an env whose tasks carry their solution."""

        def act(conv: Conversation) -> str:
            if conv.task is None or key not in conv.task.payload:
                raise ValueError(f"a golden replay needs each task's payload[{key!r}]: conversation {conv.id} has none")
            actions = conv.task.payload[key]
            action = actions[min(conv.turn, len(actions) - 1)]
            return tool_call_text(action["name"], **action["arguments"])

        return cls(act)

    def act(self, conversations: Sequence[Conversation]) -> list[PolicyOutput]:
        """``fn`` of each conversation; one it raises on fails that episode alone."""
        return [self._one(conv) for conv in conversations]

    def _one(self, conv: Conversation) -> PolicyOutput:
        try:
            return self.fn(conv)
        except Exception as e:  # noqa: BLE001 - one conversation's failure, not the batch's
            return PolicyFailure(error=f"{type(e).__name__}: {message_of(e)}")


class HumanPolicy:
    """A person at the terminal types each action. One conversation at a time."""

    def __init__(self, stdin: TextIO | None = None, stdout: TextIO | None = None) -> None:
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self._shown: dict[int, int] = {}

    def act(self, conversations: Sequence[Conversation]) -> list[PolicyOutput]:
        return [self._ask(conv) for conv in conversations]

    def _ask(self, conv: Conversation) -> Action:
        start = self._shown.get(conv.id, 0)
        for message in conv.messages[start:]:
            if message["role"] != "assistant":
                self.stdout.write(f"\n[{message['role']}] {message['content']}\n")
        self._shown[conv.id] = len(conv.messages) + 1  # +1: the action typed below
        self.stdout.write("\n> ")
        self.stdout.flush()
        lines: list[str] = []
        # A line ending in a backslash continues the action on the next line.
        while True:
            line = self.stdin.readline()
            if not line:
                raise EOFError("no more input from the terminal")
            line = line.rstrip("\n")
            if line.endswith("\\"):
                lines.append(line[:-1])
                self.stdout.write("… ")
                self.stdout.flush()
                continue
            lines.append(line)
            return "\n".join(lines)
