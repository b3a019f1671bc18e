"""What fails outside the policy's control is infra, with one clear message: a server
that will not start, speaks something else than MCP, dies or hangs mid-episode.
The next reset starts the server anew."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentenv import InfraError, tool_call_text
from agentenv.envs.adapters.mcp import MCPEnv, ServerConfig
from tests.envs.adapters.mcp.conftest import KVEnv, kv_stdio


def failing_reset(config: ServerConfig, *, tries: int = 1) -> str:
    env = MCPEnv(server=config)
    try:
        for _ in range(tries):  # each reset tries again, and fails the same way: the env is not wedged
            with pytest.raises(InfraError) as caught:
                env.reset(seed=0)
    finally:
        env.close()
    return str(caught.value)


def test_a_server_command_that_does_not_exist() -> None:
    message = failing_reset(ServerConfig(command=["/nonexistent/mcp-server"]), tries=2)
    assert "could not be started" in message and "/nonexistent/mcp-server" in message


def test_a_server_that_exits_at_once_names_its_stderr() -> None:
    code = "import sys; sys.stderr.write('missing API key\\n'); sys.exit(3)"
    message = failing_reset(ServerConfig(command=[sys.executable, "-c", code]))
    assert "closed the connection while starting" in message and "missing API key" in message


def test_a_server_that_prints_garbage_does_not_speak_mcp() -> None:
    code = "import time; print('Welcome to my server!', flush=True); time.sleep(60)"
    message = failing_reset(ServerConfig(command=[sys.executable, "-c", code], start_timeout_s=20))
    assert "does not speak MCP: it wrote 'Welcome to my server!'" in message


def test_a_silent_server_times_out_its_handshake() -> None:
    code = "import time; time.sleep(60)"
    message = failing_reset(ServerConfig(command=[sys.executable, "-c", code], start_timeout_s=1))
    assert "did not finish the MCP handshake within 1 s" in message


class _NotMCP(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = b"<html>hello</html>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_DELETE = do_POST

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def not_mcp_url() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _NotMCP)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    httpd.shutdown()
    httpd.server_close()


def test_an_http_url_that_is_not_mcp(not_mcp_url: str) -> None:
    message = failing_reset(ServerConfig(transport="http", url=not_mcp_url, start_timeout_s=10))
    assert "failed to start" in message and "text/html" in message


def test_an_http_url_where_nothing_listens() -> None:
    message = failing_reset(ServerConfig(transport="http", url="http://127.0.0.1:9/mcp", start_timeout_s=5))
    assert "failed to start" in message and "127.0.0.1:9" in message


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"transport": "stdio"}, "needs a command"),
        ({"transport": "http", "command": ["x"]}, "needs a url"),
        ({"transport": "http", "url": "ftp://x"}, "must start with http"),
        ({"command": ["x"], "timeout_s": 3}, "field 'timeout_s'"),
        ({"command": ["x"], "call_timeout_s": 0}, "greater than 0"),
    ],
)
def test_a_bad_server_config_is_one_clear_error(config: dict[str, object], expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        MCPEnv(server=config)


def test_a_server_killed_mid_episode_is_infra_and_the_next_reset_restarts_it() -> None:
    env = KVEnv(server=kv_stdio())
    try:
        env.reset(seed=0)
        os.kill(int(env.mcp.call_tool("pid").text), signal.SIGKILL)
        obs, _reward, terminated, truncated, info = env.step(tool_call_text("put", key="a", value="1"))
        assert truncated and not terminated and info["failure"] == "infra" and info["error_kind"] == "infra"
        assert "environment failed" in obs[0]["content"]
        starts = env.mcp.starts
        env.reset(seed=0)
        assert env.mcp.starts == starts + 1
        obs, *_, info = env.step(tool_call_text("put", key="a", value="1"))
        assert obs[0]["content"] == "ok"
    finally:
        env.close()


def test_a_server_killed_between_episodes_is_restarted_at_reset() -> None:
    env = KVEnv(server=kv_stdio())
    try:
        env.reset(seed=0)
        starts = env.mcp.starts
        os.kill(int(env.mcp.call_tool("pid").text), signal.SIGKILL)
        env.reset(seed=0)  # the reset tool finds the server gone, and starts it again
        obs, *_ = env.step(tool_call_text("echo", text="back"))
        assert obs[0]["content"] == "back" and env.mcp.starts == starts + 1
    finally:
        env.close()


def test_a_tool_that_hangs_is_infra_and_the_next_reset_restarts_the_server() -> None:
    env = KVEnv(server=kv_stdio(call_timeout_s=1.0))
    try:
        env.reset(seed=0)
        starts = env.mcp.starts
        obs, _, _, truncated, info = env.step(tool_call_text("nap", seconds=30))
        assert truncated and info["failure"] == "infra" and "within 1 s" in info["error"]
        env.reset(seed=0)
        assert env.mcp.starts == starts + 1
        obs, *_ = env.step(tool_call_text("echo", text="fresh"))
        assert obs[0]["content"] == "fresh"
    finally:
        env.close()


def test_over_http_the_env_starts_kills_and_restarts_its_server() -> None:
    from tests.envs.adapters.mcp.conftest import kv_http

    env = KVEnv(server=kv_http())
    try:
        env.reset(seed=0)
        starts = env.mcp.starts
        obs, *_, info = env.step(tool_call_text("put", key="k", value="v"))
        assert obs[0]["content"] == "ok"
        assert env.mcp.read_resource("kv://all") == '{"k": "v"}'
        process = env.mcp._process
        assert process is not None
        process.kill()
        process.wait()
        *_, truncated, info = env.step(tool_call_text("get", key="k"))
        assert truncated and info["failure"] == "infra"
        env.reset(seed=0)
        obs, *_ = env.step(tool_call_text("echo", text="again"))
        assert obs[0]["content"] == "again" and env.mcp.starts == starts + 1
    finally:
        env.close()
    assert process.poll() is not None


def test_a_server_at_a_given_url_is_used_and_never_restarted_by_the_env() -> None:
    import socket
    import subprocess
    import time

    from tests.envs.adapters.mcp.conftest import KV_SERVER

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([sys.executable, str(KV_SERVER), "--http", "--port", str(port)])
    env = KVEnv(server=ServerConfig(transport="http", url=f"http://127.0.0.1:{port}/mcp"))
    try:
        deadline = time.monotonic() + 30
        while True:  # the test's own server: wait until it listens
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        env.reset(seed=0)
        obs, *_ = env.step(tool_call_text("echo", text="remote"))
        assert obs[0]["content"] == "remote"
        process.kill()
        process.wait()
        *_, truncated, info = env.step(tool_call_text("echo", text="gone"))
        assert truncated and info["failure"] == "infra"
        with pytest.raises(InfraError, match="failed to start"):
            env.reset(seed=0)
    finally:
        env.close()
        if process.poll() is None:
            process.kill()
            process.wait()
