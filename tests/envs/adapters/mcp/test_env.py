"""MCPEnv over the test server (stdio): tools and schemas, what a call does, and the
policy's attacks on it (schema violations, hidden tools, hostile text)."""

from __future__ import annotations

import json

import pytest

from agentenv import ToolCall, tool_call_text
from tests.envs.adapters.mcp.conftest import KVEnv


def served(env: KVEnv) -> list[str]:
    return json.loads(env.mcp.call_tool("served").text)


def test_the_agent_sees_the_servers_tools_with_their_schemas(kv_env: KVEnv) -> None:
    obs, _ = kv_env.reset(seed=0)
    # Hidden and reset tools left out.
    assert set(kv_env.tools) == {"put", "get", "lookup", "echo", "double", "nap", "boom"}
    put = kv_env.tools["put"].schema["function"]
    assert put["description"] == "Store a value under a key."
    assert put["parameters"]["properties"]["key"] == {"type": "string"}
    assert put["parameters"]["required"] == ["key", "value"]
    assert '"name": "put"' in obs[0]["content"]


def test_a_call_reaches_the_server_and_its_answer_is_the_observation(kv_env: KVEnv) -> None:
    kv_env.reset(seed=0)
    obs, _reward, terminated, truncated, info = kv_env.step(tool_call_text("put", key="a", value="1"))
    assert obs[0]["content"] == "ok" and info["error"] is None and not (terminated or truncated)
    obs, *_ = kv_env.step(tool_call_text("get", key="a"))
    assert obs[0]["content"] == "1"
    assert json.loads(kv_env.mcp.read_resource("kv://all")) == {"a": "1"}
    assert kv_env.state.calls == 2


def test_each_episode_starts_from_the_reset_tools_state(kv_env: KVEnv) -> None:
    kv_env.reset(seed=0)
    kv_env.step(tool_call_text("put", key="a", value="1"))
    kv_env.reset(seed=0)
    assert json.loads(kv_env.mcp.read_resource("kv://all")) == {}


def test_an_is_error_result_is_a_tool_error_not_infra(kv_env: KVEnv) -> None:
    kv_env.reset(seed=0)
    obs, reward, _, truncated, info = kv_env.step(tool_call_text("get", key="missing"))
    assert info["error_kind"] == "tool" and "no key 'missing'" in obs[0]["content"]
    assert not truncated and info["failure"] is None and reward == 0.0
    assert kv_env.state.tool_errors == 1


def test_a_json_rpc_error_of_a_live_servers_own_is_a_tool_error_not_infra(kv_env: KVEnv) -> None:
    # -32000 is CONNECTION_CLOSED to the SDK, but JSON-RPC leaves -32000..-32099 to
    # servers: asking for a missing key ended the episode as infra and restarted the server.
    kv_env.reset(seed=0)
    starts = kv_env.mcp.starts
    obs, _, terminated, truncated, info = kv_env.step(tool_call_text("lookup", key="nope"))
    assert info["error_kind"] == "tool" and info["failure"] is None and not (terminated or truncated)
    assert "no such key: nope" in obs[0]["content"]
    kv_env.step(tool_call_text("put", key="k", value="v"))
    assert kv_env.step(tool_call_text("lookup", key="k"))[0][0]["content"] == "v"
    kv_env.reset(seed=0)
    assert kv_env.mcp.starts == starts  # the same server, never taken for broken


def test_a_tool_that_raises_inside_the_server_is_a_tool_error(kv_env: KVEnv) -> None:
    kv_env.reset(seed=0)
    _obs, _, _, truncated, info = kv_env.step(tool_call_text("boom"))
    assert info["error_kind"] == "tool" and not truncated


def test_arguments_the_schema_refuses_are_a_format_error_and_never_sent(kv_env: KVEnv) -> None:
    kv_env.reset(seed=0)
    for action, expected in [
        (tool_call_text("put", key="a"), "missing argument 'value'"),
        (tool_call_text("put", key=1, value="x"), "argument 'key': 1 is not of type 'string'"),
        (tool_call_text("double", n="two"), "argument 'n'"),
        (tool_call_text("echo", text="x", extra=1), "unexpected argument 'extra'"),
    ]:
        kv_env.reset(seed=0)
        obs, reward, *_, info = kv_env.step(action)
        assert info["error_kind"] == "format" and reward < 0
        assert expected in obs[0]["content"]
    assert served(kv_env) == []


def test_an_unknown_tool_gets_a_did_you_mean(kv_env: KVEnv) -> None:
    kv_env.reset(seed=0)
    obs, *_, info = kv_env.step(tool_call_text("puts", key="a", value="b"))
    assert info["error_kind"] == "format" and "did you mean 'put'" in obs[0]["content"].lower()


@pytest.mark.parametrize("name", ["wipe", "pid", "served"])
def test_hidden_tools_cannot_be_called_by_the_agent(kv_env: KVEnv, name: str) -> None:
    kv_env.reset(seed=0)
    kv_env.step(tool_call_text("put", key="a", value="1"))
    obs, *_, info = kv_env.step(tool_call_text(name))
    assert info["error_kind"] == "format" and "unknown tool" in obs[0]["content"]
    assert json.loads(kv_env.mcp.read_resource("kv://all")) == {"a": "1"}  # the store was not wiped


def test_hostile_text_never_raises_nor_reaches_infra(kv_env: KVEnv) -> None:
    deep: object = "x"
    for _ in range(200):
        deep = {"k": deep}
    attacks: list[object] = [
        "<tool_call>" + json.dumps({"name": "echo", "arguments": {"text": "x" * 1_000_000}}) + "</tool_call>",
        ToolCall("echo", {"text": "x" * 1_000_000}),  # a ToolCall has no action-length limit of its own
        ToolCall("echo", {"text": "a\udc80b"}),
        '<tool_call>{"name": "echo", "arguments": {"text": "a\\udc80b"}}</tool_call>',
        ToolCall("echo", {"text": deep}),
        '<tool_call>{"name": "double", "arguments": {"n": 1' + "0" * 5000 + "}}</tool_call>",
        ToolCall("double", {"n": 10**2000}),
        ToolCall("double", {"n": float("nan")}),
        ToolCall("nap", {"seconds": float("inf")}),
        ToolCall("put\x00", {"key": "a", "value": "b"}),
        ToolCall("wipe\n", {}),
        ToolCall("put", {"key\udc80": "a", "value": "b"}),
    ]
    for action in attacks:
        kv_env.reset(seed=0)
        obs, _reward, _, truncated, info = kv_env.step(action)  # type: ignore[arg-type]
        assert info["error_kind"] == "format", (repr(action)[:80], info)
        assert not truncated and obs
    assert served(kv_env) == []


def test_control_characters_go_to_the_server_and_back_intact(kv_env: KVEnv) -> None:
    kv_env.reset(seed=0)
    text = "bell\x07 nul\x00 esc\x1b[31m tab\t \u202e rtl \ufeff"
    obs, *_, info = kv_env.step(ToolCall("echo", {"text": text}))
    assert info["error"] is None and obs[0]["content"] == text


def test_a_long_answer_is_cut(kv_env: KVEnv) -> None:
    kv_env.reset(seed=0)
    obs, *_, info = kv_env.step(ToolCall("echo", {"text": "y" * 30_000}))
    assert info["error"] is None
    assert len(obs[0]["content"]) < 16_100 and "cut: the answer is 30000 characters" in obs[0]["content"]


def test_a_huge_but_valid_integer_round_trips(kv_env: KVEnv) -> None:
    kv_env.reset(seed=0)
    obs, *_, info = kv_env.step(ToolCall("double", {"n": 10**300}))
    assert info["error"] is None and obs[0]["content"] == str(2 * 10**300)


def test_snapshot_of_a_server_that_cannot_export_its_state_is_refused(kv_env: KVEnv) -> None:
    kv_env.reset(seed=0)
    with pytest.raises(NotImplementedError, match="cannot snapshot its MCP server"):
        kv_env.snapshot()


def test_a_library_failure_on_one_call_is_a_tool_error(kv_env: KVEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    kv_env.reset(seed=0)
    client = kv_env.mcp._client
    assert client is not None

    async def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("a bug in the SDK")

    monkeypatch.setattr(client, "call_tool", broken)
    obs, _, _, truncated, info = kv_env.step(tool_call_text("echo", text="hi"))
    assert info["error_kind"] == "tool" and "a bug in the SDK" in obs[0]["content"] and not truncated
    monkeypatch.undo()
    obs, *_, info = kv_env.step(tool_call_text("echo", text="hi"))
    assert obs[0]["content"] == "hi"  # the session went on


def test_isolation_restart_gives_each_episode_a_fresh_server() -> None:
    from agentenv.envs.adapters.mcp import MCPEnv
    from tests.envs.adapters.mcp.conftest import kv_stdio

    class FreshKV(MCPEnv):
        isolation = "restart"

    env = FreshKV(server=kv_stdio())
    try:
        env.reset(seed=0)
        starts = env.mcp.starts
        env.step(tool_call_text("put", key="a", value="1"))
        env.reset(seed=0)
        assert json.loads(env.mcp.read_resource("kv://all")) == {} and env.mcp.starts == starts + 1
    finally:
        env.close()


def test_an_env_used_after_shutdown_starts_its_server_again() -> None:
    from agentenv.envs.adapters.mcp import shutdown
    from tests.envs.adapters.mcp.conftest import kv_stdio

    env = KVEnv(server=kv_stdio())
    try:
        env.reset(seed=0)
        shutdown()
        env.reset(seed=0)
        obs, *_ = env.step(tool_call_text("echo", text="again"))
        assert obs[0]["content"] == "again"
    finally:
        env.close()


def test_a_closed_envs_server_is_taken_over_by_the_next_env() -> None:
    from tests.envs.adapters.mcp.conftest import kv_stdio

    first = KVEnv(server=kv_stdio())
    first.reset(seed=0)
    pid, starts = first.mcp.call_tool("pid").text, first.mcp.starts
    first.step(tool_call_text("put", key="a", value="1"))
    first.close()
    second = KVEnv(server=kv_stdio())
    try:
        second.reset(seed=0)
        assert second.mcp.call_tool("pid").text == pid and second.mcp.starts == starts  # no new server
        assert json.loads(second.mcp.read_resource("kv://all")) == {}  # and its episode starts clean
        assert "put" in second.tools
    finally:
        second.close()
