"""The browser tools' argument types: the checks every action passes before it reaches the browser.

Each type is a pydantic `Annotated` string whose validator answers with a message
the agent can act on (`PydanticCustomError`, shown as the ``format`` error of the
call). What needs the live page (whether a ref is on it, whether a URL is on the
site's origin) is checked by validators the env binds to itself (env.py), on top
of these. Nothing here ever becomes script: text is typed into fields by Playwright,
keys are pressed by name.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

__all__ = ["MAX_ANSWER_CHARS", "MAX_TEXT_CHARS", "AnswerText", "InputText", "Key", "OptionLabel", "Ref", "SiteUrl"]

MAX_TEXT_CHARS = 5_000
MAX_ANSWER_CHARS = 2_000
MAX_URL_CHARS = 2_000
_REF = re.compile(r"e[1-9][0-9]{0,6}")
_MODIFIERS = frozenset({"Shift", "Control", "Alt", "Meta", "ControlOrMeta"})
_KEYS = frozenset(
    {
        *(f"F{i}" for i in range(1, 13)),
        *(f"Digit{i}" for i in range(10)),
        *(f"Key{c}" for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
        *(f"Numpad{i}" for i in range(10)),
        "Backquote", "Minus", "Equal", "Backslash", "Backspace", "Tab", "Delete", "Escape", "Enter", "Space",
        "ArrowDown", "ArrowUp", "ArrowLeft", "ArrowRight", "End", "Home", "Insert", "PageDown", "PageUp",
        "BracketLeft", "BracketRight", "Semicolon", "Quote", "Comma", "Period", "Slash",
        "NumpadAdd", "NumpadSubtract", "NumpadMultiply", "NumpadDivide", "NumpadDecimal", "NumpadEnter",
        *_MODIFIERS,
    }
)  # fmt: skip
"""Key names Playwright presses (its US layout); any single printable ASCII character is a key
too (the layout has no other: "é" fails in the browser, so it is refused here, to be typed)."""
_CUT_COPY_PASTE = frozenset({"c", "x", "v", "keyc", "keyx", "keyv", "insert", "numpad0"})  # Numpad0 is Insert
_CLIPBOARD = {"Control": _CUT_COPY_PASTE, "ControlOrMeta": _CUT_COPY_PASTE, "Meta": _CUT_COPY_PASTE,
              "Shift": frozenset({"insert", "delete"})}  # fmt: skip
"""Chromium's clipboard is the browser's, shared by every episode's context: a copy in one
episode would be pasted in another. The agent types text instead."""


def _error(kind: str, reason: str) -> PydanticCustomError:
    return PydanticCustomError(kind, "{reason}", {"reason": reason})


def _ref(value: str) -> str:
    if not _REF.fullmatch(value):
        raise _error("ref", f"a ref looks like e12 (the [e12] before an element in the page view), got {value[:40]!r}")
    return value


def _text(limit: int, *, newlines: bool) -> AfterValidator:
    allowed = "\n\t" if newlines else ""

    def check(value: str) -> str:
        if len(value) > limit:
            raise _error("too_long", f"at most {limit} characters, got {len(value)}")
        for i, char in enumerate(value):
            if char in allowed:
                continue
            if unicodedata.category(char) in ("Cc", "Cs"):  # control characters, lone surrogates
                raise _error(
                    "control_character",
                    f"the text holds the control character U+{ord(char):04X} at position {i}; "
                    f"type plain text{' (newlines and tabs are fine)' if newlines else ''}",
                )
        return value

    return AfterValidator(check)


def _key(value: str) -> str:
    parts = value.split("+") if value != "+" and not value.endswith("++") else [*value[:-2].split("+"), "+"]
    *modifiers, key = [p for p in parts if p != ""] or [""]
    bad = [m for m in modifiers if m not in _MODIFIERS]
    if bad:
        raise _error("key", f"unknown modifier {bad[0][:20]!r}; modifiers are {', '.join(sorted(_MODIFIERS))}")
    if any(key.lower() in _CLIPBOARD.get(m, ()) for m in modifiers):
        raise _error(
            "key",
            f"{value[:40]!r} uses the clipboard, which this browser does not offer (it would carry text "
            "between episodes); put text in a field with fill",
        )
    printable = len(key) == 1 and key.isascii() and key.isprintable()
    if key not in _KEYS and not printable:
        typed = " (type other characters into a field instead)" if len(key) == 1 else ""
        raise _error(
            "key",
            f"unknown key {key[:30]!r}; press a key by name (Enter, Tab, Escape, ArrowDown, PageDown, Backspace, "
            f"F1..F12, ...), a single ASCII character{typed}, or a combination such as Control+a",
        )
    return value


def _url(value: str) -> str:
    if len(value) > MAX_URL_CHARS:
        raise _error("url", f"the URL is {len(value)} characters long; the limit is {MAX_URL_CHARS}")
    if any(c.isspace() or unicodedata.category(c) in ("Cc", "Cs") for c in value) or "\\" in value:
        raise _error("url", "the URL holds whitespace, a control character or a backslash; give a path such as /cart")
    return value


Ref = Annotated[str, AfterValidator(_ref)]
InputText = Annotated[str, _text(MAX_TEXT_CHARS, newlines=True)]
AnswerText = Annotated[str, _text(MAX_ANSWER_CHARS, newlines=True)]
OptionLabel = Annotated[str, _text(500, newlines=False)]
Key = Annotated[str, AfterValidator(_key)]
SiteUrl = Annotated[str, AfterValidator(_url)]
"""Checked for shape here; the env checks that it stays on the site."""
