"""Action parsers: from what a model produced to a list of `ToolCall`s.

A parser is any object with ``parse(action) -> list[ToolCall]`` and a
``format_hint`` that tells the model how to call tools. An empty list means the
action was plain text with no tool call. Malformed input raises `ParseError`
(defined in `agentenv.core.errors`, re-exported here), which `Env.step` turns into an
error observation and a format penalty.

Built in: `HermesParser` (``<tool_call>{...}</tool_call>``, the format of the
Qwen and Hermes chat templates), `JSONParser` (a bare JSON object), `OpenAIParser`
(structured ``tool_calls`` of an OpenAI assistant message) and `AutoParser`, the
default, which picks among them by the shape of the action.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from agentenv.core import _safejson
from agentenv.core.errors import ParseError
from agentenv.core.types import Action, ToolCall

__all__ = [
    "ActionParser",
    "AutoParser",
    "HermesParser",
    "JSONParser",
    "OpenAIParser",
    "ParseError",
    "tool_call_text",
]

MAX_CALLS_PER_ACTION = 16
MAX_ARGUMENT_DEPTH = 32
"""Tool arguments nested deeper are refused: no tool needs them, and deep values break encoders later."""


@runtime_checkable
class ActionParser(Protocol):
    format_hint: str

    def parse(self, action: Action) -> list[ToolCall]: ...


_CALL_KEYS = frozenset({"name", "arguments", "parameters", "id"})


def _call_from_obj(obj: Any, index: int) -> ToolCall:
    if type(obj) is dict and len(obj) == 2:  # the common shape, {"name": ..., "arguments": {...}}: checked fast
        name, arguments = obj.get("name"), obj.get("arguments")
        if type(name) is str and type(arguments) is dict and 0 < len(name) <= 128:
            return ToolCall(name, arguments)
    if not isinstance(obj, dict):
        raise ParseError(f"tool call {index}: expected a JSON object, got {type(obj).__name__}")
    if not obj.keys() <= _CALL_KEYS:
        unknown = sorted(set(obj) - _CALL_KEYS)
        raise ParseError(f'tool call {index}: unexpected keys {unknown}; use "name" and "arguments"')
    name = obj.get("name")
    if name is None:
        raise ParseError(f'tool call {index}: missing "name"')
    if not isinstance(name, str) or not 0 < len(name) <= 128:
        raise ParseError(f'tool call {index}: "name" must be a string of 1 to 128 characters')
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):  # some models emit arguments as a JSON string
        try:
            arguments = _safejson.loads(arguments, max_depth=MAX_ARGUMENT_DEPTH) if arguments.strip() else {}
        except _safejson.UnsafeJSON as e:
            raise ParseError(f'tool call {index}: "arguments": {e}') from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ParseError(f'tool call {index}: "arguments" must be an object, got {type(arguments).__name__}')
    call_id = obj.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise ParseError(f'tool call {index}: "id" must be a string')
    # Whatever reaches here was checked already: JSON text by _loads / _safejson.loads,
    # an assistant message by the env's boundary (agentenv.core._admit).
    return ToolCall(name, arguments, call_id)


def checked_call(call: ToolCall, index: int = 1) -> ToolCall:
    """``call`` if its name, id and arguments are plain JSON data that every later
    reader can take (see `agentenv.core._safejson`); otherwise `ParseError`."""
    found = _safejson.problem(
        {"name": call.name, "id": call.id, "arguments": call.arguments}, max_depth=MAX_ARGUMENT_DEPTH + 1
    )
    if found is not None:
        where, what = found
        raise ParseError(f"tool call {index}: {_safejson.clean_text(where)}: {what}")
    return call


def _loads(text: str, index: int) -> Any:
    try:
        return _safejson.loads(text, max_depth=MAX_ARGUMENT_DEPTH + 1)
    except _safejson.UnsafeJSON as e:
        raise ParseError(f"tool call {index}: {e}") from None


def _text_of(action: Action) -> str:
    if isinstance(action, str):
        return action
    if isinstance(action, dict):
        if action.get("tool_calls"):  # calls this parser cannot read must not be recorded as made
            raise ParseError("this parser reads calls in the message's text, not its tool_calls; use OpenAIParser")
        content = action.get("content") or ""
        if not isinstance(content, str):
            raise ParseError(f"message content must be a string, got {type(content).__name__}")
        return content
    raise ParseError(f"expected text, got {type(action).__name__}")


_new_call = object.__new__
_set_name = vars(ToolCall)["name"].__set__  # the slots' own descriptors
_set_arguments = vars(ToolCall)["arguments"].__set__
_set_id = vars(ToolCall)["id"].__set__


def _one_hermes_call(text: str) -> list[ToolCall] | None:
    """The one call of ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (and
    nothing else in the text but whitespace around the JSON), read with the fewest steps;
    None for anything else, which `_hermes_calls` reads (and reports)."""
    start = text.find("<tool_call>")
    if start < 0:
        return None
    end = text.find("</tool_call>", start)
    if end < 0 or text.find("<tool_call>", end) >= 0 or (start and not text[:start].isspace()):
        return None
    body = text[start + 11 : end].strip(" \t\n\r")  # JSON's own whitespace, as json.loads allows
    obj = _safejson.read_harmless(body, MAX_ARGUMENT_DEPTH + 1)
    if type(obj) is dict and len(obj) == 2:  # {"name": ..., "arguments": {...}}, as _call_from_obj checks it
        name, arguments = obj.get("name"), obj.get("arguments")
        if type(name) is str and type(arguments) is dict and 0 < len(name) <= 128:
            # What ToolCall.__post_init__ checks was checked just above; its frozen __init__
            # (each field through object.__setattr__, then the checks again) was a third of a parse.
            call = _new_call(ToolCall)
            _set_name(call, name)
            _set_arguments(call, arguments)
            _set_id(call, None)
            return [call]
    return None


class HermesParser:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block per call."""

    format_hint = 'To call a tool, write <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>.'

    def parse(self, action: Action) -> list[ToolCall]:
        text = action if type(action) is str else _text_of(action)
        calls = _one_hermes_call(text)  # the common case, read with the fewest steps
        return _hermes_calls(text) if calls is None else calls


def _hermes_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>`` block of ``text`` (`ParseError` for one that is not a call)."""
    start = text.find("<tool_call>")
    if start < 0:
        if "</tool_call>" in text:
            raise ParseError("found </tool_call> without a matching <tool_call>")
        return []
    start += len("<tool_call>")
    bodies = []
    while start >= 0:
        end = text.find("</tool_call>", start)
        bodies.append(text[start:] if end < 0 else text[start:end])  # a call cut at the stop string
        if len(bodies) > MAX_CALLS_PER_ACTION:
            raise ParseError(f"at most {MAX_CALLS_PER_ACTION} tool calls per turn")
        start = -1 if end < 0 else text.find("<tool_call>", end)
        if start >= 0:
            start += len("<tool_call>")
    return [_call_from_obj(_loads(body, i), i) for i, body in enumerate(bodies, start=1)]


def _unfenced(text: str) -> str:
    """``text`` without a ```json fence around the whole of it (the body stripped), or
    ``text`` itself. By slicing: a regex with two runs of whitespace around a lazy body
    backtracks in cubic time on a fence left open (an action of 4,000 characters took
    over a minute)."""
    if len(text) < 6 or not (text.startswith("```") and text.endswith("```")):
        return text
    body = text[3:-3]
    return (body[4:] if body.startswith("json") else body).strip()


class JSONParser:
    """A bare JSON object ``{"name": ..., "arguments": {...}}`` (or a list of them),
    optionally inside a ```json fence."""

    format_hint = 'To call a tool, reply with only a JSON object {"name": "TOOL", "arguments": {...}}.'

    def parse(self, action: Action) -> list[ToolCall]:
        text = _unfenced(_text_of(action).strip())
        if not text.startswith(("{", "[")):
            return []
        obj = _loads(text, 1)
        items = obj if isinstance(obj, list) else [obj]
        if len(items) > MAX_CALLS_PER_ACTION:
            raise ParseError(f"at most {MAX_CALLS_PER_ACTION} tool calls per turn, got {len(items)}")
        return [_call_from_obj(item, i) for i, item in enumerate(items, start=1)]


class OpenAIParser:
    """The ``tool_calls`` of an OpenAI assistant message (or a `ToolCall`)."""

    format_hint = "Call tools through the API's tool-calling interface."

    def parse(self, action: Action) -> list[ToolCall]:
        if isinstance(action, ToolCall):
            return [checked_call(action)]
        if not isinstance(action, dict):
            raise ParseError(f"expected an assistant message object, got {type(action).__name__}")
        raw = action.get("tool_calls") or []
        if not isinstance(raw, list):
            raise ParseError(f'"tool_calls" must be a list, got {type(raw).__name__}')
        if len(raw) > MAX_CALLS_PER_ACTION:
            raise ParseError(f"at most {MAX_CALLS_PER_ACTION} tool calls per turn, got {len(raw)}")
        calls = []
        for i, item in enumerate(raw):
            if not isinstance(item, dict) or not isinstance(item.get("function"), dict):
                raise ParseError(f'tool_calls[{i}]: expected {{"type": "function", "function": {{...}}}}')
            fn = dict(item["function"])
            if item.get("id") is not None:
                fn["id"] = item["id"]
            calls.append(_call_from_obj(fn, i + 1))
        return calls


class AutoParser:
    """The default: structured calls, then ``<tool_call>`` blocks, then a bare JSON object."""

    format_hint = HermesParser.format_hint

    def __init__(self) -> None:
        self._hermes = HermesParser()
        self._json = JSONParser()
        self._openai = OpenAIParser()

    def parse(self, action: Action) -> list[ToolCall]:
        if type(action) is str and "<tool_call>" in action:  # the common case first
            calls = _one_hermes_call(action)
            return _hermes_calls(action) if calls is None else calls
        if isinstance(action, ToolCall):
            return [checked_call(action)]
        if isinstance(action, dict):
            if action.get("tool_calls"):
                return self._openai.parse(action)
            action = _text_of(action)
        if not isinstance(action, str):
            raise ParseError(f"expected text, a ToolCall or an assistant message, got {type(action).__name__}")
        if "<tool_call>" in action or "</tool_call>" in action:
            return self._hermes.parse(action)
        return self._json.parse(action)


def tool_call_text(name: str, /, **arguments: Any) -> str:
    """The ``<tool_call>`` text of one call, as a Hermes/Qwen-template model writes it."""
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>{payload}</tool_call>"
