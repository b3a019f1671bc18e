"""Tools as typed methods: the `tool` decorator and the schema built from a signature.

One definition serves three readers: the pydantic model that validates the
arguments, the OpenAI "tools" JSON schema shown to the model, and the call itself.
Parameter descriptions come from the docstring's ``Args:`` section (Google style).
"""

from __future__ import annotations

import dataclasses
import decimal
import inspect
import math
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic_core import SchemaValidator

__all__ = ["ToolSpec", "spec_from_model", "tool"]

F = TypeVar("F", bound=Callable[..., Any])

_TOOL_ATTR = "__agentenv_tool__"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """Everything the env needs to know about one tool."""

    name: str
    description: str
    args_model: type[BaseModel]
    method_name: str
    terminal: bool
    schema: dict[str, Any]  # OpenAI "tools" entry: {"type": "function", "function": {...}}
    fields_validator: SchemaValidator | None = field(init=False, repr=False, compare=False)
    """The validator of ``args_model``'s fields alone, for a model that is nothing but its
    fields (no validators, no ``__init__`` or ``model_post_init`` of its own): the same
    checks and errors, giving the fields as a dict (the call's keyword arguments) without
    building the model. None for any other model: validate with the model itself."""
    finite_by_type: bool = field(init=False, repr=False, compare=False)
    """Whether the argument model's types alone keep NaN and infinities out (ints, strings,
    literals, floats that refuse them...), so validated arguments need no `non_finite` walk.
    Told once from the model's core schema; False whenever unsure."""

    def __post_init__(self) -> None:
        # Built once per tool (per class, or per env for tools made at run time), never per call.
        schema = _fields_schema(self.args_model)
        fields = None if schema is None else SchemaValidator(schema["schema"], schema.get("config"))
        object.__setattr__(self, "fields_validator", fields)
        object.__setattr__(self, "finite_by_type", schema is not None and _finite_fields(schema))

    @property
    def parameters(self) -> tuple[str, ...]:
        return tuple(self.args_model.model_fields)


def tool(fn: F | None = None, *, name: str | None = None, terminal: bool = False) -> Any:
    """Mark an `Env` method as a tool the agent can call.

    The method's annotated parameters become the tool's arguments (validated by
    pydantic before the call) and its docstring the description. A tool returns
    what the agent sees (a string, or anything JSON-serialisable), raises
    `agentenv.ToolError` for a failure the agent should see, and with
    ``terminal=True`` ends the episode after it runs (a "submit" tool); calls after it in
    the same action are not run, each answered "not run" (a tool error), so nothing the
    policy does after its answer reaches what ``verify`` reads.

        @tool(terminal=True)
        def submit(self, answer: int) -> str:
            '''Submit the final answer.

            Args:
                answer: The value of the expression.
            '''
    """

    def mark(f: F) -> F:
        setattr(f, _TOOL_ATTR, {"name": name or f.__name__, "terminal": terminal})
        return f

    return mark(fn) if fn is not None else mark


def non_finite(value: Any) -> bool:
    """Whether validated arguments hold NaN or an infinity anywhere: a nested model or
    dataclass keeps its own config, so ``allow_inf_nan=False`` on the arguments' model
    does not reach it (nor a string such as ``"nan"`` it coerces to a float).

    Every value is looked at, each container once (an argument type's validator may
    return one that holds itself): the action's size bounds the walk. A cap on the values
    looked at let a NaN through behind 100,000 others in an env that admits long actions."""
    stack, walked = [value], set()
    while stack:
        item = stack.pop()
        if isinstance(item, (float, complex, decimal.Decimal)):
            if not _finite_number(item):
                return True
            continue
        if isinstance(item, (str, bytes, int)) or item is None or id(item) in walked:
            continue
        walked.add(id(item))
        if isinstance(item, BaseModel):
            stack.extend(item.__dict__.values())
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
    return False


def _fields_schema(model: type[BaseModel]) -> Any:
    """The core schema of ``model`` when it is a plain model of fields, else None."""
    if not getattr(model, "__pydantic_complete__", False) or getattr(model, "__pydantic_post_init__", None):
        return None
    try:
        schema = model.__pydantic_core_schema__
    except Exception:  # noqa: BLE001 - a model pydantic cannot build yet: the model validates
        return None
    if (
        schema.get("type") != "model"  # a model validator wraps it, or definitions do
        or schema.get("custom_init")
        or schema.get("root_model")
        or schema.get("post_init")
        or schema["schema"].get("type") != "model-fields"
    ):
        return None
    return schema


def _finite_fields(schema: Any) -> bool:
    """Whether every value a plain model (`_fields_schema`) validates is free of NaN and
    infinities by its types alone. Only what the core schema states is trusted: a
    validator function, a nested model or dataclass, ``Any``, a default factory or extra
    fields could hold anything."""
    config = schema.get("config", {})
    if config.get("allow_inf_nan", True) or config.get("extra_fields_behavior") == "allow":
        return False
    return all(_finite_schema(f["schema"]) for f in schema["schema"]["fields"].values())


_FINITE_SCALARS = frozenset({"int", "bool", "str", "none"})


def _finite_schema(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if kind in _FINITE_SCALARS:
        return True
    if kind == "float":
        return not schema.get("allow_inf_nan", False)  # without its own, the model's config refuses them
    if kind == "literal":
        return all(type(v) in (str, int, bool, type(None)) for v in schema["expected"])
    if kind == "nullable":
        return _finite_schema(schema["schema"])
    if kind == "default":
        return "default" in schema and not non_finite(schema["default"]) and _finite_schema(schema["schema"])
    if kind in ("list", "set", "frozenset"):
        return "items_schema" in schema and _finite_schema(schema["items_schema"])
    if kind == "dict":
        return all(k in schema and _finite_schema(schema[k]) for k in ("keys_schema", "values_schema"))
    if kind == "union":
        return all(_finite_schema(c[0] if isinstance(c, tuple) else c) for c in schema["choices"])
    return False  # validator functions, models, dataclasses, tuples, Any, enums, decimals...


def _finite_number(number: float | complex | decimal.Decimal) -> bool:
    if isinstance(number, decimal.Decimal):
        return number.is_finite()
    if isinstance(number, complex):
        return math.isfinite(number.real) and math.isfinite(number.imag)
    return math.isfinite(number)


def collect_tools(cls: type) -> dict[str, ToolSpec]:
    """Build the specs of every method marked with `tool` on ``cls`` and its bases."""
    specs: dict[str, ToolSpec] = {}
    for klass in reversed(cls.__mro__):
        named: dict[str, str] = {}  # tool name -> the method of this class that declares it
        for attr, value in vars(klass).items():
            marker = getattr(value, _TOOL_ATTR, None)
            if marker is None:
                continue
            spec = build_spec(value, method_name=attr, **marker)
            if spec.name in named:  # the later one would silently win
                raise TypeError(
                    f"{klass.__name__}: methods {named[spec.name]!r} and {attr!r} are both tool {spec.name!r}"
                )
            named[spec.name] = attr
            specs = {k: v for k, v in specs.items() if v.method_name != attr}  # overridden
            specs[spec.name] = spec
    return specs


def build_spec(fn: Callable[..., Any], *, method_name: str, name: str, terminal: bool) -> ToolSpec:
    if not _NAME_RE.match(name):
        raise TypeError(f"tool name must match {_NAME_RE.pattern}, got {name!r}")
    _check_callable_as_tool(fn, name)
    summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for param in list(inspect.signature(fn).parameters.values())[1:]:  # skip self
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name!r}: *args and **kwargs cannot be described to a model")
        if param.kind is param.POSITIONAL_ONLY:  # the env passes arguments by name
            raise TypeError(f"tool {name!r}: parameter {param.name!r} is positional-only; drop the '/'")
        if param.name not in hints:
            raise TypeError(f"tool {name!r}: parameter {param.name!r} needs a type annotation")
        if hasattr(BaseModel, param.name):  # model_config would be taken as the model's config, dropped
            raise TypeError(f"tool {name!r}: parameter {param.name!r} is a name pydantic reserves; rename it")
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints[param.name], Field(default, description=arg_docs.get(param.name)))
    model_name = "".join(part.title() for part in re.split(r"[_-]", name)) + "Args"
    # No NaN or infinity in a float argument: they pass every range check a tool writes
    # (``amount <= 0`` is False for NaN) and turn into null in the state's JSON.
    args_model = create_model(model_name, __config__=ConfigDict(extra="forbid", allow_inf_nan=False), **fields)
    return spec_from_model(name, summary, args_model, method_name=method_name, terminal=terminal)


def _check_callable_as_tool(fn: Any, name: str) -> None:
    """TypeError for a method the env cannot call as a tool: it calls ``method(**arguments)``
    on the env and shows what that returns. An async or generator method returned an
    object without running (the call counted as a success, a terminal one ended the
    episode); a static or class method lost its first parameter to the skipped ``self``."""
    if not inspect.isfunction(fn):
        raise TypeError(f"tool {name!r}: @tool marks a plain method (def {name}(self, ...)), got {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise TypeError(
            f"tool {name!r}: an async or generator method would never run (the env calls it and shows what it "
            "returns); write a plain def that returns the result"
        )


def spec_from_model(
    name: str, description: str, args_model: type[BaseModel], *, method_name: str, terminal: bool = False
) -> ToolSpec:
    """A `ToolSpec` whose arguments are an existing pydantic model.

    For envs whose tools are not methods (the tools env's HTTP routes): the model
    validates the arguments and its JSON schema is what the agent is shown. The
    env must have an attribute ``method_name`` to call with the validated fields.
    """
    if not _NAME_RE.match(name):
        raise TypeError(f"tool name must match {_NAME_RE.pattern}, got {name!r}")
    parameters = _strip_titles(args_model.model_json_schema())
    parameters.setdefault("properties", {})
    parameters.setdefault("required", [])
    schema = {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }
    return ToolSpec(name, description, args_model, method_name, terminal, schema)


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and ``Args:`` entries."""
    lines = doc.splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    current: str | None = None
    in_args = False
    for line in lines:
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args:
            if stripped.endswith(":") and " " not in stripped:  # next section ("Returns:")
                in_args = False
                continue
            match = re.match(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", stripped)
            if match and line.startswith((" ", "\t")) and len(line) - len(line.lstrip()) <= 8:
                current = match.group(1)
                args[current] = match.group(2)
            elif current and stripped:
                args[current] = f"{args[current]} {stripped}".strip()
        elif stripped or summary:
            summary.append(stripped)
    return " ".join(" ".join(summary).split()), args


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's auto-generated titles: they cost prompt tokens and say nothing."""
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema
