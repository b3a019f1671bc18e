"""What the sites' checks share: answers read strictly, and the changes between the
database as an episode began and as it ended.

Answers: an information task expects one value. `answer_text`, `answer_int` and
`answer_cents` read the agent's whole answer as that one value (whitespace and case
normalised, one pair of quotes and a final full stop dropped) or as nothing, so an
answer listing several candidates never matches.

Changes: a site reads its whole database into a `State` (every table and column but
the side effects of merely looking, such as mail's read flags; rows keyed by their
primary key, with literal SQL in the site's module) and `changes` gives what was
added, removed or changed. That is every task's frame: a writing check requires the
intended change and that nothing else changed anywhere, so an agent that writes many
things to be sure of one scores 0, and an agent that does nothing scores 0; an
information check is wrapped in `read_only`, so a right answer after collateral
damage (the cart emptied, every booking cancelled) scores 0 too. `describe` names
what changed.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Check",
    "State",
    "TableChange",
    "answer_cents",
    "answer_int",
    "answer_text",
    "changes",
    "describe",
    "keyed",
    "normalise",
    "read_only",
]

Row = tuple[Any, ...]
State = Mapping[str, Mapping[Hashable, Row]]
"""Table name -> primary key -> row."""

_MONEY = re.compile(r"^\$?(\d{1,3}(?:,\d{3})+|\d{1,9})(?:\.(\d{1,2}))?$")


def normalise(text: str) -> str:
    """Whitespace collapsed, case folded."""
    return " ".join(text.split()).casefold()


def answer_text(answer: str | None) -> str | None:
    """The answer as one normalised value, or None when there is none."""
    if answer is None:
        return None
    text = normalise(answer).removesuffix(".").strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip().removesuffix(".").strip()
    return text or None


def answer_int(answer: str | None) -> int | None:
    """A whole number written as digits (``7``), else None."""
    text = answer_text(answer)
    if text is None or not (text.isascii() and text.isdecimal()) or len(text) > 9:
        return None
    return int(text)


def answer_cents(answer: str | None) -> int | None:
    """An amount of dollars (``34.50``, ``$34.50``, ``1,240.00``, ``12``) in cents, else None."""
    text = answer_text(answer)
    match = _MONEY.match(text or "")
    if match is None:
        return None
    dollars, cents = match.groups()
    return int(dollars.replace(",", "")) * 100 + int((cents or "0").ljust(2, "0"))


def keyed(rows: Iterable[Sequence[Any]], width: int = 1) -> dict[Hashable, Row]:
    """Rows keyed by their first column (or first ``width`` columns, as a tuple)."""
    out: dict[Hashable, Row] = {}
    for row in rows:
        key = row[0] if width == 1 else tuple(row[:width])
        out[key] = tuple(row)
    return out


@dataclass(frozen=True)
class TableChange:
    added: dict[Hashable, Row] = field(default_factory=dict)
    removed: dict[Hashable, Row] = field(default_factory=dict)
    changed: dict[Hashable, tuple[Row, Row]] = field(default_factory=dict)
    """Key -> (row before, row after)."""

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def changes(before: State, after: State) -> dict[str, TableChange]:
    """The tables that differ between two states, and how."""
    if set(before) != set(after):
        raise ValueError(f"states of different tables: {sorted(before)} vs {sorted(after)}")
    out: dict[str, TableChange] = {}
    for table, old in before.items():
        new = after[table]
        change = TableChange(
            added={k: new[k] for k in new.keys() - old.keys()},
            removed={k: old[k] for k in old.keys() - new.keys()},
            changed={k: (old[k], new[k]) for k in old.keys() & new.keys() if old[k] != new[k]},
        )
        if change:
            out[table] = change
    return out


def describe(changed: Mapping[str, TableChange], limit: int = 20) -> list[str]:
    """What `changes` found, one line per row (``"orders 1003: changed"``), at most ``limit``
    lines and then how many more: the reason a frame does not hold."""
    lines = [
        f"{table} {key!r:.120}: {kind}"  # a key may be text the agent typed
        for table, change in sorted(changed.items())
        for kind, rows in (("added", change.added), ("removed", change.removed), ("changed", change.changed))
        for key in sorted(rows, key=repr)
    ]
    return [*lines[:limit], f"... and {len(lines) - limit} more"] if len(lines) > limit else lines


Check = Callable[..., float]


def read_only(state: Callable[[sqlite3.Connection], State]) -> Callable[[Check], Check]:
    """A decorator for an information check: it scores 0 unless ``state`` (the site's whole
    database, side effects of looking aside) ends as the episode began. The check runs first,
    so a task it cannot score (an authoring error) still says so."""

    def wrap(check: Check) -> Check:
        @functools.wraps(check)
        def checked(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, **args: Any) -> float:
            score = check(db, start, answer, **args)
            return 0.0 if changes(state(start), state(db)) else score

        return checked

    return wrap
