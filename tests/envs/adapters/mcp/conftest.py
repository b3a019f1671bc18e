"""Fixtures of the MCP adapter's tests: the test server's configs, one shared env, and a
check that no server process outlives the tests of a module."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from agentenv.envs.adapters.mcp import MCPEnv, ServerConfig, shutdown

KV_SERVER = Path(__file__).with_name("kv_server.py")
SERVER_SCRIPTS = ("kv_server.py", "notes_server.py")


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
