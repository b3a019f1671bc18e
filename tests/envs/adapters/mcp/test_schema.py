"""A server tool's input schema as the env applies it: what a policy's arguments cannot do to it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from agentenv.envs.adapters.mcp.schema import tool_spec
from tests.envs.adapters.mcp.conftest import Contacts

EMAIL = r"^([a-zA-Z0-9]+\.?)+@example\.com$"  # exponential on Python's re: 28 s at 29 characters


def _model(schema: dict) -> type:
    spec = tool_spec("t", "a tool", schema, method_name="_call_mcp", terminal=False, max_chars=64_000)
    assert spec is not None
    return spec.args_model


_PROBE = """
import sys
from pydantic import ValidationError
from agentenv.envs.adapters.mcp.schema import tool_spec
from tests.envs.adapters.mcp.conftest import Contacts
EMAIL = {email!r}
if sys.argv[1] == "value":
    schema = {{"type": "object", "properties": {{"email": {{"type": "string", "pattern": EMAIL}}}}}}
    good, bad = {{"email": "ada.l@example.com"}}, {{"email": "a" * 40 + "!"}}
else:
    schema = {{"type": "object", "patternProperties": {{EMAIL: {{"type": "integer"}}}}, "additionalProperties": False}}
    good, bad = {{"ada@example.com": 1}}, {{"a" * 40 + "!": 1}}
model = tool_spec("t", "a tool", schema, method_name="_call_mcp", terminal=False, max_chars=64_000).args_model
model.model_validate(good)
try:
    model.model_validate(bad)
except ValidationError:
    print("refused")
"""


@pytest.mark.parametrize("where", ["value", "key"])
def test_a_pattern_runs_in_linear_time_on_what_the_policy_wrote(where: str) -> None:
    # The policy writes the strings and keys a schema's patterns are matched against; on
    # Python's backtracking re this pattern took 28 s at 29 characters, hours at 40.
    code = _PROBE.format(email=EMAIL)
    done = subprocess.run([sys.executable, "-c", code, where], timeout=60, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr[-2000:]


def test_a_pattern_the_linear_engine_cannot_run_is_left_to_the_server() -> None:
    model = _model({"type": "object", "properties": {"w": {"type": "string", "pattern": r"^(a)\1$"}}})
    model.model_validate({"w": "anything"})  # not checked here: the server has its own check


def _left_out(schema: dict) -> bool:
    return tool_spec("t", "a tool", schema, method_name="_call_mcp", terminal=False, max_chars=64_000) is None


@pytest.mark.parametrize(
    "shape",
    [
        lambda url: {"properties": {"r": {"$ref": url}}},
        lambda url: {"properties": {"r": {"$dynamicRef": url}}},
        lambda url: {"$id": url, "properties": {"r": {"$ref": "other.json"}}},  # relative to a remote $id
        lambda url: {"properties": {"r": {"$ref": "#/x-defs/A"}}, "x-defs": {"A": {"$ref": url}}},
        lambda url: {"$schema": "http://json-schema.org/draft-07/schema#", "properties": {"r": {"$ref": url}}},
        lambda url: {"properties": {"r": {"$ref": "#/$defs/Record"}}},  # a pointer to nothing
    ],
    ids=["ref", "dynamicRef", "beside-remote-id", "through-a-pointer", "draft-07", "to-nothing"],
)
def test_a_schema_whose_references_leave_it_is_left_out_and_nothing_is_fetched(contacts: Contacts, shape) -> None:
    """When the tools are listed, not when the agent calls one (then the fetch would run
    inside `step`, with no timeout: a host that never answers held the step for good)."""
    assert _left_out({"type": "object", **shape(contacts.url())})
    assert contacts.seen == []


INTEGER = {"$defs": {"R": {"type": "integer"}}}


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"properties": {"r": {"$ref": "#/$defs/R"}}, **INTEGER}, 1, "one"),
        ({"$id": "http://example.com/t.json", "properties": {"r": {"$ref": "t.json#/$defs/R"}}, **INTEGER}, 1, "one"),
        ({"properties": {"r": {"$ref": "#int"}}, "$defs": {"R": {"$anchor": "int", "type": "integer"}}}, 1, "one"),
        (
            {
                "$defs": {"R": {"$id": "http://example.com/r.json", "type": "integer"}},
                "properties": {"r": {"$ref": "http://example.com/r.json"}},
            },
            1,
            "one",
        ),
        # the JSON Schema metaschemas come with jsonschema: no fetch needed
        ({"properties": {"r": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}}, {"type": "string"}, 5),
    ],
    ids=["defs", "own-id", "anchor", "embedded-id", "metaschema"],
)
def test_references_within_the_schema_still_work(schema: dict, good: object, bad: object) -> None:
    model = _model({"type": "object", **schema})
    model.model_validate({"r": good})
    with pytest.raises(ValidationError):
        model.model_validate({"r": bad})


def test_a_reference_the_load_check_missed_is_refused_not_fetched(
    contacts: Contacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The validator's registry retrieves nothing: were the check at load to let a remote
    reference through (none does), the call would be refused, and nothing fetched."""
    monkeypatch.setattr("agentenv.envs.adapters.mcp.schema.unresolvable_ref", lambda schema, cls: None)
    model = _model({"type": "object", "properties": {"r": {"$ref": contacts.url()}}})
    with pytest.raises(ValidationError, match="the tool's input schema cannot check them"):
        model.model_validate({"r": "x"})
    assert contacts.seen == []
