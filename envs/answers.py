r"""The one answer of a reply, and whether it equals a reference: the rule every adapter reads replies by.

    extract_answer("... so the total is \boxed{1,000}.")   # "1,000"
    extract_answer("\boxed{1} or \boxed{2}")               # AmbiguousAnswer: a format error
    same_answer("1,000", "1e3")                             # True
    is_correct(reply, "1000")                               # both at once

The question-answer env (`agentenv.envs.adapters.qa`) and reasoning-gym's
(`agentenv.envs.adapters.reasoning_gym`) read the answer with `extract_answer`;
TextArena's (`agentenv.envs.adapters.textarena_games`) reads a move with
`extract_move`, the same rule with square brackets as one more marker. Each makes an
`AmbiguousAnswer` a format error: an error observation, the format penalty, nothing
scored or played, task reward 0 unless a later reply answers.

The rule, step by step; each step costs time linear in the reply's length, whatever it holds.

1. Reasoning is skipped: only the text after the last ``</think>`` counts.
2. Markers: ``<answer>...</answer>`` (the tag's name in any case: ``<Answer>``) and
   ``\boxed{...}`` (its braces balanced); for a move, ``[...]`` too. **A reply holds at
   most one answer.** Markers may hold one marker of another kind, which is read in
   turn (``<answer>\boxed{4}</answer>`` is 4); the answer is the innermost one's content.
   Without any marker, the whole text is the answer. A reply is an `AmbiguousAnswer`,
   a format error, when it holds

   - two or more markers side by side, at any depth: ``\boxed{1} \boxed{2}``,
     ``<answer>1</answer> <ANSWER>2</ANSWER>``, ``<answer>\boxed{1} \boxed{2}</answer>``,
     whichever of them is right;
   - a marker inside a marker of its own kind: ``<answer><answer>4</answer></answer>``;
   - markup that does not pair up: an opening left open (``<answer>1 <answer>2</answer>``,
     ``\boxed{4``), a closing tag or bracket without its opening, or markers that cross
     (``<answer>\boxed{4</answer>}``).

   An empty marker (``\boxed{}``, as in a quoted "put the answer in \boxed{}") holds no
   answer and is not counted. One marker holding a list (``<answer>1, 2, 3</answer>``) is
   one answer, the list: it equals a reference that is that list, and no member of it.
3. Normalisation (`normalize`): Unicode NFKC, but superscripts, subscripts, circled
   and fraction forms are kept (NFKC reads ``4²`` as ``42``); invisible format characters (zero-width
   spaces, soft hyphens, direction marks) dropped; control characters and whitespace runs
   made one space; trimmed; one enclosing ``$...$``, ``\(...\)`` or ``\[...\]`` removed;
   trailing periods removed; case folded.
4. Numbers (`parse_number`): when both sides read as decimal numbers, they are equal when
   their values are, exactly: no tolerance, no rounding. A number is an optional sign, an
   optional ``$``, digits (thousands commas allowed only in groups of three), an optional
   fraction and an optional exponent: "1,000" == "1000" == "1e3" == "1000.0" == "$1,000";
   "1,00" and "1,2,3" are not numbers (so a list of candidates is not one). Values are
   compared as (sign, significant digits, exponent), never built as Python numbers, so
   "1e999999" or a 100,000-digit reply costs no more than reading it. "nan", "inf" and
   "infinity" are words, not numbers, and equal only the same word.
5. Otherwise the normalised texts must be equal.

Left out: fractions ("3/4" against "0.75"), LaTeX expressions (``\frac{1}{2}``), units
("72 dollars"), tolerances, unordered lists. A task set that needs them overrides
`agentenv.envs.adapters.qa.QAEnv.verify`. Left out of step 2: telling a list that is the
answer from a list of guesses (the scorer's business: reasoning-gym's hedge check).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from agentenv.core.errors import ParseError

__all__ = [
    "AmbiguousAnswer",
    "extract_answer",
    "extract_move",
    "is_correct",
    "matches",
    "normalize",
    "parse_number",
    "same_answer",
]

_THINK_END = "</think>"
_TEXT_TOKENS = re.compile(r"(?i:<answer>|</answer>)|\\boxed\s*\{|\{|\}")
_MOVE_TOKENS = re.compile(r"(?i:<answer>|</answer>)|\\boxed\s*\{|\{|\}|\[|\]")
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")
_SPACE = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")
_WRAPPERS = (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_NUMBER = re.compile(
    r"(?P<sign>[+-]?)\$?(?P<whole>\d{1,3}(?:,\d{3})+|\d*)(?:\.(?P<frac>\d+))?(?:e(?P<exp>[+-]?\d{1,18}))?",
    re.ASCII,
)

Number = tuple[str, str, int]
"""(sign, significant digits without leading or trailing zeros, exponent): equal tuples, equal values."""


class AmbiguousAnswer(ParseError):
    """A reply that holds more than one answer, or answer markup that does not pair up
    (step 2 of the module's rule). Every adapter makes it a format error: it is a
    `ParseError` (and so a `ValueError`), what an action that cannot be read raises."""


# -- step 2: markers -------------------------------------------------------------------

_TAG, _BOX, _BRACKET, _BRACE = "<answer>", "\\boxed{", "[", "{"
"""What the scanner's stack holds: a marker's kind, or a plain brace inside a box."""
_CLOSING = {_TAG: "</answer>", _BOX: "}", _BRACKET: "]"}


@dataclass(slots=True)
class _Marker:
    kind: str
    start: int
    """Where its content starts."""
    end: int = -1
    """Where its content ends (-1 while open)."""
    children: int = 0
    child: _Marker | None = None


def _innermost(text: str, tokens: re.Pattern[str]) -> list[_Marker]:
    """The markers of ``text`` from the outermost in, one per depth (empty without any);
    `AmbiguousAnswer` where the rule of step 2 refuses the text. One pass over the tokens
    with a stack, so nesting and many markers cost no more than the text's length."""
    root = _Marker("", 0)
    stack: list[_Marker | None] = []  # markers, and None for a plain brace inside a box
    open_kinds: dict[str, int] = dict.fromkeys(_CLOSING, 0)
    for match in tokens.finditer(text):
        token = match.group()
        top = stack[-1] if stack else root
        in_box = bool(stack) and (top is None or top.kind == _BOX)
        kind = _kind_of(token)
        if kind == _BRACE:
            if in_box:
                stack.append(None)  # a brace of the box's content, e.g. \frac{1}{2}
        elif kind is not None:  # an opening marker
            if open_kinds[kind]:
                raise AmbiguousAnswer(f"{_shown(kind)} inside {_shown(kind)}: give one answer, unnested")
            open_kinds[kind] += 1
            stack.append(_Marker(kind, match.end()))
        elif token == "}" and not in_box:
            continue  # a brace outside any box is text
        elif token == "}" and top is None:
            stack.pop()  # the closing brace of a plain brace inside a box
        elif top is None or top is root or _CLOSING[top.kind] != token.lower():
            still = next((m for m in reversed(stack) if m is not None), None)
            where = f"while {_shown(still.kind)} is open" if still else f"with no {_opening_of(token)} before it"
            raise AmbiguousAnswer(f"{token!r} comes {where}: answer markup must pair up")
        else:
            stack.pop()
            open_kinds[top.kind] -= 1
            top.end = match.start()
            if top.child is None and not text[top.start : top.end].strip():
                continue  # an empty marker holds no answer: a quoted "put it in \boxed{}"
            parent = next((m for m in reversed(stack) if m is not None), root)
            parent.children += 1
            if parent.children > 1:
                where = "" if parent is root else f" inside {_shown(parent.kind)}"
                raise AmbiguousAnswer(f"more than one answer{where}: give exactly one")
            parent.child = top
    if stack:
        opened = next(m for m in reversed(stack) if m is not None)
        raise AmbiguousAnswer(f"{_shown(opened.kind)} is left open: close it, and give one answer")
    chain = []
    marker = root.child
    while marker is not None:
        chain.append(marker)
        marker = marker.child
    return chain


def _kind_of(token: str) -> str | None:
    """The kind a token opens (`_BRACE` for a plain brace), or None for a closing token."""
    if token in ("}", "]") or token.startswith("</"):
        return None
    if token == "{":
        return _BRACE
    if token == "[":
        return _BRACKET
    return _BOX if token[0] == "\\" else _TAG


def _opening_of(closing: str) -> str:
    return {"}": "\\boxed{", "]": "["}.get(closing, "<answer>")


def _shown(kind: str) -> str:
    return {_TAG: "<answer>", _BOX: "\\boxed{}", _BRACKET: "[...]"}[kind]


def _after_reasoning(reply: str) -> str:
    end = reply.rfind(_THINK_END)
    return reply if end < 0 else reply[end + len(_THINK_END) :]


def extract_answer(reply: str) -> str:
    """The answer part of ``reply`` (steps 1 and 2 of the module's rule), not yet normalised:
    the innermost marker's content, or the whole text after the reasoning without one.
    `AmbiguousAnswer` for a reply holding more than one answer or markup that does not pair up."""
    text = _after_reasoning(reply)
    chain = _innermost(text, _TEXT_TOKENS)
    if not chain:
        return text
    return text[chain[-1].start : chain[-1].end]


def extract_move(reply: str) -> str | None:
    """The content of the one ``[...]`` of ``reply`` (a TextArena move), by the same rule
    with brackets as one more marker: ``I play [4]``, ``<answer>[4]</answer>`` and
    ``\\boxed{[4]}`` are 4. None when the reply names no move; `AmbiguousAnswer` when it
    holds more than one answer (``[1] [2]``, ``[[4]]``, ``<answer>[1]</answer> <answer>x</answer>``)
    or markup that does not pair up (``[4``, ``4]``)."""
    text = _after_reasoning(reply)
    for marker in _innermost(text, _MOVE_TOKENS):
        if marker.kind == _BRACKET:
            return text[marker.start : marker.end]
    return None


# -- steps 3 to 5: comparing ---------------------------------------------------------------


def normalize(text: str) -> str:
    """``text`` as answers are compared (step 3 of the module's rule)."""
    if not text.isascii():  # NFKC and the invisible characters change nothing in ASCII
        text = _INVISIBLE.sub("", _compatible(text))
    text = _SPACE.sub(" ", text).strip()
    for opening, closing in _WRAPPERS:
        if len(text) >= len(opening) + len(closing) and text.startswith(opening) and text.endswith(closing):
            text = text[len(opening) : len(text) - len(closing)].strip()
            break
    return text.rstrip(".").rstrip().casefold()


_KEPT_FORMS = ("<super>", "<sub>", "<circle>", "<fraction>")


def _compatible(text: str) -> str:
    """NFKC of ``text``, keeping the characters whose compatibility form would change a
    value: ``4²`` would be ``42``, ``⑫`` ``12``, ``½`` ``1\u20442``. Runs between them are
    normalised whole, so combining marks still compose. Each distinct character is
    looked up once, so a long reply costs its length in C, not a Python call a character."""
    kept = [ch for ch in set(text) if not ch.isascii() and unicodedata.decomposition(ch).startswith(_KEPT_FORMS)]
    if not kept:
        return unicodedata.normalize("NFKC", text)
    runs = re.split(f"([{''.join(re.escape(ch) for ch in kept)}])", text)  # odd items: the kept characters
    return "".join(run if i % 2 else unicodedata.normalize("NFKC", run) for i, run in enumerate(runs))


def parse_number(text: str) -> Number | None:
    """The exact value of normalised ``text`` if it is a decimal number (step 4), else None."""
    match = _NUMBER.fullmatch(text)
    if match is None:
        return None
    whole, frac = match["whole"].replace(",", ""), match["frac"] or ""
    if not whole and not frac:
        return None
    digits = (whole + frac).lstrip("0")
    if not digits:
        return ("", "0", 0)  # zero, whatever its sign
    significant = digits.rstrip("0")
    exponent = int(match["exp"] or 0) - len(frac) + (len(digits) - len(significant))
    return ("-" if match["sign"] == "-" else "", significant, exponent)


def same_answer(candidate: str, reference: str) -> bool:
    """Whether answer ``candidate`` equals ``reference`` (steps 3 to 5)."""
    return matches(candidate, reference)


def matches(answer: str, reference: str, aliases: Iterable[str] = ()) -> bool:
    """Whether extracted ``answer`` equals ``reference`` or one of ``aliases``. The answer
    is normalised and read as a number once, whatever the number of aliases."""
    a = normalize(answer)
    x = parse_number(a)
    for b in (normalize(r) for r in (reference, *aliases)):
        if a == b or (x is not None and x == parse_number(b)):
            return True
    return False


def is_correct(reply: str, reference: str, aliases: Iterable[str] = ()) -> bool:
    """Whether the answer in ``reply`` equals ``reference`` or one of ``aliases``; False
    for a reply holding more than one answer (an env makes that a format error first)."""
    try:
        return matches(extract_answer(reply), reference, aliases)
    except AmbiguousAnswer:
        return False
