"""A scripted OpenAI-compatible chat completions server for tests.

A real HTTP server on 127.0.0.1 (stdlib `ThreadingHTTPServer`, one thread per
connection) whose reply to each request is a function of that request, so a test
says what the "model" answers, and which records every request it received and
how many were in flight at once. It speaks just enough of the protocol for
`OpenAIPolicy`: no streaming, no auth checks, no other endpoints.
"""

from __future__ import annotations

import json
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: Any
    """The parsed JSON body (None when the body was not JSON)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body["messages"]


@dataclass
class Reply:
    """What the server answers: a status, a body (JSON-encoded unless bytes) and headers."""

    body: Any = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    """Wait this long before answering (cut short when the server stops)."""
    drop: bool = False
    """Close the connection without answering (a server that died mid-request)."""
    drip_s: float = 0.0
    """Send the status line and headers one byte at a time, this long apart, then hang up
    (a server stuck in its reply: each byte comes within a read timeout, the reply never)."""


Script = Callable[[Request], Reply]


def chat_reply(
    content: str | None = "",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str = "stop",
    delay_s: float = 0.0,
) -> Reply:
    """A 200 chat completion with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return Reply(body, delay_s=delay_s)


def tool_call(name: str, arguments: dict[str, Any], id: str = "call_1") -> dict[str, Any]:
    """One structured tool call as the API returns it (arguments as a JSON string)."""
    return {"id": id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


class OpenAIServer:
    """Serves ``POST /v1/chat/completions`` with ``script(request)`` until `stop`."""

    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script or (lambda request: chat_reply("ok"))
        self.requests: list[Request] = []
        self.errors: list[str] = []
        """Tracebacks of scripts that raised (answered with HTTP 599)."""
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(self))
        self._httpd.daemon_threads = True
        # A short poll interval: shutdown() waits up to one interval, once per test.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.01,), name="openai-test-server", daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_port}/v1"

    def start(self) -> OpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers still in a delay
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _answer(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            reply = self.script(request)
            if reply.delay_s:
                self._stopping.wait(reply.delay_s)
        except Exception:  # noqa: BLE001 - reported to the test through `errors`
            self.errors.append(traceback.format_exc())
            reply = Reply({"error": {"message": "the test script raised"}}, status=599)
        finally:
            # Counted out before the reply is written, so a client that sends its
            # next request the moment it has this reply is never counted twice.
            with self._lock:
                self.in_flight -= 1
        return reply


def _handler_class(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
        # Headers and body go out in two writes; without this each reply waits
        # for the client's delayed ACK (~40 ms).
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            headers = {k.lower(): v for k, v in self.headers.items()}
            if self.path != "/v1/chat/completions":
                self._send(Reply({"error": {"message": f"no route {self.path}"}}, status=404))
                return
            self._send(server._answer(Request(self.path, headers, body)))

        def _send(self, reply: Reply) -> None:
            if reply.drop:
                self.close_connection = True
                return
            payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            if reply.drip_s:
                self._drip(reply, payload)
                return
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up (a timeout test)

        def _drip(self, reply: Reply, payload: bytes) -> None:
            lines = [f"HTTP/1.1 {reply.status} Reply", f"Content-Length: {len(payload)}"]
            lines += [f"{name}: {value}" for name, value in reply.headers.items()]
            head = ("\r\n".join(lines) + "\r\n\r\n").encode()
            try:
                for i in range(len(head)):
                    if server._stopping.wait(reply.drip_s):
                        return
                    self.wfile.write(head[i : i + 1])
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler
