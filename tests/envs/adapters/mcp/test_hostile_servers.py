"""A server that misbehaves on purpose, over each transport: it says nothing, trickles its
answer a byte at a time, sends an answer without end, or answers with what is not JSON-RPC.
Whatever it does, the step ends by its deadline as ``infra`` saying what the server did, the
episode's trajectory serialises, and the same env's next reset starts a server that works.

And a tool whose input schema refers to a URL: the env never fetches it (a server that
records every request is never contacted, one that never answers never holds a step)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentenv import ScriptedPolicy, Trajectory, rollout, tool_call_text
from agentenv.core._deadline import run_within
from agentenv.envs.adapters.mcp import MCPEnv, ServerConfig
from tests.envs.adapters.mcp.conftest import Contacts

HOSTILE = Path(__file__).with_name("hostile_server.py")
LIVENESS_S = 120.0
"""A rollout still running after this long hung: the test fails rather than wait forever.
Every deadline below is a few seconds; this bounds nothing the env promises."""
LIMIT = 1024 * 1024


def hostile(mode: str, transport: str, *, schema: dict[str, object] | None = None) -> ServerConfig:
    argv = [sys.executable, str(HOSTILE), mode]
    if schema is not None:
        argv += ["--schema", json.dumps(schema)]
    limits = {"call_timeout_s": 2.0, "max_message_bytes": LIMIT}
    if transport == "stdio":
        return ServerConfig(command=argv, **limits)  # type: ignore[arg-type]
    return ServerConfig(
        transport="http",
        command=[*argv, "--http", "--port", "{port}"],
        url="http://127.0.0.1:{port}/mcp",
        **limits,  # type: ignore[arg-type]
    )


def first_bad_then_echo(conversation: object) -> str:
    """Episode 0 calls the misbehaving tool; episode 1, on the same env, a well-behaved one."""
    if conversation.id == 0:  # type: ignore[attr-defined]
        return tool_call_text("bad", text="hi")
    return tool_call_text("echo", text="again")


def two_episodes_on_one_env(config: ServerConfig) -> tuple[list[Trajectory], list[MCPEnv]]:
    made: list[MCPEnv] = []

    def make() -> MCPEnv:
        made.append(MCPEnv(server=config, max_turns=1))
        return made[-1]

    policy = ScriptedPolicy(first_bad_then_echo)
    finished = run_within(LIVENESS_S, lambda: rollout(make, policy, n=2, concurrency=1), name="test-rollout")
    assert finished is not None, f"the rollout did not end within {LIVENESS_S:g} s"
    return finished.result(), made


SAID = {
    ("stdio", "silent"): "did not answer tool 'bad' within 2 s",
    ("http", "silent"): "did not answer tool 'bad' within 2 s",
    ("stdio", "trickle"): "did not answer tool 'bad' within 2 s",
    ("http", "trickle"): "did not answer tool 'bad' within 2 s",
    ("stdio", "huge"): f"the MCP server sent a message over {LIMIT} bytes",
    ("http", "huge"): f"the MCP server sent an answer over {LIMIT} bytes",
    ("stdio", "garbage"): "it wrote what is not MCP: it wrote '<html>this is not JSON-RPC</html>'",
    ("http", "garbage"): "Failed to parse JSON response",
}


@pytest.mark.parametrize(("transport", "mode"), list(SAID), ids=[f"{t}-{m}" for t, m in SAID])
def test_a_misbehaving_server_ends_the_step_as_infra_by_its_deadline_and_nothing_is_lost(
    transport: str, mode: str
) -> None:
    trajectories, made = two_episodes_on_one_env(hostile(mode, transport))
    broken, after = trajectories
    assert broken.failure == "infra" and SAID[transport, mode] in (broken.error or "")
    assert broken.task_reward is None  # never scored
    assert len(made) == 1, "the second episode ran on the same env, after its reset"
    assert after.failure != "infra" and after.transitions[0].observation[0]["content"] == "again"
    for trajectory in trajectories:  # what the episodes recorded reads back as it was
        assert Trajectory.from_json(trajectory.to_json()) == trajectory


# -- schemas that refer to the network -----------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_tool_whose_schema_refers_to_a_url_is_left_out_and_the_url_never_fetched(
    contacts: Contacts, transport: str
) -> None:
    schema = {"type": "object", "properties": {"text": {"$ref": contacts.url()}}}
    env = MCPEnv(server=hostile("ok", transport, schema=schema))
    try:
        env.reset(seed=0)
        shown = [t["function"]["name"] for t in env.tool_schemas()]
        assert "bad" not in shown and "echo" in shown
        done = run_within(LIVENESS_S, lambda: env.step(tool_call_text("bad", text="hi")), name="test-step")
        assert done is not None, "the step did not end"
        obs, _, _, truncated, info = done.result()
        assert info["error_kind"] == "format" and not truncated  # an unknown tool, as for any name not shown
        obs, *_ = env.step(tool_call_text("echo", text="still here"))
        assert obs[0]["content"] == "still here"
    finally:
        env.close()
    assert contacts.seen == []


def test_a_schema_with_only_a_remote_metaschema_is_kept_and_nothing_is_fetched(contacts: Contacts) -> None:
    """``$schema`` names a dialect; jsonschema picks a validator by it and never fetches it."""
    schema = {"$schema": contacts.url(), "type": "object", "properties": {"text": {"type": "string"}}}
    env = MCPEnv(server=hostile("ok", "stdio", schema=schema))
    try:
        env.reset(seed=0)
        obs, *_, info = env.step(tool_call_text("bad", text="hi"))
        assert info["error"] is None and obs[0]["content"] == "hi"
    finally:
        env.close()
    assert contacts.seen == []
