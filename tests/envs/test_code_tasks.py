"""The shipped code tasks and the loaders: every reference passes, a wrong answer fails."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from agentenv import TaskFileError
from agentenv.envs.code import (
    CodeSandboxes,
    benchmark_task,
    code_task,
    default_tasks,
    from_dataset,
    load_benchmark_jsonl,
    make_task,
    make_tasks,
    verify_solution,
)
from agentenv.envs.code.families import FAMILIES
from tests.envs._code import require

HUMANEVAL_STYLE = {
    "task_id": "Demo/0",
    "prompt": 'def shout(s: str) -> str:\n    """Upper-case s and add "!"."""\n',
    "entry_point": "shout",
    "canonical_solution": '    return s.upper() + "!"\n',
    "test": "def check(candidate):\n    assert candidate('hi') == 'HI!'\n    assert candidate('') == '!'\n",
}


@pytest.fixture(scope="module")
def pools():
    require("docker")
    with CodeSandboxes("auto", workspaces=1, verifiers=2) as pools:
        yield pools


def test_the_shipped_set_covers_every_family_and_difficulty():
    tasks = default_tasks()
    assert len(tasks) >= 150
    assert {(t.metadata.family, t.metadata.difficulty) for t in tasks} == {
        (f, d) for f in FAMILIES for d in range(4)}
    assert {t.metadata.tags[0] for t in tasks} == {
        "strings", "lists", "math", "parsing", "data-structures", "algorithms"}
    for task in tasks:
        payload = code_task(task)
        assert payload.solution and len(payload.hidden_tests) >= 3 and payload.visible_tests
        visible = {json.dumps(t.args) for t in payload.visible_tests}
        assert not visible & {json.dumps(t.args) for t in payload.hidden_tests}  # hidden means unseen


def test_every_shipped_reference_passes_and_a_trivially_wrong_solution_fails(pools):
    tasks = default_tasks()

    def judge(task):
        payload = code_task(task)
        wrong = f"def {payload.entry_point}(*args, **kwargs):\n    return None\n"
        return (verify_solution(pools, task, payload.solution), verify_solution(pools, task, wrong))

    with ThreadPoolExecutor(2) as workers:
        results = list(workers.map(judge, tasks))
    failing = [(t.id, r.error, [o.detail for o in r.outcomes if not o.passed]) for t, (r, _) in zip(tasks, results)
               if not r.all_passed]
    assert not failing
    assert not [t.id for t, (_, w) in zip(tasks, results) if w.all_passed]


def test_generation_is_deterministic_and_a_new_rng_gives_a_new_variant():
    assert [t.model_dump() for t in make_tasks(variants=1, seed=3)] == \
        [t.model_dump() for t in make_tasks(variants=1, seed=3)]
    a = make_task("caesar", np.random.default_rng(1), 2)
    b = make_task("caesar", np.random.default_rng(2), 2)
    assert a.metadata == b.metadata and a.prompt != b.prompt
    with pytest.raises(ValueError, match="difficulty"):
        make_task("caesar", np.random.default_rng(1), 7)


def test_benchmark_jsonl_loads_and_its_reference_passes(tmp_path, pools):
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps({**HUMANEVAL_STYLE, "extra_field": 1}) + "\n")
    (task,) = load_benchmark_jsonl(path)
    assert task.id == "Demo/0" and "def shout" in task.prompt
    assert verify_solution(pools, task, code_task(task).solution).all_passed
    assert not verify_solution(pools, task, "def shout(s):\n    return s\n").all_passed


def test_a_bad_benchmark_line_names_the_line_and_the_field(tmp_path):
    path = tmp_path / "bench.jsonl"
    bad = {k: v for k, v in HUMANEVAL_STYLE.items() if k != "entry_point"}
    path.write_text(json.dumps(HUMANEVAL_STYLE) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(TaskFileError, match=r"bench.jsonl:2: field 'entry_point'"):
        load_benchmark_jsonl(path)


def test_a_datasets_split_or_any_iterable_of_records_loads():
    assert from_dataset([HUMANEVAL_STYLE]).ids == ["Demo/0"]
    datasets = pytest.importorskip("datasets")
    split = datasets.Dataset.from_list([HUMANEVAL_STYLE])
    assert from_dataset(split)[0] == benchmark_task(HUMANEVAL_STYLE)


def test_mutate_makes_a_solvable_task_of_the_same_family_and_difficulty(pools):
    from agentenv.envs.code import CodeEnv

    env = CodeEnv()
    rng = np.random.default_rng(0)
    for task in list(default_tasks())[::24]:  # one task of every seventh family, across difficulties
        variant = env.mutate(task, rng)
        assert variant is not None and variant.id != task.id and variant.payload != task.payload
        assert (variant.metadata.family, variant.metadata.difficulty) == (task.metadata.family, task.metadata.difficulty)
        assert verify_solution(pools, variant, code_task(variant).solution).all_passed
    assert env.mutate(benchmark_task(HUMANEVAL_STYLE), rng) is None  # no generator behind a benchmark task
    env.close()
