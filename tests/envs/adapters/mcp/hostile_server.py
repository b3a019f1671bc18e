"""An MCP server that speaks the protocol by hand, so that it can break it on purpose.

    python hostile_server.py MODE [--schema JSON] [--http --port N]

It answers the handshake and lists two tools: ``echo`` (well behaved) and ``bad``, whose
input schema is ``--schema`` (default: one string argument ``text``). A call to ``bad``
is answered according to MODE:

- ``ok``: like ``echo``;
- ``silent``: never answered;
- ``trickle``: a valid answer, one byte every 0.2 s;
- ``huge``: an answer that never ends (text without end, no newline);
- ``garbage``: a line (or an HTTP body) that is not JSON-RPC, then nothing more.

Standard library only, over stdio (one JSON-RPC message per line) or streamable HTTP
(``--http``: plain JSON answers, HTTP/1.0 so that a body may end when the connection does).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TEXT_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
TRICKLE_S = 0.2


def answer(message: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any] | None:
    """The well-behaved answer to ``message`` (None for a notification)."""
    if "id" not in message or "method" not in message:
        return None
    method, params = message["method"], message.get("params") or {}
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
    if method == "initialize":
        reply["result"] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile", "version": "0"},
        }
    elif method == "tools/list":
        reply["result"] = {
            "tools": [
                {"name": "echo", "description": "Echo the text.", "inputSchema": TEXT_SCHEMA},
                {"name": "bad", "description": "A tool that misbehaves.", "inputSchema": schema},
            ]
        }
    elif method == "tools/call":
        text = str((params.get("arguments") or {}).get("text", ""))
        reply["result"] = {"content": [{"type": "text", "text": text}], "isError": False}
    elif method == "ping":
        reply["result"] = {}
    else:
        reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
    return reply


def is_bad_call(message: dict[str, Any]) -> bool:
    return message.get("method") == "tools/call" and (message.get("params") or {}).get("name") == "bad"


def misbehave(mode: str, reply: dict[str, Any], write: Callable[[bytes], None], stop: threading.Event) -> None:
    """Send ``reply`` to a call of ``bad`` the way ``mode`` says."""
    data = (json.dumps(reply) + "\n").encode()
    if mode == "ok":
        write(data)
    elif mode == "silent":
        stop.wait()
    elif mode == "trickle":
        for i in range(len(data)):
            if stop.wait(TRICKLE_S):
                return
            write(data[i : i + 1])
    elif mode == "huge":
        write(b'{"jsonrpc": "2.0", "id": ' + json.dumps(reply["id"]).encode() + b', "result": {"content": [')
        chunk = b'{"type": "text", "text": "' + b"x" * 65536 + b'"}, '
        while not stop.is_set():
            write(chunk)
    elif mode == "garbage":
        write(b"<html>this is not JSON-RPC</html>\n")
    else:
        raise SystemExit(f"unknown mode {mode!r}")


def serve_stdio(mode: str, schema: dict[str, Any]) -> None:
    out = sys.stdout.buffer
    stop = threading.Event()

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        reply = answer(message, schema)
        if reply is None:
            continue
        if is_bad_call(message):
            misbehave(mode, reply, write, stop)
        else:
            write((json.dumps(reply) + "\n").encode())


def serve_http(mode: str, schema: dict[str, Any], port: int) -> None:
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            message = json.loads(self.rfile.read(length) or b"{}")
            reply = answer(message, schema) if isinstance(message, dict) else None
            if reply is None:
                self.send_response(202)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            if is_bad_call(message):
                try:
                    misbehave(mode, reply, self.wfile.write, stop)
                except OSError:  # the client hung up
                    pass
            else:
                self.wfile.write(json.dumps(reply).encode())

        def do_GET(self) -> None:
            self.send_response(405)  # no stream of the server's own messages
            self.end_headers()

        def do_DELETE(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    httpd.daemon_threads = True
    try:
        httpd.serve_forever()
    finally:
        stop.set()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["ok", "silent", "trickle", "huge", "garbage"])
    parser.add_argument("--schema", default=json.dumps(TEXT_SCHEMA))
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.http:
        serve_http(args.mode, json.loads(args.schema), args.port)
    else:
        serve_stdio(args.mode, json.loads(args.schema))
