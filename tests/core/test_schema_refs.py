"""`agentenv.core._schema_refs`: a schema's references resolve within it or not at all,
relative to the ids above them as the schema's draft spells them, and never by a fetch."""

from __future__ import annotations

import pytest

jsonschema = pytest.importorskip("jsonschema")

from agentenv.core._schema_refs import offline_registry, unresolvable_ref  # noqa: E402


@pytest.mark.parametrize(
    ("validator", "schema", "found"),
    [
        # draft 4 names a base with "id"; "$id" means nothing there
        (
            jsonschema.Draft4Validator,
            {"id": "urn:a", "definitions": {"x": {}}, "properties": {"p": {"$ref": "urn:a#/definitions/x"}}},
            None,
        ),
        (
            jsonschema.Draft4Validator,
            {"$id": "urn:a", "definitions": {"x": {}}, "properties": {"p": {"$ref": "urn:a#/definitions/x"}}},
            ("/properties/p", "$ref", "urn:a#/definitions/x"),
        ),
        # 2020-12: an id below the root is the base of what lies under it
        (
            jsonschema.Draft202012Validator,
            {"$defs": {"n": {"$id": "urn:n", "$defs": {"k": {}}, "items": {"$ref": "#/$defs/k"}}}},
            None,
        ),
        (
            jsonschema.Draft202012Validator,
            {"$defs": {"n": {"$id": "urn:n", "items": {"$ref": "#/$defs/k"}}}},
            ("/$defs/n/items", "$ref", "#/$defs/k"),
        ),
        # what a data keyword holds is data, never a reference
        (jsonschema.Draft202012Validator, {"const": {"$ref": "http://example.com/x"}}, None),
        (
            jsonschema.Draft202012Validator,
            {"items": {"$dynamicRef": "http://example.com/x"}},
            ("/items", "$dynamicRef", "http://example.com/x"),
        ),
    ],
    ids=["draft4-id", "draft4-ignores-$id", "embedded-id", "embedded-id-to-nothing", "const-is-data", "dynamicRef"],
)
def test_references_resolve_as_the_draft_reads_them(validator, schema, found) -> None:
    assert unresolvable_ref(schema, validator) == found


def test_the_registry_retrieves_nothing_and_a_validator_on_it_raises_instead(monkeypatch) -> None:
    import urllib.request

    fetched: list[object] = []
    monkeypatch.setattr(urllib.request, "urlopen", lambda *args, **kwargs: fetched.append(args))
    validator = jsonschema.Draft202012Validator(
        {"items": {"$ref": "http://127.0.0.1:9/x"}}, registry=offline_registry()
    )
    with pytest.raises(Exception, match="Unresolvable"):
        list(validator.iter_errors([1]))
    assert fetched == []
