"""Policies: scripted (tests, demos, oracles), a person at the terminal, and any
OpenAI-compatible endpoint. The contract they meet is `agentenv.core.policy`; the
transformers and vLLM policies live with the trainer (`agentenv.trainers`).

`OpenAIPolicy` loads httpx, so it is imported on first use: `import agentenv` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentenv.core.policy import Conversation, Generation, Policy, PolicyFailure, PolicyOutput, TokenId
from agentenv.policies.scripted import HumanPolicy, ScriptedPolicy

if TYPE_CHECKING:
    from agentenv.policies.openai import OpenAIPolicy

__all__ = [
    "Conversation",
    "Generation",
    "HumanPolicy",
    "OpenAIPolicy",
    "Policy",
    "PolicyFailure",
    "PolicyOutput",
    "ScriptedPolicy",
    "TokenId",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIPolicy":
        from agentenv.policies.openai import OpenAIPolicy

        return OpenAIPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
