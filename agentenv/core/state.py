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


def _child(path: str, key: Any) -> str:
    """``path`` and ``key``, with ``~`` and ``/`` in the key escaped (RFC 6901)."""
    key = key if type(key) is str else str(key)
    if "~" in key or "/" in key:
        key = key.replace("~", "~0").replace("/", "~1")
    return f"{path}/{key}"


def json_diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """The changes from ``before`` to ``after`` as JSON-Patch-style operations.

    Objects are diffed key by key; lists element by element when their lengths
    match, otherwise replaced whole (cheap, and exact enough for a transition log).
    """
    if before == after:
        return []
    ops: list[dict[str, Any]] = []
    _diff(before, after, path, ops)
    return ops


def _diff(before: Any, after: Any, path: str, ops: list[dict[str, Any]]) -> None:
    """`json_diff`'s operations, appended to ``ops``; ``before != after`` is known. This
    runs on every step of every env that tracks its state: a value not diffed inside is
    replaced without a call of its own, and exact types are told apart before isinstance."""
    if isinstance(before, dict) and isinstance(after, dict):
        kept = 0
        for key, value in before.items():
            if key not in after:
                ops.append({"op": "remove", "path": _child(path, key)})
                continue
            kept += 1
            new = after[key]
            if value == new:  # paths are built only for what changed
                continue
            where = f"{path}/{key}" if type(key) is str and "~" not in key and "/" not in key else _child(path, key)
            kind = type(new)
            if kind in _LEAVES:
                inside = False
            elif kind is list and type(value) is list:
                inside = len(new) == len(value)
            else:  # objects, and subclasses of dict and list (told apart as isinstance tells them)
                inside = (kind is dict and type(value) is dict) or _diffable(value, new)
            if inside:
                _diff(value, new, where, ops)
            else:
                ops.append({"op": "replace", "path": where, "value": new})
        if kept < len(after):  # some keys are new
            for key, value in after.items():
                if key not in before:
                    ops.append({"op": "add", "path": _child(path, key), "value": value})
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            if b != a:
                _diff(b, a, f"{path}/{i}", ops)
    else:
        ops.append({"op": "replace", "path": path or "/", "value": after})


_LEAVES = frozenset({int, str, float, bool, type(None)})


def _diffable(before: Any, after: Any) -> bool:
    """Whether `_diff` looks inside: two objects, or two lists of one length."""
    if isinstance(before, dict):
        return isinstance(after, dict)
    return isinstance(before, list) and isinstance(after, list) and len(before) == len(after)
