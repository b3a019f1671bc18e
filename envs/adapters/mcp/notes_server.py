"""A small MCP server: a notes store, over stdio or streamable HTTP.

The server of the ``mcp-notes-v0`` example env (notes.py) and of the docs. It is
a plain script on the official SDK (it imports nothing of agentenv, so it starts
in the time the SDK takes to import):

    python notes_server.py                          # stdio
    python notes_server.py --http --port 8765       # streamable HTTP at http://127.0.0.1:8765/mcp

Agent tools: ``add_note``, ``read_note``, ``list_notes``, ``delete_note``. Admin
tools the env hides from the agent: ``reset`` (a new episode), ``export_state`` and
``import_state`` (snapshots). Resource: ``notes://all``, every note as JSON.
Left out: persistence (the notes live in memory), several clients at once.
"""

from __future__ import annotations

import argparse
import json
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

MAX_NOTES = 100
Title = Annotated[str, Field(min_length=1, max_length=100, description="The note's title (unique).")]
Body = Annotated[str, Field(max_length=2000, description="The note's text.")]


def build(name: str = "notes") -> MCPServer:
    """The server, its tools and its resource (tests add tools of their own to it)."""
    server = MCPServer(name, instructions="A notes store. Titles are unique.", log_level="WARNING")
    notes: dict[str, str] = {}

    @server.tool()
    def add_note(title: Title, body: Body) -> str:
        """Add a note. Fails if a note with this title exists."""
        if title in notes:
            raise ToolError(f"a note titled {title!r} exists; delete it first")
        if len(notes) >= MAX_NOTES:
            raise ToolError(f"the store is full ({MAX_NOTES} notes)")
        notes[title] = body
        return f"saved {title!r}"

    @server.tool()
    def read_note(title: Title) -> str:
        """Read a note's text."""
        if title not in notes:
            raise ToolError(f"no note titled {title!r}")
        return notes[title]

    @server.tool()
    def list_notes() -> list[str]:
        """The titles of every note, sorted."""
        return sorted(notes)

    @server.tool()
    def delete_note(title: Title) -> str:
        """Delete a note."""
        if notes.pop(title, None) is None:
            raise ToolError(f"no note titled {title!r}")
        return f"deleted {title!r}"

    @server.tool()
    def reset(notes_json: str = "{}") -> str:
        """Admin: replace every note with the given ones (a JSON object title -> text)."""
        fresh = json.loads(notes_json)
        if not isinstance(fresh, dict) or not all(isinstance(v, str) for v in fresh.values()):
            raise ToolError("notes_json must be a JSON object of strings")
        notes.clear()
        notes.update(fresh)
        return "reset"

    @server.tool()
    def export_state() -> str:
        """Admin: every note, as JSON (for snapshots)."""
        return json.dumps(notes, sort_keys=True)

    @server.tool()
    def import_state(state: str) -> str:
        """Admin: restore what export_state returned."""
        return reset(state)

    @server.resource("notes://all", mime_type="application/json")
    def all_notes() -> str:
        """Every note: a JSON object title -> text."""
        return json.dumps(notes, sort_keys=True)

    return server


def main(server: MCPServer | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = server or build()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
