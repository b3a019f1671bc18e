"""Wire types shared by envs, policies and rollouts: chat messages, tool calls, actions.

Messages are plain dicts in the OpenAI chat shape (``role``, ``content``, ``name``,
``tool_call_id``, ``tool_calls``) so any chat template or API consumes them as they
are; `Message` types them. Everything that crosses a boundary from a model is a
strict pydantic model.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal, NotRequired, TypedDict

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Action", "Failure", "Message", "ToolCall"]

Role = Literal["system", "user", "assistant", "tool"]


class Message(TypedDict):
    """One chat message in the OpenAI shape."""

    role: Role
    content: str
    name: NotRequired[str]
    tool_call_id: NotRequired[str]
    tool_calls: NotRequired[list[dict[str, Any]]]


class ToolCall(BaseModel):
    """A parsed request to call one tool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


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
