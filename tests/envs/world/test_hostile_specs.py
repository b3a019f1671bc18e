"""World specs that would turn a step against its host: a state schema whose ``$ref`` fetches
a remote document (a request to any host, from inside `env.step`, with no timeout), and one
whose patterns backtrack exponentially on text the policy chose. The first is refused when
the spec loads, and nothing is ever fetched; patterns run in linear time, and one the linear
engine cannot run is refused when the spec loads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from agentenv.envs.world import JSONSchemaState
from agentenv.envs.world.schema import SchemaError
from agentenv.envs.world.spec import SpecError, load_spec

pytest.importorskip("jsonschema")


def spec(notes_schema: dict[str, Any]) -> dict[str, Any]:
    """A one-tool notes world whose notes object has ``notes_schema``."""
    return {
        "name": "notes",
        "instructions": "Keep notes.",
        "state_schema": {"type": "object", "required": ["notes"], "properties": {"notes": notes_schema}},
        "initial_state": {"notes": {}},
        "tools": [
            {
                "name": "add_note",
                "description": "Add a note.",
                "arguments": {
                    "type": "object",
                    "required": ["title", "text"],
                    "properties": {"title": {"type": "string"}, "text": {"type": "string"}},
                },
                "writes": ["/notes/{title}"],
            }
        ],
    }


@pytest.mark.parametrize(
    "ref",
    ["http://127.0.0.1:9/note.json", "https://example.com/schema#/x", "file:///etc/passwd", "note.json"],
)
def test_a_remote_ref_is_refused_when_the_spec_loads_naming_where(ref: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec(spec({"type": "object", "additionalProperties": {"$ref": ref}}))
    message = str(err.value)
    assert "state_schema" in message and "/properties/notes/additionalProperties/$ref" in message
    assert "not a local reference" in message


@pytest.mark.parametrize("ref", ["#/$defs/missing", "#/properties/nope", "#nowhere", "#/$defs/note/items"])
def test_a_local_ref_to_nothing_is_refused_when_the_spec_loads_naming_where(ref: str) -> None:
    """Not when a state first reaches it, mid-step, as an error from inside jsonschema."""
    notes = {"type": "object", "additionalProperties": {"$ref": ref}, "$defs": {"note": {"type": "string"}}}
    with pytest.raises(SpecError) as err:
        load_spec(spec(notes))
    message = str(err.value)
    assert "state_schema" in message and "/properties/notes/additionalProperties/$ref" in message
    assert "points to nothing" in message


def test_a_ref_to_nothing_below_an_embedded_id_is_refused_when_the_spec_loads() -> None:
    """An ``$id`` below the root changes what its references are relative to; the load
    check resolves them from there too, rather than leave them to the first state."""
    note = {"$id": "urn:note", "type": "object", "additionalProperties": {"$ref": "#/$defs/missing"}}
    with pytest.raises(SpecError, match="points to nothing"):
        load_spec(spec({"type": "object", "additionalProperties": note}))
    fine = {
        "$id": "urn:note",
        "type": "object",
        "additionalProperties": {"$ref": "#/$defs/text"},
        "$defs": {"text": {"type": "string"}},
    }
    world = load_spec(spec({"type": "object", "additionalProperties": fine}))
    with pytest.raises(SchemaError, match="/notes/a/b"):
        world.schema.validate({"notes": {"a": {"b": 1}}})


def test_local_refs_still_work_and_nothing_is_ever_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The validator's registry retrieves nothing: even a reference the load checks let
    through (none does) could not reach the network."""
    import urllib.request

    fetched: list[object] = []

    def urlopen(request: object, *args: object, **kwargs: object) -> None:
        fetched.append(request)
        raise OSError("no network in this test")

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)  # what jsonschema's default registry fetches with
    notes = {"type": "object", "additionalProperties": {"$ref": "#/$defs/note"}}
    defs = {"note": {"type": "string", "maxLength": 3}}
    state = JSONSchemaState({"type": "object", "properties": {"notes": notes}, "$defs": defs})
    assert state.validate({"notes": {"a": "abc"}}) == {"notes": {"a": "abc"}}
    with pytest.raises(SchemaError, match="/notes/a"):
        state.validate({"notes": {"a": "abcd"}})
    monkeypatch.setattr("agentenv.envs.world.schema._check_safe", lambda schema: None)
    monkeypatch.setattr("agentenv.envs.world.schema._check_references", lambda schema, cls: None)
    remote = JSONSchemaState({"type": "object", "additionalProperties": {"$ref": "http://127.0.0.1:9/x.json"}})
    with pytest.raises(Exception, match=r"127\.0\.0\.1"):
        remote.validate({"a": 1})
    assert fetched == []


BACKTRACKING = "^(a|aa)+$"
SHAPES = {
    "pattern": {"type": "object", "additionalProperties": {"type": "string", "pattern": BACKTRACKING}},
    "patternProperties": {"type": "object", "patternProperties": {BACKTRACKING: {}}, "additionalProperties": False},
    "propertyNames": {"type": "object", "propertyNames": {"pattern": BACKTRACKING}},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_patterns_match_as_before(shape: str) -> None:
    world = load_spec(spec(SHAPES[shape]))
    good = {"notes": {"aaa": "aaa"}}
    assert world.schema.validate(good) == good
    with pytest.raises(SchemaError):
        world.schema.validate({"notes": {"aab": "aab"}})


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_backtracking_pattern_runs_in_linear_time_on_the_policys_text(shape: str) -> None:
    """On Python's re, 60 characters of ``a`` and a ``!`` would take longer than the universe
    has run; the check runs in its own process so that a regression fails, not hangs."""
    code = textwrap.dedent(
        f"""
        from agentenv.envs.world.schema import SchemaError
        from agentenv.envs.world.spec import load_spec
        from tests.envs.world.test_hostile_specs import SHAPES, spec
        world = load_spec(spec(SHAPES[{shape!r}]))
        text = "a" * 60 + "!"
        try:
            world.schema.validate({{"notes": {{text: text}}}})
        except SchemaError:
            print("refused")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "refused"


@pytest.mark.parametrize(
    "notes_schema, where",
    [
        ({"additionalProperties": {"type": "string", "pattern": "^(?=a)"}}, "additionalProperties/pattern"),
        ({"patternProperties": {"(a)\\1": {}}}, "/properties/notes/patternProperties"),
        ({"propertyNames": {"pattern": "(?<!x)y"}}, "propertyNames/pattern"),
    ],
    ids=["lookahead", "backreference", "lookbehind"],
)
def test_a_pattern_the_linear_engine_cannot_run_is_refused_when_the_spec_loads(notes_schema: dict, where: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec(spec({"type": "object", **notes_schema}))
    assert "state_schema" in str(err.value) and where in str(err.value) and "not supported" in str(err.value)


def test_unevaluated_properties_beside_pattern_properties_is_refused() -> None:
    """jsonschema's unevaluatedProperties matches patternProperties with Python's re itself."""
    notes = {"type": "object", "patternProperties": {"^a": {}}, "unevaluatedProperties": False}
    with pytest.raises(SpecError, match="unevaluatedProperties"):
        load_spec(spec(notes))
