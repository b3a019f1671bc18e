"""The schema of a world's state: a pydantic model (Python worlds) or a JSON Schema (specs).

Both answer the same question for the emulator: is this JSON a valid state, and
what is its canonical form. A pydantic model validates the JSON strictly, as JSON
(``"5"`` is not an int), with unknown fields refused when the model forbids extras
(`agentenv.State` does); the canonical form is its JSON dump. A JSON Schema is
checked with the ``jsonschema`` library (draft 2020-12); the canonical form is the
JSON itself. Left out: JSON Schema ``$ref`` to anything outside the schema.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

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
        self.json_schema = schema
        self._validator = jsonschema.Draft202012Validator(schema)

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
