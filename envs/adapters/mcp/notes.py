"""``mcp-notes-v0``: keep a notes store in order, through a real MCP server's tools.

The server is notes_server.py over stdio, one per env. Each task's payload
holds the notes the episode starts with (``start``, put in place by the server's
``reset`` tool), the notes it must end with (``expect``) and the golden tool calls
(``actions``, for the oracle). The agent calls ``finish`` when done. The verifier
reads the ``notes://all`` resource and scores 1 when the store is exactly
``expect``: extra or missing notes fail, and nothing the agent writes is read but
the store itself. Snapshots go through the server's ``export_state`` and
``import_state``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from agentenv.core.task import Task, TaskSet
from agentenv.core.tools import tool
from agentenv.envs.adapters.mcp.config import ServerConfig
from agentenv.envs.adapters.mcp.env import MCPEnv
from agentenv.policies import ScriptedPolicy

__all__ = ["NOTES_SERVER", "NotesEnv", "notes_tasks", "oracle"]

NOTES_SERVER = Path(__file__).with_name("notes_server.py")


def _task(task_id: str, prompt: str, start: dict[str, str], expect: dict[str, str], actions: list[Any]) -> Task:
    return Task(
        id=task_id,
        prompt=prompt,
        payload={"start": start, "expect": expect, "actions": [*actions, {"name": "finish", "arguments": {}}]},
    )


def notes_tasks() -> TaskSet:
    """The example's tasks, each with golden actions."""
    return TaskSet(
        [
            _task(
                "add",
                "Add a note titled 'groceries' whose text is 'milk, eggs'. Call finish when done.",
                {},
                {"groceries": "milk, eggs"},
                [{"name": "add_note", "arguments": {"title": "groceries", "body": "milk, eggs"}}],
            ),
            _task(
                "delete",
                "Delete the note titled 'old'; keep every other note. Call finish when done.",
                {"old": "stale", "keep": "fresh"},
                {"keep": "fresh"},
                [{"name": "delete_note", "arguments": {"title": "old"}}],
            ),
            _task(
                "rename",
                "Rename the note 'draft' to 'final', keeping its text as it is. Call finish when done.",
                {"draft": "Meet at 10 in room 4."},
                {"final": "Meet at 10 in room 4."},
                [
                    {"name": "read_note", "arguments": {"title": "draft"}},
                    {"name": "add_note", "arguments": {"title": "final", "body": "Meet at 10 in room 4."}},
                    {"name": "delete_note", "arguments": {"title": "draft"}},
                ],
            ),
        ]
    )


class NotesEnv(MCPEnv):
    """A notes store behind an MCP server; the task says what the store must hold."""

    server = ServerConfig(command=[sys.executable, str(NOTES_SERVER)])
    isolation = "reset_tool"
    reset_tool = "reset"
    snapshot_tool = "export_state"
    restore_tool = "import_state"
    max_turns = 8
    instructions = "You manage a notes store through its tools."

    def default_tasks(self) -> TaskSet:
        return notes_tasks()

    def episode_arguments(self, task: Task) -> dict[str, Any]:
        return {"notes_json": json.dumps(task.payload.get("start", {}))}

    @tool(terminal=True)
    def finish(self) -> str:
        """Say you are done; this ends the episode."""
        return "done"

    def verify(self, task: Task) -> float:
        notes = json.loads(self.mcp.read_resource("notes://all"))
        return float(notes == task.payload["expect"])


def oracle() -> ScriptedPolicy:
    """Replays the task's golden actions, one per turn (the last is ``finish``)."""
    return ScriptedPolicy.golden()
