from agentenv import json_diff


def test_json_diff_reports_changes_as_patch_operations():
    before = {"a": 1, "b": {"c": [1, 2], "d": "x"}, "gone": True, "a/b": 0}
    after = {"a": 2, "b": {"c": [1, 3], "d": "x"}, "new": None, "a/b": 1}
    assert json_diff(before, after) == [
        {"op": "replace", "path": "/a", "value": 2},
        {"op": "replace", "path": "/b/c/1", "value": 3},
        {"op": "remove", "path": "/gone"},
        {"op": "replace", "path": "/a~1b", "value": 1},
        {"op": "add", "path": "/new", "value": None},
    ]


def test_json_diff_replaces_lists_that_change_length_and_is_empty_when_equal():
    assert json_diff({"l": [1]}, {"l": [1, 2]}) == [{"op": "replace", "path": "/l", "value": [1, 2]}]
    assert json_diff({"x": {"y": 1}}, {"x": {"y": 1}}) == []
    assert json_diff(1, 2) == [{"op": "replace", "path": "/", "value": 2}]


def test_json_diff_looks_inside_nested_objects_and_equal_length_lists_only():
    from collections import OrderedDict

    before = {"o": OrderedDict(a=1, b=2), "l": [{"x": 1}, 2], "s": "a", "n": None, "k~/": {"i/j": [1]}}
    after = {"o": OrderedDict(a=1, b=3), "l": [{"x": 2}, 2], "s": 1, "n": [1], "k~/": {"i/j": [1, 2]}}
    assert json_diff(before, after) == [
        {"op": "replace", "path": "/o/b", "value": 3},
        {"op": "replace", "path": "/l/0/x", "value": 2},
        {"op": "replace", "path": "/s", "value": 1},
        {"op": "replace", "path": "/n", "value": [1]},
        {"op": "replace", "path": "/k~0~1/i~1j", "value": [1, 2]},
    ]
    assert json_diff([1, 2], {"a": 1}) == [{"op": "replace", "path": "/", "value": {"a": 1}}]
    assert json_diff({"a": {"b": 1}}, {"a": {"c": 1}}) == [
        {"op": "remove", "path": "/a/b"},
        {"op": "add", "path": "/a/c", "value": 1},
    ]
