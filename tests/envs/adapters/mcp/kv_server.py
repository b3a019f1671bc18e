"""The MCP server the MCP adapter's tests start: a key-value store with tools that misbehave on request.

    python kv_server.py            # stdio
    python kv_server.py --http --port N

Run as a script (it imports only the SDK), over stdio or streamable HTTP.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

server = MCPServer("kv", log_level="ERROR")
store: dict[str, str] = {}
calls: list[str] = []


@server.tool()
def put(key: str, value: str) -> str:
    """Store a value under a key."""
    calls.append("put")
    store[key] = value
    return "ok"


@server.tool()
def lookup(key: str) -> str:
    """The value under a key; a missing key is a JSON-RPC error of the server's own (-32000)."""
    calls.append("lookup")
    if key not in store:
        raise MCPError(code=-32000, message=f"no such key: {key}")
    return store[key]


@server.tool()
def get(key: str) -> str:
    """The value under a key."""
    calls.append("get")
    if key not in store:
        raise ToolError(f"no key {key!r}")
    return store[key]


@server.tool()
def echo(text: str) -> str:
    """Return the text as it came."""
    calls.append("echo")
    return text


@server.tool()
def double(n: int) -> int:
    """Twice n."""
    calls.append("double")
    return 2 * n


@server.tool()
def nap(seconds: float) -> str:
    """Sleep (a tool that hangs)."""
    calls.append("nap")
    time.sleep(seconds)
    return "awake"


@server.tool()
def boom() -> str:
    """Raise an unexpected exception inside the server."""
    calls.append("boom")
    raise RuntimeError("kaboom")


@server.tool()
def pid() -> int:
    """Test hook: the server's process id."""
    return os.getpid()


@server.tool()
def served() -> str:
    """Test hook: the tool calls served so far, as JSON."""
    return json.dumps(calls)


@server.tool()
def wipe() -> str:
    """Test hook: empty the store and the call log."""
    store.clear()
    calls.clear()
    return "wiped"


@server.resource("kv://all", mime_type="application/json")
def everything() -> str:
    """The whole store as JSON."""
    return json.dumps(store, sort_keys=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run("stdio")
