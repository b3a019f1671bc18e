"""Reading task records out of a Hugging Face ``datasets`` split, or out of any iterable of records.

The adapters that turn a split into a `TaskSet` (`agentenv.envs.adapters.qa.from_dataset`,
`agentenv.envs.code.from_dataset`) share this: which row field feeds which task
field (a column name, or a function of the row), ids that stay the same from run
to run, task metadata from columns, and one clear `TaskFileError` for a record
that lacks a field or holds a value a task cannot carry. Each error names the
record's index (``split[i]``), the field and the column, with a did-you-mean
against the columns.

``datasets`` is never imported here: a split is read as what it is, an iterable
of dict rows that may say its ``column_names`` (a `datasets.Dataset` or
``IterableDataset`` does), so ``import agentenv`` stays light and a list of dicts
works the same. A ``DatasetDict`` (what ``load_dataset(name)`` returns without
``split=``) is refused with a message naming its splits.

Left out: coercing values beyond what each adapter states, and skipping bad
records (filter the split first: ``split.filter(...)``).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import numbers
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agentenv.core import _safejson
from agentenv.core.errors import TaskFileError
from agentenv.core.task import Task, TaskMeta, did_you_mean

__all__ = [
    "META_FIELDS",
    "Ids",
    "Reader",
    "Source",
    "Split",
    "as_text",
    "check_metadata",
    "open_split",
    "read_id",
    "read_metadata",
    "stable_id",
    "task_or_error",
]

Source = str | Callable[[Mapping[str, Any]], Any]
"""Where a task field comes from: a column name, or a function of the row (a dict)."""
META_FIELDS = tuple(TaskMeta.model_fields)
MAX_ID_CHARS = 256
BATCH_ROWS = 1024
_MISSING = object()
_FILE_BUILDERS = frozenset({"arrow", "csv", "generator", "json", "pandas", "parquet", "sql", "text", "xml"})


@dataclass(frozen=True, slots=True)
class Split:
    """A split's rows and what is known of its columns before reading them."""

    columns: list[str] | None
    """The split's ``column_names``, or the first record's keys for a plain iterable; None when it is empty."""
    rows: Iterable[Mapping[str, Any]]
    dataset: str | None
    """The dataset's name when the split says (a `datasets.Dataset` loaded by name), else None."""
    part: str | None
    """The split's name ("train") when it says, else None."""

    @property
    def name(self) -> str | None:
        """``DATASET-SPLIT`` (or ``DATASET``) when the dataset's name is known, else None."""
        if self.dataset is None:
            return None
        return f"{self.dataset}-{self.part}" if self.part else self.dataset


def open_split(split: Any, *, what: str) -> Split:
    """``split`` checked to be one split (not a ``DatasetDict``, not a single record), ready to read."""
    if isinstance(split, Mapping):
        values = list(split.values())
        if type(split).__name__.endswith("DatasetDict") or (values and all(hasattr(v, "column_names") for v in values)):
            names = ", ".join(repr(str(k)) for k in split)
            raise TypeError(
                f"{what} takes one split of a dataset, got a {type(split).__name__} of the splits {names}: "
                f"pick one, e.g. dataset[{next(iter(split), 'train')!r}]"
            )
        raise TypeError(f"{what} takes a dataset split or an iterable of records, got one record (a dict)")
    if isinstance(split, (str, bytes)) or not isinstance(split, Iterable):
        raise TypeError(f"{what} takes a dataset split or an iterable of records (dicts), got {type(split).__name__}")
    columns = getattr(split, "column_names", None)
    rows: Iterable[Mapping[str, Any]]
    if isinstance(columns, (list, tuple)):
        columns = [str(c) for c in columns]
        batched = columns and callable(getattr(split, "iter", None))
        rows = _guarded(_batched_rows(split) if batched else split)
    else:  # a plain iterable: the first record's keys stand for the columns
        iterator: Iterator[Any] = _guarded(split)
        first: Any = next(iterator, _MISSING)
        if first is _MISSING:
            columns, rows = None, ()
        else:
            columns = [str(k) for k in first] if isinstance(first, Mapping) else None
            rows = itertools.chain((first,), iterator)
    info = getattr(split, "info", None)
    dataset = getattr(info, "dataset_name", None)
    if dataset in _FILE_BUILDERS:  # load_dataset("json", data_files=...): the name is the file format's
        dataset = None
    part = getattr(split, "split", None)
    return Split(
        columns,
        rows,
        dataset if isinstance(dataset, str) and dataset else None,
        str(part) if part is not None and str(part) else None,
    )


def _guarded(rows: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """``rows``, with a failure of the data source itself (a corrupt file, a generator that
    raises) a `TaskFileError` naming the record it could not read, its cause chained."""
    index = 0
    iterator = iter(rows)
    while True:
        try:
            row = next(iterator)
        except StopIteration:
            return
        except Exception as e:  # any library's failure to read, reported as the record's (re-raised)
            raise TaskFileError(f"record {index}: reading the split failed: {type(e).__name__}: {e}") from e
        yield row
        index += 1


def _batched_rows(split: Any) -> Iterator[dict[str, Any]]:
    """The rows of a `datasets` split read a batch of columns at a time: the same dicts as
    iterating it, for a third of the cost (its per-row formatting is the slow part)."""
    for batch in split.iter(batch_size=BATCH_ROWS):
        keys = list(batch)
        for values in zip(*(batch[k] for k in keys), strict=True):
            yield dict(zip(keys, values, strict=True))


@dataclass(frozen=True, slots=True)
class Reader:
    """Reads one task field out of rows. ``field`` is how the caller named it (``answer``,
    ``columns['tests']``, ``metadata['difficulty']``), for the error messages."""

    field: str
    source: Source

    @property
    def column(self) -> str | None:
        return self.source if isinstance(self.source, str) else None

    def where(self) -> str:
        return f"{self.field} (column {self.source!r})" if isinstance(self.source, str) else f"{self.field}"

    def check_columns(self, columns: list[str] | None) -> None:
        """A `TaskFileError` now, before any row is read, when the split lacks the column."""
        if columns is None or not isinstance(self.source, str) or self.source in columns:
            return
        hint = did_you_mean(self.source, columns)
        raise TaskFileError(
            f"the split has no column {self.source!r} for {self.field}.{hint} Its columns: {', '.join(columns)}."
        )

    def read(self, row: Mapping[str, Any], index: int, *, required: bool = True) -> Any:
        """The field's value in ``row`` (None when absent and not ``required``)."""
        if type(row) is not dict and not isinstance(row, Mapping):
            raise TaskFileError(f"record {index}: expected a dict of columns, got {type(row).__name__}")
        if isinstance(self.source, str):
            value = row.get(self.source, _MISSING)
            if value is _MISSING:
                if not required:
                    return None
                keys = [str(k) for k in row]
                hint = did_you_mean(self.source, keys) or f" Its columns: {', '.join(keys)}."
                raise TaskFileError(f"record {index}: no column {self.source!r} for {self.field}.{hint}")
            return value
        try:
            return self.source(row)
        except Exception as e:  # noqa: BLE001 - the user's function on a record: its failure names the record
            hint = did_you_mean(str(e.args[0]), [str(k) for k in row]) if isinstance(e, KeyError) and e.args else ""
            raise TaskFileError(
                f"record {index}: {self.field}= (a function of the row) raised {type(e).__name__}: {e}.{hint}"
            ) from None

    def text(self, row: Mapping[str, Any], index: int, *, numbers_ok: bool = False) -> str:
        """The field as non-empty text; numbers become their decimal text when ``numbers_ok``."""
        return as_text(self.read(row, index), index, self.where(), numbers_ok=numbers_ok)


def as_text(value: Any, index: int, where: str, *, numbers_ok: bool = False) -> str:
    """``value`` as non-empty Unicode text, or a `TaskFileError` naming the record and field."""
    if type(value) is str and value.isascii() and value.strip():  # the common case, on every record
        return value
    if value is None:
        raise TaskFileError(f"record {index}: {where} is missing (None)")
    if isinstance(value, bool):
        raise TaskFileError(
            f"record {index}: {where} is a bool ({value}): map it to the text expected first, e.g. with split.map"
        )
    if numbers_ok and isinstance(value, numbers.Integral):
        if int(value).bit_length() > _safejson.MAX_INT_BITS:
            bits = _safejson.MAX_INT_BITS
            raise TaskFileError(f"record {index}: {where} is an integer too large to write ({bits} bits at most)")
        value = str(int(value))
    elif numbers_ok and isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            raise TaskFileError(f"record {index}: {where} is {number}, not a value an answer can equal")
        value = _shortest(number)
    if not isinstance(value, str):
        expected = "text or a number" if numbers_ok else "text"
        raise TaskFileError(f"record {index}: {where} is a {type(value).__name__}, expected {expected}")
    if not value.strip():
        raise TaskFileError(f"record {index}: {where} is empty")
    if not _safejson.is_unicode(value):
        raise TaskFileError(f"record {index}: {where} holds a lone surrogate, which is not Unicode text")
    return value


def _shortest(number: float) -> str:
    """``number`` written as the shortest decimal that reads back as it; for a value a
    float32 column widened (``0.1`` arrives as 0.10000000149011612), the shortest that
    reads back as that float32, which is what the data says."""
    written = repr(number)
    try:
        single = struct.unpack("f", struct.pack("f", number))[0]
    except OverflowError:  # past float32's range: it never was one
        return written
    if single != number:
        return written
    for digits in range(1, 10):  # 9 significant digits tell any two float32 values apart
        text = f"{number:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == number:
            return text if len(text) < len(written) else written
    return written


def check_metadata(metadata: Mapping[str, Source] | None) -> list[Reader]:
    """Readers for ``metadata`` (a `TaskMeta` field -> its source); unknown names fail with a did-you-mean."""
    readers = []
    for name, source in (metadata or {}).items():
        if name not in META_FIELDS:
            hint = did_you_mean(name, META_FIELDS) or f" The fields: {', '.join(META_FIELDS)}."
            raise ValueError(f"metadata has no field {name!r}.{hint}")
        if not (isinstance(source, str) or callable(source)):
            raise TypeError(f"metadata[{name!r}] must be a column name or a function of the row, got {source!r}")
        readers.append(Reader(f"metadata[{name!r}]", source))
    return readers


def read_metadata(readers: list[Reader], row: Mapping[str, Any], index: int, family: str) -> TaskMeta:
    """The task's metadata from its row: ``family`` unless mapped, difficulty an integer >= 0
    (or text of one), tags a string or a list of strings."""
    if not readers:
        return _plain_meta(family)
    values: dict[str, Any] = {"family": family}
    for reader in readers:
        name = reader.field[len("metadata['") : -2]
        value = reader.read(row, index)
        if name == "difficulty":
            if isinstance(value, str) and value.strip().isdecimal() and value.strip().isascii():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TaskFileError(
                    f"record {index}: {reader.where()} is {value!r:.80}, expected an integer >= 0 "
                    "(map labels with a function, e.g. metadata={'difficulty': lambda row: LEVELS[row['level']]})"
                )
            value = int(value)
        elif name == "tags":
            value = (value,) if isinstance(value, str) else value
            if not isinstance(value, Iterable) or not all(isinstance(t, str) for t in value):
                raise TaskFileError(f"record {index}: {reader.where()} must be text or a list of text")
            value = tuple(value)
        else:
            value = as_text(value, index, reader.where(), numbers_ok=True)
        values[name] = value
    try:
        return TaskMeta.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        raise TaskFileError(f"record {index}: metadata[{err['loc'][0]!r}]: {err['msg']}") from None


@functools.lru_cache(maxsize=64)
def _plain_meta(family: str) -> TaskMeta:
    return TaskMeta(family=family)  # frozen: one shared by every task of a split


def stable_id(prefix: str, index: int, *content: str) -> str:
    """``prefix-index-hash``: the same row of the same split gets the same id in every run,
    and an edited row a new one (the hash is of ``content``)."""
    digest = hashlib.blake2b("\0".join(content).encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return f"{prefix}-{index}-{digest}"


def read_id(reader: Reader, row: Mapping[str, Any], index: int, prefix: str | None) -> str:
    """The task id from the id column: its text (an integer id as decimal), ``prefix/`` before it if given."""
    value = as_text(reader.read(row, index), index, reader.where(), numbers_ok=True)
    task_id = f"{prefix}/{value}" if prefix else value
    if len(task_id) > MAX_ID_CHARS:
        raise TaskFileError(
            f"record {index}: {reader.where()} is {len(task_id)} characters; ids have at most {MAX_ID_CHARS}"
        )
    return task_id


def task_or_error(index: int, **fields: Any) -> Task:
    """A `Task` from ``fields``; a `TaskFileError` naming the record and field if it is invalid."""
    try:
        return Task(**fields)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(task)"
        raise TaskFileError(f"record {index}: task field {field!r}: {err['msg']}") from None


class Ids:
    """Task ids seen so far: a repeat is an error naming both records."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def add(self, task_id: str, index: int) -> None:
        first = self._seen.setdefault(task_id, index)
        if first != index:
            raise TaskFileError(f"record {index}: id {task_id!r} repeats record {first}'s; ids must be unique")
