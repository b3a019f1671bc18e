"""Code tasks from a Hugging Face datasets split: HumanEval's and MBPP's layouts, column mapping, bad records."""

from __future__ import annotations

import json

import pytest

import agentenv
from agentenv import TaskFileError, check_env, tool_call_text
from agentenv.envs.code import CodeSandboxes, benchmark_task, code_task, from_dataset, verify_solution

datasets = pytest.importorskip("datasets")

HUMANEVAL = {
    "task_id": "Demo/0",
    "prompt": 'def shout(s: str) -> str:\n    """Upper-case s and add "!".\n    >>> shout("hi")\n    \'HI!\'\n"""\n',
    "entry_point": "shout",
    "canonical_solution": '    return s.upper() + "!"\n',
    "test": "def check(candidate):\n    assert candidate('hi') == 'HI!'\n    assert candidate('') == '!'\n",
}
MBPP = {  # the layout of the "mbpp" dataset (full config), solution and tests as shipped
    "task_id": 11,
    "text": "Write a python function to remove first and last occurrence of a given character from the string.",
    "code": (
        "def remove_Occ(s,ch): \r\n    for i in range(len(s)): \r\n        if (s[i] == ch): \r\n"
        "            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    for i in range(len(s) - 1,-1,-1):  \r\n"
        "        if (s[i] == ch): \r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    return s "
    ),
    "test_list": [
        'assert remove_Occ("hello","l") == "heo"',
        'assert remove_Occ("abcda","a") == "bcd"',
        'assert remove_Occ("PHP","P") == "H"',
    ],
    "test_setup_code": "",
    "challenge_test_list": [],
}
MBPP_SANITIZED = {  # the "sanitized" config: prompt instead of text, test_imports instead of test_setup_code
    "source_file": "Benchmark Questions Verification V2.ipynb",
    "task_id": 2,
    "prompt": "Write a function to find the shared elements from the given two lists.",
    "code": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))\n",
    "test_imports": ["import math"],
    "test_list": ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))"],
}

WRONG_REMOVE_OCC = "def remove_Occ(s, ch):\n    return s.strip(ch)\n"  # right on 2 of the 3 tests: not "hello"


@pytest.fixture(scope="module")
def pools():
    with CodeSandboxes("process", workspaces=1, verifiers=1) as pools:
        yield pools


def test_a_humaneval_split_loads_as_the_benchmark_loader_reads_it():
    split = datasets.Dataset.from_list([HUMANEVAL])
    (task,) = from_dataset(split)
    assert task == benchmark_task(HUMANEVAL)
    assert from_dataset([HUMANEVAL])[0] == task  # a list of dicts reads the same
    assert len(code_task(task).visible_tests) == 1  # its one >>> example
    assert "shout('hi') == 'HI!'" in task.prompt


@pytest.mark.parametrize("record", [MBPP, MBPP_SANITIZED], ids=["mbpp", "sanitized"])
def test_an_mbpp_split_finds_its_entry_point_and_shows_the_first_test(record):
    (task,) = from_dataset(datasets.Dataset.from_list([record]))
    payload = code_task(task)
    assert task.id == str(record["task_id"])
    assert payload.entry_point == {11: "remove_Occ", 2: "similar_elements"}[record["task_id"]]
    assert [t.code for t in payload.hidden_tests] == record["test_list"]
    assert [t.code for t in payload.visible_tests] == record["test_list"][:1]
    assert record["test_list"][0] in task.prompt
    assert all(test not in task.prompt for test in record["test_list"][1:])  # the others stay hidden
    assert payload.solution == record["code"]
    assert payload.setup == ("import math" if record is MBPP_SANITIZED else "")


@pytest.mark.slow  # starts process sandboxes
def test_make_code_v0_runs_dataset_tasks_end_to_end_and_the_reference_scores_1(pools, tmp_path):
    path = tmp_path / "mbpp.jsonl"
    path.write_text(json.dumps(MBPP) + "\n")
    mbpp = datasets.load_dataset("json", data_files=str(path))["train"]  # the real datasets path, a local file
    tasks = from_dataset(mbpp, id_prefix="mbpp")
    tasks = agentenv.TaskSet([*tasks, *from_dataset(datasets.Dataset.from_list([HUMANEVAL]))])
    env = agentenv.make("code-v0", tasks=tasks, sandboxes=pools)
    for task in tasks:
        env.reset(seed=0, options={"task": task.id})
        *_, terminated, _, info = env.step(tool_call_text("submit", code=code_task(task).solution))
        assert terminated and info["task_reward"] == 1.0 and info["success"], (task.id, info)
    env.reset(seed=0, options={"task": "mbpp/11"})
    *_, info = env.step(tool_call_text("submit", code=WRONG_REMOVE_OCC))
    assert info["task_reward"] == 0.0 and info["failure"] == "policy"
    env.close()


@pytest.mark.slow  # starts process sandboxes
def test_a_dataset_code_env_passes_check_env(pools):
    tasks = from_dataset(datasets.Dataset.from_list([MBPP]))
    with agentenv.make("code-v0", tasks=tasks, sandboxes=pools) as env:
        check_env(env, actions=[tool_call_text("submit", code=MBPP["code"])])


def test_other_column_names_map_with_columns_and_entry_points_can_be_given():
    rows = [
        {
            "uid": "t1",
            "question": "Add two numbers.",
            "asserts": ["assert plus(1, 2) == 3", "assert plus(0, 0) == 0"],
            "ref": "def plus(a, b):\n    return a + b\n",
            "fn": "plus",
            "level": 2,
        }
    ]
    columns = {"id": "uid", "prompt": "question", "tests": "asserts", "solution": "ref", "entry_point": "fn"}
    (task,) = from_dataset(rows, columns=columns, metadata={"difficulty": "level"}, visible_tests=2)
    assert task.id == "t1" and task.metadata.difficulty == 2 and task.metadata.family == "benchmark"
    assert len(code_task(task).visible_tests) == 2 and code_task(task).entry_point == "plus"
    (task,) = from_dataset(rows, columns={"prompt": "question", "tests": lambda row: row["asserts"][:1]})
    assert task.id.startswith("code-0-") and [t.code for t in code_task(task).hidden_tests] == [
        "assert plus(1, 2) == 3"
    ]


# -- bad input ----------------------------------------------------------------------------------------


def test_a_split_without_the_layouts_columns_names_them_with_a_did_you_mean():
    split = datasets.Dataset.from_list([{"prompt": "Add.", "test": "assert f(1) == 1"}])
    with pytest.raises(
        TaskFileError, match=r"no column 'tests' for the field 'tests' \(layout 'columns'\)\. Did you mean 'test'\?"
    ):
        from_dataset(split)
    with pytest.raises(TaskFileError, match=r"no column 'test_lst' for columns\['tests'\]\. Did you mean 'test_list'"):
        from_dataset(datasets.Dataset.from_list([MBPP]), columns={"tests": "test_lst"})
    with pytest.raises(ValueError, match=r"columns has no field 'test'\. Did you mean 'tests'\?"):
        from_dataset(split, columns={"test": "test"})
    with pytest.raises(ValueError, match="layout must be"):
        from_dataset(split, layout="apps")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"test_list": []}, r"record 1: tests \(column 'test_list'\): List should have at least 1 item"),
        ({"test_list": None}, r"record 1: tests \(column 'test_list'\): Input should be a valid list"),
        ({"text": ""}, r"record 1: prompt \(column 'text'\): String should have at least 1 character"),
        (
            {"test_list": ["assert True"]},
            r"record 1: no entry point: no column holds one and the tests call no function",
        ),
        ({"test_list": [42]}, r"record 1: tests \(column 'test_list'\): Input should be a valid string"),
        ({"text": "a\udcffb"}, r"record 1: prompt \(column 'text'\): .*unicode string"),
    ],
)
def test_a_bad_record_names_its_index_and_field(change, message):
    with pytest.raises(TaskFileError, match=message):
        from_dataset([MBPP, {**MBPP, "task_id": 12, **change}])


def test_a_humaneval_record_without_its_entry_point_asks_for_one_rather_than_guess_candidate():
    record = {k: v for k, v in HUMANEVAL.items() if k != "entry_point"}
    with pytest.raises(TaskFileError, match=r"record 0: no entry point"):
        from_dataset([record], layout="humaneval")
    (task,) = from_dataset([record], layout="humaneval", columns={"entry_point": lambda row: "shout"})
    assert task == benchmark_task(HUMANEVAL)


def test_a_record_lacking_a_column_names_it_and_a_dataset_dict_names_its_splits():
    bad = {k: v for k, v in MBPP.items() if k != "text"}
    with pytest.raises(TaskFileError, match=r"record 1: no column 'text' for prompt\."):
        from_dataset([MBPP, {**bad, "txt": "x", "task_id": 12}])
    split = datasets.Dataset.from_list([MBPP])
    with pytest.raises(
        TypeError, match=r"DatasetDict of the splits 'test', 'train': pick one, e\.g\. dataset\['test'\]"
    ):
        from_dataset(datasets.DatasetDict({"test": split, "train": split}))
    with pytest.raises(TaskFileError, match=r"record 1: id '11' repeats record 0's"):
        from_dataset([MBPP, MBPP])


@pytest.mark.parametrize(
    "tests",
    [
        ["assert f(" + "(" * 50_000 + ")" * 50_000 + ") == 1"],  # nesting past the parser's stack
        ["assert f(1) == 1\x00"],
        ["x" * 200_000],
    ],
    ids=["deep", "nul", "huge"],
)
def test_hostile_tests_give_a_clear_error_or_a_task_never_a_crash(tests):
    record = {"text": "Do it.", "test_list": tests, "code": "def f(x):\n    return x\n"}
    try:
        (task,) = from_dataset([record])
    except TaskFileError as e:
        assert "record 0" in str(e)
    else:
        assert code_task(task).hidden_tests


@pytest.mark.slow  # starts process sandboxes
def test_verify_solution_judges_a_wrong_solution_wrong(pools):
    (task,) = from_dataset([MBPP])
    assert verify_solution(pools, task, MBPP["code"]).all_passed
    report = verify_solution(pools, task, WRONG_REMOVE_OCC)
    assert (report.passed, report.total) == (2, 3)
