"""The authoring API: a `World` is a state schema, tools, invariants and tasks.

    world = World("notes", state=Notes, initial_state=Notes(), instructions="Keep notes.")
    world.emulated("add_note", AddNote, "Add a note under a title.", writes=["/notes/{title}"])

    @world.code(reads=["/notes"])
    def list_notes(state: Notes, args: NoArgs) -> str:
        '''List the titles of the notes.'''
        return "\\n".join(sorted(state.notes))

    world.invariant("short_notes", lambda s: all(len(n) < 500 for n in s.notes.values()))
    world.add_task(world_task("notes-1", "Add a note 'todo' saying 'buy milk'.",
                              goal={"==": [{"val": ["notes", "todo"]}, "buy milk"]}, golden=[...]))

A tool is either *emulated* (a `WorldModel` proposes its observation and state
change) or *code* (a function of a copy of the typed state and the arguments; the
change it makes is diffed). Either way the change is validated the same way
(`agentenv.envs.world.validate`): only the tool's write paths, a valid state, every
invariant and the tool's postconditions. A world mixing both is a hybrid world.

Tasks are plain `agentenv.Task`s whose payload (`WorldTaskPayload`) holds the goal
and sub-goals as JSON Logic rules, an optional setup patch of the initial state,
and golden actions with, for emulated tools, the response a faithful emulator
gives: the scripted model is built from those (`ScriptedWorldModel.from_world`).
Every task is checked before an env or the scripted model first uses the world's tasks
(`agentenv.envs.world.replay.checked_tasks`): its setup applies, the invariants hold at
its start, its goal does not, and its golden actions reach it. A world here holds no
check of its own: the check replays tasks through the validator, which reads the world.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentenv import Task, TaskMeta, TaskSet
from agentenv.core import _safejson
from agentenv.envs.world._extra import EXTRA, need
from agentenv.envs.world.paths import PathPattern
from agentenv.envs.world.predicates import Predicate, PredicateError, rule_predicate
from agentenv.envs.world.schema import ModelState, SchemaError, StateSchema

__all__ = [
    "FINISH_TOOL",
    "Args",
    "GoldenStep",
    "Response",
    "World",
    "WorldTaskPayload",
    "WorldTool",
    "respond",
    "world_task",
]

FINISH_TOOL = "finish"
"""The env's own terminal tool: the agent declares it is done."""
MAX_ARGUMENT_DEPTH = 16
MAX_ARGUMENT_CHARS = 16_000
"""A call's arguments, as canonical JSON, may be at most this long (they go into a prompt)."""


class Args(BaseModel):
    """Base of a tool's argument model: unknown arguments are an error."""

    model_config = ConfigDict(extra="forbid")


class Response(BaseModel):
    """What an emulated tool answers: the observation and the RFC 6902 patch of the state.
    The wire shape the world model must produce, and what the cache keeps."""

    model_config = ConfigDict(extra="forbid", strict=True)

    observation: str = Field(max_length=16_000)
    state_patch: list[dict[str, Any]] = Field(max_length=256)


class GoldenStep(BaseModel):
    """One golden action; ``response`` is the faithful emulator's answer (None for code tools)."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: dict[str, Any] = {}
    response: Response | None = None


class SubGoal(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    rule: Any


class WorldTaskPayload(BaseModel):
    """The payload of a world task (`agentenv.Task.payload`), validated once per task."""

    model_config = ConfigDict(extra="forbid")

    goal: Any
    """JSON Logic over the world state: the task is solved when it holds on the final state."""
    subgoals: list[SubGoal] = []
    """JSON Logic over the world state: the step reward's milestones (see `WorldEnv`)."""
    setup: list[dict[str, Any]] = []
    """An RFC 6902 patch applied to the world's initial state for this task."""
    golden: list[GoldenStep] = []
    may_change: list[str] = []
    """Path patterns (`agentenv.envs.world.paths` syntax, ``*`` but no ``{argument}``) the task
    may change besides what its golden actions change: for a task with more than one right
    outcome. Everything else must end as the golden run leaves it (`agentenv.envs.world.frame`)."""

    def as_json(self) -> dict[str, Any]:
        """The payload as a task holds it (``may_change`` only when given, so the tasks written
        before it keep their payloads)."""
        return self.model_dump(mode="json", exclude_none=True, exclude=None if self.may_change else {"may_change"})


@dataclass(frozen=True, eq=False)
class WorldTool:
    """One tool of a world."""

    name: str
    description: str
    args_model: type[BaseModel]
    writes: tuple[PathPattern, ...] = ()
    """Where a call may change the state (see `agentenv.envs.world.paths`); () = read-only."""
    reads: tuple[PathPattern, ...] | None = None
    """The slice of the state the world model is shown; None = the whole state."""
    postconditions: tuple[Predicate, ...] = ()
    """Tests of ``{"args", "before", "after", "observation"}`` every accepted change passes."""
    impl: Callable[[Any, Any], str] | None = None
    """Code tools: ``impl(state_copy, args) -> observation``; None: emulated."""

    @property
    def emulated(self) -> bool:
        return self.impl is None

    @functools.cached_property
    def arguments_schema(self) -> dict[str, Any]:
        """The argument model's JSON Schema (what the world model is shown)."""
        return self.args_model.model_json_schema()

    def describe(self) -> dict[str, Any]:
        """What identifies the tool's behaviour (its part of the world's fingerprint)."""
        return {
            "name": self.name,
            "description": self.description,
            "arguments": self.arguments_schema,
            "writes": [p.pattern for p in self.writes],
            "reads": None if self.reads is None else [p.pattern for p in self.reads],
            "postconditions": [_predicate_id(p) for p in self.postconditions],
            "code": self.impl is not None,
        }


class World:
    """A world: its state schema and initial state, tools, invariants and tasks."""

    def __init__(
        self,
        name: str,
        *,
        state: type[BaseModel] | StateSchema,
        initial_state: BaseModel | Mapping[str, Any],
        instructions: str,
        description: str = "",
        tasks: Callable[[], Iterable[Task]] | Iterable[Task] = (),
        max_turns: int = 20,
        stop_on_goal: bool = True,
    ) -> None:
        """
        Args:
            name: Short name; part of every cache key.
            state: The state model (a pydantic model) or a `StateSchema` (specs: JSON Schema).
            initial_state: The state every task starts from before its own setup patch.
            instructions: What the agent is told about the world (the system prompt).
            description: What the world model is told about the world.
            tasks: The tasks, or a function returning them (called once, lazily).
            max_turns: Steps per episode.
            stop_on_goal: End the episode as soon as the goal holds (else at ``finish``).
        """
        if not name or not isinstance(name, str):
            raise ValueError(f"a world has a non-empty name, got {name!r}")
        for module in EXTRA:  # fail here, with the fix, rather than at the first step
            need(module)
        self.name = name
        self.schema: StateSchema = ModelState(state) if isinstance(state, type) else state
        if isinstance(initial_state, BaseModel):
            initial_state = initial_state.model_dump(mode="json")
        try:
            self.initial_state = self.schema.validate(dict(initial_state))
        except SchemaError as e:
            raise ValueError(f"world {name!r}: the initial state is not valid: {e}") from None
        self.instructions = instructions
        self.description = description or instructions
        self.max_turns = max_turns
        self.stop_on_goal = stop_on_goal
        self.tools: dict[str, WorldTool] = {}
        self.invariants: list[Predicate] = []
        self._tasks = tasks
        self._extra_tasks: list[Task] = []

    # -- tools -----------------------------------------------------------------------

    def add_tool(self, tool: WorldTool) -> WorldTool:
        if tool.name in self.tools or tool.name == FINISH_TOOL:
            raise ValueError(f"world {self.name!r}: the tool name {tool.name!r} is taken")
        _check_tool(tool, self.name)
        self.tools[tool.name] = _guarded(tool)
        self.__dict__.pop("fingerprint", None)
        return self.tools[tool.name]

    def emulated(
        self,
        name: str,
        args: type[BaseModel],
        description: str,
        *,
        writes: Sequence[str] = (),
        reads: Sequence[str] | None = None,
        postconditions: Iterable[Predicate] = (),
    ) -> WorldTool:
        """Add a tool the world model emulates."""
        return self.add_tool(
            WorldTool(
                name,
                " ".join(description.split()),
                args,
                tuple(PathPattern.parse(p) for p in writes),
                None if reads is None else tuple(PathPattern.parse(p) for p in reads),
                tuple(postconditions),
            )
        )

    def code(
        self, *, name: str | None = None, writes: Sequence[str] = (), reads: Sequence[str] | None = None
    ) -> Callable[[Callable[[Any, Any], str]], Callable[[Any, Any], str]]:
        """Add ``fn(state, args) -> observation`` as a code tool; its docstring is the description
        and its second parameter's annotation the argument model. ``fn`` gets a copy of the
        typed state to change; the change is diffed and validated like a proposal's."""

        def register(fn: Callable[[Any, Any], str]) -> Callable[[Any, Any], str]:
            params = list(inspect.signature(fn).parameters)
            if len(params) != 2:
                raise TypeError(f"code tool {fn.__name__!r} must take (state, args), got {params}")
            hints = inspect.get_annotations(fn, eval_str=True)
            args = hints.get(params[1])
            if not (isinstance(args, type) and issubclass(args, BaseModel)):
                raise TypeError(f"code tool {fn.__name__!r}: annotate {params[1]!r} with a pydantic model")
            doc = " ".join((inspect.getdoc(fn) or fn.__name__).split())
            self.add_tool(
                WorldTool(
                    name or fn.__name__,
                    doc,
                    args,
                    tuple(PathPattern.parse(p) for p in writes),
                    None if reads is None else tuple(PathPattern.parse(p) for p in reads),
                    (),
                    fn,
                )
            )
            return fn

        return register

    def invariant(self, name: str, test: Callable[[Any], Any] | Any, description: str = "") -> Predicate:
        """Add an invariant: a JSON Logic rule over the state JSON, or a function of the typed state."""
        if callable(test):
            predicate = Predicate(name, fn=test, description=description)
        else:
            predicate = rule_predicate(name, test, description)
        if any(p.name == name for p in self.invariants):
            raise ValueError(f"world {self.name!r}: the invariant {name!r} is already defined")
        self.invariants.append(predicate)
        self.__dict__.pop("fingerprint", None)
        return predicate

    # -- tasks -------------------------------------------------------------------------

    def add_task(self, task: Task) -> None:
        self._extra_tasks.append(task)
        self.__dict__.pop("tasks", None)

    @functools.cached_property
    def tasks(self) -> TaskSet:
        """The world's tasks, as given: `agentenv.envs.world.replay.checked_tasks` checks them
        (the env reads them through it)."""
        made = self._tasks() if callable(self._tasks) else self._tasks
        return TaskSet([*made, *self._extra_tasks])

    def task_start(self, task: Task) -> dict[str, Any]:
        """The canonical world state ``task`` starts from (its setup applied): a copy of its own,
        so nothing an episode does can reach the world's initial state."""
        payload = task_payload(task)
        if not payload.setup:
            return json.loads(json.dumps(self.initial_state))
        try:
            state = need("jsonpatch").apply_patch(self.initial_state, payload.setup)
        except Exception as e:  # noqa: BLE001 - jsonpatch raises several kinds; all mean a bad setup
            raise ValueError(f"task {task.id!r}: the setup patch does not apply: {e}") from None
        try:
            return self.schema.validate(state)
        except SchemaError as e:
            raise ValueError(f"task {task.id!r}: the setup makes an invalid state: {e}") from None

    def check_invariants(self, state_json: dict[str, Any], typed: Any = None) -> str | None:
        """The first broken invariant, described, or None when all hold."""
        for inv in self.invariants:
            try:
                if inv.fn is not None:
                    typed = typed if typed is not None else self.schema.typed(state_json)
                    ok = inv.test(typed)
                else:
                    ok = inv.test(state_json)
            except PredicateError as e:
                return f"invariant {inv.name!r} could not be evaluated: {e}"
            except Exception as e:  # noqa: BLE001 - a Python invariant that raises on this state: not valid
                return f"invariant {inv.name!r} raised {type(e).__name__}: {str(e)[:200]}"
            if not ok:
                return f"invariant {inv.name!r} does not hold" + (f" ({inv.description})" if inv.description else "")
        return None

    @functools.cached_property
    def fingerprint(self) -> str:
        """A hash of everything that shapes the world model's answers and their validation:
        a changed tool, schema or invariant never reuses cached responses."""
        data = {
            "name": self.name,
            "description": self.description,
            "schema": self.schema.json_schema,
            "tools": [t.describe() for t in self.tools.values()],
            "invariants": [_predicate_id(p) for p in self.invariants],
        }
        text = json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def task_payload(task: Task) -> WorldTaskPayload:
    try:
        return WorldTaskPayload.model_validate(task.payload)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(payload)"
        raise ValueError(f"task {task.id!r}: payload field {where!r}: {err['msg']}") from None


def respond(observation: str, *patch: dict[str, Any]) -> Response:
    """The answer of a faithful emulator, for a golden step: ``respond("done", op, op, ...)``."""
    return Response(observation=observation, state_patch=list(patch))


def world_task(
    task_id: str,
    prompt: str,
    *,
    goal: Any,
    golden: Sequence[tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], Response | None]],
    subgoals: Mapping[str, Any] | None = None,
    setup: Sequence[Mapping[str, Any]] = (),
    may_change: Sequence[str] = (),
    family: str = "default",
    difficulty: int = 0,
) -> Task:
    """A world task: ``golden`` holds ``(tool, arguments)`` for code tools and
    ``(tool, arguments, respond(...))`` for emulated ones. The task may change what its
    golden actions change and what ``may_change`` names, nothing else (`WorldTaskPayload`)."""
    steps = []
    for step in golden:
        tool, arguments, *rest = step
        steps.append(GoldenStep(tool=tool, arguments=dict(arguments), response=rest[0] if rest else None))
    payload = WorldTaskPayload(
        goal=goal,
        subgoals=[SubGoal(name=k, rule=v) for k, v in (subgoals or {}).items()],
        setup=[dict(op) for op in setup],
        golden=steps,
        may_change=list(may_change),
    )
    return Task(
        id=task_id,
        prompt=prompt,
        payload=payload.as_json(),
        metadata=TaskMeta(family=family, difficulty=difficulty),
    )


# -- checks made when a tool is added -------------------------------------------------------


def _check_tool(tool: WorldTool, world: str) -> None:
    if not (isinstance(tool.args_model, type) and issubclass(tool.args_model, BaseModel)):
        raise TypeError(f"world {world!r}, tool {tool.name!r}: the arguments are a pydantic model")
    schema = tool.args_model.model_json_schema()
    props, required = schema.get("properties", {}), set(schema.get("required", []))
    for pattern in (*tool.writes, *(tool.reads or ())):
        for arg in pattern.arguments:
            kind = props.get(arg, {}).get("type")
            if arg not in props or arg not in required or kind not in ("string", "integer"):
                raise TypeError(
                    f"world {world!r}, tool {tool.name!r}: the path {pattern.pattern!r} names argument {arg!r}, "
                    "which must be a required string or integer argument"
                )


def _guarded(tool: WorldTool) -> WorldTool:
    """The tool with an argument model that also refuses what cannot go into a prompt or a key:
    nesting past `MAX_ARGUMENT_DEPTH`, integers past JSON's safe size, oversized arguments."""

    def check(model: BaseModel) -> BaseModel:
        data = model.model_dump(mode="json")
        found = _safejson.problem(data, max_depth=MAX_ARGUMENT_DEPTH)
        if found is not None:
            raise ValueError(f"{found[0] or 'arguments'}: {found[1]}")
        size = len(json.dumps(data, ensure_ascii=False))
        if size > MAX_ARGUMENT_CHARS:
            raise ValueError(f"the arguments are {size} characters as JSON; the limit is {MAX_ARGUMENT_CHARS}")
        return model

    class Guarded(tool.args_model):  # type: ignore[name-defined]
        @model_validator(mode="after")
        def _world_guard(self) -> Any:
            return check(self)

    Guarded.__name__ = Guarded.__qualname__ = tool.args_model.__name__
    guarded: type[BaseModel] = Guarded
    return WorldTool(tool.name, tool.description, guarded, tool.writes, tool.reads, tool.postconditions, tool.impl)


def _predicate_id(p: Predicate) -> Any:
    return p.rule if p.fn is None else f"python:{p.name}:{getattr(p.fn, '__qualname__', '?')}"
