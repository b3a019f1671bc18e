import json

import pytest

from agentenv import Task, TaskFileError, TaskSet


def _tasks(n):
    return TaskSet(Task(id=f"task-{i}", prompt=f"p{i}", metadata={"family": "f", "difficulty": i % 3}) for i in range(n))


def test_taskset_indexing_lookup_and_did_you_mean():
    ts = _tasks(5)
    assert len(ts) == 5 and ts[1].id == "task-1" and ts.get("task-3").prompt == "p3"
    assert "task-4" in ts and ts[4] in ts and "task-9" not in ts
    assert isinstance(ts[1:3], TaskSet) and ts[1:3].ids == ["task-1", "task-2"]
    with pytest.raises(KeyError, match="Did you mean 'task-1'"):
        ts.get("task_1")
    with pytest.raises(ValueError, match="duplicate task id"):
        TaskSet([Task(id="a", prompt=""), Task(id="a", prompt="")])


def test_split_is_deterministic_disjoint_and_order_independent():
    ts = _tasks(400)
    train, test = ts.split(0.25, seed=1)
    assert len(train) + len(test) == 400 and not set(train.ids) & set(test.ids)
    assert 60 < len(test) < 140
    again_train, again_test = TaskSet(reversed(list(ts))).split(0.25, seed=1)
    assert set(again_test.ids) == set(test.ids)
    assert set(ts.split(0.25, seed=2)[1].ids) != set(test.ids)
    assert set(ts[:100].split(0.25, seed=1)[1].ids) == set(test.ids) & set(ts[:100].ids)


def test_jsonl_round_trip(tmp_path):
    ts = _tasks(3)
    path = tmp_path / "tasks.jsonl"
    ts.to_jsonl(path)
    loaded = TaskSet.from_jsonl(path)
    assert list(loaded) == list(ts)


def test_jsonl_with_a_converter_for_other_layouts(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps({"task_id": "X/0", "prompt": "def f():", "test": "assert f()"}) + "\n")
    ts = TaskSet.from_jsonl(path, convert=lambda r: {"id": r["task_id"], "prompt": r["prompt"], "payload": {"test": r["test"]}})
    assert ts.get("X/0").payload == {"test": "assert f()"}


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (['{"id": "a", "prompt": "x"}', "{oops"], r"tasks.jsonl:2: invalid JSON"),
        (['{"id": "a"}'], r"tasks.jsonl:1: field 'prompt': Field required"),
        (['{"id": "a", "prompt": "x", "metadata": {"difficulty": -1}}'], r"tasks.jsonl:1: field 'metadata.difficulty'"),
        (['{"id": "a", "prompt": "x", "colour": 1}'], r"tasks.jsonl:1: field 'colour': Extra inputs"),
        (['[1, 2]'], r"tasks.jsonl:1: expected a JSON object"),
        (['{"id": "a", "prompt": "x"}', "", '{"id": "a", "prompt": "y"}'], r"tasks.jsonl:3: field 'id': duplicate task id 'a' \(first on line 1\)"),
    ],
)
def test_invalid_task_files_name_file_line_and_field(tmp_path, lines, expected):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TaskFileError, match=expected):
        TaskSet.from_jsonl(path)
