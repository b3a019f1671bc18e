"""`MCPEnv`: the tools of an MCP server as an env's tools, over stdio or streamable HTTP.

At the first reset the env starts its server (`ServerConfig`), lists its tools
and shows each to the agent with the server's JSON schema (schema.py); a call is
checked against that schema before it is sent, and the answer's text is the
observation. An ``isError`` answer is a tool error (the agent's, no penalty but
the failed call); a JSON-RPC refusal likewise. Tools named in ``hidden_tools``
(the server's admin tools: reset, export...) are never shown and cannot be
called by the agent: they are unknown tools to it. Tools in ``terminal_tools``
end the episode when they succeed.

One server per env. MCP servers keep their state in the process, so two episodes
on one server would see each other's writes; each env holds its own server (its
``MCPClient``), started at its first reset and kept for the next episodes. The
rollout engine makes one env per concurrent episode, so a worker runs as many
servers as it has live episodes. A closed env hands its live server back to a
process-wide pool (client.py, `release`) for a while, and the next env with the same
`ServerConfig` takes it over (episodes are kept apart by ``isolation`` as always), so
the envs a rollout call makes do not each start a server again.

Episode isolation, by ``isolation``:
- ``"reset_tool"``: every reset calls the server's ``reset_tool`` with
  ``episode_arguments(task)`` (the task's starting data);
- ``"restart"``: every reset starts a fresh server process (any server, but a
  process start per episode);
- ``"none"``: nothing is reset (a stateless server, or state meant to persist).

Snapshots: a server's state is its own, so `snapshot` works only when the server
can export it: set ``snapshot_tool`` (returns the state as text) and
``restore_tool`` (takes it back as ``{"state": text}``), or override
`snapshot_server` / `restore_server`. Otherwise `snapshot` raises
`NotImplementedError` saying so; it never pretends. A snapshot with no server state
is refused on restore unless ``isolation`` is ``"none"``: the resumed episode would go
on over what the server's last episode left.

Faults: a server that will not start, exits, hangs (no answer within
``call_timeout_s``) or speaks something other than MCP is `InfraError` (the
episode is truncated as ``infra``); the next reset starts the server anew. So a
tool that can hang on some input lets a policy turn a failure into ``infra``:
servers used for training must bound their own tools. Verifiers call the server
through ``self.mcp`` (`MCPClient.call_tool`, `read_resource`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal

from agentenv.core.env import Env
from agentenv.core.errors import EnvStateError, InfraError, ToolError
from agentenv.core.state import State
from agentenv.core.task import Task, TaskSet
from agentenv.envs.adapters.mcp.client import MCPClient, acquire, release
from agentenv.envs.adapters.mcp.config import ServerConfig, as_config
from agentenv.envs.adapters.mcp.schema import tool_spec

__all__ = ["Isolation", "MCPEnv", "MCPState"]

logger = logging.getLogger("agentenv.envs.adapters.mcp")
Isolation = Literal["reset_tool", "restart", "none"]
_METHOD_PREFIX = "mcp:"  # the per-instance callers the core dispatches server tools to


class MCPState(State):
    """What the episode did, as the reward hooks and the trajectory see it (the server holds the rest)."""

    calls: int = 0
    """Server tool calls that reached the server."""
    tool_errors: int = 0
    """Of those, the ones the server answered with an error."""


class MCPEnv(Env[MCPState]):
    """An env whose tools are an MCP server's. Subclass it for tasks and a verifier,
    or use it as it is with ``server=`` and ``tasks=``."""

    # -- set these in subclasses ------------------------------------------------
    server: ClassVar[ServerConfig | None] = None
    """The default server (the ``server`` argument overrides it)."""
    isolation: ClassVar[Isolation] = "none"
    """How episodes are kept apart (see the module docstring)."""
    reset_tool: ClassVar[str | None] = None
    """The server tool every reset calls when ``isolation == "reset_tool"``; hidden from the agent."""
    hidden_tools: ClassVar[frozenset[str]] = frozenset()
    """Server tools the agent never sees (reset, snapshot and restore tools are hidden anyway)."""
    terminal_tools: ClassVar[frozenset[str]] = frozenset()
    """Server tools that end the episode when they succeed (e.g. a ``submit``)."""
    snapshot_tool: ClassVar[str | None] = None
    """A server tool that returns the server's state as text (for `snapshot`)."""
    restore_tool: ClassVar[str | None] = None
    """A server tool that takes that text back as ``{"state": text}`` (for `restore`)."""
    max_result_chars: int = 16_000
    """Longer tool answers are cut to this many characters (with a note saying so)."""
    max_argument_chars: int = 64_000
    """Arguments longer than this as JSON are a format error (never sent)."""
    instructions = "You are an agent. Solve the task by calling the tools."

    def __init__(
        self,
        server: ServerConfig | Mapping[str, Any] | None = None,
        tasks: TaskSet | Iterable[Task] | None = None,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            server: The MCP server (a `ServerConfig` or its dict); default: the class's ``server``.
            tasks: The task set (default: `default_tasks()`).
            kwargs: Passed to `Env` (max_turns, parser, tool_prompt, render_mode, lean).
        """
        config = server if server is not None else type(self).server
        if config is None:
            raise TypeError(f"{type(self).__name__} needs a server: pass server=ServerConfig(...) or set the class's")
        self.server_config = as_config(config)
        if self.isolation not in ("reset_tool", "restart", "none"):
            raise ValueError(f"isolation must be 'reset_tool', 'restart' or 'none', got {self.isolation!r}")
        if self.isolation == "reset_tool" and not self.reset_tool:
            raise TypeError(f"{type(self).__name__}: isolation 'reset_tool' needs reset_tool (a server tool's name)")
        self._mcp: MCPClient | None = None
        self._tools_of: tuple[MCPClient, int] | None = None  # the client and start the tools were read from
        self._server_tools: dict[str, str] = {}  # agent's name -> server's name
        super().__init__(tasks, **kwargs)

    # -- hooks ---------------------------------------------------------------------

    def initial_state(self, task: Task) -> MCPState:
        self._ensure_server(fresh=self.isolation == "restart")
        if self.isolation == "reset_tool":
            assert self.reset_tool is not None  # checked in __init__
            try:
                self._admin(self.reset_tool, self.episode_arguments(task))
            except InfraError:  # a server that died since the last episode: one fresh start
                self._ensure_server(fresh=True)
                self._admin(self.reset_tool, self.episode_arguments(task))
        return MCPState()

    def episode_arguments(self, task: Task) -> dict[str, Any]:
        """The arguments of ``reset_tool`` for ``task`` (default: none)."""
        return {}

    def snapshot_server(self) -> Any:
        """The server's state, JSON-serialisable (default: ``snapshot_tool``'s text)."""
        if self.snapshot_tool is None or self.restore_tool is None:
            raise NotImplementedError(
                f"{type(self).__name__} cannot snapshot its MCP server: its state lives in the server process. "
                "Set snapshot_tool and restore_tool (server tools that export and import the state), "
                "or override snapshot_server() and restore_server()"
            )
        return self._admin(self.snapshot_tool, {})

    def restore_server(self, data: Any) -> None:
        """Put ``data`` (from `snapshot_server`) back into the server (default: ``restore_tool``)."""
        if self.restore_tool is None:
            raise NotImplementedError(f"{type(self).__name__} has no restore_tool to restore its MCP server with")
        self._admin(self.restore_tool, {"state": data})

    def snapshot_external(self) -> Any:
        if self._mcp is None:
            return None
        return self.snapshot_server()

    def restore_external(self, data: Any) -> None:
        if data is None:
            if self.isolation != "none":
                # `snapshot` always saves a stateful server's state. Without it the episode
                # would go on over whatever the server's last episode left (a solved task).
                raise ValueError("the snapshot holds no state of the MCP server (its 'external' is null)")
            return
        self._ensure_server(fresh=False)
        self.restore_server(data)

    def on_close(self) -> None:
        if self._mcp is not None:
            release(self._mcp)  # kept a while for the next env of this server, then stopped
            self._mcp = None

    # -- for verifiers and subclasses ----------------------------------------------

    @property
    def mcp(self) -> MCPClient:
        """The live client of this env's server (started at the first reset)."""
        if self._mcp is None:
            raise EnvStateError("the MCP server starts at the first reset: call reset() first")
        return self._mcp

    # -- internals -------------------------------------------------------------------

    def _ensure_server(self, *, fresh: bool) -> None:
        """A live server: started on first use, restarted when it broke (or ``fresh``)."""
        if self._mcp is None:
            self._mcp = acquire(self.server_config)  # another env's live server, or a new client
        if fresh or not self._mcp.live:
            self._mcp.start()
        if self._tools_of != (self._mcp, self._mcp.starts):  # a server started since the tools were read
            self._load_tools()
            self._tools_of = (self._mcp, self._mcp.starts)

    def _load_tools(self) -> None:
        admin = {self.reset_tool, self.snapshot_tool, self.restore_tool} - {None}
        hidden = self.hidden_tools | admin
        own = type(self).tools
        specs = {}
        self._server_tools = {}
        for tool in self.mcp.tools:
            if tool.name in hidden:
                continue
            spec = tool_spec(
                tool.name,
                tool.description or "",
                tool.input_schema,
                method_name=_METHOD_PREFIX + tool.name,
                terminal=tool.name in self.terminal_tools,
                max_chars=self.max_argument_chars,
            )
            if spec is None:
                continue
            if spec.name in own or spec.name in specs:
                logger.warning("MCP tool %r left out: the name %r is taken", tool.name, spec.name)
                continue
            specs[spec.name] = spec
            self._server_tools[spec.name] = tool.name
            setattr(self, spec.method_name, functools.partial(self._call_server_tool, tool.name))
        self.tools = {**specs, **own}  # type: ignore[misc]  # per instance: the server's tools

    def _call_server_tool(self, name: str, arguments: dict[str, Any]) -> str:
        # The core has checked the arguments against the tool's schema already.
        result = self.mcp.call_tool(name, arguments)
        state = self.state
        state.calls += 1
        text = result.text
        if not text and result.structured is not None:
            text = _json(result.structured)
        if len(text) > self.max_result_chars:
            text = f"{text[: self.max_result_chars]}\n[... cut: the answer is {len(text)} characters]"
        if result.is_error:
            state.tool_errors += 1
            raise ToolError(text or f"the tool {name!r} failed")
        return text

    def _admin(self, name: str, arguments: dict[str, Any]) -> str:
        """Call one of the server's admin tools; any failure of it is the env's, so `InfraError`."""
        try:
            result = self.mcp.call_tool(name, arguments)
        except ToolError as e:
            raise InfraError(f"the MCP server's {name!r} failed: {e}") from None
        if result.is_error:
            raise InfraError(f"the MCP server's {name!r} failed: {result.text[:300]}")
        return result.text


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, default=str)
