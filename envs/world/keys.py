"""Canonical JSON and the hashes cache keys are made of.

Canonical JSON: keys sorted, no spaces, UTF-8 kept (not escaped). Two equal JSON
values always have the same canonical text, so equal states hash alike.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["cache_key", "canonical_json", "state_hash"]


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def state_hash(state: Any) -> str:
    return hashlib.sha256(canonical_json(state).encode()).hexdigest()


def cache_key(world: str, tool: str, arguments: dict[str, Any], state: str, model_id: str, history: str = "") -> str:
    """The key of one emulated call: world (name and fingerprint), tool, canonical
    arguments, state hash, model id, the prompt's version, and the hash of the history
    the model is shown (``""`` for none). The reply depends on that history too: keyed
    without it, text one episode put in its history (an injection that talks the model
    into refusing) would be the cached answer to the same call in every other episode."""
    from agentenv.envs.world.prompt import PROMPT_VERSION

    parts = [PROMPT_VERSION, world, tool, canonical_json(arguments), state, model_id]
    if history:
        parts.append(history)
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()
