"""Code tasks: the payload model, the shipped procedural set, and loaders for public benchmarks.

A code task is a `Task` whose ``payload`` validates as `CodeTask`: the entry
point, visible tests (shown in the prompt, runnable by the agent), hidden tests
(only ever run by the verifier), an optional reference solution and setup code.

- `make_tasks` builds the shipped set deterministically from the families in
  `agentenv.envs.code.families`; `make_task(family, rng, difficulty)` is one
  variant (what a task mutator calls with a new ``rng``), never one whose hidden tests
  ``return True`` or ``return xs`` passes (`trivial_solution`).
- `load_benchmark_jsonl` reads the common public layout
  ``{task_id, prompt, entry_point, test, canonical_solution}`` (HumanEval-style,
  plain or gzipped JSONL: ``HumanEval.jsonl.gz`` loads as shipped). ``test``
  defines ``check(candidate)`` and becomes the one hidden code test; the prompt's
  ``>>>`` docstring examples become the visible tests (`docstring_examples`).
  `agentenv.envs.code.dataset.from_dataset` reads a Hugging Face ``datasets`` split
  (HumanEval, MBPP or any columns).

Task files are untrusted: every record goes through a pydantic model, and a bad
one raises `TaskFileError` naming the file, line and field; a docstring example
that cannot be a test (broken, hostile or not a call) is skipped, never an error.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import keyword
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from agentenv import Task, TaskSet
from agentenv.envs.code._codec import decode, encode, same
from agentenv.envs.code.families import FAMILIES, Family, Variant
from agentenv.envs.code.verify import CallTest, CodeTest, TestCase

__all__ = [
    "BenchmarkRecord",
    "CodeTask",
    "DocstringExample",
    "benchmark_task",
    "code_task",
    "default_tasks",
    "docstring_examples",
    "load_benchmark_jsonl",
    "make_task",
    "make_tasks",
    "stub_prompt",
    "trivial_solution",
]

VISIBLE_TESTS = 2
DIFFICULTIES = (0, 1, 2, 3)
TRIVIAL_RETURNS: tuple[Any, ...] = (None, 0, 1, -1, True, False, "", [], {}, ())
"""What a do-nothing solution returns: no generated task's hidden tests all expect one of these
(nor all expect the first argument back), see `trivial_solution`."""
GENERATION_ATTEMPTS = 20
"""Variants `make_task` draws, each with the next numbers of its ``rng``, before it gives up on
one whose hidden tests a do-nothing solution cannot pass."""
MAX_PARSED_CHARS = 100_000
"""Longer source is never given to `ast.parse` (a docstring example is skipped; a dataset's
tests or solution are not searched for an entry point): the parser takes ~100x the text in
memory, and a task file's line may hold 64 MB."""


def _not_keyword(name: str) -> str:
    """An entry point named ``None`` or ``class`` passes the identifier pattern, but no
    function can have that name: every solution would fail, the reference's included."""
    if keyword.iskeyword(name):
        raise ValueError(f"{name!r} is a Python keyword, so no function can have that name")
    return name


EntryPoint = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"), AfterValidator(_not_keyword)]
_CHECK = re.compile(r"^def\s+check\s*\(", re.MULTILINE)


def _defines_check(test: str) -> str:
    """The hidden test is ``test`` followed by ``check(candidate)``: without a top-level
    ``def check`` it raises NameError whatever the solution, and the task is unsolvable."""
    if _CHECK.search(test) is None:
        raise ValueError("defines no top-level `def check(candidate):`, which the hidden test calls")
    return test


class CodeTask(BaseModel):
    """The ``payload`` of a code task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    entry_point: EntryPoint = Field(description="the function the tests call")
    hidden_tests: list[TestCase] = Field(min_length=1, description="run by the verifier only")
    visible_tests: list[TestCase] = Field(default_factory=list, description="shown and runnable by the agent")
    solution: str | None = Field(None, description="a reference solution (source defining entry_point)")
    setup: str = Field("", description="code that code tests run first (a benchmark prompt's helper functions)")
    test_timeout_s: float = Field(3.0, gt=0, le=60, description="wall clock per test")


class BenchmarkRecord(BaseModel):
    """One line of a public code benchmark (HumanEval layout; extra fields are ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    task_id: str = Field(min_length=1, max_length=256)
    prompt: str
    entry_point: EntryPoint
    test: Annotated[str, AfterValidator(_defines_check)]
    canonical_solution: str | None = None


def code_task(task: Task) -> CodeTask:
    """The validated payload of ``task``."""
    return CodeTask.model_validate(task.payload)


# -- benchmarks ----------------------------------------------------------------------------


def benchmark_task(record: Mapping[str, Any]) -> Task:
    """A `Task` from a benchmark record; ``test`` must define ``check(candidate)``.

    The prompt's docstring examples become the visible tests (see `docstring_examples`);
    the record's ``test`` is the one hidden test."""
    rec = BenchmarkRecord.model_validate(record)
    examples = docstring_examples(rec.prompt, rec.entry_point)
    payload = CodeTask(
        entry_point=rec.entry_point,
        visible_tests=[e.test() for e in examples],
        hidden_tests=[CodeTest(code=f"{rec.test}\n\ncheck(candidate)\n")],
        solution=None if rec.canonical_solution is None else rec.prompt + rec.canonical_solution,
        setup=rec.prompt,
    )
    return Task(
        id=rec.task_id,
        prompt=stub_prompt(rec.prompt, rec.entry_point, examples),
        payload=payload.model_dump(mode="json"),
        metadata={"family": "benchmark"},
    )


def stub_prompt(stub: str, entry_point: str, examples: list[DocstringExample]) -> str:
    """What the agent is shown for a benchmark task whose prompt is code to complete."""
    prompt = (
        f"Complete this Python function; your solution.py must define `{entry_point}`.\n\n"
        f"```python\n{stub.rstrip()}\n```"
    )
    if examples:
        prompt += "\n\nExamples (the visible tests):\n" + "\n".join(f"    {e.call} == {e.expected}" for e in examples)
    return prompt


def load_benchmark_jsonl(path: str | Path) -> TaskSet:
    """A benchmark file in the ``{task_id, prompt, entry_point, test, canonical_solution}`` layout."""
    return TaskSet.from_jsonl(path, convert=benchmark_task)


# -- docstring examples --------------------------------------------------------------------

_PS1 = re.compile(r"([ \t]*)>>>(?: (.*))?")
_PS2 = re.compile(r"\.\.\.(?: (.*))?")
_CLOSING_QUOTES = re.compile(r"\"\"\"|\'\'\'")
_DIRECTIVE = re.compile(r"#[ \t]*doctest:")


@dataclass(frozen=True, slots=True)
class DocstringExample:
    """A docstring example: ``call`` must return ``expected``.

    Both are Python source normalised by `ast.unparse`; ``expected`` is a literal."""

    call: str
    expected: str

    def test(self) -> CodeTest:
        """The example as a code test; its failure message says what came back."""
        shown = self.call if len(self.call) <= 80 else self.call[:77] + "..."
        got, want = f"{shown} returned ", f", expected {self.expected}"
        return CodeTest(
            code=f"_result = {self.call}\nassert _result == {self.expected}, {got!r} + repr(_result) + {want!r}\n"
        )


def docstring_examples(prompt: str, entry_point: str) -> list[DocstringExample]:
    """The doctest-style examples of ``prompt`` that can serve as visible tests, in order, once each.

    An example is a ``>>>`` line, its ``...`` continuation lines and the output
    lines under it, up to a blank line, the next ``>>>``, a line indented less or a
    closing triple quote; no output means the call returns None. Kept: a single
    expression calling ``entry_point`` whose output is a Python literal. Skipped,
    never an error: anything else (other expressions, printed text, tracebacks,
    doctest's ``...`` wildcard, ``+SKIP``, source that does not parse, an example
    longer than `MAX_PARSED_CHARS`). The prompt
    is read as written, not as the evaluated docstring, so ``"a\\nb"`` in an
    example means what its author typed."""
    lines = re.split(r"\r\n?|\n", prompt)
    found: dict[DocstringExample, None] = {}  # ordered and deduplicated
    for i, line in enumerate(lines):
        if (match := _PS1.fullmatch(line)) is not None:
            source, output = _example_lines(lines, i + 1, indent=match.group(1))
            example = _example("\n".join([match.group(2) or "", *source]), "\n".join(output), entry_point)
            if example is not None:
                found[example] = None
    return list(found)


def _example_lines(lines: list[str], start: int, *, indent: str) -> tuple[list[str], list[str]]:
    """The continuation lines and the output lines after a ``>>>`` line, ``indent`` removed."""
    source: list[str] = []
    output: list[str] = []
    for j in range(start, len(lines)):  # not a slice: copying the rest for each example is quadratic
        line = lines[j]
        if not line.strip() or not line.startswith(indent) or line.lstrip().startswith(">>>"):
            break
        line = line[len(indent) :]
        if not output and (continued := _PS2.fullmatch(line)) is not None:
            source.append(continued.group(1) or "")
            continue
        closing = _CLOSING_QUOTES.search(line)
        output.append(line if closing is None else line[: closing.start()])
        if closing is not None:
            break
    return source, output


def _example(source: str, want: str, entry_point: str) -> DocstringExample | None:
    if len(source) + len(want) > MAX_PARSED_CHARS or _skipped(source):
        return None
    try:
        call = ast.parse(source.strip(), mode="eval").body
        expected = ast.parse(want.strip(), mode="eval").body if want.strip() else ast.Constant(None)
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == entry_point):
            return None
        ast.literal_eval(expected)
        if any(isinstance(node, ast.Constant) and node.value is Ellipsis for node in ast.walk(expected)):
            return None
        return DocstringExample(call=ast.unparse(call), expected=ast.unparse(expected))
    # The parser answers hostile nesting with MemoryError or RecursionError; a huge
    # integer literal with ValueError (and so does unparse for a hex one).
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


def _skipped(source: str) -> bool:
    """Whether a line of ``source`` has a ``# doctest:`` directive with ``+SKIP`` after it.

    A substring test after the first directive of each line, not one regex
    (``#\\s*doctest:.*\\+SKIP`` backtracks over the rest of the line from every
    ``#doctest:`` in it: quadratic in a hostile line's length)."""
    for line in source.splitlines():
        if (directive := _DIRECTIVE.search(line)) is not None and "+SKIP" in line[directive.end() :]:
            return True
    return False


# -- the procedural set --------------------------------------------------------------------


def make_task(family: Family | str, rng: np.random.Generator, difficulty: int, *, task_id: str | None = None) -> Task:
    """One task of ``family`` at ``difficulty`` (0-3), parameters and inputs drawn from ``rng``.

    A variant whose hidden tests a do-nothing solution passes (`trivial_solution`) is
    dropped and the next one drawn from ``rng``; ValueError after `GENERATION_ATTEMPTS`."""
    fam = FAMILIES[family] if isinstance(family, str) else family
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty}")
    for _ in range(GENERATION_ATTEMPTS):
        variant = fam.make(rng, difficulty)
        tests = _call_tests(variant)
        visible, hidden = tests[:VISIBLE_TESTS], tests[VISIBLE_TESTS:]
        if (decoy := trivial_solution(hidden)) is None:
            break
    else:
        raise ValueError(
            f"family {fam.name!r} at difficulty {difficulty} made {GENERATION_ATTEMPTS} variants in a row whose "
            f"hidden tests all pass for a solution that does nothing ({decoy}): its inputs must draw "
            "cases with different answers"
        )
    payload = CodeTask(
        entry_point=variant.entry_point, visible_tests=visible, hidden_tests=hidden, solution=variant.solution
    )
    return Task(
        id=task_id or f"code-{fam.name}-d{difficulty}-{int(rng.integers(1 << 30)):08x}",
        prompt=_prompt(variant, visible),
        payload=payload.model_dump(mode="json"),
        metadata={"family": fam.name, "difficulty": difficulty, "tags": (fam.category,)},
    )


def trivial_solution(tests: Sequence[CallTest]) -> str | None:
    """A do-nothing solution that passes every one of ``tests`` (``"return True"``, ``"return
    the first argument"``), compared as the verifier does (`same`); None when there is none.

    A family's inputs are random, so a draw may hold only one answer (every string a
    palindrome, every list already merged): `make_task` then draws again."""
    expected = [decode(t.expected) for t in tests]
    for constant in TRIVIAL_RETURNS:
        if all(same(e, constant) for e in expected):
            return f"return {constant!r}"
    if all(t.args and same(e, decode(t.args[0])) for e, t in zip(expected, tests, strict=True)):
        return "return the first argument"
    return None


def _call_tests(variant: Variant) -> list[CallTest]:
    """Run the reference solution on each distinct input (on the host: it is our own code).

    An input the reference rejects (say, a generated division by zero) is dropped."""
    namespace: dict[str, Any] = {}
    exec(compile(variant.solution, f"<{variant.entry_point} reference>", "exec"), namespace)  # noqa: S102
    function = namespace[variant.entry_point]
    tests, seen = [], set()
    for args in variant.inputs:
        key = json.dumps(encode(args), sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        try:
            expected = function(*copy.deepcopy(args))
        except Exception:  # noqa: BLE001, S112 - not a valid input for this variant
            continue
        tests.append(CallTest(args=[encode(a) for a in args], expected=encode(expected)))
    if len(tests) < VISIBLE_TESTS + 3:
        raise ValueError(f"family of {variant.entry_point!r} made only {len(tests)} distinct valid tests")
    return tests


def _prompt(variant: Variant, visible: list[CallTest]) -> str:
    examples = "\n".join(
        f"    {variant.entry_point}({', '.join(repr(decode(a)) for a in t.args)}) == {decode(t.expected)!r}"
        for t in visible
    )
    return (
        f"Write a Python function `{variant.signature}`.\n\n{variant.description}\n\n"
        f"Examples (the visible tests):\n{examples}"
    )


@functools.cache
def default_tasks() -> TaskSet:
    """The shipped set: every family at every difficulty, two variants each (168 tasks)."""
    return make_tasks(variants=2, seed=0)


def make_tasks(
    *,
    variants: int = 2,
    seed: int = 0,
    families: Iterable[str] | None = None,
    difficulties: Iterable[int] = DIFFICULTIES,
) -> TaskSet:
    """``variants`` tasks per family and difficulty, deterministic in ``seed``."""
    tasks = []
    for name in families or FAMILIES:
        for d in difficulties:
            for k in range(variants):
                # One generator per task: adding a family never changes the others' tasks.
                rng = np.random.default_rng([seed, _stable_hash(name), d, k])
                tasks.append(make_task(name, rng, d, task_id=f"code-{name}-d{d}-{seed}-{k}"))
    return TaskSet(tasks)


def _stable_hash(text: str) -> int:
    return int.from_bytes(text.encode()[:8].ljust(8, b"\0"), "big") % (1 << 31)
