"""The authoring API of the tools env: a domain is request models + route functions +
answer fields + tasks.

A `Domain` holds a SQLite schema and seed, the routes the agent may call, what the
verifier leaves out of its comparison, the typed fields of its final answer, and its
tasks with golden actions. A route is a plain function ``(db, request) -> result`` over an
open `sqlite3.Connection`; the service runs it in a transaction, so a `RuleViolation`
or any error rolls back every write the route made. Business rules are raised,
never returned:

    retail = Domain("retail", schema=SCHEMA, seed=seed, ignore_tables=("session",),
                    ignore_columns={"refunds": ("id",)}, answer=RetailAnswer, ...)

    @retail.route(write=True)
    def cancel_order(db: sqlite3.Connection, req: CancelOrder) -> dict:
        '''Cancel a pending order.'''
        ...
        raise RuleViolation("cancel_only_pending", "only pending orders can be cancelled")

The final tool, ``respond``, carries a free-text message (shown to the user, never
scored) and the fields of the domain's `Answer` model. A task names the fields it
expects (`gold_task(..., expect={...})`); the verifier requires each of them exactly
and every other field empty, so an answer stuffed with guesses cannot score.
Integer fields of requests and answers must be bounded inside SQLite's 64-bit range
(checked at definition), so no argument value reaches SQLite as an overflow.

The verifier compares every table and column of the schema (`Domain.compare`) but those
named in ``ignore_tables`` (bookkeeping: a login session) and ``ignore_columns`` (ids the
database draws, which the agent cannot choose), rows as a multiset: the final database must
equal the one the golden actions reach in all of it, so a change to a record the task does
not name (another order cancelled, every booking moved) fails the task however well the
named record was handled. A table left out of a hand-written list could be changed at
will; here leaving one out is a decision in the domain's code.

Every task an env is given (the domain's own, a task file, a `Task` in reset options)
passes `Domain.check_task`: at most `MAX_GOLD_ACTIONS` golden actions, each a route of
the domain with valid arguments, then ``respond`` with the expected fields. A bad
golden action is the task author's error, refused with a ValueError naming it, not
an episode that fails at verify time.

Left out: HTTP (service.py / app.py), the episode loop (env.py). Queries must be
parameterised (``db.execute("... WHERE id = ?", (req.id,))``); a test checks every
built-in domain for it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sqlite3
import typing
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from agentenv import Task, TaskMeta, TaskSet
from agentenv.core.task import did_you_mean

__all__ = [
    "MAX_GOLD_ACTIONS",
    "MAX_REPORTED",
    "Answer",
    "Domain",
    "NotFound",
    "Request",
    "Route",
    "RuleViolation",
    "gold_task",
    "load_domain",
    "row_differences",
]

Handler = Callable[[sqlite3.Connection, Any], Any]
FINISH_TOOL = "respond"  # the env's own terminal tool: the final answer, never sent to the service
MESSAGE_FIELD = "message"  # respond's free text: shown to the user, never scored
SQLITE_INT_RANGE = (-(2**63), 2**63 - 1)
MAX_REPORTED = 20
"""Differences `row_differences` names one by one; past this many it says how many more."""
MAX_GOLD_ACTIONS = 64
"""The most golden actions (``respond`` included) a task may hold. The verifier replays
them all, one signed call each, inside the step that ends the episode, so a longer list
would stall that step (2,000 reads take ~30 s); real tasks need a handful."""
Message = Annotated[
    str,
    Field(
        max_length=4000,
        description=(
            "What you tell the user, in words. It is not checked: put the facts they asked for in the other fields."
        ),
    ),
]


class Request(BaseModel):
    """Base of every request model: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class Answer(BaseModel):
    """Base of a domain's answer fields: the facts ``respond`` carries besides its message.

    Every field defaults to None (left empty); a task checks the ones it expects
    exactly and requires the others empty. Give each field a description that says
    when to fill it: the agent sees it in ``respond``'s schema.

    A fact must also have been *seen*: the value of each expected field, but those
    named in ``inferred``, must have come back in a tool result of the episode, in a
    record of the task's subject (named by the golden read calls' arguments; env.py),
    so a guess that happens to be right (the likeliest status, say) scores nothing.
    ``inferred`` names fields the agent concludes rather than reads (a rule name).
    """

    model_config = ConfigDict(extra="forbid")

    inferred: ClassVar[frozenset[str]] = frozenset({"rule"})


class _GoldAction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any]


class _GoldPayload(BaseModel):
    """The payload `gold_task` builds; a task from a file or a caller must have its shape."""

    actions: list[_GoldAction]
    expect: dict[str, Any] = {}
    inferred: list[str] = []


class RuleViolation(Exception):
    """A business rule refused the call. ``rule`` is a stable snake_case name."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


class NotFound(Exception):
    """The record the call names does not exist (the agent may retry with another id)."""


@dataclass(frozen=True, slots=True)
class Route:
    name: str
    request: type[Request]
    handler: Handler
    write: bool
    description: str


class Domain:
    """One world of the tools env: its database, its routes and its tasks."""

    def __init__(
        self,
        name: str,
        *,
        schema: str,
        seed: Callable[[sqlite3.Connection], None],
        instructions: str,
        tasks: Callable[[], Sequence[Task]] | None = None,
        answer: type[Answer] = Answer,
        ignore_tables: Sequence[str] = (),
        ignore_columns: Mapping[str, Sequence[str]] | None = None,
        compare: None = None,
    ) -> None:
        """
        Args:
            name: Short name (``retail``); also the task family.
            schema: SQL run once to create the tables of the seed database.
            seed: Fills the seed database; must be deterministic.
            instructions: The system prompt's policy text (the rules, in words).
            tasks: Returns the tasks; called once, lazily, so it may use the routes.
            answer: The typed fields of the final answer (default: none, only the message).
            ignore_tables: Tables the verifier leaves out: bookkeeping (a login session).
            ignore_columns: Table -> columns the verifier leaves out: ids the database
                draws (``AUTOINCREMENT``), which the agent cannot choose. Every other
                table and column is compared.
            compare: Removed: every table and column is compared now; name what is not
                in ``ignore_tables`` and ``ignore_columns``.
        """
        if compare is not None:
            raise TypeError(
                f"domain {name!r}: compare= was replaced by ignore_tables= and ignore_columns=: the verifier "
                "compares every table and column of the schema but those named there"
            )
        _check_answer_model(answer)
        self.name = name
        self.schema = schema
        self.seed = seed
        self.compare: dict[str, tuple[str, ...]] = _compared(name, schema, ignore_tables, ignore_columns or {})
        """Table -> the columns the verifier compares: all of the schema's but the ignored ones."""
        self.instructions = instructions
        self.answer = answer
        self.routes: dict[str, Route] = {}
        self._tasks = tasks

    def route(self, *, write: bool = False) -> Callable[[Handler], Handler]:
        """Register ``fn(db, req: SomeRequest)`` as the tool ``fn.__name__``."""

        def register(fn: Handler) -> Handler:
            params = list(inspect.signature(fn).parameters)
            if len(params) != 2:
                raise TypeError(f"route {fn.__name__!r} must take (db, request), got {params}")
            request = typing.get_type_hints(fn).get(params[1])
            if not (isinstance(request, type) and issubclass(request, Request)):
                raise TypeError(f"route {fn.__name__!r}: annotate {params[1]!r} with a Request subclass")
            if fn.__name__ in self.routes or fn.__name__ == FINISH_TOOL:
                raise ValueError(f"route name {fn.__name__!r} is taken in domain {self.name!r}")
            _check_int_bounds(request, f"route {fn.__name__!r}")
            doc = " ".join((inspect.getdoc(fn) or inspect.getdoc(request) or fn.__name__).split())
            self.routes[fn.__name__] = Route(fn.__name__, request, fn, write, doc)
            return fn

        return register

    @functools.cached_property
    def respond_model(self) -> type[BaseModel]:
        """The arguments of ``respond``: the message, then the answer fields."""
        fields: dict[str, Any] = {
            MESSAGE_FIELD: (Message, ...),
            **{name: (f.annotation, f) for name, f in self.answer.model_fields.items()},
        }
        return create_model(f"{self.answer.__name__}Respond", __config__=ConfigDict(extra="forbid"), **fields)

    @functools.cached_property
    def tasks(self) -> TaskSet:
        tasks = TaskSet(self._tasks() if self._tasks else ())
        for task in tasks:
            self.check_task(task)
        return tasks

    def create_seed(self, path: str) -> None:
        """Write the seed database to ``path``."""
        db = sqlite3.connect(path)
        try:
            with db:
                db.executescript(self.schema)
                self.seed(db)
        finally:
            db.close()

    def compared_rows(self, path: str | Path) -> dict[str, list[tuple[Any, ...]]]:
        """The compared columns of every compared table of the database at ``path`` (opened
        read-only), rows sorted: two databases match when these are equal."""
        db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        try:
            out = {}
            for table, columns in sorted(self.compare.items()):
                cols = ", ".join(f'"{c}"' for c in columns)  # names read from the schema, not the agent
                out[table] = db.execute(f'SELECT {cols} FROM "{table}" ORDER BY {cols}').fetchall()  # noqa: S608
            return out
        finally:
            db.close()

    def check_task(self, task: Task) -> None:
        """Raise ValueError, naming the task and the action, unless ``task``'s golden actions
        are sound: at most `MAX_GOLD_ACTIONS`, each but the last a route of this domain with
        valid arguments, the last ``respond`` with the task's expected fields, and the task
        checks something (an expected field or a write)."""
        where = f"task {task.id!r}"
        actions = task.payload.get("actions")
        if not actions:
            raise ValueError(f"{where}: no golden actions; build tasks with gold_task()")
        if isinstance(actions, list) and len(actions) > MAX_GOLD_ACTIONS:  # before validating each one
            raise ValueError(
                f"{where}: {len(actions)} golden actions, expected at most {MAX_GOLD_ACTIONS} "
                "(the verifier replays every one in the final step)"
            )
        try:
            payload = _GoldPayload.model_validate(task.payload)
        except ValidationError as e:
            raise ValueError(f"{where}: payload {_first_error(e)}") from None
        *calls, final = payload.actions
        for i, action in enumerate(calls):
            route = self.routes.get(action.name)
            if route is None:
                raise ValueError(
                    f"{where}: golden action {i} {action.name!r} is not a route of {self.name!r}."
                    f"{did_you_mean(action.name, self.routes) or f' Routes: {sorted(self.routes)}.'}"
                )
            try:
                route.request.model_validate(action.arguments)
            except ValidationError as e:
                raise ValueError(f"{where}: golden action {i} {action.name!r}: arguments {_first_error(e)}") from None
        if final.name != FINISH_TOOL or _fields(final.arguments) != payload.expect:
            raise ValueError(f"{where}: the last golden action must be {FINISH_TOOL} with the expected fields")
        try:
            given = self.respond_model.model_validate(final.arguments).model_dump(exclude_none=True)
        except ValidationError as e:
            raise ValueError(f"{where}: the expected answer is not a valid {FINISH_TOOL}: {e}") from None
        if _fields(given) != payload.expect:  # "5" for an int field would never match what the agent's 5 validates to
            raise ValueError(f"{where}: give each expected value as its field's type, got {payload.expect}")
        if not payload.expect and not any(self.routes[a.name].write for a in calls):
            raise ValueError(
                f"{where}: checks nothing: no expected answer field and no golden write, so a {FINISH_TOOL} "
                "with no fields as the first action passes it; expect the facts the user asked for, or make "
                "the change they asked for"
            )


def gold_task(
    task_id: str,
    prompt: str,
    actions: Sequence[tuple[str, dict[str, Any]]],
    *,
    answer: str,
    expect: Mapping[str, Any] | None = None,
    inferred: Sequence[str] = (),
    family: str = "default",
    difficulty: int = 0,
) -> Task:
    """A task with golden actions; the final ``respond(message=answer, **expect)`` is appended.

    ``expect`` holds the answer fields the task checks (what the user asked to be
    told, or the rule that forbids the request, with the fact behind it): the
    verifier requires each exactly and every other field empty, and each value
    (but the answer model's ``inferred`` fields and those named in ``inferred``
    here, say a sum the agent computes) to have come back in a tool result.
    ``answer`` is the golden message to the user; it is shown, never scored.
    """
    expect = dict(expect or {})
    if MESSAGE_FIELD in expect or None in expect.values():
        raise ValueError(f"task {task_id!r}: expect holds answer fields (not {MESSAGE_FIELD!r}), none of them None")
    calls = [{"name": n, "arguments": a} for n, a in actions]
    calls.append({"name": FINISH_TOOL, "arguments": {MESSAGE_FIELD: answer, **expect}})
    return Task(
        id=task_id,
        prompt=prompt,
        payload={"actions": calls, "expect": expect, "inferred": sorted(inferred)},
        metadata=TaskMeta(family=family, difficulty=difficulty),
    )


def row_differences(want: Mapping[str, list[tuple[Any, ...]]], got: Mapping[str, list[tuple[Any, ...]]]) -> list[str]:
    """What differs between two `Domain.compared_rows` results, table by table: each row the
    first holds more often than the second (``missing``) and the other way (``unexpected``),
    as ``"<table>: missing (...)"``; at most `MAX_REPORTED` of them, then how many more."""
    found: list[str] = []
    for table in sorted(want.keys() | got.keys()):
        a, b = Counter(want.get(table, [])), Counter(got.get(table, []))
        found += [f"{table}: missing {row!r:.300}" for row in sorted((a - b).elements(), key=repr)]
        found += [f"{table}: unexpected {row!r:.300}" for row in sorted((b - a).elements(), key=repr)]
    if len(found) > MAX_REPORTED:
        return [*found[:MAX_REPORTED], f"... and {len(found) - MAX_REPORTED} more"]
    return found


def _compared(
    name: str, schema: str, ignore_tables: Sequence[str], ignore_columns: Mapping[str, Sequence[str]]
) -> dict[str, tuple[str, ...]]:
    """Every table of ``schema`` and its columns, less the ignored ones; ValueError for an
    ignored table or column the schema does not have."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(schema)
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        tables = [t for t in tables if not t.startswith("sqlite_")]  # sqlite_sequence: AUTOINCREMENT's own
        columns = {t: [r[1] for r in db.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    finally:
        db.close()
    for table in [*ignore_tables, *ignore_columns]:
        if table not in columns:
            raise ValueError(
                f"domain {name!r}: no table {table!r} to ignore in the schema.{did_you_mean(table, columns)}"
            )
    for table, cols in ignore_columns.items():
        for col in cols:
            if col not in columns[table]:
                raise ValueError(
                    f"domain {name!r}: table {table!r} has no column {col!r} to ignore."
                    f"{did_you_mean(col, columns[table]) or f' Columns: {columns[table]}.'}"
                )
    compared = {}
    for table, cols in columns.items():
        kept = tuple(c for c in cols if c not in ignore_columns.get(table, ()))
        if table not in ignore_tables and kept:
            compared[table] = kept
    return compared


def _fields(respond_args: Mapping[str, Any]) -> dict[str, Any]:
    """The answer fields of ``respond``'s arguments (all but the message)."""
    return {k: v for k, v in respond_args.items() if k != MESSAGE_FIELD}


def _first_error(error: ValidationError) -> str:
    """``field 'a.b': <message>`` for the first error of ``error``."""
    first = error.errors()[0]
    return f"field {'.'.join(str(p) for p in first['loc']) or '(root)'!r}: {first['msg']}"


def _check_answer_model(answer: type[Answer]) -> None:
    if not (isinstance(answer, type) and issubclass(answer, Answer)):
        raise TypeError(f"answer must be a subclass of agentenv.envs.tools.Answer, got {answer!r}")
    for name, f in answer.model_fields.items():
        if name == MESSAGE_FIELD or f.is_required() or f.default is not None:
            raise TypeError(
                f"{answer.__name__}.{name}: answer fields default to None (left empty), "
                f"and {MESSAGE_FIELD!r} is respond's own"
            )
    _check_int_bounds(answer, answer.__name__)


def _check_int_bounds(model: type[BaseModel], owner: str) -> None:
    """Every integer field has bounds SQLite can hold, so a huge number is a validation error, not an overflow."""
    loose = _unbounded_ints(model.model_json_schema())
    if loose:
        lo, hi = SQLITE_INT_RANGE
        raise TypeError(
            f"{owner}: bound the integer field(s) {loose} inside [{lo}, {hi}], "
            "e.g. Annotated[int, Field(ge=1, le=10**6)]"
        )


def _unbounded_ints(schema: Any, where: str = "(root)") -> list[str]:
    if isinstance(schema, list):
        return [p for item in schema for p in _unbounded_ints(item, where)]
    if not isinstance(schema, dict):
        return []
    found = []
    if schema.get("type") == "integer":
        lo = schema.get("minimum", schema.get("exclusiveMinimum"))
        hi = schema.get("maximum", schema.get("exclusiveMaximum"))
        if lo is None or hi is None or lo < SQLITE_INT_RANGE[0] or hi > SQLITE_INT_RANGE[1]:
            found.append(where)
    for key, value in schema.items():
        if key in ("properties", "$defs") and isinstance(value, dict):
            found += [p for name, sub in value.items() for p in _unbounded_ints(sub, name)]
        elif isinstance(value, (dict, list)):
            found += _unbounded_ints(value, where)
    return found


def load_domain(path: str) -> Domain:
    """The `Domain` at ``"package.module:ATTRIBUTE"``."""
    module_name, sep, attr = path.partition(":")
    if not sep or not attr:
        raise ValueError(f"a domain is named 'module:attribute', got {path!r}")
    domain = getattr(importlib.import_module(module_name), attr, None)
    if not isinstance(domain, Domain):
        raise TypeError(f"{path!r} is {type(domain).__name__}, expected an agentenv.envs.tools.Domain")
    return domain
