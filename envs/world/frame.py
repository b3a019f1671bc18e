"""The frame condition of a world task: what it may change, and that nothing else did.

A goal says what must hold at the end; it cannot say what must stay as it was. "Remove
the old log" holds after ``rm -r /home`` as well as after ``rm old.log``. So every task
also has a frame, built from its golden run (`agentenv.envs.world.replay.task_frame`):

- the expected end state, the state the golden actions reach from the task's start;
- the paths the task may touch: those where the start and the expected end differ (a
  dict compared key by key, a list item by item, so ``rm old.log`` touches the one entry
  ``/files/~1home~1user~1logs~1old.log``), and those its ``may_change`` patterns name
  (`agentenv.envs.world.paths` syntax, for a task with more than one right outcome).

A final state keeps the frame when it equals the expected end state everywhere outside
those paths: anything else that changed is collateral damage and the task scores 0,
however well its goal holds. What changed is named by JSON Pointer
(`Frame.violations`): the env keeps it in the episode's state and trajectory.

A list counts item by item, so an append-only ledger that gains an entry the golden run
does not make (a deposit and a withdrawal that cancel out) breaks the frame, as it
should: it records movements nobody asked for. Within the touched paths anything goes;
the goal says what they must hold.

Left out: a frame per sub-goal (shaping reads the sub-goals alone), and ranges of list
indices in ``may_change`` (`paths` has none).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentenv.envs.world.paths import BoundPath, PathPattern, escape

__all__ = ["MAX_REPORTED", "Frame", "changed_paths", "frame_patterns"]

MAX_REPORTED = 20
"""Violations named one by one; past this many the last entry says how many more."""
_MISSING = object()


@dataclass(frozen=True, slots=True)
class Frame:
    """A task's frame: its expected end state and the paths it may change."""

    expected: dict[str, Any]
    """The state the golden actions reach from the task's start."""
    touched: tuple[str, ...]
    """The JSON Pointers where the golden run changed the start (at the finest level)."""
    allowed: tuple[BoundPath, ...]
    """``touched`` and the task's ``may_change`` patterns: where the end state may differ."""

    def violations(self, state: Any, limit: int = MAX_REPORTED) -> list[str]:
        """Where ``state`` differs from the expected end state outside the allowed paths, as
        ``"<pointer> (added|removed|changed)"``; empty when the frame holds."""
        found: list[tuple[tuple[str, ...], str]] = []
        extra = _compare(self.expected, state, (), self.allowed, found, limit)
        named = [f"{_pointer(at)} ({kind})" for at, kind in found]
        return [*named, f"... and {extra} more"] if extra else named

    def holds(self, state: Any) -> bool:
        return not self.violations(state, limit=1)


def changed_paths(before: Any, after: Any) -> list[BoundPath]:
    """Where ``after`` differs from ``before``, at the finest level: each path literal (a key
    ``*`` is no wildcard), so it covers exactly that entry and what lies below it."""
    found: list[tuple[tuple[str, ...], str]] = []
    _compare(before, after, (), (), found, None)
    return [BoundPath(_pointer(at), at, _pointer(at)) for at, _ in found]


def frame_patterns(patterns: Iterable[str], where: str) -> list[BoundPath]:
    """``may_change`` patterns, parsed; ValueError naming ``where`` for one that is malformed or
    names an argument (a task's patterns have no call to take values from)."""
    out = []
    for pattern in patterns:
        try:
            parsed = PathPattern.parse(pattern)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: may_change pattern {pattern!r:.80}: {e}") from None
        if not parsed.tokens:
            raise ValueError(f"{where}: may_change pattern '' is the whole state: it would allow any change")
        if parsed.arguments:
            raise ValueError(
                f"{where}: may_change pattern {pattern!r:.80} names argument(s) {sorted(parsed.arguments)}; "
                "a task's patterns are plain paths, '*' allowed"
            )
        out.append(parsed.bind({}))
    return out


def _compare(
    want: Any,
    got: Any,
    at: tuple[str, ...],
    allowed: Sequence[BoundPath],
    found: list[tuple[tuple[str, ...], str]],
    limit: int | None,
) -> int:
    """Append to ``found`` each path outside ``allowed`` where ``got`` differs from ``want``
    (up to ``limit``); returns how many more there were past it."""
    if allowed and any(path.covers(at) for path in allowed):
        return 0
    if isinstance(want, dict) and isinstance(got, dict):
        extra = 0
        for key in sorted(want.keys() | got.keys()):
            extra += _compare(want.get(key, _MISSING), got.get(key, _MISSING), (*at, key), allowed, found, limit)
        return extra
    if isinstance(want, list) and isinstance(got, list):
        extra = 0
        for i in range(max(len(want), len(got))):
            a = want[i] if i < len(want) else _MISSING
            b = got[i] if i < len(got) else _MISSING
            extra += _compare(a, b, (*at, str(i)), allowed, found, limit)
        return extra
    if _same(want, got):
        return 0
    if limit is not None and len(found) >= limit:
        return 1
    found.append((at, "added" if want is _MISSING else "removed" if got is _MISSING else "changed"))
    return 0


def _pointer(tokens: Sequence[str]) -> str:
    return "".join("/" + escape(t) for t in tokens)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1`` (Python's ``True == 1`` would say it is)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) or isinstance(b, dict) or isinstance(a, list) or isinstance(b, list):
        return False  # containers of one kind were compared item by item; mixed kinds differ
    return a is b or a == b
