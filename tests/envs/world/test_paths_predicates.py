"""Write-path patterns and JSON Logic predicates: what a tool may touch, and rules a spec cannot abuse."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentenv.envs.world import PredicateError, rule_predicate
from agentenv.envs.world.paths import PathPattern, allowed, bind_all, select


def bound(*patterns: str, **args: object) -> list:
    return bind_all([PathPattern.parse(p) for p in patterns], args)


def test_a_pattern_allows_its_path_and_what_is_below_it_only() -> None:
    b = bound("/files/{path}", path="/tmp/a")
    assert allowed("/files/~1tmp~1a", b)
    assert allowed("/files/~1tmp~1a/content", b)
    assert not allowed("/files/~1tmp~1ab", b)
    assert not allowed("/files", b)
    assert not allowed("", b)
    assert not allowed("/files/~1tmp~1a~1b", b)  # a child entry of a flat map needs its own pattern


def test_the_subtree_pattern_reaches_entries_under_the_path() -> None:
    b = bound("/files/{path}", "/files/{path}~1*", path="/tmp/a")
    assert allowed("/files/~1tmp~1a~1b", b)
    assert not allowed("/files/~1tmp~1b", b)


def test_wildcards_match_one_token_and_argument_values_are_literal() -> None:
    assert allowed("/accounts/A1/balance", bound("/accounts/*/balance"))
    assert not allowed("/accounts/A1/owner", bound("/accounts/*/balance"))
    literal = bound("/notes/{title}", title=".*")
    assert allowed("/notes/.*", literal) and not allowed("/notes/x", literal)


def test_a_token_with_several_wildcards_matches_in_one_pass() -> None:
    many = bound("/notes/*a*a*a*b", "/x/{k}*{k}", k="ab")
    assert allowed("/notes/aaab", many) and allowed("/notes/xaybazzab", many)
    assert not allowed("/notes/aab", many) and not allowed("/notes/aaaba", many)
    assert allowed("/x/abab", many) and allowed("/x/ab--ab", many) and not allowed("/x/aba", many)
    # A regex of several ".*" took seconds on 400 characters (about n**4) and minutes at 2,000.
    code = (
        "from agentenv.envs.world.paths import PathPattern, allowed\n"
        "b = PathPattern.parse('/notes/*a*a*a*b').bind({})\n"
        "assert not allowed('/notes/' + 'a' * 2000, [b])\n"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True).returncode == 0


def test_a_bound_pattern_shows_the_pointer_with_the_arguments_in_place() -> None:
    assert [b.shown for b in bound("/files/{path}", "/files/{path}~1*", "/a/*", path="/tmp/x")] == [
        "/files/~1tmp~1x",
        "/files/~1tmp~1x~1*",
        "/a/*",
    ]


def test_malformed_pointers_are_never_allowed() -> None:
    b = bound("/notes/{t}", t="x")
    assert not allowed("notes/x", b)
    assert not allowed("/notes/x~2", b)


def test_select_returns_the_declared_slice() -> None:
    state = {"files": {"/a": 1, "/a/b": 2, "/c": 3}, "other": 4}
    assert select(state, bound("/files/{path}", "/files/{path}~1*", path="/a")) == {
        "/files/~1a": 1,
        "/files/~1a~1b": 2,
    }
    assert select(state, bound("/missing")) == {}


def test_a_pattern_naming_a_missing_argument_fails_at_binding() -> None:
    with pytest.raises(KeyError):
        bound("/notes/{title}")


def test_rules_evaluate_over_json_with_keys_holding_slashes_and_dots() -> None:
    rule = rule_predicate("g", {"==": [{"val": ["files", "/home/u/a.txt", "content"]}, "hi"]})
    assert rule.test({"files": {"/home/u/a.txt": {"content": "hi"}}})
    assert not rule.test({"files": {}})


@pytest.mark.parametrize(
    "rule, problem",
    [
        ({"no_such_op": [1]}, "unknown operator"),
        ({"now": []}, "unknown operator"),  # not deterministic: not available
        ({">": [1]}, "at least 2"),
    ],
)
def test_bad_rules_are_refused_at_load_with_the_reason(rule: object, problem: str) -> None:
    with pytest.raises(PredicateError, match=problem):
        rule_predicate("r", rule)


def test_deep_or_huge_rules_are_refused_before_the_engine_sees_them() -> None:
    deep: object = True
    for _ in range(10_000):  # the engine recurses natively: this would overflow its stack
        deep = {"!": [deep]}
    with pytest.raises(PredicateError, match="nested"):
        rule_predicate("deep", deep)
    with pytest.raises(PredicateError, match="values"):
        rule_predicate("wide", {"and": [True] * 5000})


def test_an_expensive_evaluation_fails_instead_of_running_on() -> None:
    rule = rule_predicate("busy", {"map": [{"var": "a"}, {"map": [{"var": ""}, {"+": [{"var": ""}, 1]}]}]})
    with pytest.raises(PredicateError, match="BudgetExceeded"):
        rule.test({"a": [[1] * 1000] * 1000})


@pytest.mark.parametrize("blank", [0, "", False])
def test_a_missing_value_equals_no_blank_and_equality_is_strict(blank: object) -> None:
    """The engine's loose ``==`` holds ``null == 0``: "A9 holds 0" held where A9 did not
    exist, and "unchanged" (after == before) held where a field worth 0 was deleted."""
    balance = {"val": ["accounts", "A9", "balance_cents"]}
    assert not rule_predicate("g", {"==": [balance, blank]}).test({"accounts": {}})
    assert rule_predicate("g", {"!=": [balance, blank]}).test({"accounts": {}})
    unchanged = {"==": [{"val": ["after", "x"]}, {"val": ["before", "x"]}]}
    assert not rule_predicate("u", unchanged).test({"before": {"x": blank}, "after": {}})
    assert rule_predicate("u", unchanged).test({"before": {"x": blank}, "after": {"x": blank}})
    assert not rule_predicate("s", {"==": [{"val": ["x"]}, "5"]}).test({"x": 5})
    assert rule_predicate("n", {"==": [{"val": ["x"]}, 5]}).test({"x": 5.0})  # numbers by value
