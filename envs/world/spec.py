"""World specs: a whole world in YAML or JSON, loaded into the same env with no Python.

    name: notes
    instructions: Keep the user's notes.
    state_schema: {type: object, properties: {notes: {type: object, ...}}, required: [notes]}
    initial_state: {notes: {}}
    tools:
      - name: add_note
        description: Add a note under a title.
        arguments: {type: object, properties: {title: {type: string, maxLength: 40}, text: {type: string}},
                    required: [title, text]}
        writes: ["/notes/{title}"]
    invariants:
      - {name: short_notes, rule: {all: [{values: {var: notes}}, {"<": [{length: {var: ""}}, 500]}]}}
    tasks:
      - id: notes-1
        prompt: Add a note 'todo' saying 'buy milk'.
        difficulty: 0
        goal: {"==": [{val: [notes, todo]}, buy milk]}
        golden:
          - tool: add_note
            arguments: {title: todo, text: buy milk}
            response: {observation: saved, state_patch: [{op: add, path: /notes/todo, value: buy milk}]}

The state is a JSON Schema (draft 2020-12); invariants, goals, sub-goals and
postconditions are JSON Logic (`agentenv.envs.world.predicates`); a tool's
arguments are a JSON Schema of a flat object, turned into a pydantic model (types
string, integer, number, boolean, arrays of those, enums; the usual bounds); its
write and read paths are `agentenv.envs.world.paths` patterns. Every tool is
emulated. A spec is untrusted input (a proposer's draft is one): it is size- and
depth-checked before anything reads it, YAML aliases are refused (a few lines of
them expand exponentially), and every error names the field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from agentenv import Task, TaskMeta
from agentenv.core import _safejson
from agentenv.envs.world.predicates import Predicate, PredicateError, rule_predicate
from agentenv.envs.world.schema import JSONSchemaState, SchemaError
from agentenv.envs.world.world import Args, GoldenStep, SubGoal, World, WorldTaskPayload

__all__ = ["MAX_SPEC_BYTES", "SpecError", "WorldSpec", "load_spec", "parse_spec"]

MAX_SPEC_BYTES = 4 << 20
MAX_SPEC_DEPTH = 64
_NAME = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"


class SpecError(ValueError):
    """A world spec that does not load; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PredicateSpec(_Strict):
    name: str = Field(min_length=1, max_length=100)
    rule: Any
    description: str = ""


class ToolSpec(_Strict):
    name: str = Field(pattern=_NAME)
    description: str = Field(min_length=1, max_length=4000)
    arguments: dict[str, Any] = {"type": "object", "properties": {}}
    writes: list[str] = []
    reads: list[str] | None = None
    postconditions: list[PredicateSpec] = []


class TaskSpec(_Strict):
    id: str = Field(min_length=1, max_length=256)
    prompt: str = Field(min_length=1)
    family: str | None = None
    difficulty: int = Field(default=0, ge=0, le=10)
    goal: Any
    subgoals: list[SubGoal] = []
    setup: list[dict[str, Any]] = []
    golden: list[GoldenStep]
    may_change: list[str] = []


class WorldSpec(_Strict):
    """The whole spec, validated; `build` makes the `World`."""

    name: str = Field(pattern=_NAME)
    description: str = ""
    instructions: str = Field(min_length=1)
    max_turns: int = Field(default=20, ge=1, le=200)
    stop_on_goal: bool = True
    state_schema: dict[str, Any]
    initial_state: dict[str, Any]
    tools: list[ToolSpec] = Field(min_length=1)
    invariants: list[PredicateSpec] = []
    tasks: list[TaskSpec] = []

    def build(self) -> World:
        try:
            schema = JSONSchemaState(self.state_schema)
        except SchemaError as e:
            raise SpecError(f"state_schema: {e}") from None
        try:
            world = World(
                self.name,
                state=schema,
                initial_state=self.initial_state,
                instructions=self.instructions,
                description=self.description,
                max_turns=self.max_turns,
                stop_on_goal=self.stop_on_goal,
                tasks=[_task(t, self.name) for t in self.tasks],
            )
        except ValueError as e:
            raise SpecError(str(e)) from None
        for i, tool in enumerate(self.tools):
            where = f"tools[{i}] ({tool.name})"
            try:
                args = arguments_model(tool.name, tool.arguments)
                world.emulated(
                    tool.name,
                    args,
                    tool.description,
                    writes=tool.writes,
                    reads=tool.reads,
                    postconditions=[_predicate(p, f"{where}.postconditions") for p in tool.postconditions],
                )
            except SpecError as e:
                raise SpecError(f"{where}: {e}") from None
            except (TypeError, ValueError, KeyError) as e:
                raise SpecError(f"{where}: {e}") from None
        for i, inv in enumerate(self.invariants):
            predicate = _predicate(inv, f"invariants[{i}]")
            try:
                world.invariant(predicate.name, predicate.rule, predicate.description)
            except ValueError as e:
                raise SpecError(f"invariants[{i}]: {e}") from None
        return world


def parse_spec(source: str | bytes | dict[str, Any]) -> WorldSpec:
    """A `WorldSpec` from YAML or JSON text (or its parsed data); `SpecError` otherwise."""
    if isinstance(source, dict):
        data: Any = source
    else:
        text = source.decode("utf-8", errors="strict") if isinstance(source, bytes) else source
        if len(text.encode("utf-8", errors="surrogatepass")) > MAX_SPEC_BYTES:
            raise SpecError(f"the spec is over {MAX_SPEC_BYTES} bytes")
        try:
            data = _json_or_yaml(text)
        except yaml.YAMLError as e:
            raise SpecError(f"not YAML or JSON: {str(e)[:300]}") from None
        except RecursionError:
            raise SpecError("the spec is nested too deeply") from None
    if not isinstance(data, dict):
        raise SpecError(f"a world spec is a mapping, got {type(data).__name__}")
    found = _safejson.problem(data, max_depth=MAX_SPEC_DEPTH)
    if found is not None:
        raise SpecError(f"{found[0] or '(spec)'}: {found[1]}")
    try:
        return WorldSpec.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(spec)"
        raise SpecError(f"{where}: {err['msg']}") from None


def load_spec(source: str | Path | dict[str, Any]) -> World:
    """The `World` of a spec file (.yaml, .yml, .json), or of spec data; `SpecError` naming
    the file and field when it does not load. Its tasks are checked before an env first uses
    them (`agentenv.envs.world.replay.checked_tasks`)."""
    if isinstance(source, dict):
        return parse_spec(source).build()
    path = Path(source)
    try:
        raw = path.read_bytes()[: MAX_SPEC_BYTES + 1]
        return parse_spec(raw).build()
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None


# -- pieces --------------------------------------------------------------------------------

_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool}
_BOUNDS = {
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
    "minimum": "ge",
    "maximum": "le",
    "exclusiveMinimum": "gt",
    "exclusiveMaximum": "lt",
    "minItems": "min_length",
    "maxItems": "max_length",
}
_KNOWN = {"type", "description", "enum", "items", "default", "title", *_BOUNDS}


def arguments_model(tool: str, schema: dict[str, Any]) -> type[Args]:
    """A pydantic model (extra arguments refused) for a flat JSON Schema object."""
    if schema.get("type", "object") != "object":
        raise SpecError(f"arguments: the schema's type is 'object', got {schema.get('type')!r}")
    unknown = set(schema) - {"type", "properties", "required", "additionalProperties", "description", "title"}
    if unknown:
        raise SpecError(f"arguments: unsupported keyword(s) {sorted(unknown)}")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list):
        raise SpecError("arguments: 'properties' is an object and 'required' a list")
    missing = [r for r in required if r not in properties]
    if missing:
        raise SpecError(f"arguments: required {missing} are not properties")
    fields: dict[str, Any] = {}
    for name, prop in properties.items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$", name):
            raise SpecError(f"arguments.properties: {name!r} is not a valid argument name")
        if not isinstance(prop, dict):
            raise SpecError(f"arguments.properties.{name}: a JSON Schema object, got {type(prop).__name__}")
        annotation = _annotation(prop, f"arguments.properties.{name}")
        if name in required:
            fields[name] = (annotation, Field(..., description=prop.get("description")))
        else:
            fields[name] = (annotation | None, Field(prop.get("default"), description=prop.get("description")))
    model_name = "".join(p.title() for p in re.split(r"[_-]", tool)) + "Args"
    model: type[Args] = create_model(model_name, __base__=Args, **fields)
    return model


def _annotation(prop: dict[str, Any], where: str) -> Any:
    unknown = set(prop) - _KNOWN
    if unknown:
        raise SpecError(f"{where}: unsupported keyword(s) {sorted(unknown)}")
    if "enum" in prop:
        values = prop["enum"]
        if not isinstance(values, list) or not values or not all(isinstance(v, (str, int)) for v in values):
            raise SpecError(f"{where}: enum is a non-empty list of strings or integers")
        return Literal[tuple(values)]
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items", {})
        if not isinstance(items, dict) or items.get("type") not in _SCALARS:
            raise SpecError(f"{where}: array items are one of {sorted(_SCALARS)}")
        inner = _annotation(items, f"{where}.items")
        return Annotated[list[inner], Field(**_bounds(prop, where))]  # type: ignore[valid-type]
    if kind not in _SCALARS:
        raise SpecError(f"{where}: type is one of {sorted(_SCALARS)} or 'array', got {kind!r}")
    bounds = _bounds(prop, where)
    base = _SCALARS[kind]
    strict = Field(strict=True) if kind != "number" else Field(allow_inf_nan=False)
    return Annotated[base, strict, Field(**bounds)] if bounds else Annotated[base, strict]


def _bounds(prop: dict[str, Any], where: str) -> dict[str, Any]:
    out = {}
    for key, name in _BOUNDS.items():
        if key in prop:
            value = prop[key]
            ok = isinstance(value, str) if key == "pattern" else isinstance(value, (int, float))
            if not ok or isinstance(value, bool):
                raise SpecError(f"{where}.{key}: expected a {'string' if key == 'pattern' else 'number'}")
            out[name] = value
    return out


def _predicate(spec: PredicateSpec, where: str) -> Predicate:
    try:
        return rule_predicate(spec.name, spec.rule, spec.description)
    except PredicateError as e:
        raise SpecError(f"{where}: {e}") from None


def _task(spec: TaskSpec, world: str) -> Task:
    payload = WorldTaskPayload(
        goal=spec.goal, subgoals=spec.subgoals, setup=spec.setup, golden=spec.golden, may_change=spec.may_change
    )
    return Task(
        id=spec.id,
        prompt=spec.prompt,
        payload=payload.as_json(),
        metadata=TaskMeta(family=spec.family or world, difficulty=spec.difficulty),
    )


def _json_or_yaml(text: str) -> Any:
    if text.lstrip().startswith("{"):
        try:
            return _safejson.loads(text, max_depth=MAX_SPEC_DEPTH)
        except _safejson.UnsafeJSON:
            pass  # YAML flow style starts with "{" too
    return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader that also refuses aliases


class _NoAliasLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing anchors and aliases."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("aliases (*name) are not allowed in a world spec")
        return super().compose_node(parent, index)
