"""The policy contract: what the rollout engine asks of a policy, and what it may answer.

A `Policy` is anything with ``act(conversations) -> outputs``; the rollout engine calls
it once per turn with every live episode (`Conversation`). It may answer with plain
actions or `Generation`s, which also carry the token ids and log-probs a trainer needs,
a `PolicyFailure` (its backend failed: the episode ends as ``infra``) or `Refused`.

Left out: the policies themselves (`agentenv.policies`, and the transformers policy in
`agentenv.trainers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat

from agentenv.core._admit import Refused
from agentenv.core.task import Task
from agentenv.core.types import Action, Message

__all__ = ["Conversation", "Generation", "Policy", "PolicyFailure", "PolicyOutput", "TokenId"]


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
