"""The MCP client's transports, bounded in what a server may send.

The SDK reads a stdio server's output into one string until a newline comes (and splits
that string again at every chunk, so a long line costs time quadratic in its length on
the event loop every client of the process shares), and reads an HTTP answer that is
plain JSON whole: a server that writes without end (one line that never ends, a body
that never ends) grows the env's memory until its process dies. So:

- `bounded_stdio` runs a stdio server as the SDK does (its own session, so the whole
  process group can be stopped; the SDK's inherited environment) and reads its output
  as bytes, split at newlines in linear time; a line longer than ``max_message_bytes``
  ends the session and stops the server;
- `capped_http_client` is the SDK's HTTP client (its timeouts) whose answers to POSTs
  (each the answer to one request) stop at ``max_message_bytes``: the SDK reports that
  request as failed ("Failed to parse JSON response"), the session goes on. The server's
  own stream (GET) is left to the SDK, which bounds each of its events.

Either calls ``on_fault`` with a sentence saying what the server did, so the client
reports that rather than a closed connection. Time is bounded elsewhere: every request
waits at most ``call_timeout_s`` (client.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import IO, Any

import anyio
import anyio.abc
import httpx2
from mcp import StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

__all__ = ["MessageTooLarge", "bounded_stdio", "capped_http", "capped_http_client"]

Fault = Callable[[str], None]
_EXIT_WAIT_S = 2.0
"""How long a stdio server has to exit once its stdin is closed, and again after SIGTERM."""


@asynccontextmanager
async def bounded_stdio(
    params: StdioServerParameters, errlog: IO[str], max_message_bytes: int, on_fault: Fault
) -> AsyncIterator[tuple[Any, Any]]:
    """The stdio server ``params`` names, as the SDK's ``(read, write)`` streams."""
    process = await anyio.open_process(
        [params.command, *params.args],
        env=get_default_environment() | (params.env or {}),
        stderr=errlog,
        cwd=params.cwd,
        start_new_session=True,  # its own process group: stopping it stops what it started
    )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    pending = bytearray()  # the start of a line whose newline has not come yet

    async def deliver(chunk: bytes) -> bool:
        """Send on each line ``chunk`` completes; False for one past ``max_message_bytes``."""
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if len(pending) + end - start > max_message_bytes:
                return False
            line = bytes(pending) + chunk[start:end]
            pending.clear()
            start = end + 1
            if line.strip():
                await read_writer.send(_parsed(line))
        pending.extend(chunk[start:])
        return len(pending) <= max_message_bytes

    async def read() -> None:
        assert process.stdout is not None  # opened with pipes
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            async with read_writer:
                async for chunk in process.stdout:
                    if not await deliver(chunk):
                        on_fault(f"the MCP server sent a message over {max_message_bytes} bytes (max_message_bytes)")
                        _signal_group(process, signal.SIGKILL)
                        return  # the session sees its stream end: what waits on it fails now

    async def write() -> None:
        assert process.stdin is not None  # opened with pipes
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the server stopped reading: the session ends rather than wait

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()
            tasks.cancel_scope.cancel()


def _parsed(line: bytes) -> SessionMessage | Exception:
    """One line as a JSON-RPC message, or the error that says why it is not one (the
    session hands it to the client's message handler)."""
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as e:
        return e


async def _stop(process: anyio.abc.Process) -> None:
    """Close the server's stdin (MCP's way to ask it to exit), then SIGTERM, then SIGKILL
    its process group, each after `_EXIT_WAIT_S`."""
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with anyio.move_on_after(_EXIT_WAIT_S):
            while process.returncode is None:
                await anyio.sleep(0.02)
        if process.returncode is not None:
            break
        _signal_group(process, sig)
    _signal_group(process, signal.SIGKILL)  # what it started and left behind
    with anyio.move_on_after(_EXIT_WAIT_S):
        await process.wait()
    if process.stdout is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdout.aclose()


def _signal_group(process: anyio.abc.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


# -- HTTP ---------------------------------------------------------------------------


_CONNECT_TIMEOUT_S = 30.0
_READ_TIMEOUT_S = 300.0
"""The SDK's own defaults (`mcp.shared._httpx_utils`): a read may wait long on a stream."""


class MessageTooLarge(httpx2.StreamError):
    """An answer past ``max_message_bytes``. A `StreamError`, which the SDK turns into the
    failure of that one request."""


@asynccontextmanager
async def capped_http(url: str, max_message_bytes: int, on_fault: Fault) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's streamable HTTP transport to ``url``, over `capped_http_client`."""
    async with (
        capped_http_client(max_message_bytes, on_fault) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams


def capped_http_client(max_message_bytes: int, on_fault: Fault) -> httpx2.AsyncClient:
    """The SDK's HTTP client, its answers to POSTs cut at ``max_message_bytes``."""
    transport = _CappedTransport(httpx2.AsyncHTTPTransport(), max_message_bytes, on_fault)
    timeout = httpx2.Timeout(_CONNECT_TIMEOUT_S, read=_READ_TIMEOUT_S)
    return httpx2.AsyncClient(transport=transport, timeout=timeout)


class _CappedTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int, on_fault: Fault) -> None:
        self._inner, self._limit, self._on_fault = inner, limit, on_fault

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if request.method != "POST":
            return response
        assert isinstance(response.stream, httpx2.AsyncByteStream)  # an async transport's
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_CappedStream(response.stream, self._limit, self._on_fault),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, on_fault: Fault) -> None:
        self._inner, self._limit, self._on_fault = inner, limit, on_fault

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > self._limit:
                message = f"the MCP server sent an answer over {self._limit} bytes (max_message_bytes)"
                self._on_fault(message)
                raise MessageTooLarge(message)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
