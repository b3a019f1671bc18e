"""Predicates over the world state: JSON Logic rules, or Python callables in Python worlds.

Goals, sub-goals, invariants and postconditions are predicates. In a world spec they
are JSON Logic (https://jsonlogic.com), evaluated by datalogic-py, a maintained
engine with a conformance suite; no Python is ever evaluated from a spec. Rules are
checked when they load (known operators, argument counts) and bounded so that a
hostile spec (an LLM proposer drafts them) cannot hurt the process: nesting and
size are capped before the engine sees a rule (it recurses natively), evaluation
runs under an operation budget, and only deterministic operator families are
available (no ``now``).

Data a rule reads: the world state for goals, sub-goals and invariants; for a
tool's postconditions ``{"args", "before", "after", "observation"}``. Keys with dots
or slashes (file paths) are read with ``{"val": ["files", "/home/u/a.txt"]}``.

``==`` and ``!=`` compare strictly, as ``===`` and ``!==`` (numbers by value: 0 is
0.0): the engine's loose equality holds ``null == 0``, so a goal such as "A9 holds 0"
would hold where A9 does not exist, and an "unchanged" check (``after.x == before.x``)
would pass where a field worth 0 was deleted.

Left out: custom operators, dates and times.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentenv.core import _safejson
from agentenv.envs.world._extra import need

__all__ = ["MAX_RULE_DEPTH", "MAX_RULE_NODES", "OPS_BUDGET", "Predicate", "PredicateError", "rule_predicate"]

MAX_RULE_DEPTH = 32
"""Deeper rules are refused at load (the engine recurses natively: depth is a stack)."""
MAX_RULE_NODES = 2000
"""Rules with more JSON values than this are refused at load."""
OPS_BUDGET = 200_000
"""Operations one evaluation may charge; past it the predicate fails with an error."""
MAX_DATA_DEPTH = 64
"""Data a rule reads must nest no deeper (the engine recurses): the env's states and replies
are checked against this before any rule reads them."""
_FAMILIES = ["Core", "ExtArray", "ExtObject", "ExtString", "ExtControl", "ExtMath"]


class PredicateError(ValueError):
    """A rule that cannot load, or an evaluation that failed (not a False)."""


@dataclass(frozen=True, slots=True)
class Predicate:
    """A named test of JSON data: a JSON Logic rule or a Python function.

    ``test(data)`` is True or False, or raises `PredicateError` when the rule fails
    to evaluate (a type error, the budget spent): callers decide what that means (a
    rejected proposal, a broken verifier), never a silent False.
    """

    name: str
    rule: Any = None
    """The JSON Logic rule; None for a Python predicate."""
    fn: Callable[[Any], Any] | None = None
    description: str = ""
    compiled: Any = field(default=None, repr=False, compare=False)
    """The engine's compiled rule (`rule_predicate` fills it)."""

    def test(self, data: Any) -> bool:
        """Whether the predicate holds on ``data``: JSON data, no deeper than `MAX_DATA_DEPTH`
        (the env passes validated states); `PredicateError` when evaluation fails."""
        if self.fn is not None:
            return bool(self.fn(data))
        return _evaluate(self.compiled or _compiled(self.rule, self.name), data, self.name)

    def to_json(self) -> dict[str, Any]:
        """The predicate as spec data; a Python predicate has none."""
        if self.fn is not None:
            raise TypeError(f"predicate {self.name!r} is Python code, not a rule: it has no JSON form")
        return {"name": self.name, "rule": self.rule, **({"description": self.description} if self.description else {})}


def rule_predicate(name: str, rule: Any, description: str = "") -> Predicate:
    """A `Predicate` from a JSON Logic rule, checked now: `PredicateError` names what is wrong."""
    return Predicate(name, rule=rule, description=description, compiled=_compiled(rule, name))


_engine: Any = None
_compiled_rules: dict[str, Any] = {}


def _get_engine() -> Any:
    global _engine
    if _engine is None:
        _engine = need("datalogic_py").Engine(families=_FAMILIES)
    return _engine


def _compiled(rule: Any, name: str) -> Any:
    """The compiled rule (compiled once per distinct rule text)."""
    problem = _safejson.problem(rule, max_depth=MAX_RULE_DEPTH)
    if problem is not None:
        raise PredicateError(f"predicate {name!r}: {problem[1]} (at {problem[0] or 'the top'})")
    try:
        key = json.dumps(rule, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise PredicateError(f"predicate {name!r}: the rule is not JSON data ({e})") from None
    found = _compiled_rules.get(key)
    if found is not None:
        return found
    if _count_nodes(rule) > MAX_RULE_NODES:
        raise PredicateError(f"predicate {name!r}: the rule has more than {MAX_RULE_NODES} values")
    datalogic_py = need("datalogic_py")
    engine = _get_engine()
    try:
        compiled = engine.compile_checked(_strict_equality(rule))
    except datalogic_py.CompileError as e:
        details = "; ".join(f"{d['message']} at {d['pointer'] or '/'}" for d in e.diagnostics[:3])
        raise PredicateError(f"predicate {name!r}: {details or e}") from None
    except datalogic_py.DataLogicError as e:
        raise PredicateError(f"predicate {name!r}: {e}") from None
    if len(_compiled_rules) < 10_000:  # bounded: a proposer may draft many rules
        _compiled_rules[key] = compiled
    return compiled


_STRICT = {"==": "===", "!=": "!=="}


def _strict_equality(rule: Any) -> Any:
    """``rule`` with each ``==``/``!=`` made strict (see the module docstring); a rule is a
    bounded tree (checked before this runs)."""
    if isinstance(rule, list):
        return [_strict_equality(r) for r in rule]
    if not isinstance(rule, dict):
        return rule
    return {_STRICT.get(op, op): _strict_equality(args) for op, args in rule.items()}


def _evaluate(compiled: Any, data: Any, name: str) -> bool:
    datalogic_py = need("datalogic_py")

    try:
        result, _ = compiled.evaluate_metered(data, OPS_BUDGET)
    except datalogic_py.DataLogicError as e:
        raise PredicateError(f"predicate {name!r} failed: {e.error_type}: {str(e)[:200]}") from None
    return bool(_get_engine().truthy(result))


def _count_nodes(value: Any) -> int:
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count
