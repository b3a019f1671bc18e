r"""The final answer of a reply, and whether it equals a reference: the question-answer env's rule.

    extract_answer("... so the total is \boxed{1,000}.")   # "1,000"
    same_answer("1,000", "1e3")                             # True
    is_correct(reply, "1000")                               # both at once

The rule, step by step; each step costs time linear in the reply's length, whatever it holds.

1. Reasoning is skipped: only the text after the last ``</think>`` counts.
2. Markup: when that text holds a complete ``\boxed{...}`` (braces balanced) or
   ``<answer>...</answer>``, the answer is the content of the one that *closes last*,
   read again the same way up to three times (``<answer>\boxed{4}</answer>`` is 4).
   Only the last one counts: ``\boxed{1} \boxed{2}`` answers 2, so a reply stuffed
   with candidates is scored on one of them. Without markup, the whole text is the answer.
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
`agentenv.envs.adapters.qa.QAEnv.verify`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

__all__ = ["extract_answer", "is_correct", "matches", "normalize", "parse_number", "same_answer"]

MAX_REREADS = 3
"""How many times an extracted answer is read again for markup inside it."""
_THINK_END = "</think>"
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"
_BRACES = re.compile(r"\\boxed\s*\{|\{|\}")
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")
_SPACE = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")
_WRAPPERS = (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_NUMBER = re.compile(
    r"(?P<sign>[+-]?)\$?(?P<whole>\d{1,3}(?:,\d{3})+|\d*)(?:\.(?P<frac>\d+))?(?:e(?P<exp>[+-]?\d{1,18}))?",
    re.ASCII,
)

Number = tuple[str, str, int]
"""(sign, significant digits without leading or trailing zeros, exponent): equal tuples, equal values."""


def extract_answer(reply: str) -> str:
    """The answer part of ``reply`` (steps 1 and 2 of the module's rule), not yet normalised."""
    end = reply.rfind(_THINK_END)
    text = reply if end < 0 else reply[end + len(_THINK_END) :]
    for _ in range(MAX_REREADS + 1):
        inner = _last_markup(text)
        if inner is None:
            break
        text = inner
    return text


def _last_markup(text: str) -> str | None:
    """The content of the ``\\boxed{}`` or ``<answer>`` that closes last, or None without one."""
    best_end, best = -1, None
    boxed = _last_boxed(text)
    if boxed is not None:
        best_end, best = boxed
    close = text.rfind(_ANSWER_CLOSE)
    if close >= 0:
        open_ = text.rfind(_ANSWER_OPEN, 0, close)
        if open_ >= 0 and close + len(_ANSWER_CLOSE) > best_end:
            best = text[open_ + len(_ANSWER_OPEN) : close]
    return best


def _last_boxed(text: str) -> tuple[int, str] | None:
    """(end, content) of the ``\\boxed{...}`` whose closing brace comes last: one pass, a
    stack of open braces, so nesting and many boxes cost no more than the text's length."""
    if "\\boxed" not in text:
        return None
    stack: list[int] = []  # per open brace: where a box's content starts, or -1 for a plain brace
    last: tuple[int, int, int] | None = None
    for match in _BRACES.finditer(text):
        token = match.group()
        if token == "}":
            if stack and (start := stack.pop()) >= 0:
                last = (match.end(), start, match.start())
        else:
            stack.append(match.end() if token != "{" else -1)
    if last is None:
        return None
    end, start, stop = last
    return end, text[start:stop]


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
    """Whether the answer in ``reply`` equals ``reference`` or one of ``aliases``."""
    return matches(extract_answer(reply), reference, aliases)
