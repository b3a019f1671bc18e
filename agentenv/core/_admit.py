"""Where a policy's action enters an env: what it may be, and how it is recorded.

A policy is untrusted: it may hand `Env.step` text with lone surrogates, an
OpenAI message dict of any shape (odd types, deep nesting, non-string keys,
objects), a `ToolCall` holding values no encoder takes, or something that is
none of these. `admit` turns any of it into an action the parsers can read, the
assistant message the conversation records (always plain JSON data, so the
trajectory serialises), and the reason it is not a valid action, if any, which
`Env.step` reports as a format error. It never raises.

Left out: parsing tool calls out of the text (the parsers do that).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError

from agentenv.core import _safejson
from agentenv.core.types import Action, Message, ToolCall

__all__ = ["Admitted", "Refused", "admit", "clean_messages", "limited", "safe_repr"]

MAX_MESSAGE_DEPTH = 40
"""Deeper assistant-message dicts are refused (tool-call arguments nest up to 32 inside)."""
_REPR_CHARS = 1000


class Admitted(NamedTuple):  # a NamedTuple: one is made per step, and tuples are made fast
    action: Action
    """What the parser reads: text, a `ToolCall` or a normalised assistant message."""
    message: Message
    """The assistant message the conversation records: plain JSON data."""
    error: str | None = None
    """Why this is not a valid action (a format error), or None."""


class Refused(NamedTuple):
    """An action already refused where it was made (the Ray driver admits what it cannot
    send as is): the text recorded and the format error."""

    shown: str
    error: str


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    arguments: str | dict[str, Any] | None = None


class _ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str | None = None
    type: str = "function"
    function: _Function


class _AssistantIn(BaseModel):
    """An OpenAI assistant message as a policy may hand it over (extra keys kept if they are JSON)."""

    model_config = ConfigDict(extra="allow")

    role: str = "assistant"
    content: str | None = None
    tool_calls: list[_ToolCallIn] | None = None


def admit(action: Any, turn: int, max_chars: int | None = None) -> Admitted:
    """The action as the env will read and record it; see the module docstring. With
    ``max_chars``, `limited` to that many characters."""
    if type(action) is str and action.isascii():  # the common case, on every step
        admitted = Admitted(action, {"role": "assistant", "content": action})
        return admitted if max_chars is None or len(action) <= max_chars else limited(admitted, max_chars)
    admitted = _admit_other(action, turn)
    return admitted if max_chars is None else limited(admitted, max_chars)


def _admit_other(action: Any, turn: int) -> Admitted:
    if isinstance(action, str):
        text = str.__str__(action)  # a str subclass may override anything; its characters are what count
        if not _safejson.is_unicode(text):
            clean = _safejson.clean_text(text)
            at = next(i for i, ch in enumerate(text) if "\ud800" <= ch <= "\udfff")
            return Admitted(
                clean,
                {"role": "assistant", "content": clean},
                f"the action holds a lone surrogate (U+{ord(text[at]):04X} at char {at}), which is not Unicode text",
            )
        return Admitted(text, {"role": "assistant", "content": text})
    if type(action) is Refused:
        return Admitted(action.shown, {"role": "assistant", "content": action.shown}, action.error)
    if isinstance(action, ToolCall):
        return _admit_call(action, turn)
    if isinstance(action, dict):
        return _admit_message(action, turn)
    shown = safe_repr(action)
    return Admitted(
        shown,
        {"role": "assistant", "content": shown},
        f"expected text, a ToolCall or an assistant message, got {type(action).__name__}",
    )


def limited(admitted: Admitted, max_chars: int) -> Admitted:
    """``admitted``, or, for an action longer than ``max_chars`` characters (its text, or
    its message as JSON), a format error that records only the first ``max_chars`` of it:
    a refused 10 MB action would otherwise be kept whole in the conversation, in its
    transition and in every trajectory file, and be sent back to the policy."""
    action = admitted.action
    if type(action) is str:
        size = len(action)
        if size <= max_chars:
            return admitted
        text = action
    else:
        text = json.dumps(admitted.message, ensure_ascii=False, default=str)
        size = len(text)
        if size <= max_chars:
            return admitted
    kept = text[:max_chars] + f"\n[{size - max_chars} more characters not kept]"
    error = admitted.error or f"the action is {size} characters long; the limit is {max_chars}"
    return Admitted(kept, {"role": "assistant", "content": kept}, error)


def _admit_call(call: ToolCall, turn: int) -> Admitted:
    # Checked again, whole: a subclass, or fields set behind the dataclass's back, are
    # a policy's Python objects like any other. What goes on is a plain ToolCall.
    name, arguments, call_id = (object.__getattribute__(call, f) for f in ("name", "arguments", "id"))
    found = None
    if type(name) is not str or type(arguments) is not dict or not (call_id is None or type(call_id) is str):
        found = ("", "a ToolCall's name and id must be strings and its arguments a dict")
    else:
        found = _safejson.problem({"name": name, "id": call_id, "arguments": arguments}, max_depth=MAX_MESSAGE_DEPTH)
    if found is None:
        try:
            text = json.dumps(arguments, ensure_ascii=False)
        except ValueError:  # NaN is fine for json.dumps; what is left is a circular structure
            found = ("arguments", "they cannot be written as JSON")
    if found is not None:
        where, what = found
        shown = _safejson.clean_text(name) if type(name) is str else safe_repr(name)
        return Admitted(
            shown, {"role": "assistant", "content": ""}, f"tool call {shown!r}: {where + ': ' if where else ''}{what}"
        )
    try:
        plain = ToolCall(name, arguments, call_id)
    except ValueError as e:  # a name of 0 or more than 128 characters
        return Admitted(name, {"role": "assistant", "content": ""}, str(e))
    message: Message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": call_id or f"call_{turn}_0", "type": "function", "function": {"name": name, "arguments": text}},
        ],
    }
    return Admitted(plain, message)


def _admit_message(action: dict[Any, Any], turn: int) -> Admitted:
    found = _safejson.problem(action, max_depth=MAX_MESSAGE_DEPTH)
    if found is not None:
        where, what = found
        shown = _content_of(action)
        return Admitted(
            shown,
            {"role": "assistant", "content": shown},
            f"the assistant message{': ' + where if where else ''}: {what}",
        )
    try:
        parsed = _AssistantIn.model_validate(action)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(message)"
        shown = _content_of(action)
        return Admitted(
            shown, {"role": "assistant", "content": shown}, f"the assistant message: field {field!r}: {err['msg']}"
        )
    message = parsed.model_dump(exclude_none=True)
    message["role"] = "assistant"
    message["content"] = parsed.content or ""
    if parsed.tool_calls:
        message["tool_calls"] = [
            {**tc, "id": tc.get("id") or f"call_{turn}_{i}"} for i, tc in enumerate(message["tool_calls"])
        ]
    return Admitted(message, message)  # type: ignore[arg-type]


def _content_of(action: Any) -> str:
    """The message's text content, read without calling anything of the (untrusted) object."""
    if type(action) is not dict:
        return ""
    for key, value in list(dict.items(action)):
        if type(key) is str and key == "content" and type(value) is str:
            return _safejson.clean_text(value)
    return ""


def clean_messages(messages: list[Message]) -> list[Message]:
    """``messages`` with every content a writable string (lone surrogates spelled out,
    anything else rendered): an env's observation must serialise whatever a tool returned."""
    for message in messages:
        content = message.get("content")
        if type(content) is str:
            if not content.isascii() and not _safejson.is_unicode(content):
                message["content"] = _safejson.clean_text(content)
        elif content is not None and _safejson.problem(content, max_depth=MAX_MESSAGE_DEPTH) is not None:
            message["content"] = safe_repr(content)  # e.g. content parts holding what JSON cannot
    return messages


def safe_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as e:  # noqa: BLE001 - a hostile __repr__, or an int past the digit limit
        text = f"<{type(value).__name__}: repr failed with {type(e).__name__}>"
    if not isinstance(text, str):
        text = f"<{type(value).__name__}>"
    return _safejson.clean_text(text[:_REPR_CHARS])
