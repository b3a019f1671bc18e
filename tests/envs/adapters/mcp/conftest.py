"""Fixtures of the MCP adapter's tests: the test server's configs, one shared env, and a
check that no server process outlives the tests of a module."""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from agentenv.envs.adapters.mcp import MCPEnv, ServerConfig, shutdown

KV_SERVER = Path(__file__).with_name("kv_server.py")
SERVER_SCRIPTS = ("kv_server.py", "notes_server.py", "hostile_server.py")


def kv_stdio(**kwargs: object) -> ServerConfig:
    return ServerConfig(command=[sys.executable, str(KV_SERVER)], **kwargs)  # type: ignore[arg-type]


def kv_http(**kwargs: object) -> ServerConfig:
    return ServerConfig(
        transport="http",
        command=[sys.executable, str(KV_SERVER), "--http", "--port", "{port}"],
        url="http://127.0.0.1:{port}/mcp",
        **kwargs,  # type: ignore[arg-type]
    )


class KVEnv(MCPEnv):
    """The test server's tools; each episode starts from an empty store."""

    isolation = "reset_tool"
    reset_tool = "wipe"
    hidden_tools = frozenset({"pid", "served"})

    def verify(self, task: object) -> float:
        return 0.0


def server_processes() -> list[int]:
    """Pids of live test-server processes that this process started (its children)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and state != "Z" and any(s in cmdline for s in SERVER_SCRIPTS):
            found.append(int(entry))
    return found


@pytest.fixture(scope="module", autouse=True)
def no_server_left() -> Iterator[None]:
    yield
    shutdown()
    assert server_processes() == [], "an MCP server process outlived the tests"


@pytest.fixture(scope="module")
def kv_env() -> Iterator[KVEnv]:
    """One env over stdio for the module (a server start is the slow part); reset before use."""
    env = KVEnv(server=kv_stdio(call_timeout_s=3.0))
    yield env
    env.close()


class Contacts:
    """A local HTTP server that records every connection made to it; ``answer`` says
    whether it answers (with a JSON schema) or holds each connection without a word."""

    def __init__(self, *, answer: bool) -> None:
        self.seen: list[str] = []
        self.answer = answer
        self._held: list[socket.socket] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def url(self, path: str = "/schema.json") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.seen.append(conn.recv(4096).decode(errors="replace").split("\r\n")[0])
            if self.answer:
                body = b'{"type": "string"}'
                head = f"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
                conn.sendall(head.encode() + body)
                conn.close()
            else:
                self._held.append(conn)

    def close(self) -> None:
        self._server.close()
        for conn in self._held:
            conn.close()


@pytest.fixture(params=[True, False], ids=["recording", "never-answers"])
def contacts(request: pytest.FixtureRequest) -> Iterator[Contacts]:
    server = Contacts(answer=request.param)
    yield server
    server.close()
