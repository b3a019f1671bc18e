"""JSON Schema references resolved offline, for schemas that come from outside the project.

jsonschema resolves a ``$ref`` it cannot find in the schema by fetching its URL (with
no timeout) when a validator first reaches it: an MCP server's tool schema with
``{"$ref": "http://host/x.json"}`` made the env fetch that URL when the agent called
the tool, and a host that never answers held the step for as long as it liked. Every
schema the project evaluates (MCP tools, world states) is therefore applied with
`offline_registry`: a reference resolves within the schema itself or the JSON Schema
metaschemas jsonschema bundles, or not at all. `unresolvable_ref` finds, when a schema
is loaded, the first reference that would not, so a caller refuses the schema then
(with the place and the reference in its message) rather than meet it mid-step.

The check walks every object of the schema that may be a schema (those under data
keywords, ``const``, ``enum``, ``default``, ``examples``, are data), each reference
relative to the ``$id``s above it (``id`` in drafts 3 and 4), as the validator resolves
it. A validator that still meets a reference the check did not (one inside a value no
keyword names, reached through a JSON Pointer) fails that validation with
``referencing``'s ``Unresolvable``: it never fetches.

jsonschema and referencing are imported when first used, never at import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urljoin

__all__ = ["offline_registry", "subschemas", "unresolvable_ref"]

_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are data, not schemas."""
_NAMED_SUBSCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
"""Keywords whose values map names (or patterns) to schemas."""


def offline_registry() -> Any:
    """A `referencing.Registry` that retrieves nothing (its default ``retrieve`` refuses
    every URI): jsonschema adds its bundled metaschemas to it, and any other reference
    is `referencing.exceptions.Unresolvable`."""
    import referencing

    return referencing.Registry()


def unresolvable_ref(schema: dict[str, Any], validator_class: Any) -> tuple[str, str, str] | None:
    """The first reference in ``schema`` that does not resolve offline, as (JSON Pointer
    of the object holding it, keyword, reference); None when all do. ``validator_class``
    (a jsonschema validator class) says the draft, and so which keyword holds an id."""
    import jsonschema_specifications  # type: ignore[import-untyped]  # jsonschema's own dependency
    import referencing
    import referencing.jsonschema
    from referencing.exceptions import Unresolvable

    dialect = validator_class.ID_OF(validator_class.META_SCHEMA) or ""
    specification = referencing.jsonschema.specification_with(dialect, default=referencing.jsonschema.DRAFT202012)
    root = specification.create_resource(schema)
    registry = jsonschema_specifications.REGISTRY.combine(offline_registry())
    try:
        registry = registry.with_resource(root.id() or "", root).crawl()
    except Exception:  # noqa: BLE001 - an id referencing cannot read (not a string, not a URI)
        return "", "$id", str(root.id())
    for where, base, node in _walk(schema, specification.id_of):
        for key in _REFERENCES:
            ref = node.get(key)
            if not isinstance(ref, str):
                continue
            try:
                registry.resolver(base_uri=base).lookup(ref)
            except Unresolvable:
                return where, key, ref
            except Exception:  # noqa: BLE001 - not a URI at all ("http://[x"): it cannot resolve either
                return where, key, ref
    return None


def subschemas(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object in ``schema`` that may be a schema, with its JSON Pointer. An object
    under an unknown keyword counts (a local ``$ref`` may point there); data keywords'
    values do not."""
    for where, _, node in _walk(schema, lambda node: None):
        yield where, node


def _walk(schema: dict[str, Any], id_of: Callable[[dict[str, Any]], Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """`subschemas`, each with the base URI its references are relative to (``id_of``
    reads a node's own id, as the draft spells it)."""
    stack: list[tuple[str, str, Any]] = [("", "", schema)]
    while stack:
        where, base, node = stack.pop()
        if not isinstance(node, dict):
            continue
        own = id_of(node)
        if isinstance(own, str):
            base = urljoin(base, own)
        yield where, base, node
        for key, value in node.items():
            here = f"{where}/{_escape(key)}"
            if key in _DATA_KEYWORDS:
                continue
            if key in _NAMED_SUBSCHEMAS and isinstance(value, dict):
                stack.extend((f"{here}/{_escape(name)}", base, sub) for name, sub in value.items())
            elif isinstance(value, list):
                stack.extend((f"{here}/{i}", base, sub) for i, sub in enumerate(value))
            else:
                stack.append((here, base, value))


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")
