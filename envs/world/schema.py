"""The schema of a world's state: a pydantic model (Python worlds) or a JSON Schema (specs).

Both answer the same question for the emulator: is this JSON a valid state, and
what is its canonical form. A pydantic model validates the JSON strictly, as JSON
(``"5"`` is not an int), with unknown fields refused when the model forbids extras
(`agentenv.State` does); the canonical form is its JSON dump. A JSON Schema is
checked with the ``jsonschema`` library (draft 2020-12); the canonical form is the
JSON itself.

A JSON Schema runs inside `env.step` on text the policy chose, so two of its features
are held back. ``$ref`` and ``$dynamicRef`` must be local (``#...``) and point into the
schema: a remote one would be fetched mid-step (a request to any host, with no timeout),
and the validator's registry retrieves nothing (`agentenv.core._schema_refs`), so
nothing is ever fetched. Patterns (``pattern``, ``patternProperties``,
and so ``propertyNames``' patterns) run on a linear-time engine, the Rust regex of
pydantic-core (`agentenv.core._patterns`), never Python's backtracking ``re``, where
``^(a|aa)+$`` takes 7 times longer for each 4 more characters of the text. A schema with
a pattern that engine cannot run (a lookaround, a backreference) is refused when loaded,
as is ``unevaluatedProperties`` beside ``patternProperties`` (jsonschema matches those
with ``re`` itself).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from agentenv.core._patterns import linear_patterns, matcher
from agentenv.core._schema_refs import offline_registry, subschemas, unresolvable_ref
from agentenv.envs.world._extra import need

__all__ = ["JSONSchemaState", "ModelState", "SchemaError", "StateSchema"]


class SchemaError(ValueError):
    """The data is not a valid state; the message names the field."""


class StateSchema(Protocol):
    @property
    def json_schema(self) -> dict[str, Any]: ...

    def validate(self, data: Any) -> dict[str, Any]:
        """The canonical JSON of a valid state; `SchemaError` otherwise."""
        ...

    def typed(self, data: dict[str, Any]) -> Any:
        """The state as Python code sees it (the model instance, or the dict)."""
        ...


class ModelState:
    """A pydantic model as the state schema."""

    def __init__(self, model: type[BaseModel]) -> None:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"a state model is a pydantic BaseModel subclass, got {model!r}")
        self.model = model
        self.json_schema = model.model_json_schema()

    def validate(self, data: Any) -> dict[str, Any]:
        try:
            text = json.dumps(data, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as e:
            raise SchemaError(f"the state is not JSON data: {e}") from None
        try:
            state = self.model.__pydantic_validator__.validate_json(text, strict=True)
        except ValidationError as e:
            raise SchemaError(_pydantic_message(e)) from None
        return state.model_dump(mode="json")

    def typed(self, data: dict[str, Any]) -> BaseModel:
        return self.model.__pydantic_validator__.validate_python(data)


class JSONSchemaState:
    """A JSON Schema (draft 2020-12) as the state schema."""

    def __init__(self, schema: dict[str, Any]) -> None:
        jsonschema = need("jsonschema")
        if not isinstance(schema, dict):
            raise SchemaError(f"the state schema is a JSON object, got {type(schema).__name__}")
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as e:
            raise SchemaError(f"the state schema is not a valid JSON Schema: {e.message}") from None
        _check_safe(schema)
        self.json_schema = schema
        validator_class = linear_patterns(jsonschema.Draft202012Validator, unsupported="refuse")
        _check_references(schema, validator_class)
        self._validator = validator_class(schema, registry=offline_registry())

    def validate(self, data: Any) -> dict[str, Any]:
        error = next(iter(sorted(self._validator.iter_errors(data), key=lambda e: list(e.absolute_path))), None)
        if error is not None:
            where = "/" + "/".join(str(p) for p in error.absolute_path)
            raise SchemaError(f"{where}: {error.message[:300]}")
        if not isinstance(data, dict):
            raise SchemaError(f"the state must be a JSON object, got {type(data).__name__}")
        return data

    def typed(self, data: dict[str, Any]) -> dict[str, Any]:
        return data


def _pydantic_message(error: ValidationError) -> str:
    parts = []
    for err in error.errors()[:3]:
        where = "/" + "/".join(str(p) for p in err["loc"])
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


# -- what a schema may hold, and patterns on a linear-time engine ------------------------------


def _check_safe(schema: dict[str, Any]) -> None:
    """`SchemaError`, naming where, for a reference that is not local, a pattern the linear
    engine cannot run, or ``unevaluatedProperties`` beside ``patternProperties``."""
    keywords: set[str] = set()
    for where, node in subschemas(schema):
        keywords.update(node)
        for key in ("$ref", "$dynamicRef"):
            ref = node.get(key)
            if isinstance(ref, str) and not ref.startswith("#"):
                raise SchemaError(
                    f"{where}/{key}: {ref[:200]!r} is not a local reference; only '#...' ones are "
                    "allowed (nothing outside the schema is fetched)"
                )
        patterns = [(f"{where}/pattern", node["pattern"])] if isinstance(node.get("pattern"), str) else []
        named = node.get("patternProperties")
        patterns += [(f"{where}/patternProperties", p) for p in named] if isinstance(named, dict) else []
        for at, pattern in patterns:
            if matcher(pattern) is None:
                raise SchemaError(
                    f"{at}: the pattern {pattern[:200]!r} is not supported (patterns run on a linear-time "
                    "engine, which has no lookarounds or backreferences)"
                )
    if {"unevaluatedProperties", "patternProperties"} <= keywords:
        raise SchemaError(
            "'unevaluatedProperties' beside 'patternProperties' is not supported "
            "(jsonschema would match those patterns on Python's backtracking re)"
        )


def _check_references(schema: dict[str, Any], validator_class: Any) -> None:
    """`SchemaError`, naming where, for a ``$ref`` that points nowhere in the schema (found
    when the spec loads, not when a state first reaches it mid-step)."""
    missing = unresolvable_ref(schema, validator_class)
    if missing is not None:
        where, key, ref = missing
        raise SchemaError(f"{where}/{key}: {ref[:200]!r} points to nothing in the schema")
