"""Wire types shared by envs, policies and rollouts: chat messages, tool calls, actions.

Messages are plain dicts in the OpenAI chat shape (``role``, ``content``, ``name``,
``tool_call_id``, ``tool_calls``) so any chat template or API consumes them as they
are; `Message` types them. Everything that crosses a boundary from a model is a
strict pydantic model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, NotRequired, TypedDict

__all__ = ["Action", "Failure", "Message", "ToolCall"]

Role = Literal["system", "user", "assistant", "tool"]


class Message(TypedDict):
    """One chat message in the OpenAI shape."""

    role: Role
    content: str
    name: NotRequired[str]
    tool_call_id: NotRequired[str]
    tool_calls: NotRequired[list[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A parsed request to call one tool.

    A frozen dataclass (not a pydantic model): one is made per call on the step's hot
    path. Pydantic still validates it wherever it is a field of a model.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None

    def __post_init__(self) -> None:
        if type(self.name) is str and type(self.arguments) is dict and self.id is None and 0 < len(self.name) <= 128:
            return  # the common case, checked in one line: one is made per call
        if not isinstance(self.name, str) or not 0 < len(self.name) <= 128:
            raise ValueError(f"ToolCall.name must be a string of 1 to 128 characters, got {self.name!r:.60}")
        if not isinstance(self.arguments, dict):
            raise ValueError(f"ToolCall.arguments must be a dict, got {type(self.arguments).__name__}")
        if self.id is not None and not isinstance(self.id, str):
            raise ValueError(f"ToolCall.id must be a string or None, got {type(self.id).__name__}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "id": self.id}


# What a policy may hand to `Env.step`: raw model text, one parsed call, or an
# OpenAI assistant message (``{"role": "assistant", "content": ..., "tool_calls": [...]}``).
Action = str | ToolCall | dict[str, Any]


class Failure(str, Enum):
    """How an episode ended, from the trainer's point of view."""

    NONE = "none"  # solved
    POLICY = "policy"  # ended by the agent, not solved
    FORMAT = "format"  # ended because the agent kept producing invalid actions
    INFRA = "infra"  # the environment's infrastructure failed; never the policy's fault
    TRUNCATED = "truncated"  # out of turns, tokens or time
