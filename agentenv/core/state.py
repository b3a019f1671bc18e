"""Typed env state and the JSON diff recorded with every transition.

An env's `State` is a pydantic model and the single source of truth of the
episode: snapshots serialise it, transitions record how each step changed it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["State", "json_diff"]


class State(BaseModel):
    """Base class of every env's state. Subclass it and declare the fields.

    Fields must survive a JSON round trip (``model_dump(mode="json")`` then
    ``model_validate``) unchanged: snapshots depend on it, and `check_env` tests it.
    """

    model_config = ConfigDict(extra="forbid")


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def json_diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """The changes from ``before`` to ``after`` as JSON-Patch-style operations.

    Objects are diffed key by key; lists element by element when their lengths
    match, otherwise replaced whole (cheap, and exact enough for a transition log).
    """
    if before == after:
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[dict[str, Any]] = []
        for key, value in before.items():
            if key not in after:
                ops.append({"op": "remove", "path": f"{path}/{_escape(str(key))}"})
            elif value != after[key]:  # paths are built only for what changed
                ops.extend(json_diff(value, after[key], f"{path}/{_escape(str(key))}"))
        for key, value in after.items():
            if key not in before:
                ops.append({"op": "add", "path": f"{path}/{_escape(str(key))}", "value": value})
        return ops
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        ops = []
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            if b != a:
                ops.extend(json_diff(b, a, f"{path}/{i}"))
        return ops
    return [{"op": "replace", "path": path or "/", "value": after}]
