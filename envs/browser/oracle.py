"""The golden-action oracle: a scripted policy that reads the page view like an agent would.

Each golden `Action` names its element by ARIA role and name (`Target`); the oracle
finds that element in the latest page views of the conversation, takes its ref, and
emits the tool call. When the page is longer than the view and the element is not
among the lines seen yet, it scrolls (those scrolls are its own, not golden steps).
When the golden actions run out (a writing task), it answers ``done``. It reads the
task (``conversation.task``), which only a scripted oracle may do.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from agentenv import Conversation, ScriptedPolicy, ToolCall, tool_call_text
from agentenv.core.parsers import AutoParser, ParseError
from agentenv.envs.browser.site import Action, Target
from agentenv.envs.browser.view import element_lines

__all__ = ["oracle"]

_WINDOW = re.compile(r"^\[lines (\d+)-(\d+) of (\d+) shown; [^\]]*\]$", re.MULTILINE)
_PARSER = AutoParser()


def oracle() -> ScriptedPolicy:
    """The oracle of the browser envs (see the module docstring)."""
    return ScriptedPolicy(next_action)


def next_action(conv: Conversation) -> str:
    if conv.task is None:
        raise ValueError("the browser oracle needs the task (conversation.task)")
    golden = [Action.from_json(a) for a in conv.task.payload["golden"]]
    done, since = _progress(conv.messages, golden)
    if done >= len(golden):
        return tool_call_text("answer", text="done")
    action = golden[done]
    if action.target is None:
        return _call(action, None)
    views = [text for m in conv.messages[since:] if m["role"] != "assistant" and (text := _view_text(m))]
    if not views:  # the last golden action failed and showed no page: use the latest view
        views = [text for m in conv.messages if m["role"] != "assistant" and (text := _view_text(m))][-1:]
    ref, move = _find(action.target, views)
    if ref is None:
        if move is None:
            raise ValueError(f"golden target {action.target} of task {conv.task.id!r} is not on the page")
        return tool_call_text("scroll", direction=move)
    return _call(action, ref)


def _call(action: Action, ref: str | None) -> str:
    text = action.text or ""
    if action.tool == "click":
        return tool_call_text("click", ref=ref)
    if action.tool == "fill":
        return tool_call_text("fill", ref=ref, text=text)
    if action.tool == "select":
        return tool_call_text("select", ref=ref, option=text)
    if action.tool == "press":
        return tool_call_text("press", key=text)
    if action.tool == "scroll":
        return tool_call_text("scroll", direction=text)
    if action.tool == "goto":
        return tool_call_text("goto", url=text)
    if action.tool == "back":
        return tool_call_text("back")
    return tool_call_text("answer", text=text)


def _progress(messages: Sequence[Any], golden: Sequence[Action]) -> tuple[int, int]:
    """How many golden actions were taken, and the index of the message after the last one
    (the views since then show the page the next one acts on)."""
    done, since = 0, 0
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        call = _first_call(message)
        if call is None or done >= len(golden):
            continue
        if call.name == golden[done].tool and (
            call.name != "scroll" or call.arguments.get("direction") == golden[done].text
        ):
            done, since = done + 1, i + 1
    return done, since


def _first_call(message: Any) -> ToolCall | None:
    try:
        calls = _PARSER.parse(message.get("content") if not message.get("tool_calls") else message)
    except ParseError:
        return None
    return calls[0] if calls else None


def _view_text(message: Any) -> str:
    content = message.get("content")
    if isinstance(content, list):  # text and a screenshot
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) and "\nURL: " in f"\n{content}" else ""


def _find(target: Target, views: Sequence[str]) -> tuple[str | None, str | None]:
    """The ref of ``target`` across ``views`` of one page (placed by their line numbers),
    or None and the direction to scroll to see more of the page (up to its top first)."""
    seen: dict[int, tuple[str, str, str]] = {}
    top_seen = bottom_seen = False
    for text in views:
        body = text[text.index("URL: ") :]
        window = _WINDOW.search(body)
        first = int(window.group(1)) - 1 if window else 0
        for i, line in enumerate(body.splitlines()[2:]):  # after URL and Title
            for element in element_lines(line):
                seen[first + i] = element
        top_seen = top_seen or first == 0
        bottom_seen = bottom_seen or window is None or int(window.group(2)) == int(window.group(3))
    matches = [ref for _, (ref, role, name) in sorted(seen.items()) if role == target.role and name == target.name]
    if len(matches) > target.nth:
        return matches[target.nth], None
    if not top_seen:
        return None, "up"
    if not bottom_seen:
        return None, "down"
    return None, None
