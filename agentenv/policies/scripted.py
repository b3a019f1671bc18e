"""Policies that need no model: `ScriptedPolicy` (tests, demos, oracles) and
`HumanPolicy` (a person at the terminal). The contract they meet is
`agentenv.core.policy`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from agentenv.core.errors import message_of
from agentenv.core.parsers import tool_call_text
from agentenv.core.policy import Conversation, PolicyFailure, PolicyOutput
from agentenv.core.types import Action

__all__ = ["HumanPolicy", "ScriptedPolicy"]


class ScriptedPolicy:
    """A policy written as a function of one conversation (or a fixed list of actions)."""

    def __init__(self, fn: Callable[[Conversation], Action]) -> None:
        self.fn = fn

    @classmethod
    def replay(cls, actions: Sequence[Action]) -> ScriptedPolicy:
        """Play ``actions`` in order, one per turn, then repeat the last one."""
        if not actions:
            raise ValueError("replay needs at least one action")
        return cls(lambda conv: actions[min(conv.turn, len(actions) - 1)])

    @classmethod
    def golden(cls, key: str = "actions") -> ScriptedPolicy:
        """Replay each task's golden tool calls, ``task.payload[key]`` (a list of
        ``{"name": ..., "arguments": {...}}``), as tool-call text, one per turn, then
        repeat the last one: the oracle of an env whose tasks carry their solution."""

        def act(conv: Conversation) -> str:
            if conv.task is None or key not in conv.task.payload:
                raise ValueError(f"a golden replay needs each task's payload[{key!r}]: conversation {conv.id} has none")
            actions = conv.task.payload[key]
            action = actions[min(conv.turn, len(actions) - 1)]
            return tool_call_text(action["name"], **action["arguments"])

        return cls(act)

    def act(self, conversations: Sequence[Conversation]) -> list[PolicyOutput]:
        """``fn`` of each conversation; one it raises on fails that episode alone."""
        return [self._one(conv) for conv in conversations]

    def _one(self, conv: Conversation) -> PolicyOutput:
        try:
            return self.fn(conv)
        except Exception as e:  # noqa: BLE001 - one conversation's failure, not the batch's
            return PolicyFailure(error=f"{type(e).__name__}: {message_of(e)}")


class HumanPolicy:
    """A person at the terminal types each action. One conversation at a time."""

    def __init__(self, stdin: TextIO | None = None, stdout: TextIO | None = None) -> None:
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self._shown: dict[int, int] = {}

    def act(self, conversations: Sequence[Conversation]) -> list[PolicyOutput]:
        return [self._ask(conv) for conv in conversations]

    def _ask(self, conv: Conversation) -> Action:
        start = self._shown.get(conv.id, 0)
        for message in conv.messages[start:]:
            if message["role"] != "assistant":
                self.stdout.write(f"\n[{message['role']}] {message['content']}\n")
        self._shown[conv.id] = len(conv.messages) + 1  # +1: the action typed below
        self.stdout.write("\n> ")
        self.stdout.flush()
        lines: list[str] = []
        # A line ending in a backslash continues the action on the next line.
        while True:
            line = self.stdin.readline()
            if not line:
                raise EOFError("no more input from the terminal")
            line = line.rstrip("\n")
            if line.endswith("\\"):
                lines.append(line[:-1])
                self.stdout.write("… ")
                self.stdout.flush()
                continue
            lines.append(line)
            return "\n".join(lines)
