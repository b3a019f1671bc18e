"""Tasks and task sets: what an episode is asked to do, loaded from Python or JSONL (plain or gzipped).

A `Task` is data: an id, the prompt the agent sees, an env-specific ``payload``
(the expression to evaluate, the hidden tests, the gold actions) and metadata the
failure miner groups by. A `TaskSet` is an ordered, id-indexed collection with a
deterministic train/test split. Task files are untrusted input: every line is
validated, hostile ones included (corrupt gzip, bytes that are not UTF-8, deep
nesting, huge numbers, NaN or infinity, lone surrogates), and an error names the
file, the line and the field.
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import io
import json
import math
import unicodedata
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, overload

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from agentenv.core import _safejson
from agentenv.core.errors import EnvArgumentError, TaskFileError

__all__ = ["Task", "TaskMeta", "TaskSet", "content_key"]


def _printable(label: str) -> str:
    """Ids, families and tags are printed as they are by the CLIs (``agentenv miner show``,
    eval tables): a control character from a task file could clear the terminal or forge a row."""
    bad = next((c for c in label if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise ValueError(f"control character U+{ord(bad):04X} in {label[:40]!r}; use printable text")
    return label


Label = Annotated[str, AfterValidator(_printable)]
MAX_ID_CHARS = 256
"""The longest task id; a task the miner derives from another (`agentenv.miner`) stays within it."""


class TaskMeta(BaseModel):
    """What a task is, for grouping and sampling."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    family: Label = "default"
    difficulty: int = Field(default=0, ge=0, description="0 = easiest")
    tags: tuple[Label, ...] = ()


class Task(BaseModel):
    """One task. ``payload`` is the env's own data and is never shown to the agent
    unless the env puts it in the prompt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Label = Field(min_length=1, max_length=MAX_ID_CHARS)
    prompt: str
    payload: dict[str, Any] = Field(default_factory=dict)
    metadata: TaskMeta = Field(default_factory=TaskMeta)


def content_key(task: Task) -> str:
    """A hash of what the agent is given and checked against (prompt and payload), not
    of the id: two tasks with one key are one task under two ids."""
    text = json.dumps([task.prompt, task.payload], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` Did you mean 'a', 'b'?`` for the (up to three) ``choices`` closest to
    ``word``, or "" when none is close: append it to an error message.

    agentenv's one did-you-mean: every "unknown X" message uses it (env ids, task
    ids, tool names, env keyword arguments), so they all read alike."""
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def curriculum_slice(tasks: TaskSet, difficulties: object, *, env: str) -> TaskSet:
    """The tasks whose difficulty is in ``difficulties``: an env's ``difficulties=`` argument.

    Checked here, in one line naming the argument (`EnvArgumentError`), because it
    often comes from a config file, where ``difficulties = 2`` is a natural typo for
    ``[2]``: filtering with it failed deep inside the env with a bare TypeError, and a
    slice that matched no task made an env with nothing to sample."""
    if isinstance(difficulties, (str, bytes)) or not isinstance(difficulties, Iterable):
        raise EnvArgumentError(f"{env}: difficulties must be a list of ints, e.g. [2], got {difficulties!r}")
    wanted = list(difficulties)
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in wanted):
        raise EnvArgumentError(f"{env}: difficulties must be a list of ints, e.g. [2], got {wanted!r}")
    sliced = tasks.filter(lambda t: t.metadata.difficulty in wanted)
    if not sliced:
        have = sorted({t.metadata.difficulty for t in tasks})
        raise EnvArgumentError(f"{env}: difficulties {wanted} match no task; the tasks have difficulties {have}")
    return sliced


class TaskSet(Sequence[Task]):
    """An ordered collection of tasks with unique ids."""

    def __init__(self, tasks: Iterable[Task | Mapping[str, Any]] = ()) -> None:
        self._tasks: list[Task] = [t if isinstance(t, Task) else Task.model_validate(t) for t in tasks]
        self._by_id: dict[str, Task] = {}
        for task in self._tasks:
            if task.id in self._by_id:
                raise ValueError(f"duplicate task id {task.id!r}")
            self._by_id[task.id] = task

    def __len__(self) -> int:
        return len(self._tasks)

    @overload
    def __getitem__(self, index: int) -> Task: ...
    @overload
    def __getitem__(self, index: slice) -> TaskSet: ...
    def __getitem__(self, index: int | slice) -> Task | TaskSet:
        if isinstance(index, slice):
            return TaskSet(self._tasks[index])
        return self._tasks[index]

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def __contains__(self, item: object) -> bool:
        key = item.id if isinstance(item, Task) else item
        return key in self._by_id

    def __repr__(self) -> str:
        return f"TaskSet({len(self)} tasks)"

    def get(self, task_id: str) -> Task:
        """The task with this id; a KeyError with a did-you-mean otherwise."""
        try:
            return self._by_id[task_id]
        except KeyError:
            raise KeyError(f"no task with id {task_id!r}.{did_you_mean(task_id, self._by_id)}") from None

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self._tasks]

    def sample(self, rng: np.random.Generator) -> Task:
        if not self._tasks:
            raise ValueError("cannot sample from an empty TaskSet")
        return self._tasks[int(rng.integers(len(self._tasks)))]

    def filter(self, predicate: Callable[[Task], bool]) -> TaskSet:
        return TaskSet(t for t in self._tasks if predicate(t))

    def split(
        self, test_fraction: float = 0.2, *, seed: int = 0, by: Literal["content", "id"] = "content"
    ) -> tuple[TaskSet, TaskSet]:
        """Deterministic (train, test) split: each task's side is drawn from a hash of its
        content (`content_key`: the prompt the agent sees and the payload its verifier
        checks), so tasks of one content, under however many ids, land together and no test
        task has a twin in train; the same content lands on the same side whatever the order
        or size of the set. ``by="id"`` draws by id instead (tasks of one content may then
        fall on both sides: `shared_content` counts them). A set of few distinct contents
        splits coarsely: a set with one content holds it all on one side."""
        if not 0.0 <= test_fraction <= 1.0:
            raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
        if by not in ("content", "id"):
            raise ValueError(f"by must be 'content' or 'id', got {by!r}")
        train: list[Task] = []
        test: list[Task] = []
        for task in self._tasks:
            key = content_key(task) if by == "content" else task.id
            digest = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest()
            (test if int.from_bytes(digest, "big") / 2**64 < test_fraction else train).append(task)
        return TaskSet(train), TaskSet(test)

    def contents(self) -> int:
        """How many distinct contents (`content_key`) the set holds."""
        return len({content_key(task) for task in self._tasks})

    def shared_content(self, other: TaskSet) -> int:
        """How many of these tasks have a twin in ``other``: a task of the same content
        (`content_key`), whatever its id. 0 for the test side of a content split."""
        theirs = {content_key(task) for task in other}
        return sum(content_key(task) in theirs for task in self._tasks)

    # -- files ---------------------------------------------------------------

    @classmethod
    def from_jsonl(
        cls,
        path: str | Path,
        *,
        convert: Callable[[dict[str, Any]], Mapping[str, Any] | Task] | None = None,
    ) -> TaskSet:
        """Load one task per line of a UTF-8 JSONL file, gzipped or not (told by its
        first bytes, not its name). ``convert`` maps another layout (say, a public
        benchmark's) to `Task` fields. Errors name the file, line and field."""
        path = Path(path)
        tasks: list[Task] = []
        seen: dict[str, int] = {}
        for lineno, line in _jsonl_lines(path):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            record = _json_record(line, where)
            try:
                data = convert(record) if convert else record
                task = data if isinstance(data, Task) else Task.model_validate(data)
            except ValidationError as e:
                err = e.errors()[0]
                field = ".".join(str(p) for p in err["loc"]) or "(record)"
                raise TaskFileError(f"{where}: field {field!r}: {err['msg']}") from None
            except (KeyError, TypeError, ValueError) as e:
                raise TaskFileError(f"{where}: {type(e).__name__}: {e}") from None
            if task.id in seen:
                first = seen[task.id]
                raise TaskFileError(f"{where}: field 'id': duplicate task id {task.id!r} (first on line {first})")
            seen[task.id] = lineno
            tasks.append(task)
        return cls(tasks)

    def to_jsonl(self, path: str | Path) -> None:
        with Path(path).open("w", encoding="utf-8") as f:
            for task in self._tasks:
                f.write(task.model_dump_json() + "\n")


# -- reading task files --------------------------------------------------------------

GZIP_MAGIC = b"\x1f\x8b"
MAX_LINE_BYTES = 64 << 20
"""A longer line is refused: it would be read whole, and a small gzip can hold gigabytes of one line."""
MAX_GZIP_RATIO = 100
"""A gzipped file may inflate to this many times its size (or `MAX_LINE_BYTES`, if more):
text JSONL inflates ~3-20x, a gzip bomb ~1000x, and every line read is kept in memory."""
MAX_DEPTH = 100
"""Deeper JSON is refused: pydantic cannot write a task nested ~250 deep back out, and no real task nests so deep."""


def _jsonl_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of ``path``, gunzipped if it starts with the gzip magic.

    A missing or unreadable file raises the usual OSError; bytes that are not UTF-8,
    a corrupt or truncated gzip stream, one inflating past `MAX_GZIP_RATIO` or an
    overlong line raise `TaskFileError`. A leading UTF-8 byte order mark is dropped."""
    lineno = inflated = 0
    with path.open("rb") as raw:
        gzipped = raw.read(2) == GZIP_MAGIC
        raw.seek(0)
        stream: io.BufferedIOBase = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
        size = path.stat().st_size
        max_inflated = max(MAX_GZIP_RATIO * size, MAX_LINE_BYTES)
        try:
            while line := stream.readline(MAX_LINE_BYTES + 1):
                lineno += 1
                if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                    raise TaskFileError(f"{path}:{lineno}: line longer than {MAX_LINE_BYTES} bytes")
                inflated += len(line)
                if gzipped and inflated > max_inflated:
                    raise TaskFileError(
                        f"{path}: gzip data inflates past {max_inflated} bytes (the bound for a {size}-byte file: "
                        f"{MAX_GZIP_RATIO}x its size, at least {MAX_LINE_BYTES}), likely a gzip bomb; "
                        "if it is meant to be this large, gunzip it and load the plain file"
                    )
                if lineno == 1:
                    line = line.removeprefix(b"\xef\xbb\xbf")  # the UTF-8 BOM some editors write
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as e:
                    bad = e.object[e.start]
                    raise TaskFileError(
                        f"{path}:{lineno}: not UTF-8 text: byte {bad:#04x} at byte {e.start + 1} of the line"
                    ) from None
                yield lineno, text
        except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError; EOFError: cut short
            raise TaskFileError(f"{path}:{lineno + 1}: corrupt or truncated gzip data: {e}") from None


def _json_record(line: str, where: str) -> dict[str, Any]:
    """One line's JSON object; `TaskFileError` for anything else, hostile input included
    (see `agentenv.core._safejson`: lone surrogates, nesting past `MAX_DEPTH`, huge numbers),
    and NaN or infinity (``NaN``, ``Infinity``, ``1e309``), which `json.loads` accepts
    but JSON cannot write back: a task holding one would become another task (null)
    in a trajectory or a checkpoint."""
    non_finite: list[str] = []  # the literals of NaN and infinity, in the order read
    try:
        record = json.loads(line, parse_constant=_NonFiniteLiterals(non_finite), parse_float=_Floats(non_finite))
    except json.JSONDecodeError as e:
        raise TaskFileError(f"{where}: invalid JSON: {e.msg} (column {e.colno})") from None
    except ValueError as e:  # an integer of more digits than int() converts
        raise TaskFileError(f"{where}: invalid JSON: {e}") from None
    except RecursionError:
        raise TaskFileError(f"{where}: invalid JSON: nested too deeply") from None
    if not isinstance(record, dict):
        raise TaskFileError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if (found := _safejson.problem(record, max_depth=MAX_DEPTH)) is not None:
        field, what = found
        raise TaskFileError(f"{where}: field {field or '(record)'!r}: {what}")
    if non_finite:
        field = _safejson.first_non_finite(record) or "(record)"
        raise TaskFileError(
            f"{where}: field {field!r}: {non_finite[0]} is not a finite number; JSON has no NaN or infinity "
            "(written back, the task would hold null there): use a finite number, a string or null"
        )
    return record


class _NonFiniteLiterals:
    """``parse_constant`` of `json.loads`: notes NaN, Infinity and -Infinity (which JSON does not have)."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def __call__(self, literal: str) -> float:
        self.seen.append(literal)
        return float(literal)


class _Floats(_NonFiniteLiterals):
    """``parse_float`` of `json.loads`: notes a number too large for a float (1e309 reads as infinity)."""

    def __call__(self, literal: str) -> float:
        value = float(literal)
        if not math.isfinite(value):
            self.seen.append(literal if len(literal) <= 40 else literal[:37] + "...")
        return value
