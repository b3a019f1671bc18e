"""Auditing a code task set: references that fail, and hidden tests a trivial solution passes."""

from __future__ import annotations

import pytest

import agentenv
from agentenv import tool_call_text
from agentenv.envs.code import CodeSandboxes, audit_tasks, benchmark_task, from_dataset

pytestmark = pytest.mark.slow  # starts process sandboxes


def _mbpp(task_id: int, code: str, tests: list[str]) -> dict[str, object]:
    return {"task_id": task_id, "text": "Write the function.", "code": code, "test_list": tests, "test_setup_code": ""}


ROWS = [
    _mbpp(1, "def add(a, b):\n    return a + b\n", ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]),
    _mbpp(2, "def srt(xs):\n    return sorted(xs)\n", ["assert srt([]) == []"]),  # only the empty list
    _mbpp(3, "def dbl(x):\n    return 3 * x\n", ["assert dbl(2) == 4"]),  # a reference that is wrong
    _mbpp(4, "def ev(x):\n    return x % 2 == 0\n", ["assert ev(2)", "assert ev(4)"]),  # only truthiness
]
WEAK_CHECK = {  # a HumanEval-layout record whose check never calls the candidate
    "task_id": "Weak/0",
    "prompt": 'def shout(s: str) -> str:\n    """Upper-case s and add "!"."""\n',
    "entry_point": "shout",
    "canonical_solution": '    return s.upper() + "!"\n',
    "test": "def check(candidate):\n    assert True\n",
}


@pytest.fixture(scope="module")
def sandboxes():
    with CodeSandboxes("process", verifiers=1, workspaces=1) as pools:
        yield pools


def test_the_audit_names_each_unsound_task_and_why_and_keeps_the_sound_ones(sandboxes) -> None:
    tasks = from_dataset(ROWS, id_prefix="mbpp")
    tasks = agentenv.TaskSet([*tasks, benchmark_task(WEAK_CHECK)])
    seen: list[tuple[int, int]] = []
    report = audit_tasks(tasks, sandboxes=sandboxes, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 5) for i in range(1, 6)]
    by_id = {a.task_id: a for a in report.audits}
    assert [a.task_id for a in report.audits] == tasks.ids
    assert by_id["mbpp/1"].sound and by_id["mbpp/1"].reference == "passed" and not by_id["mbpp/1"].decoys_passed
    assert by_id["mbpp/2"].decoys_passed == ("[]", "args[0] if args else None")
    assert by_id["mbpp/3"].reference == "failed" and "hidden test 1" in by_id["mbpp/3"].reference_error
    assert not by_id["mbpp/3"].decoys_passed
    assert {"1", "True", "args[0] if args else None"} <= set(by_id["mbpp/4"].decoys_passed)
    assert "None" not in by_id["mbpp/4"].decoys_passed
    assert len(by_id["Weak/0"].decoys_passed) == 11  # every decoy: the check asserts nothing
    assert report.sound_tasks().ids == ["mbpp/1"]
    text = str(report)
    assert text.startswith("5 tasks audited: 1 sound, 4 not")
    assert "mbpp/2: a trivial solution passes every hidden test: return [], return args[0] if args else None" in text
    assert "mbpp/3: its reference fails the hidden tests" in text


def test_what_the_audit_flags_is_what_a_policy_could_earn_with_it(sandboxes) -> None:
    """The decoy the audit reports as passing earns the whole task reward in the env."""
    tasks = from_dataset(ROWS[1:2], id_prefix="mbpp")
    [audit] = audit_tasks(tasks, sandboxes=sandboxes).audits
    decoy = f"def srt(*args, **kwargs):\n    return {audit.decoys_passed[0]}\n"
    with agentenv.make("code-v0", tasks=tasks, sandboxes=sandboxes) as env:
        env.reset(seed=0, options={"task": "mbpp/2"})
        *_, info = env.step(tool_call_text("submit", code=decoy))
    assert info["task_reward"] == 1.0


def test_a_task_without_a_reference_is_checked_against_the_decoys_only(sandboxes) -> None:
    record = {**WEAK_CHECK, "test": "def check(candidate):\n    assert candidate('a') == 'A!'\n"}
    del record["canonical_solution"]
    report = audit_tasks([benchmark_task(record)], sandboxes=sandboxes)
    assert report.audits[0].reference == "none" and report.audits[0].sound
    assert "1 without a reference" in str(report)
