"""A proposal counts only if it parses, applies, writes only the tool's paths and leaves a
valid state: one test per check, each naming the rejection kind the metrics count."""

from __future__ import annotations

import copy
import json

import pytest

from agentenv.envs.world import REJECTION_KINDS, Rejected, World
from agentenv.envs.world.paths import bind_all
from agentenv.envs.world.validate import MAX_REPLY_CHARS, extract_json, validate

START = {"notes": {"x": "old"}, "count": 1}


def check(world: World, reply: object, tool: str = "add_note", args: dict | None = None, state: dict | None = None):
    args = args or {"title": "todo", "text": "buy milk"}
    state = copy.deepcopy(state or START)
    before = copy.deepcopy(state)
    spec = world.tools[tool]
    text = reply if isinstance(reply, str) else json.dumps(reply)
    try:
        return validate(text, world, spec, bind_all(spec.writes, args), state, args)
    finally:
        assert state == before  # never changed in place, accepted or not


def kind_of(world: World, reply: object, **kw) -> str:
    with pytest.raises(Rejected) as err:
        check(world, reply, **kw)
    assert err.value.kind in REJECTION_KINDS
    return err.value.kind


GOOD = {
    "observation": "saved",
    "state_patch": [
        {"op": "add", "path": "/notes/todo", "value": "buy milk"},
        {"op": "replace", "path": "/count", "value": 2},
    ],
}


def test_a_faithful_proposal_is_accepted_with_the_new_canonical_state(world: World) -> None:
    accepted = check(world, GOOD)
    assert accepted.observation == "saved"
    assert accepted.state == {"notes": {"x": "old", "todo": "buy milk"}, "count": 2}


def test_json_in_a_code_fence_or_after_prose_is_read(world: World) -> None:
    assert check(world, "```json\n" + json.dumps(GOOD) + "\n```").observation == "saved"
    assert check(world, "Sure! Here it is: " + json.dumps(GOOD) + " Hope that helps.").observation == "saved"


@pytest.mark.parametrize(
    "reply",
    ["", "I cannot do that.", "{not json", '{"observation": "a", "state_patch": [', "[1, 2]"],
)
def test_text_without_a_json_object_is_not_json_or_shape(world: World, reply: str) -> None:
    assert kind_of(world, reply) in ("not_json", "shape")


def test_json_no_reader_should_take_is_not_json(world: World) -> None:
    assert kind_of(world, '{"observation": "\\udc80", "state_patch": []}') == "not_json"
    assert kind_of(world, "[" * 100 + "]" * 100) == "not_json"
    # NaN in a middle patch step, gone from the final state: the reply is stored as strict JSON
    passing = '{"observation": "", "state_patch": [{"op": "add", "path": "/notes/todo", "value": NaN}, '
    passing += '{"op": "replace", "path": "/notes/todo", "value": "buy milk"}, '
    passing += '{"op": "replace", "path": "/count", "value": 1}]}'
    assert kind_of(world, passing) == "not_json"
    assert kind_of(world, '{"observation": "a", "state_patch": [], "n": ' + "9" * 5000 + "}") == "not_json"


def test_a_reply_over_the_limit_is_too_large(world: World) -> None:
    assert kind_of(world, json.dumps({"observation": "x" * MAX_REPLY_CHARS, "state_patch": []})) == "too_large"


@pytest.mark.parametrize(
    "reply",
    [
        {"observation": "saved"},  # missing key
        {"state_patch": []},
        {**GOOD, "task_complete": True},  # extra key
        {"observation": 5, "state_patch": []},  # wrong type
        {"observation": "a", "state_patch": {"op": "add"}},
        {"observation": "a", "state_patch": [{"op": "frobnicate", "path": "/count"}]},
        {"observation": "a", "state_patch": [{"op": "add", "path": "/count"}]},  # no value
        {"observation": "a", "state_patch": [{"op": "move", "path": "/count"}]},  # no from
        {"observation": "a", "state_patch": [{"op": "add", "path": "/count", "value": 1, "extra": 1}]},
        {"observation": "x" * 20_000, "state_patch": []},
    ],
)
def test_anything_but_exactly_observation_and_patch_is_shape(world: World, reply: dict) -> None:
    assert kind_of(world, reply) == "shape"


@pytest.mark.parametrize(
    "op",
    [
        {"op": "add", "path": "/notes/other", "value": "forged"},  # another argument's path
        {"op": "replace", "path": "/notes", "value": {}},  # above the allowed path
        {"op": "remove", "path": ""},  # the root
        {"op": "move", "from": "/notes/x", "path": "/notes/todo"},  # move takes from elsewhere
        {"op": "add", "path": "/notes/todo~1..", "value": "x"},
    ],
)
def test_writes_outside_the_tools_paths_are_forbidden(world: World, op: dict) -> None:
    assert kind_of(world, {"observation": "saved", "state_patch": [op]}) == "forbidden_path"


def test_a_read_only_tool_may_write_nothing(world: World) -> None:
    reply = {"observation": "old", "state_patch": [{"op": "replace", "path": "/notes/x", "value": "new"}]}
    assert kind_of(world, reply, tool="read_note", args={"title": "x"}) == "forbidden_path"


def test_an_argument_value_in_a_path_is_literal(world: World) -> None:
    # title "*" may write /notes/* (the key "*"), not every note
    reply = {"observation": "saved", "state_patch": [{"op": "replace", "path": "/notes/x", "value": "y"}]}
    assert kind_of(world, reply, args={"title": "*", "text": "y"}) == "forbidden_path"


def test_a_patch_that_does_not_apply_is_patch(world: World) -> None:
    assert kind_of(world, {"observation": "s", "state_patch": [{"op": "remove", "path": "/notes/todo"}]}) == "patch"
    test_op = {"op": "test", "path": "/count", "value": 99}
    assert kind_of(world, {"observation": "s", "state_patch": [test_op]}) == "patch"


def test_a_state_the_schema_refuses_is_schema(world: World) -> None:
    bad_type = {"op": "replace", "path": "/count", "value": "2"}  # a string for an int, refused strictly
    assert kind_of(world, {"observation": "s", "state_patch": [bad_type]}) == "schema"
    not_text = {"op": "add", "path": "/notes/todo", "value": ["buy", "milk"]}
    assert kind_of(world, {"observation": "s", "state_patch": [not_text]}) == "schema"


def test_a_state_breaking_an_invariant_is_invariant(world: World) -> None:
    forgot_count = {"observation": "saved", "state_patch": [{"op": "add", "path": "/notes/todo", "value": "milk"}]}
    with pytest.raises(Rejected) as err:
        check(world, forgot_count)
    assert err.value.kind == "invariant" and "count_matches" in err.value.message
    long = {**GOOD, "state_patch": [{"op": "add", "path": "/notes/todo", "value": "x" * 101}, GOOD["state_patch"][1]]}
    assert kind_of(world, long) == "invariant"


def test_extract_json_returns_the_first_object() -> None:
    assert extract_json('noise {"a": 1} {"b": 2}') == {"a": 1}


def test_applying_a_patch_shares_untouched_parts_and_never_mutates_the_original() -> None:
    from agentenv.envs.world.validate import _apply

    before = {"a": {"x": {"y": [1, 2]}}, "b": {}, "c": {"big": list(range(100))}}
    frozen = copy.deepcopy(before)
    patch = [
        {"op": "move", "from": "/a/x", "path": "/b/x"},
        {"op": "add", "path": "/b/x/z", "value": 3},  # mutates what the move took from before
        {"op": "add", "path": "/b/x/y/-", "value": 9},
        {"op": "copy", "from": "/b/x", "path": "/a/w"},
        {"op": "remove", "path": "/b/x/y/0"},
    ]
    after = _apply(patch, before)
    assert before == frozen
    assert after == {"a": {"w": {"y": [1, 2, 9], "z": 3}}, "b": {"x": {"y": [2, 9], "z": 3}}, "c": frozen["c"]}
    assert after["c"] is before["c"]  # untouched parts are shared, not copied


def doubling(levels: int, root: str = "/notes/todo") -> list[dict]:
    """A patch whose every two copies double what it holds (``c{j}`` holds two ``c{j-1}``),
    never copying a place into itself: a few hundred bytes of reply, 2^levels KB of state."""
    ops = [{"op": "add", "path": root, "value": {"c0": "a" * 1000}}]
    for j in range(1, levels + 1):
        ops.append({"op": "add", "path": f"{root}/c{j}", "value": {}})
        ops += [{"op": "copy", "from": f"{root}/c{j - 1}", "path": f"{root}/c{j}/{side}"} for side in "xy"]
    return ops


def test_copies_carrying_more_than_a_reply_may_hold_are_too_large(world: World) -> None:
    """12 levels would build 4 MB from a 2 KB reply (and 40 levels a terabyte): the copies are
    counted against the reply limit as they apply, so it stops at the first past it."""
    with pytest.raises(Rejected) as err:
        check(world, {"observation": "s", "state_patch": doubling(12)})
    assert err.value.kind == "too_large" and "copies" in err.value.message
    assert kind_of(world, {"observation": "s", "state_patch": doubling(3)}) == "schema"  # small: checked as usual


@pytest.mark.parametrize("source", ["", "/notes"])
def test_a_copy_into_its_own_subtree_is_patch(world: World, source: str) -> None:
    """Copying the whole state (or a parent) under itself doubles it per operation."""
    reply = {"observation": "s", "state_patch": [{"op": "copy", "from": source, "path": "/notes/todo"}]}
    assert kind_of(world, reply) == "patch"


def test_a_copy_that_would_nest_the_state_too_deep_is_schema(world: World) -> None:
    deep: object = "x"
    for _ in range(40):
        deep = {"d": deep}
    state = {"notes": {"x": deep}, "count": 1}
    landing = "/notes/todo" + "/d" * 30
    patch = [
        {"op": "add", "path": "/notes/todo", "value": json.loads(json.dumps(deep).replace('"x"', "{}", 1))},
        {"op": "copy", "from": "/notes/x", "path": landing},
    ]
    with pytest.raises(Rejected) as err:
        check(world, {"observation": "s", "state_patch": patch}, state=state)
    assert err.value.kind == "schema" and "more than 64 deep" in err.value.message
