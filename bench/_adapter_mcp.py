"""Per-step overhead of the MCP adapter: `MCPEnv.step` vs `ClientSession.call_tool` on the same server.

Both sides talk to the notes server (envs/adapters/mcp/notes_server.py) over the same
transport, each to its own server process started the same way, in this process:
"direct" is the SDK's ``ClientSession.call_tool("read_note", ...)`` awaited on an
asyncio loop (its own thread), timed on that loop; "adapter" is ``env.step`` of the same call as
text (parse, schema check, the call through the env's driver thread, rendering,
the transition record). Batches of 20 alternate between the two; medians of
per-step times, reset excluded. Cases:
``stdio`` and ``http`` (streamable HTTP, the env starting the server).

    python bench/_adapter_mcp.py            # ~20 s; --steps N
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from agentenv import tool_call_text
from agentenv.envs.adapters.mcp import MCPEnv, ServerConfig, shutdown
from agentenv.envs.adapters.mcp.client import _free_port, _stop_process, _wait_for_port
from agentenv.envs.adapters.mcp.notes import NOTES_SERVER

CALL = ("read_note", {"title": "a"})


def configs() -> dict[str, ServerConfig]:
    script = str(NOTES_SERVER)
    return {
        "stdio": ServerConfig(command=[sys.executable, script]),
        "http": ServerConfig(
            transport="http",
            command=[sys.executable, script, "--http", "--port", "{port}"],
            url="http://127.0.0.1:{port}/mcp",
        ),
    }


class _Direct:
    """The SDK alone: one ``ClientSession`` on an asyncio loop of its own thread, held open so
    that its batches can alternate with the env's (the machine's load then hits both alike).
    Each call is timed on the loop, around ``await session.call_tool(...)`` only."""

    def __init__(self, config: ServerConfig) -> None:
        assert config.command is not None
        self.process: subprocess.Popen[bytes] | None = None
        if config.transport == "stdio":
            params = StdioServerParameters(command=config.command[0], args=config.command[1:])
            target: Any = stdio_client(params)
        else:
            port = _free_port()
            argv = [a.replace("{port}", str(port)) for a in config.command]
            self.process = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
            _wait_for_port(self.process, port, time.monotonic() + 30, "notes")
            target = f"http://127.0.0.1:{port}/mcp"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.stop = asyncio.Event()
        self.session: Any = None
        opened = concurrent.futures.Future[None]()
        self.holder = asyncio.run_coroutine_threadsafe(self._hold(target, opened), self.loop)
        opened.result(60)

    async def _hold(self, target: Any, opened: concurrent.futures.Future[None]) -> None:
        async with Client(target, cache=None) as client:
            self.session = client.session
            await self.session.call_tool("add_note", {"title": "a", "body": "hello"})
            opened.set_result(None)
            await self.stop.wait()

    async def _batch(self, n: int) -> list[float]:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            await self.session.call_tool(*CALL)
            times.append(time.perf_counter() - start)
        return times

    def batch(self, n: int) -> list[float]:
        return asyncio.run_coroutine_threadsafe(self._batch(n), self.loop).result(60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.holder.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if self.process is not None:
            _stop_process(self.process)


def _env_batch(env: MCPEnv, n: int) -> list[float]:
    action = tool_call_text(CALL[0], **CALL[1])
    times = []
    for _ in range(n):
        start = time.perf_counter()
        obs, *_ = env.step(action)
        times.append(time.perf_counter() - start)
    assert obs[0]["content"] == "hello", obs
    return times


def case(config: ServerConfig, steps: int, batch: int = 20) -> tuple[float, float]:
    """Median µs per call: (direct, adapter), in alternating batches after a warm-up batch each."""
    direct = _Direct(config)
    env = MCPEnv(server=config, max_turns=steps + 2 * batch + 10)
    try:
        env.reset(seed=0)
        env.step(tool_call_text("add_note", title="a", body="hello"))
        direct.batch(batch), _env_batch(env, batch)  # warm-up
        direct_times: list[float] = []
        env_times: list[float] = []
        while len(env_times) < steps:
            direct_times += direct.batch(batch)
            env_times += _env_batch(env, batch)
    finally:
        env.close()
        direct.close()
    return statistics.median(direct_times) * 1e6, statistics.median(env_times) * 1e6


def measure(steps: int = 200) -> list[dict[str, Any]]:
    rows = []
    for name, config in configs().items():
        direct, adapter = case(config, steps)
        rows.append({"adapter": "mcp", "case": name, "direct_us": direct, "adapter_us": adapter})
    shutdown()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    print(f"{'adapter':<8} {'case':<6} {'direct_us':>10} {'adapter_us':>11} {'ratio':>6}")
    for row in measure(args.steps):
        ratio = row["adapter_us"] / row["direct_us"]
        print(
            f"{row['adapter']:<8} {row['case']:<6} {row['direct_us']:>10.0f} {row['adapter_us']:>11.0f} {ratio:>5.2f}x"
        )


if __name__ == "__main__":
    main()
