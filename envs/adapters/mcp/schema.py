"""An MCP tool as an agentenv tool: its JSON schema shown as it is, and enforced.

The agent sees each server tool like any ``@tool``: an OpenAI "tools" entry whose
``parameters`` is the server's ``inputSchema``. The core validates a call's
arguments with the spec's ``args_model`` before the tool runs, so the model here
runs the JSON schema (``jsonschema``, the draft the schema names) and reports
each violation at its field, the way pydantic's own errors read: a call the
schema refuses is a format error and never reaches the server. It also refuses
arguments longer than ``max_chars`` as JSON (a `ToolCall` handed to `Env.step`
is not bounded by the action's length limit).

Patterns (``pattern``, ``patternProperties``) run on a linear-time engine (the Rust
regex of pydantic-core), never Python's backtracking ``re``: the policy writes the
strings and keys they are matched against, and ``^([a-z0-9]+\\.?)+@x\\.com$`` took 28 s
on 29 characters there. A pattern that engine cannot run (a lookaround, a
backreference) is left for the server to check.

References resolve offline (`agentenv.core._schema_refs`): within the schema, or to
the JSON Schema metaschemas jsonschema bundles. The server writes the schema, so a
``$ref`` (or ``$dynamicRef``) to a URL would have the env fetch it, with no timeout,
when the agent calls the tool. A tool whose schema holds a reference that does not
resolve offline (a URL, a file beside a remote ``$id``, a pointer to nothing) is left
out when the tools are listed, with a warning naming the reference: a call to it could
not be checked, and the agent never sees a tool it cannot use. Nothing is fetched.

Names: an MCP tool name outside ``[A-Za-z_][A-Za-z0-9_-]{0,63}`` (dots and slashes
are allowed by MCP) is shown with each other character as ``_``; the spec keeps
the server's name. A tool whose schema is not a valid JSON schema is left out,
with a warning: no call to it could be checked.
"""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any, ClassVar

import jsonschema
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from agentenv.core._patterns import linear_patterns
from agentenv.core._schema_refs import offline_registry, unresolvable_ref
from agentenv.core.tools import ToolSpec

__all__ = ["MCPArguments", "agent_name", "tool_spec"]

logger = logging.getLogger("agentenv.envs.adapters.mcp")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_MAX_ERRORS = 5


class MCPArguments(BaseModel):
    """A tool call's arguments, checked against the tool's JSON schema (one subclass per tool)."""

    model_config = ConfigDict(extra="forbid")

    arguments: dict[str, Any]
    schema_validator: ClassVar[Any] = None
    max_chars: ClassVar[int] = 64_000

    @model_validator(mode="wrap")
    @classmethod
    def _check(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, cls):
            return data
        errors = _violations(cls, data)
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return handler({"arguments": data})


def _violations(cls: type[MCPArguments], data: Any) -> list[InitErrorDetails]:
    if not isinstance(data, dict):
        return [_error("(arguments)", "arguments must be a JSON object", data)]
    size = len(json.dumps(data, ensure_ascii=False, default=str))
    if size > cls.max_chars:
        return [_error("(arguments)", f"the arguments are {size} characters as JSON; the limit is {cls.max_chars}", "")]
    where = _non_finite(data)
    if where is not None:
        return [_error(where, "NaN and infinities are not JSON numbers", "")]
    try:
        found = sorted(cls.schema_validator.iter_errors(data), key=lambda e: list(e.absolute_path))[:_MAX_ERRORS]
    except RecursionError:
        return [_error("(arguments)", "the arguments nest too deeply", "")]
    except Exception as e:  # noqa: BLE001 - the server's schema cannot be applied (a reference the load missed)
        return [_error("(arguments)", f"the tool's input schema cannot check them: {type(e).__name__}", "")]
    details = []
    for err in found:
        path = ".".join(str(p) for p in err.absolute_path)
        if err.validator == "required":
            missing = re.match(r"^'(.+)' is a required property$", err.message)
            details.append(_error(_join(path, missing.group(1) if missing else "?"), "", None, kind="missing"))
        elif err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = set(err.schema.get("properties", {}))
            for extra in [k for k in err.instance if k not in allowed][:_MAX_ERRORS]:
                details.append(_error(_join(path, extra), "", None, kind="extra_forbidden"))
        else:
            details.append(_error(path or "(arguments)", _short(err.message), err.instance))
    return details


def _non_finite(data: dict[str, Any]) -> str | None:
    """The path of the first NaN or infinity in ``data`` (the core has bounded its depth)."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if type(value) is float and not math.isfinite(value):
            return path or "(arguments)"
        if isinstance(value, dict):
            stack.extend((_join(path, str(k)), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((_join(path, str(i)), v) for i, v in enumerate(value))
    return None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _short(message: str) -> str:
    return message if len(message) <= 200 else message[:200] + "..."


def _error(where: str, message: str, value: Any, *, kind: str = "json_schema") -> InitErrorDetails:
    text = message or kind
    return InitErrorDetails(
        type=PydanticCustomError(kind, "{detail}", {"detail": text}),
        loc=(where,),
        input=value if isinstance(value, str | int | float | bool | type(None)) else "...",
    )


def agent_name(name: str) -> str:
    """The name the agent calls a server tool by (the server's, where the core allows it)."""
    if _NAME_RE.match(name):
        return name
    clean = re.sub(r"[^A-Za-z0-9_-]", "_", name)
    if not re.match(r"^[A-Za-z_]", clean):
        clean = "_" + clean
    return clean[:64]


def tool_spec(
    name: str, description: str, input_schema: dict[str, Any], *, method_name: str, terminal: bool, max_chars: int
) -> ToolSpec | None:
    """The spec of one server tool, or None when its input schema is not a valid JSON schema
    or holds a reference that does not resolve offline (see the module docstring)."""
    schema = dict(input_schema or {"type": "object"})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    try:
        validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator_class.check_schema(schema)
    except SchemaError as e:
        logger.warning("MCP tool %r left out: its inputSchema is not a valid JSON schema: %s", name, e.message)
        return None
    missing = unresolvable_ref(schema, validator_class)
    if missing is not None:
        where, key, ref = missing
        logger.warning(
            "MCP tool %r left out: its inputSchema's %s at %r, %r, does not resolve within the schema "
            "(references are never fetched)",
            name,
            key,
            where or "/",
            ref[:200],
        )
        return None
    validator_class = linear_patterns(validator_class, unsupported="match")  # the server checks those
    checked = dict(schema)
    if "additionalProperties" not in checked and "patternProperties" not in checked:
        checked["additionalProperties"] = False  # an argument the tool does not name is a mistake, as for @tool
    args_model = type(
        f"{agent_name(name).title().replace('_', '').replace('-', '')}Arguments",
        (MCPArguments,),
        {
            "schema_validator": validator_class(checked, registry=offline_registry()),
            "max_chars": max_chars,
            "__module__": __name__,
        },
    )
    shown = agent_name(name)
    openai = {
        "type": "function",
        "function": {"name": shown, "description": description, "parameters": _strip_titles(schema)},
    }
    return ToolSpec(shown, description, args_model, method_name, terminal, openai)


def _strip_titles(schema: Any) -> Any:
    """Drop the auto-generated titles (pydantic-made servers add one per field): they cost tokens."""
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if k == "title" and isinstance(v, str):
                continue
            # "properties" maps names to schemas: a property called "title" is kept
            out[k] = (
                {p: _strip_titles(s) for p, s in v.items()}
                if k == "properties" and isinstance(v, dict)
                else _strip_titles(v)
            )
        return out
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema
