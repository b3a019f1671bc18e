"""MCP servers as envs: the tools of any MCP server, over stdio or streamable HTTP.

    from agentenv.envs.adapters.mcp import MCPEnv, ServerConfig
    env = MCPEnv(server=ServerConfig(command=["python", "my_server.py"]))
    obs, info = env.reset(seed=0)         # starts the server on first use

`MCPEnv` (env.py) shows the server's tools with their JSON schemas and checks
calls against them; `MCPClient` (client.py) is the session, on one driver
thread per process, that verifiers use too (``self.mcp``); `ServerConfig`
(config.py) says how to start or reach the server. ``mcp-notes-v0`` (notes.py,
notes_server.py) is a worked example. Needs the ``mcp`` extra. Nothing starts at
import.
"""

from agentenv.envs.adapters.mcp.client import MCPClient, ToolResult, shutdown
from agentenv.envs.adapters.mcp.config import ServerConfig
from agentenv.envs.adapters.mcp.env import Isolation, MCPEnv, MCPState
from agentenv.envs.adapters.mcp.notes import NotesEnv, notes_tasks, oracle

__all__ = [
    "Isolation",
    "MCPClient",
    "MCPEnv",
    "MCPState",
    "NotesEnv",
    "ServerConfig",
    "ToolResult",
    "notes_tasks",
    "oracle",
    "shutdown",
]
