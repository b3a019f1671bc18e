"""The authoring API of the tools env: a domain is request models + route functions + tasks.

A `Domain` holds a SQLite schema and seed, the routes the agent may call, which
tables the verifier compares, and its tasks with golden actions. A route is a plain
function ``(db, request) -> result`` over an open `sqlite3.Connection`; the service
runs it in a transaction, so a `RuleViolation` or any error rolls back every write
the route made. Business rules are raised, never returned:

    retail = Domain("retail", schema=SCHEMA, seed=seed, compare={"orders": ("id", "status")}, ...)

    @retail.route(write=True)
    def cancel_order(db: sqlite3.Connection, req: CancelOrder) -> dict:
        '''Cancel a pending order.'''
        ...
        raise RuleViolation("cancel_only_pending", "only pending orders can be cancelled")

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentenv import Task, TaskMeta, TaskSet

__all__ = ["Domain", "NotFound", "Request", "Route", "RuleViolation", "gold_task", "load_domain"]

Handler = Callable[[sqlite3.Connection, Any], Any]
FINISH_TOOL = "respond"  # the env's own terminal tool: the final answer, never sent to the service


class Request(BaseModel):
    """Base of every request model: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


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
        compare: Mapping[str, Sequence[str]],
        instructions: str,
        tasks: Callable[[], Sequence[Task]] | None = None,
    ) -> None:
        """
        Args:
            name: Short name (``retail``); also the task family.
            schema: SQL run once to create the tables of the seed database.
            seed: Fills the seed database; must be deterministic.
            compare: Table -> columns the verifier hashes. Leave out surrogate ids
                the agent cannot choose and bookkeeping tables (sessions).
            instructions: The system prompt's policy text (the rules, in words).
            tasks: Returns the tasks; called once, lazily, so it may use the routes.
        """
        self.name = name
        self.schema = schema
        self.seed = seed
        self.compare = {table: tuple(cols) for table, cols in compare.items()}
        self.instructions = instructions
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
            doc = " ".join((inspect.getdoc(fn) or inspect.getdoc(request) or fn.__name__).split())
            self.routes[fn.__name__] = Route(fn.__name__, request, fn, write, doc)
            return fn

        return register

    @functools.cached_property
    def tasks(self) -> TaskSet:
        tasks = TaskSet(self._tasks() if self._tasks else ())
        for task in tasks:
            self._check_gold(task)
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

    def _check_gold(self, task: Task) -> None:
        for action in task.payload.get("actions", []):
            name = action["name"]
            if name != FINISH_TOOL and name not in self.routes:
                raise ValueError(f"task {task.id!r}: golden action {name!r} is not a route of {self.name!r}")
            if name != FINISH_TOOL:
                self.routes[name].request.model_validate(action["arguments"])


def gold_task(
    task_id: str,
    prompt: str,
    actions: Sequence[tuple[str, dict[str, Any]]],
    *,
    answer: str,
    outputs: Sequence[str] = (),
    family: str = "default",
    difficulty: int = 0,
) -> Task:
    """A task with golden actions; the final ``respond(message=answer)`` is appended.

    ``outputs`` are strings the final answer must contain (case-insensitive), for
    what the customer asked to be told.
    """
    missing = [o for o in outputs if o.lower() not in answer.lower()]
    if missing:
        raise ValueError(f"task {task_id!r}: the golden answer lacks required outputs {missing}")
    calls = [{"name": n, "arguments": a} for n, a in actions]
    calls.append({"name": FINISH_TOOL, "arguments": {"message": answer}})
    return Task(
        id=task_id, prompt=prompt, payload={"actions": calls, "outputs": list(outputs)},
        metadata=TaskMeta(family=family, difficulty=difficulty),
    )


def load_domain(path: str) -> Domain:
    """The `Domain` at ``"package.module:ATTRIBUTE"``."""
    module_name, sep, attr = path.partition(":")
    if not sep or not attr:
        raise ValueError(f"a domain is named 'module:attribute', got {path!r}")
    domain = getattr(importlib.import_module(module_name), attr, None)
    if not isinstance(domain, Domain):
        raise TypeError(f"{path!r} is {type(domain).__name__}, expected an agentenv.envs.tools.Domain")
    return domain
