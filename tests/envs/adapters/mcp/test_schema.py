"""A server tool's input schema as the env applies it: what a policy's arguments cannot do to it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from agentenv.envs.adapters.mcp.schema import tool_spec

EMAIL = r"^([a-zA-Z0-9]+\.?)+@example\.com$"  # exponential on Python's re: 28 s at 29 characters


def _model(schema: dict) -> type:
    spec = tool_spec("t", "a tool", schema, method_name="_call_mcp", terminal=False, max_chars=64_000)
    assert spec is not None
    return spec.args_model


_PROBE = """
import sys
from pydantic import ValidationError
from agentenv.envs.adapters.mcp.schema import tool_spec
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


def test_a_ref_to_nowhere_refuses_the_call_instead_of_raising() -> None:
    model = _model({"type": "object", "properties": {"r": {"$ref": "#/$defs/Record"}}})
    with pytest.raises(ValidationError, match="the tool's input schema cannot check them"):
        model.model_validate({"r": {"x": 1}})
    model.model_validate({})  # a call that does not use it still goes through
