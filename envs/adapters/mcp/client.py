"""`MCPClient`: a live session with one MCP server, usable from any thread.

The official SDK is async (anyio) and its sessions are async context managers:
they must be entered and left by one task. So the process has one driver thread
running an asyncio loop (made on first use, stopped at exit); each `MCPClient`
keeps a task on it that holds ``async with mcp.Client(...)`` open until `close`,
and the sync methods submit requests to that loop and wait with a timeout. Any
thread may call any client, as the rollout engine's step pool does.

Servers outlive their envs a little: `release` keeps a live client for `LINGER_S`
and `acquire` hands it to the next env with the same `ServerConfig`, so a loop
of make/close (the rollout engine's, every training step) does not start a server
per env; a client is held by one env at a time, never shared.

What is whose fault. The server process dying, a transport error, a request past
``call_timeout_s`` (whatever the server does meanwhile: nothing, a byte at a time),
a message past ``max_message_bytes`` (transport.py), a server that never finishes the
handshake or answers with what is not JSON-RPC: `InfraError`, and the client is marked
`broken` (the env restarts it at the next reset). A request that timed out also ends
its session at once, so nothing goes on reading from that server. A tool result with
``isError`` is data (`ToolResult.is_error`). A JSON-RPC error answer (the server
refused the request: unknown tool, bad params, a crash inside one handler) and any
other exception of the SDK on one request are `ToolError`: one request failed, the
session goes on.

Left out: server-to-client requests (sampling, elicitation, roots: the SDK's
defaults refuse them), notifications, pagination past the first tools page.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import IO, Any, TypeVar

try:
    import mcp_types
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import get_default_environment
    from mcp.shared.exceptions import MCPError
except ModuleNotFoundError as e:  # pragma: no cover - the extra is missing
    message = f"agentenv.envs.adapters.mcp needs the MCP SDK: pip install 'agentenv[mcp]' ({e})"
    raise ModuleNotFoundError(message, name=e.name) from e

from pydantic import ValidationError

from agentenv.core.errors import InfraError, ToolError
from agentenv.envs.adapters.mcp.config import ServerConfig
from agentenv.envs.adapters.mcp.transport import bounded_stdio, capped_http

__all__ = ["LINGER_S", "MCPClient", "ToolResult", "acquire", "release", "shutdown"]

T = TypeVar("T")
logger = logging.getLogger("agentenv.envs.adapters.mcp")

_CLOSE_TIMEOUT_S = 10.0
_STDERR_TAIL = 600


_SDK_TRANSPORT_ERRORS: tuple[tuple[int, str], ...] = (
    (mcp_types.CONNECTION_CLOSED, "SSE stream "),
    (mcp_types.PARSE_ERROR, "Failed to parse JSON response"),
    (mcp_types.INVALID_REQUEST, "Unexpected content type"),
    (mcp_types.INVALID_REQUEST, "Session terminated"),
    (mcp_types.INVALID_REQUEST, "server answered a request with 202 Accepted"),
    (mcp_types.INVALID_REQUEST, "Redirect to "),
)
"""What the SDK's HTTP transport answers in the server's stead (code, start of the
message) when the server's answer is not JSON-RPC, not of a known type, cut short, or
lost: the server failed, not the request."""


def _transport_failed(error: MCPError) -> bool:
    """Whether ``error`` is the SDK's own word that the connection closed, a request timed
    out or the server's answer could not be read (`_SDK_TRANSPORT_ERRORS`). JSON-RPC leaves
    -32000 to -32099 to servers for their own errors, so a live server answering "no such
    key" with -32000 is a tool error, never infra: the code alone cannot say, the SDK's
    message with it does."""
    if error.code == mcp_types.CONNECTION_CLOSED and error.message == "Connection closed":
        return True
    if error.code == mcp_types.REQUEST_TIMEOUT:
        return error.message.startswith("Request ") and error.message.endswith(" timed out")
    return any(error.code == code and error.message.startswith(start) for code, start in _SDK_TRANSPORT_ERRORS)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool's answer: its text blocks joined, its structured content, and whether it is an error."""

    text: str
    structured: Any
    is_error: bool


class _Driver:
    """The event loop on its own daemon thread that every client of the process uses."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agentenv-mcp", daemon=True)
        self._thread.start()

    def call(self, work: Callable[[], Awaitable[T]], timeout_s: float) -> T:
        """Run ``work()`` on the loop; `TimeoutError` (after cancelling it) past ``timeout_s``."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("MCPClient called from the driver's own thread would wait for itself")
        future = asyncio.run_coroutine_threadsafe(_run(work), self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError from None

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(_CLOSE_TIMEOUT_S)
        if not self._thread.is_alive():
            self.loop.close()


async def _run(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


_lock = threading.Lock()
_driver: _Driver | None = None
_clients: weakref.WeakSet[MCPClient] = weakref.WeakSet()


LINGER_S = 30.0
"""How long a released, live client waits for the next env before its server is stopped."""
_idle: dict[str, list[tuple[MCPClient, threading.Timer]]] = {}


def acquire(config: ServerConfig) -> MCPClient:
    """A client for ``config``: an idle one another env released (its server still running),
    or a new one (not started). Whoever acquires it holds it alone until `release`."""
    key = config.model_dump_json()
    while True:
        with _lock:
            clients = _idle.get(key)
            if not clients:
                return MCPClient(config)
            client, timer = clients.pop()
            if not clients:
                del _idle[key]
        timer.cancel()
        if client.live:
            return client
        client.close()


def release(client: MCPClient) -> None:
    """Hand ``client`` back: a live one waits `LINGER_S` for the next `acquire`, others are closed.

    The rollout engine closes its envs after every call (every training step); this keeps
    the next step's envs from starting their servers again."""
    if not client.live:
        client.close()
        return
    timer = threading.Timer(LINGER_S, _expire, args=(client,))
    timer.daemon = True
    with _lock:
        _idle.setdefault(client.config.model_dump_json(), []).append((client, timer))
    timer.start()


def _expire(client: MCPClient) -> None:
    with _lock:
        for key, clients in list(_idle.items()):
            kept = [(c, t) for c, t in clients if c is not client]
            if len(kept) != len(clients):
                if kept:
                    _idle[key] = kept
                else:
                    del _idle[key]
                break
        else:
            return  # acquired meanwhile
    client.close()


def _the_driver() -> _Driver:
    global _driver
    with _lock:
        if _driver is None:
            _driver = _Driver()
            atexit.register(shutdown)
        return _driver


def shutdown() -> None:
    """Stop every client's server, the idle ones too, and the driver thread (atexit; tests).
    A client used afterwards is not live, so its env starts the server again at its next reset."""
    global _driver
    with _lock:
        idle = [client for clients in _idle.values() for client, _ in clients]
        timers = [timer for clients in _idle.values() for _, timer in clients]
        _idle.clear()
    for timer in timers:
        timer.cancel()
    for client in idle:
        client.close()
    for client in list(_clients):
        client._teardown()
    with _lock:
        current, _driver = _driver, None
    if current is not None:
        current.stop()


class MCPClient:
    """A session with one MCP server; `start` it, call its tools, `close` it.

    For an ``http`` server with a command, the client owns that process (started by
    `start`, stopped by `close`); a ``stdio`` server's process is the SDK's, owned
    through the session. `restart` does both anew.
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.tools: list[mcp_types.Tool] = []
        """The server's tools, as listed at the last start."""
        self.broken = False
        """A request failed for infrastructure reasons: `restart` before trusting it again."""
        self.starts = 0
        """How many times the server was started (a restart counts)."""
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[str] | None = None
        self._closed = False
        self._fault: str | None = None  # what the transport saw the server do wrong (and cut it off for)
        self._garbage: str | None = None  # the last thing the server sent that was not JSON-RPC
        _clients.add(self)

    # -- lifecycle -------------------------------------------------------------------

    @property
    def live(self) -> bool:
        """Started, not broken, and (for an owned HTTP server) its process still running."""
        if self._client is None or self.broken or self._holder is None or self._holder.done():
            return False
        return self._process is None or self._process.poll() is None

    def start(self) -> None:
        """Start the server (when the config owns one), connect, and list its tools."""
        if self._closed:
            raise RuntimeError("the MCPClient is closed")
        self._teardown()
        if self._stderr is not None:
            self._stderr.close()
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        self._fault = self._garbage = None
        deadline = time.monotonic() + self.config.start_timeout_s
        try:
            target = self._target(deadline)
            _the_driver().call(lambda: self._open(target), self.config.start_timeout_s + _CLOSE_TIMEOUT_S)
        except TimeoutError:
            self._teardown()
            raise InfraError(f"the MCP server {self.config.describe()!r} did not start in time{self._tail()}") from None
        except InfraError as e:
            message = f"{e}{self._tail()}"
            self._teardown()
            raise InfraError(message) from None
        except BaseException:
            self._teardown()
            raise
        self.broken = False
        self.starts += 1

    def restart(self) -> None:
        self.start()

    def close(self) -> None:
        """End the session and stop the server; the client cannot be started again."""
        self._closed = True
        self._teardown()

    # -- requests --------------------------------------------------------------------

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        """Call a tool. `InfraError` when the server or the transport fails (see the module
        docstring), `ToolError` when the server refuses the request; an ``isError`` result
        comes back as data."""

        async def work(client: Client) -> ToolResult:
            result = await client.call_tool(name, arguments or {})
            return _tool_result(result)

        return self._request(work, f"tool {name!r}")

    def read_resource(self, uri: str) -> str:
        """The text of a resource (its text contents joined; binary ones named, not decoded)."""

        async def work(client: Client) -> str:
            result = await client.read_resource(uri)
            return "\n".join(_resource_text(c) for c in result.contents)

        return self._request(work, f"resource {uri!r}")

    def list_tools(self) -> list[mcp_types.Tool]:
        """Ask the server for its tools now (`tools` holds the list of the last start)."""

        async def work(client: Client) -> list[mcp_types.Tool]:
            return list((await client.list_tools()).tools)

        return self._request(work, "tools/list")

    # -- internals -------------------------------------------------------------------

    def _request(self, work: Callable[[Client], Awaitable[T]], what: str) -> T:
        client = self._client
        if client is None or not self.live:
            self.broken = True
            raise InfraError(f"the MCP server {self.config.describe()!r} is not running{self._exit_note()}")
        try:
            return _the_driver().call(lambda: work(client), self.config.call_timeout_s)
        except Exception as e:  # noqa: BLE001 - `_failure` sorts it into infra or a tool error
            raise self._failure(e, what) from None

    def _failure(self, error: Exception, what: str) -> Exception:
        """What a failed request raises: `InfraError` for the server's or the transport's
        fault (see the module docstring), `ToolError` for a refusal of this request."""
        if isinstance(error, TimeoutError):
            self._end_session()
            said = self._fault or (f"it wrote what is not MCP: {self._garbage}" if self._garbage else None)
            note = f" ({said})" if said else ""
            return self._broke(f"the MCP server did not answer {what} within {self.config.call_timeout_s:g} s{note}")
        if self._fault is not None:  # the transport cut the server off (a message past the limit)
            return self._broke(f"{self._fault}, on {what}")
        if isinstance(error, MCPError):
            if _transport_failed(error):
                return self._broke(f"the MCP server's connection failed on {what}: {error.message}{self._exit_note()}")
            return ToolError(f"the MCP server refused {what}: {error.message}")
        if isinstance(error, OSError | EOFError):
            return self._broke(f"the MCP server's transport failed on {what}: {type(error).__name__}: {error}")
        if type(error).__module__.startswith("anyio") or not self.live:  # a closed or broken stream
            return self._broke(f"the MCP server's connection failed on {what}: {type(error).__name__}")
        # An SDK failure on this one answer (a result it cannot parse or validate): the
        # request failed, the session did not.
        logger.warning("the MCP client failed on %s", what, exc_info=error)
        return ToolError(f"the MCP client failed on {what}: {type(error).__name__}: {str(error)[:300]}")

    def _broke(self, message: str) -> InfraError:
        self.broken = True
        return InfraError(message)

    def _on_fault(self, message: str) -> None:
        """The transport's report of what the server did wrong (called on the driver's loop)."""
        self._fault = message
        self.broken = True

    def _end_session(self) -> None:
        """Stop the session now, without waiting (a request on it timed out): the server may
        still be sending, and nothing should go on reading it. `start` cleans up the rest."""
        stop, driver = self._stop, _driver
        self.broken = True
        if stop is not None and driver is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed at exit
                driver.loop.call_soon_threadsafe(stop.set)

    def _target(self, deadline: float) -> Any:
        """What `mcp.Client` connects to; for an owned HTTP server, the process is started here."""
        config = self.config
        if config.transport == "stdio":
            assert config.command is not None  # the config's validator
            params = StdioServerParameters(
                command=config.command[0], args=config.command[1:], env=config.env, cwd=config.cwd
            )
            assert self._stderr is not None  # `start` opened it
            return bounded_stdio(params, self._stderr, config.max_message_bytes, self._on_fault)
        assert config.url is not None
        if config.command is None:
            return capped_http(config.url, config.max_message_bytes, self._on_fault)
        port = _free_port()
        argv = [part.replace("{port}", str(port)) for part in config.command]
        try:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._stderr,
                stderr=self._stderr,
                env={**_base_env(), **(config.env or {})},
                cwd=config.cwd,
                start_new_session=True,
            )
        except OSError as e:
            raise InfraError(f"the MCP server {config.describe()!r} could not be started: {e}") from None
        _wait_for_port(self._process, port, deadline, config.describe())
        return capped_http(config.url.replace("{port}", str(port)), config.max_message_bytes, self._on_fault)

    async def _open(self, target: Any) -> None:
        """Start the holder task and wait until its session is up (or failed)."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._holder = holder = asyncio.create_task(self._hold(target, ready, self._stop))
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.config.start_timeout_s)
        except BaseException as e:
            ready.cancel()  # the holder reports nothing more
            holder.cancel()  # the SDK's shutdown (shielded, bounded) stops a stdio server
            await asyncio.wait({holder}, timeout=_CLOSE_TIMEOUT_S)
            self._holder = None
            if isinstance(e, asyncio.TimeoutError):
                raise InfraError(
                    f"the MCP server {self.config.describe()!r} did not finish the MCP handshake "
                    f"within {self.config.start_timeout_s:g} s"
                ) from None
            raise

    async def _hold(self, target: Any, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        """Keep the session open until `stop` is set; report the start on ``ready``."""

        async def on_message(message: Any) -> None:
            if not isinstance(message, Exception):
                return
            said = _not_mcp(message)  # a line that is not JSON-RPC
            if not ready.done():
                ready.set_exception(InfraError(f"the MCP server {self.config.describe()!r} does not speak MCP: {said}"))
            else:  # noted, not fatal: a server that printed one stray line may still answer
                self._garbage = said

        client: Client | None = None
        try:
            async with Client(target, cache=None, message_handler=on_message) as client:
                tools = (await client.list_tools()).tools
                if ready.done():  # garbage arrived during the handshake
                    return
                self.tools = list(tools)
                self._client = client
                ready.set_result(None)
                await stop.wait()
        except BaseException as e:
            if not ready.done():
                ready.set_exception(_start_error(self.config, e))
            if not isinstance(e, Exception):
                raise
        finally:
            if client is not None and self._client is client:  # not a newer session's
                self._client = None

    def _teardown(self) -> None:
        """Stop the holder (which stops a stdio server) and an owned HTTP server process."""
        holder, stop = self._holder, self._stop
        self._holder = self._stop = None
        self._client = None
        if holder is not None and stop is not None and _driver is not None:

            async def finish() -> None:
                stop.set()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(holder, _CLOSE_TIMEOUT_S)

            with contextlib.suppress(Exception):
                _driver.call(finish, 2 * _CLOSE_TIMEOUT_S)
        process, self._process = self._process, None
        if process is not None:
            _stop_process(process)
        if self._stderr is not None and self._closed:
            self._stderr.close()
            self._stderr = None

    def _tail(self) -> str:
        """The end of the server's stderr, for start errors."""
        if self._stderr is None or self._stderr.closed:
            return ""
        try:
            self._stderr.flush()
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - 4 * _STDERR_TAIL))
            text = self._stderr.read().strip()[-_STDERR_TAIL:]
        except (OSError, ValueError):
            return ""
        return f"; its stderr ends with: {text}" if text else ""

    def _exit_note(self) -> str:
        if self._process is not None and self._process.poll() is not None:
            return f" (the server process exited with code {self._process.returncode})"
        return ""


def _start_error(config: ServerConfig, error: BaseException) -> InfraError:
    if isinstance(error, InfraError):
        return error
    while isinstance(error, BaseExceptionGroup):  # anyio's task groups wrap what failed inside
        error = error.exceptions[0]
    text = str(error)[:300] or type(error).__name__
    if isinstance(error, FileNotFoundError | PermissionError):
        return InfraError(f"the MCP server {config.describe()!r} could not be started: {text}")
    if isinstance(error, MCPError) and error.code == mcp_types.CONNECTION_CLOSED:
        return InfraError(f"the MCP server {config.describe()!r} closed the connection while starting (it exited?)")
    return InfraError(f"the MCP server {config.describe()!r} failed to start: {type(error).__name__}: {text}")


def _not_mcp(error: Exception) -> str:
    """What the server sent instead of JSON-RPC, shortly."""
    if isinstance(error, ValidationError):
        errors = error.errors()
        said = errors[0].get("input") if errors else None
        if isinstance(said, bytes):
            said = said[:400].decode("utf-8", "replace")
        if isinstance(said, str):
            return f"it wrote {said[:100]!r}, which is not a JSON-RPC message"
    return f"{type(error).__name__}: {str(error)[:200]}"


def _tool_result(result: Any) -> ToolResult:
    if not isinstance(result, mcp_types.CallToolResult):
        raise TypeError(f"expected a CallToolResult, got {type(result).__name__}")
    parts = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.EmbeddedResource):
            parts.append(_resource_text(block.resource))
        else:
            parts.append(f"[{block.type} content: {getattr(block, 'mime_type', '') or 'not shown'}]")
    return ToolResult("\n".join(parts), result.structured_content, bool(result.is_error))


def _resource_text(contents: Any) -> str:
    if isinstance(contents, mcp_types.TextResourceContents):
        return contents.text
    return f"[binary resource {contents.uri}: {contents.mime_type or 'unknown type'}]"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(process: subprocess.Popen[bytes], port: int, deadline: float, name: str) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise InfraError(f"the MCP server {name!r} exited with code {process.returncode} while starting")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise InfraError(f"the MCP server {name!r} did not listen on port {port} in time")


def _stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _base_env() -> dict[str, str]:
    """What an HTTP server process inherits: what the SDK gives a stdio one (PATH, HOME...), no secrets of ours."""
    return get_default_environment()
