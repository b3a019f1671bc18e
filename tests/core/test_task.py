import gzip
import json

import pytest

from agentenv import Task, TaskFileError, TaskSet


def _tasks(n):
    return TaskSet(
        Task(id=f"task-{i}", prompt=f"p{i}", metadata={"family": "f", "difficulty": i % 3}) for i in range(n)
    )


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
    _again_train, again_test = TaskSet(reversed(list(ts))).split(0.25, seed=1)
    assert set(again_test.ids) == set(test.ids)
    assert set(ts.split(0.25, seed=2)[1].ids) != set(test.ids)
    assert set(ts[:100].split(0.25, seed=1)[1].ids) == set(test.ids) & set(ts[:100].ids)


def _copies(contents: int, each: int) -> TaskSet:
    """``contents`` problems, each under ``each`` ids (a merged dataset, or one prompt over
    hidden payloads as in guess-number)."""
    return TaskSet(
        Task(id=f"copy-{c}-{k}", prompt="Find the secret.", payload={"secret": c})
        for c in range(contents)
        for k in range(each)
    )


def test_split_keeps_every_copy_of_a_content_on_one_side():
    ts = _copies(40, 10)
    train, test = ts.split(0.25, seed=0)
    assert test and train and test.shared_content(train) == 0
    assert {t.payload["secret"] for t in test}.isdisjoint({t.payload["secret"] for t in train})
    assert test.contents() + train.contents() == ts.contents() == 40
    # By id, copies fall on both sides: held-out tasks with twins in training.
    id_train, id_test = ts.split(0.25, seed=0, by="id")
    assert id_test.shared_content(id_train) > 0.8 * len(id_test)


def test_a_set_of_one_content_cannot_be_split_by_it():
    train, test = _copies(1, 50).split(0.5, seed=3)
    assert {len(train), len(test)} == {0, 50}


def test_jsonl_round_trip(tmp_path):
    ts = _tasks(3)
    path = tmp_path / "tasks.jsonl"
    ts.to_jsonl(path)
    loaded = TaskSet.from_jsonl(path)
    assert list(loaded) == list(ts)


def test_jsonl_with_a_converter_for_other_layouts(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps({"task_id": "X/0", "prompt": "def f():", "test": "assert f()"}) + "\n")
    ts = TaskSet.from_jsonl(
        path, convert=lambda r: {"id": r["task_id"], "prompt": r["prompt"], "payload": {"test": r["test"]}}
    )
    assert ts.get("X/0").payload == {"test": "assert f()"}


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (['{"id": "a", "prompt": "x"}', "{oops"], r"tasks.jsonl:2: invalid JSON"),
        (['{"id": "a"}'], r"tasks.jsonl:1: field 'prompt': Field required"),
        (['{"id": "a", "prompt": "x", "metadata": {"difficulty": -1}}'], r"tasks.jsonl:1: field 'metadata.difficulty'"),
        (['{"id": "a", "prompt": "x", "colour": 1}'], r"tasks.jsonl:1: field 'colour': Extra inputs"),
        (["[1, 2]"], r"tasks.jsonl:1: expected a JSON object"),
        (
            ['{"id": "a", "prompt": "x"}', "", '{"id": "a", "prompt": "y"}'],
            r"tasks.jsonl:3: field 'id': duplicate task id 'a' \(first on line 1\)",
        ),
    ],
)
def test_invalid_task_files_name_file_line_and_field(tmp_path, lines, expected):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TaskFileError, match=expected):
        TaskSet.from_jsonl(path)


def _gzipped(path, text):
    path.write_bytes(gzip.compress(text.encode()))
    return path


@pytest.mark.parametrize("name", ["tasks.jsonl.gz", "tasks.jsonl"])  # gzip is told by its bytes, not its name
def test_a_gzipped_file_loads_like_the_plain_one(tmp_path, name):
    ts = _tasks(30)
    ts.to_jsonl(tmp_path / "plain.jsonl")
    path = _gzipped(tmp_path / name, (tmp_path / "plain.jsonl").read_text())
    assert list(TaskSet.from_jsonl(path)) == list(ts)
    assert list(TaskSet.from_jsonl(tmp_path / "plain.jsonl")) == list(ts)


def _corrupt(data: bytes) -> dict[str, bytes]:
    middle = len(data) // 2
    return {
        "truncated": data[:middle],
        "flipped bytes": data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 8]) + data[middle + 8 :],
        "wrong checksum": data[:-8] + bytes(8),
        "only a gzip header": data[:10],
        "magic then garbage": b"\x1f\x8b" + b"not gzip at all" * 10,
    }


@pytest.mark.parametrize("damage", list(_corrupt(b"")))
def test_a_corrupt_or_truncated_gzip_file_is_a_task_file_error(tmp_path, damage):
    path = tmp_path / "tasks.jsonl.gz"
    _tasks(200).to_jsonl(tmp_path / "plain.jsonl")
    path.write_bytes(_corrupt(gzip.compress((tmp_path / "plain.jsonl").read_bytes()))[damage])
    with pytest.raises(TaskFileError, match=r"tasks.jsonl.gz:\d+: corrupt or truncated gzip data"):
        TaskSet.from_jsonl(path)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzipped"])
def test_bytes_that_are_not_utf8_name_the_line(tmp_path, compress):
    data = b'{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "caf\xe9"}\n'
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(gzip.compress(data) if compress else data)
    with pytest.raises(TaskFileError, match=r"tasks.jsonl:2: not UTF-8 text: byte 0xe9"):
        TaskSet.from_jsonl(path)


def test_an_overlong_line_is_refused_before_it_is_read_whole(tmp_path, monkeypatch):
    import agentenv.core.task

    monkeypatch.setattr(agentenv.core.task, "MAX_LINE_BYTES", 100)
    lines = '{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "' + "x" * 200 + '"}\n'
    path = _gzipped(tmp_path / "tasks.jsonl.gz", lines)
    with pytest.raises(TaskFileError, match=r"tasks.jsonl.gz:2: line longer than 100 bytes"):
        TaskSet.from_jsonl(path)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"id": "a", "prompt": ' + "[" * 100_000 + "]" * 100_000 + "}", r":1: invalid JSON: nested too deeply"),
        (
            '{"id": "a", "prompt": "x", "payload": {"k": ' + "[" * 101 + "]" * 101 + "}}",
            r":1: field 'payload': nested more than 100 deep",
        ),  # loads, but could not be written back out
        ('{"id": "a", "prompt": "x", "metadata": {"difficulty": ' + "7" * 5000 + "}}", r":1: invalid JSON: .*digits"),
        ('{"id": "a", "prompt": "x\\udc80"}', r":1: field 'prompt': a string holds a lone surrogate"),
        ('{"id": "a", "prompt": "x", "payload": {"k": ["ok", "\\ud800"]}}', r":1: field 'payload.k.1'"),
        ('{"id": "a", "prompt": "x", "payload": {"\\udc80": 1}}', r":1: field 'payload.\\\\udc80'"),
    ],
    ids=[
        "nested 100,000 deep",
        "nested 102 deep",
        "5,000-digit integer",
        "lone surrogate",
        "nested lone surrogate",
        "surrogate key",
    ],
)
def test_hostile_lines_are_task_file_errors(tmp_path, line, expected):
    path = tmp_path / "tasks.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(TaskFileError, match=r"tasks.jsonl" + expected) as caught:
        TaskSet.from_jsonl(path)
    str(caught.value).encode("utf-8")  # the message itself is printable


@pytest.mark.parametrize(
    ("value", "literal"),
    [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e309", "1e309"), ("-2E400", "-2E400")],
)
def test_nan_and_infinity_are_refused_naming_the_field_not_turned_into_null(tmp_path, value, literal):
    # json.loads reads them (1e309 as inf), but JSON cannot write them back: a trajectory
    # or checkpoint would hold null there, another task than the one in the file.
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        '{"id": "a", "prompt": "p"}\n'
        + '{"id": "b", "prompt": "p", "payload": {"tol": [0.5, VALUE]}}\n'.replace("VALUE", value)
    )
    with pytest.raises(TaskFileError) as caught:
        TaskSet.from_jsonl(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:2: field 'payload.tol.1': {literal} is not a finite number")
    assert "\n" not in message


def test_large_finite_floats_still_load_and_round_trip(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "prompt": "p", "payload": {"x": 1.7e308, "y": -5e-324, "z": 0.1}}\n')
    task = TaskSet.from_jsonl(path)[0]
    assert Task.model_validate_json(task.model_dump_json()) == task


def test_a_surrogate_pair_is_ordinary_text(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "prompt": "\\ud83d\\ude00"}\n')
    assert TaskSet.from_jsonl(path)[0].prompt == "\U0001f600"


def test_a_gzip_bomb_is_refused_by_its_inflated_size_not_read_whole(tmp_path, monkeypatch):
    import agentenv.core.task

    monkeypatch.setattr(agentenv.core.task, "MAX_LINE_BYTES", 1 << 20)  # the floor of the bound, scaled down
    lines = "".join(json.dumps({"id": f"t{i}", "prompt": "A" * 10_000}) + "\n" for i in range(300))
    path = _gzipped(tmp_path / "tasks.jsonl.gz", lines)  # 3 MB inflated, >100x its size
    with pytest.raises(TaskFileError, match=r"tasks.jsonl.gz: gzip data inflates past \d+ bytes .*gunzip it"):
        TaskSet.from_jsonl(path)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzipped"])
def test_a_leading_utf8_byte_order_mark_is_accepted(tmp_path, compress):
    data = "\ufeff".encode() + b'{"id": "a", "prompt": "p"}\n{"id": "b", "prompt": "q"}\n'
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(gzip.compress(data) if compress else data)
    assert TaskSet.from_jsonl(path).ids == ["a", "b"]


@pytest.mark.parametrize(
    ("metadata", "field"),
    [({"family": "evil\x1b[2J"}, "metadata.family"), ({"tags": ["ok", "two\nlines"]}, "metadata.tags.1")],
)
def test_control_characters_in_a_family_or_tag_are_refused_naming_the_field(tmp_path, metadata, field):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": "p", "metadata": metadata}) + "\n")
    with pytest.raises(TaskFileError, match=rf"tasks.jsonl:1: field '{field}': .*control character U\+00"):
        TaskSet.from_jsonl(path)
    assert Task(id="a", prompt="p", metadata={"family": "数学 café", "tags": ["a b"]}).metadata.family == "数学 café"


@pytest.mark.parametrize("task_id", ["t\x1b]0;owned\x07\x1b[2J", "t\nfake row │ solved", "t\x00"])
def test_control_characters_in_a_task_id_are_refused(tmp_path, task_id):
    # `agentenv miner show` printed such an id as it is: a terminal escape ran, a newline forged a row.
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": task_id, "prompt": "p"}) + "\n")
    with pytest.raises(TaskFileError, match=r"tasks.jsonl:1: field 'id': .*control character U\+00"):
        TaskSet.from_jsonl(path)
    assert Task(id="数学/café #1", prompt="p").id == "数学/café #1"
