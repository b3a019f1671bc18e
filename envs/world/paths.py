"""Write and read paths: which parts of the world state a tool may change or is shown.

A path pattern is an RFC 6901 JSON Pointer whose tokens may hold two kinds of
placeholder, matched against one whole (unescaped) token of a concrete pointer:

    {name}   the value of the tool's argument ``name``, literally (an agent's "*" is a "*")
    *        any run of characters, "/" included ("a.txt" or "/home/u/a.txt")

So ``/files/{path}`` lets ``rm(path="/tmp/x")`` touch the entry ``/tmp/x`` of ``files``
and anything below it, and nothing else; ``/files/{path}~1*`` (the token ``{path}/*``,
its "/" escaped as in any JSON Pointer) adds the entries whose key starts with
``/tmp/x/`` (a flat map of a directory tree); ``/accounts/*/balance`` any account's
balance. A pointer is allowed when a pattern
matches its first tokens: a write at or below an allowed path. The root pointer ""
is allowed only by the pattern "".

Left out: wildcards spanning several tokens (``**``), and ranges of array indices.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["BoundPath", "PathPattern", "allowed", "bind_all", "escape", "select", "split_pointer"]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}|\*")


def escape(token: str) -> str:
    """One JSON Pointer token for ``token`` (``~`` and ``/`` escaped)."""
    return token.replace("~", "~0").replace("/", "~1")


def split_pointer(pointer: str) -> list[str]:
    """The unescaped tokens of a JSON Pointer; ValueError for a malformed one."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"a JSON Pointer starts with '/', got {pointer[:80]!r}")
    tokens = pointer[1:].split("/")
    if "~" not in pointer:
        return tokens
    for token in tokens:
        if re.search(r"~(?![01])", token):
            raise ValueError(f"bad escape in JSON Pointer token {token[:80]!r} ('~' must be '~0' or '~1')")
    return [t.replace("~1", "/").replace("~0", "~") for t in tokens]


@dataclass(frozen=True, slots=True)
class PathPattern:
    """One write or read path of a tool (see the module docstring for the syntax)."""

    pattern: str
    tokens: tuple[str, ...]
    arguments: frozenset[str]
    """The argument names the pattern refers to."""

    @classmethod
    def parse(cls, pattern: str) -> PathPattern:
        if not isinstance(pattern, str):
            raise TypeError(f"a path pattern is a string, got {type(pattern).__name__}")
        tokens = split_pointer(pattern)
        names = frozenset(m.group(1) for t in tokens for m in _PLACEHOLDER.finditer(t) if m.group(1))
        return cls(pattern, tuple(tokens), names)

    def bind(self, arguments: Mapping[str, Any]) -> BoundPath:
        """The pattern with the call's argument values in place of their placeholders."""
        matchers: list[Matcher] = []
        shown = []
        for token in self.tokens:
            pieces: list[str | None] = []  # literal text, and None for a "*"
            last = 0
            for m in _PLACEHOLDER.finditer(token):
                pieces.append(token[last : m.start()])
                pieces.append(None if m.group(0) == "*" else _token_value(arguments, m.group(1)))
                last = m.end()
            pieces.append(token[last:])
            shown.append(escape("".join("*" if p is None else p for p in pieces)))
            matchers.append(_matcher(pieces))
        return BoundPath(self.pattern, tuple(matchers), "".join("/" + t for t in shown))


@dataclass(frozen=True, slots=True)
class _Prefix:
    """Matches tokens that start with ``prefix`` (a token ending in its only "*")."""

    prefix: str


@dataclass(frozen=True, slots=True)
class _Glob:
    """Matches tokens made of ``parts`` (literal text) with any text between each two:
    ``a*b*c`` is ``("a", "b", "c")``. Matched in one pass (the first part at the start,
    the last at the end, each middle one at its first place after the one before), where
    a regex of several ``.*`` backtracks in polynomial time on a long token (``*a*a*a*b``
    on 400 characters: seconds)."""

    parts: tuple[str, ...]

    def fullmatch(self, got: str) -> bool:
        first, *middle, last = self.parts
        end = len(got) - len(last)
        if end < len(first) or not got.startswith(first) or not got.endswith(last):
            return False
        at = len(first)
        for part in middle:
            found = got.find(part, at, end)
            if found < 0:
                return False
            at = found + len(part)
        return True


Matcher = str | _Prefix | _Glob


def _matcher(pieces: list[str | None]) -> Matcher:
    """The cheapest test for a token made of literal pieces and "*"s (None)."""
    stars = pieces.count(None)
    if stars == 0:
        return "".join(p for p in pieces if p is not None)  # compared as a string
    if stars == 1 and pieces[-2] is None and pieces[-1] == "":
        return _Prefix("".join(p for p in pieces[:-2] if p is not None))
    parts, current = [], ""
    for piece in pieces:
        if piece is None:
            parts.append(current)
            current = ""
        else:
            current += piece
    return _Glob((*parts, current))


def _matches(want: Matcher, got: str) -> bool:
    if isinstance(want, str):
        return want == got
    if isinstance(want, _Prefix):
        return got.startswith(want.prefix)
    return want.fullmatch(got)


@dataclass(frozen=True, slots=True)
class BoundPath:
    """A path pattern with one call's arguments in place: what that call may write or is shown."""

    pattern: str
    tokens: tuple[Matcher, ...]
    shown: str
    """The pointer with the arguments in place ("*" left as is): what a world model is told."""

    def covers(self, tokens: Sequence[str]) -> bool:
        """Whether a pointer with these tokens is at or below this path."""
        if len(tokens) < len(self.tokens):
            return False
        return all(_matches(want, got) for want, got in zip(self.tokens, tokens, strict=False))

    def matches(self, tokens: Sequence[str]) -> bool:
        """Whether a pointer with these tokens is exactly this path."""
        return len(tokens) == len(self.tokens) and self.covers(tokens)


def bind_all(patterns: Iterable[PathPattern], arguments: Mapping[str, Any]) -> list[BoundPath]:
    return [p.bind(arguments) for p in patterns]


def allowed(pointer: str, bound: Sequence[BoundPath]) -> bool:
    """Whether ``pointer`` lies at or below one of the bound patterns (False if malformed)."""
    try:
        tokens = split_pointer(pointer)
    except ValueError:
        return False
    return any(b.covers(tokens) for b in bound)


def select(state: Any, bound: Sequence[BoundPath]) -> dict[str, Any]:
    """The parts of ``state`` the bound patterns name, as {JSON Pointer: value}: the
    slice of the state a tool declares it reads. Paths that name nothing are left out."""
    out: dict[str, Any] = {}
    for b in bound:
        for pointer, value in _walk(state, b.tokens, ""):
            out[pointer] = value
    return dict(sorted(out.items()))


def _walk(node: Any, tokens: Sequence[Matcher], at: str) -> Iterator[tuple[str, Any]]:
    if not tokens:
        yield at, node
        return
    head, rest = tokens[0], tokens[1:]
    if isinstance(node, dict):
        keys: Iterable[str] = [head] if isinstance(head, str) else [k for k in node if _matches(head, k)]
        for key in keys:
            if key in node:
                yield from _walk(node[key], rest, f"{at}/{escape(key)}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            if _matches(head, str(i)):
                yield from _walk(item, rest, f"{at}/{i}")


def _token_value(arguments: Mapping[str, Any], name: str) -> str:
    if name not in arguments:
        raise KeyError(f"the path names argument {name!r}, which the call does not have")
    value = arguments[name]
    if isinstance(value, bool) or value is None or not isinstance(value, (str, int)):
        raise TypeError(f"argument {name!r} is used in a path, so it must be a string or an integer")
    return str(value)
