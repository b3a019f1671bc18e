"""JSON that cannot break what reads it later: the checks for untrusted values.

A policy's action, a task file or a service's answer is parsed by `json.loads`,
which lets through values that break something far from the boundary: a lone
surrogate (``"\\udc80"``) that no UTF-8 writer accepts, nesting that overflows a
recursive encoder, an integer too long for ``str()``. `loads` turns every way
`json.loads` can fail (bad JSON, a number past the digit limit, nesting past the
stack) into `UnsafeJSON`, and `problem` finds what parsing lets through, without
recursion, so deep input cannot overflow the check itself.

Left out: schema checks (pydantic does those), size limits on whole documents
(the caller caps the text before parsing).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = [
    "MAX_INT_BITS",
    "NOT_READ",
    "UnsafeJSON",
    "clean_text",
    "first_non_finite",
    "is_unicode",
    "loads",
    "problem",
    "read_harmless",
    "scan",
]

MAX_INT_BITS = 4096
"""Longer integers are refused: ``str()`` of one past ~4,300 digits raises (Python's limit)."""
_SHORT = 1200  # fewer characters than the digits of a MAX_INT_BITS integer (1,234)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class UnsafeJSON(ValueError):
    """The text is not JSON, or holds a value that would break a later reader."""


def loads(text: str | bytes, *, max_depth: int) -> Any:
    """``json.loads`` whose every failure is `UnsafeJSON`, then `problem` on the value."""
    if type(text) is str:
        value = read_harmless(text.strip(_JSON_SPACE), max_depth)  # JSON's own whitespace, as json.loads allows
        if value is not NOT_READ:
            return value
    try:
        value = _decode(text)
    except json.JSONDecodeError as e:
        raise UnsafeJSON(f"invalid JSON: {e.msg} at char {e.pos}") from None
    except RecursionError:
        raise UnsafeJSON("invalid JSON: nested too deeply") from None
    except ValueError as e:  # an integer of more digits than int() converts
        raise UnsafeJSON(f"invalid JSON: {e}") from None
    found = problem(value, max_depth=max_depth)
    if found is not None:
        where, what = found
        raise UnsafeJSON(f"{where}: {what}" if where else what)
    return value


_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # the C scanner, without json.loads' frames


def scan(text: str) -> Any:
    """``json.loads(text)`` for text with nothing around the value (no check: see `loads`)."""
    try:
        value, end = _scan(text, 0)
    except StopIteration as e:
        raise json.JSONDecodeError("Expecting value", text, e.value) from None
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _decode(text: str | bytes) -> Any:
    """What ``json.loads(text)`` returns, for less (actions are parsed on every step)."""
    if type(text) is not str:
        return json.loads(text)
    return scan(text.strip(_JSON_SPACE))  # JSON's own whitespace only, as json.loads allows


_JSON_SPACE = " \t\n\r"


NOT_READ: Any = object()
"""What `read_harmless` gives for text it leaves to `loads`."""


def read_harmless(text: str, max_depth: int) -> Any:
    """The JSON value of ``text`` (nothing around it) when the text alone shows that it
    cannot hold what `problem` refuses: too short for a huge integer, too few brackets
    to nest deeply, and no escape that could make a lone surrogate. `NOT_READ` for any
    other text, and for text that is not JSON: `loads` reads those, and says what is
    wrong. The common case, on every action, in one call."""
    if (
        len(text) >= _SHORT
        or text.count("[") + text.count("{") > max_depth
        or ("\\u" in text and _SURROGATE_ESCAPE.search(text) is not None)
    ):
        return NOT_READ
    try:
        value, end = _scan(text, 0)
    except (StopIteration, ValueError):  # not JSON (or digits past int()'s limit, which a short text cannot hold)
        return NOT_READ
    return value if end == len(text) else NOT_READ


def problem(value: Any, *, max_depth: int) -> tuple[str, str] | None:
    """(path, what is wrong) for the first value that JSON data must not hold, or None.

    Refused: nesting deeper than ``max_depth``, strings or keys with a lone
    surrogate, keys that are not strings, integers of more than `MAX_INT_BITS`
    bits, and any type but dict, list, str, int, float, bool and None."""
    if _plain(value, max_depth):  # the common case, on every action: no paths built
        return None
    return _locate(value, max_depth)


def _plain(value: Any, max_depth: int) -> bool:
    stack = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        kind = type(item)
        if kind is str:
            if not item.isascii() and not is_unicode(item):
                return False
        elif kind is dict:
            if depth >= max_depth:
                return False
            for key, v in item.items():
                if type(key) is not str or not (key.isascii() or is_unicode(key)):
                    return False
                push((v, depth + 1))
        elif kind is list:
            if depth >= max_depth:
                return False
            for v in item:
                push((v, depth + 1))
        elif kind is int:
            if item.bit_length() > MAX_INT_BITS:
                return False
        elif not (item is None or kind is bool or kind is float):
            return False
    return True


def _locate(value: Any, max_depth: int) -> tuple[str, str] | None:
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        path, item, depth = stack.pop()
        kind = type(item)
        if kind is str:
            if not is_unicode(item):
                return path, "a string holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text"
        elif kind is int:
            if item.bit_length() > MAX_INT_BITS:
                return path, f"an integer of {item.bit_length()} bits; the limit is {MAX_INT_BITS}"
        elif kind is dict or kind is list:
            if depth >= max_depth:  # named by its top field: the full path would be as deep
                return path.split(".", 1)[0], f"nested more than {max_depth} deep"
            if kind is list:
                stack.extend((f"{path}.{i}" if path else str(i), v, depth + 1) for i, v in enumerate(item))
                continue
            for key, v in item.items():
                if type(key) is not str:
                    return path, f"a key of type {type(key).__name__}; JSON keys are strings"
                name = f"{path}.{key}" if path else key
                if not is_unicode(key):
                    return clean_text(name), "a key holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text"
                stack.append((name, v, depth + 1))
        elif not (item is None or kind is bool or kind is float):
            return path, f"a value of type {kind.__name__}, which is not JSON"
    return None


def first_non_finite(value: Any) -> str | None:
    """The path of the first NaN or infinity in ``value`` (JSON data), in document order, or
    None. `json.loads` and pydantic's parser read them (``NaN``, ``Infinity``, ``1e309``), but
    JSON cannot write them back: a record holding one is written with null there. Without
    recursion, so any depth the parser let through is safe to walk."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path
        children = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        stack.extend(reversed([(f"{path}.{key}" if path else str(key), v) for key, v in children]))
    return None


def is_unicode(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (no lone surrogates)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def clean_text(text: str) -> str:
    """``text`` with each lone surrogate spelled out as ``\\udc80``: writable, and still telling."""
    return text if is_unicode(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")
