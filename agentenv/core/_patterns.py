"""JSON Schema's pattern keywords in linear time, for schemas that meet text a policy wrote.

jsonschema runs ``pattern``, ``patternProperties`` and ``additionalProperties`` (which
reads patternProperties) on Python's backtracking ``re``: a pattern such as
``^(a|aa)+$`` then takes time exponential in the length of the text, in the process
that steps the env. `linear_patterns` extends a validator class so that these keywords
run on pydantic-core's Rust regex engine (linear time) instead. Used by MCP tool
arguments (`agentenv.envs.adapters.mcp.schema`) and world states (`agentenv.envs.world.schema`).

A pattern the engine cannot run (lookarounds, backreferences) is for the caller to
decide on: ``unsupported="match"`` lets any text match it (a server checks again),
``"refuse"`` raises ``jsonschema.SchemaError`` (a caller that refused such schemas when
it loaded them, so a validator meeting one is a bug). `matcher` tells which it is.

jsonschema is imported when a validator is extended, never at import.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, Literal

from pydantic import ValidationError
from pydantic_core import SchemaValidator, core_schema

__all__ = ["linear_patterns", "matcher"]

Unsupported = Literal["match", "refuse"]


@functools.lru_cache(maxsize=512)
def matcher(pattern: str) -> Callable[[str], bool] | None:
    """``re.search(pattern, text) is not None`` in linear time, or None for a pattern the
    engine cannot run."""
    try:
        engine = SchemaValidator(
            core_schema.str_schema(pattern=pattern), config=core_schema.CoreConfig(regex_engine="rust-regex")
        )
    except Exception:  # noqa: BLE001 - pydantic-core's SchemaError: lookarounds, backreferences
        return None

    def search(text: str) -> bool:
        try:
            engine.validate_python(text)
        except ValidationError:
            return False
        return True

    return search


@functools.cache
def linear_patterns(validator_class: Any, *, unsupported: Unsupported) -> Any:
    """``validator_class`` with its pattern keywords on `matcher` (see the module docstring)."""
    import jsonschema

    def matches(pattern: str, text: str) -> bool:
        search = matcher(pattern)
        if search is not None:
            return search(text)
        if unsupported == "match":
            return True
        raise jsonschema.SchemaError(f"pattern {pattern[:200]!r} is not supported")

    def pattern_(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
        if validator.is_type(instance, "string") and not matches(pattern, instance):
            yield jsonschema.ValidationError(f"{instance[:100]!r} does not match {pattern[:200]!r}")

    def pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if matches(pattern, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)

    def additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        named, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
        extras = [k for k in instance if k not in named and not any(matches(p, k) for p in patterns)]
        if validator.is_type(extra, "object"):
            for key in extras:
                yield from validator.descend(instance[key], extra, path=key)
        elif not extra and extras:
            listed = ", ".join(repr(k[:100]) for k in sorted(extras)[:10])
            yield jsonschema.ValidationError(f"Additional properties are not allowed ({listed} unexpected)")

    keywords = {
        "pattern": pattern_,
        "patternProperties": pattern_properties,
        "additionalProperties": additional_properties,
    }
    return jsonschema.validators.extend(validator_class, keywords)
