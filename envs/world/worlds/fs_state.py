"""The fs world's state: a flat map from absolute paths to nodes, and the tree every task starts from.

Apart from the world (``fs.py``: tools, invariants) and its tasks (``fs_tasks.py``), which
both read it: the tasks are written against this tree, and the world lists the tasks.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentenv import State

__all__ = ["INITIAL_STATE", "MAX_ENTRIES", "MAX_TEXT", "FsState", "Node"]

MAX_ENTRIES = 500
MAX_TEXT = 64_000
"""Characters of text in all files together: a state the world model is shown whole stays small."""


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["file", "dir"]
    content: str = Field(default="", max_length=MAX_TEXT)


class FsState(State):
    files: dict[str, Node] = {}


INITIAL_STATE = FsState(
    files={
        "/etc": Node(kind="dir"),
        "/etc/hosts": Node(kind="file", content="127.0.0.1 localhost\n"),
        "/home": Node(kind="dir"),
        "/home/user": Node(kind="dir"),
        "/home/user/notes.txt": Node(kind="file", content="buy milk\ncall bob\n"),
        "/home/user/todo.txt": Node(kind="file", content="write report\nfix bug\n"),
        "/home/user/docs": Node(kind="dir"),
        "/home/user/docs/report.md": Node(kind="file", content="# Quarterly report\nDraft.\n"),
        "/home/user/logs": Node(kind="dir"),
        "/home/user/logs/app.log": Node(
            kind="file", content="INFO start\nERROR disk full\nINFO retry\nERROR timeout\n"
        ),
        "/home/user/logs/old.log": Node(kind="file", content="INFO old run\n"),
        "/tmp": Node(kind="dir"),
        "/tmp/scratch.txt": Node(kind="file", content="temp\n"),
    }
)
"""The tree every task starts from, before its own setup patch."""
