"""Code tasks from a Hugging Face ``datasets`` split: HumanEval's layout, MBPP's, or any columns.

    from datasets import load_dataset
    from agentenv.envs.code import from_dataset
    tasks = from_dataset(load_dataset("openai_humaneval")["test"])     # the layout is told from the columns
    tasks = from_dataset(load_dataset("mbpp")["test"])
    tasks = from_dataset(split, columns={"prompt": "question", "tests": "asserts"})   # other names

A record has six fields; a *layout* says which column holds each, and ``columns=``
overrides it field by field (a column name, or a function of the row):

=============  ====================  ================================  ===========================
field          HumanEval              MBPP (``mbpp``, ``sanitized``)     what it is
=============  ====================  ================================  ===========================
id             task_id                task_id                           the task id (optional)
prompt         prompt                 text, else prompt                 code to complete, or prose
tests          test                   test_list                         text, or a list of texts
entry_point    entry_point            (found in the tests)              the function the tests call
solution       canonical_solution     code                              a reference (optional)
setup          -                      test_setup_code, else test_imports  code the tests run first
=============  ====================  ================================  ===========================

Any other split uses the field names themselves as column names ("columns" layout).

How a record becomes a task:

- ``tests``: each text is one hidden code test, run with the entry point (and
  ``candidate``) bound to the solution's function; a text that defines
  ``check(candidate)`` (HumanEval's) is called as ``check(candidate)``.
- ``entry_point``: when no column holds it, the first function the tests call that
  the reference solution defines (else the first non-builtin function they call).
- A prompt that defines the entry point is code to complete, shown as HumanEval's
  are (`benchmark_task`): its docstring examples are the visible tests, it is run
  before the tests (its helpers), and a solution that does not define the entry
  point is the completion of the prompt. Any other prompt is prose, shown as MBPP's
  are: followed by the first ``visible_tests`` tests, which are also the visible tests.

Errors (`TaskFileError`) name the record index, the field and its column; a missing
column has a did-you-mean against the split's columns. Records are untrusted text
like any task file; only the sandbox runs their code.

Left out: stdin/stdout problems (APPS, CodeContests), tests that call functions
other than the entry point, multi-file solutions.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentenv import Task, TaskSet
from agentenv.core.errors import TaskFileError
from agentenv.core.task import did_you_mean
from agentenv.envs.adapters import _dataset
from agentenv.envs.adapters._dataset import Reader, Source
from agentenv.envs.code.tasks import MAX_PARSED_CHARS, CodeTask, docstring_examples, stub_prompt
from agentenv.envs.code.verify import CodeTest

__all__ = ["FIELDS", "LAYOUTS", "CodeRecord", "Layout", "from_dataset"]

Layout = Literal["auto", "humaneval", "mbpp", "columns"]
FIELDS = ("id", "prompt", "tests", "entry_point", "solution", "setup")
REQUIRED = ("prompt", "tests")
LAYOUTS: dict[str, dict[str, tuple[str, ...]]] = {
    "humaneval": {
        "id": ("task_id",),
        "prompt": ("prompt",),
        "tests": ("test",),
        "entry_point": ("entry_point",),
        "solution": ("canonical_solution",),
    },
    "mbpp": {
        "id": ("task_id",),
        "prompt": ("text", "prompt"),
        "tests": ("test_list",),
        "solution": ("code",),
        "setup": ("test_setup_code", "test_imports"),
    },
    "columns": {name: (name,) for name in FIELDS},
}
"""Per layout, the candidate columns of each field: the first the split has is read."""
_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
_HARNESS_NAMES = frozenset({"check", "candidate"})  # HumanEval's tests call these, never the entry point by name
_CHECK = re.compile(r"^def\s+check\s*\(", re.MULTILINE)


class CodeRecord(BaseModel):
    """One record, its fields read out of the row's columns."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str = Field(min_length=1)
    tests: list[str] = Field(min_length=1)
    entry_point: str | None = Field(None, pattern=_IDENTIFIER)
    solution: str | None = None
    setup: str = ""


def from_dataset(
    split: Any,
    *,
    layout: Layout = "auto",
    columns: Mapping[str, Source] | None = None,
    metadata: Mapping[str, Source] | None = None,
    id_prefix: str | None = None,
    visible_tests: int = 1,
) -> TaskSet:
    """Code tasks from one split of a Hugging Face dataset (or any iterable of dicts).

    ``datasets`` itself is not imported: pass ``load_dataset("openai_humaneval")["test"]``.

    Args:
        split: One split (``datasets.Dataset``, ``IterableDataset`` or a list of dicts); a
            ``DatasetDict`` is refused with its split names.
        layout: "humaneval", "mbpp", "columns" (the field names are the column names) or
            "auto": told from the columns (``entry_point`` and ``test``: humaneval;
            ``test_list``: mbpp; else columns).
        columns: Field -> column name (or function of the row), over the layout's.
        metadata: `TaskMeta` fields from columns, e.g. ``{"difficulty": "level"}``;
            the family defaults to "benchmark".
        id_prefix: Put before every id (``PREFIX/ID``); ids without an id column are
            ``PREFIX-INDEX-HASH`` (default prefix: the dataset's name, else "code").
        visible_tests: For prose prompts, how many of the tests are shown and runnable
            by the agent (all of them stay hidden tests too).
    """
    source = _dataset.open_split(split, what="code.from_dataset")
    readers = _readers(source.columns, layout, columns)
    meta_readers = _dataset.check_metadata(metadata)
    for reader in meta_readers:
        reader.check_columns(source.columns)
    if visible_tests < 0:
        raise ValueError(f"visible_tests must be >= 0, got {visible_tests}")
    prefix = id_prefix or source.name or "code"
    ids = _dataset.Ids()
    tasks = []
    for index, row in enumerate(source.rows):
        record = _record(readers, row, index)
        if "id" in readers:
            task_id = _dataset.read_id(readers["id"], row, index, id_prefix)
        else:
            task_id = _dataset.stable_id(prefix, index, record.prompt, *record.tests)
        ids.add(task_id, index)
        meta = _dataset.read_metadata(meta_readers, row, index, "benchmark")
        tasks.append(_task(record, task_id, index, meta.model_dump(), visible_tests, readers))
    return TaskSet(tasks)


def _readers(columns: list[str] | None, layout: Layout, overrides: Mapping[str, Source] | None) -> dict[str, Reader]:
    """The reader of each field the split has, checked against its columns."""
    overrides = dict(overrides or {})
    for name in overrides:
        if name not in FIELDS:
            hint = did_you_mean(name, FIELDS) or f" The fields: {', '.join(FIELDS)}."
            raise ValueError(f"columns has no field {name!r}.{hint}")
    if layout == "auto":
        layout = _detect(columns or [])
    elif layout not in LAYOUTS:
        raise ValueError(f"layout must be 'auto' or one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    readers: dict[str, Reader] = {}
    for name in FIELDS:
        if name in overrides:
            reader = Reader(f"columns[{name!r}]", overrides[name])
            reader.check_columns(columns)
            readers[name] = reader
            continue
        candidates = LAYOUTS[layout].get(name, ())
        present = [c for c in candidates if columns is None or c in columns]
        if present:
            readers[name] = Reader(name, present[0])
        elif name in REQUIRED and candidates:
            have = ", ".join(columns or []) or "none"
            wanted = candidates[0]
            hint = did_you_mean(wanted, columns or [])
            raise TaskFileError(
                f"the split has no column {wanted!r} for the field {name!r} (layout {layout!r}).{hint} "
                f"Its columns: {have}. Map one: columns={{{name!r}: 'COLUMN'}}."
            )
    return readers


def _detect(columns: list[str]) -> Literal["humaneval", "mbpp", "columns"]:
    if {"prompt", "test", "entry_point"} <= set(columns):
        return "humaneval"
    if "test_list" in columns:
        return "mbpp"
    return "columns"


def _record(readers: dict[str, Reader], row: Mapping[str, Any], index: int) -> CodeRecord:
    values: dict[str, Any] = {}
    for name, reader in readers.items():
        if name == "id":
            continue
        value = reader.read(row, index, required=name in REQUIRED)
        if name == "tests" and isinstance(value, str):
            value = [value]
        elif name == "setup":
            value = "\n".join(value) if isinstance(value, (list, tuple)) else (value or "")
        elif name == "entry_point" and isinstance(value, str):
            value = value.strip()
        values[name] = value
    try:
        record = CodeRecord.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "(record)"
        where = readers[name].where() if name in readers else name
        raise TaskFileError(f"record {index}: {where}: {err['msg']}") from None
    for name in ("prompt", "solution", "setup"):
        text = getattr(record, name)
        if text:
            _dataset.as_text(text, index, readers[name].where() if name in readers else name)
    for i, test in enumerate(record.tests):
        _dataset.as_text(test, index, f"{readers['tests'].where()}[{i}]")
    return record


def _task(
    record: CodeRecord, task_id: str, index: int, meta: dict[str, Any], visible_tests: int, readers: dict[str, Reader]
) -> Task:
    entry = record.entry_point or _entry_point(record)
    if entry is None:
        raise TaskFileError(
            f"record {index}: no entry point: no column holds one and the tests call no function; "
            "map one with columns={'entry_point': COLUMN_OR_FUNCTION}"
        )
    hidden = [CodeTest(code=f"{t}\n\ncheck(candidate)\n" if _CHECK.search(t) else t) for t in record.tests]
    if _defines(record.prompt, entry):  # code to complete: HumanEval's way
        examples = docstring_examples(record.prompt, entry)
        solution = record.solution
        if solution is not None and not _defines(solution, entry):
            solution = record.prompt + solution
        payload = CodeTask(
            entry_point=entry,
            visible_tests=[e.test() for e in examples],
            hidden_tests=hidden,
            solution=solution,
            setup="\n".join(filter(None, [record.setup, record.prompt])),
        )
        prompt = stub_prompt(record.prompt, entry, examples)
    else:  # prose: MBPP's way
        shown = record.tests[:visible_tests]
        payload = CodeTask(
            entry_point=entry,
            visible_tests=hidden[:visible_tests],
            hidden_tests=hidden,
            solution=record.solution,
            setup=record.setup,
        )
        prompt = f"{record.prompt.strip()}\n\nWrite it in Python: your solution.py must define `{entry}`."
        if shown:
            prompt += " Your code should pass tests like these (the visible tests):\n\n" + "\n".join(shown)
    return _dataset.task_or_error(
        index, id=task_id, prompt=prompt, payload=payload.model_dump(mode="json"), metadata=meta
    )


def _entry_point(record: CodeRecord) -> str | None:
    """The function the tests call: one the solution defines if any, else the first non-builtin."""
    called = [name for test in record.tests for name in _called(test) if name not in _HARNESS_NAMES]
    defined = set(_functions(record.solution or ""))
    for name in called:
        if name in defined:
            return name
    return next((name for name in called if not hasattr(builtins, name)), None)


def _called(source: str) -> list[str]:
    """Names of the plain functions ``source`` calls, in source order; [] if it does not parse."""
    tree = _parse(source)
    if tree is None:
        return []
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    calls.sort(key=lambda n: (n.lineno, n.col_offset))
    return [n.func.id for n in calls if isinstance(n.func, ast.Name)]


def _functions(source: str) -> list[str]:
    tree = _parse(source)
    if tree is None:
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _defines(source: str, name: str) -> bool:
    """Whether ``source`` defines function ``name`` at its top level (read as text: a
    prompt to complete does not parse, its body being missing)."""
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(name)}\s*\(", source, re.MULTILINE) is not None


def _parse(source: str) -> ast.Module | None:
    if len(source) > MAX_PARSED_CHARS:
        return None
    try:
        return ast.parse(source)
    # The parser answers hostile nesting with MemoryError or RecursionError, NUL bytes with ValueError.
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
