"""The page as the agent reads it: Playwright's accessibility snapshot with the env's own refs.

Playwright's ``aria_snapshot(mode="ai")`` gives a YAML-like tree in which every element
has a ref (``[ref=e5]``, ``[ref=f3e12]`` after the third navigation) that
``page.get_by_ref`` resolves against the latest snapshot. The env does not show those:
`parse` keeps the tree, drops the noise (refs of elements nobody can act on,
``[cursor=pointer]``, ``[active]``, unnamed ``generic`` wrappers) and gives each
actionable element a short ref of its own, ``[e12] button "Add to cart"``. Actionable:
an interactive role, or the outermost element styled ``cursor: pointer``; an element
that takes clicks without either (a ``<span onclick>``, an ``<a>`` without ``href``, an
inline ``cursor: pointer`` span Playwright would merge into its paragraph) is shown as a
``button`` (a ``link`` for an ``<a>``), marked so by clickables.py for the snapshot.

The env's refs (`RefBook`) are numbered across the whole episode, never reused: an
element keeps its ref while its document lives, a new document's elements get new
numbers, so a ref from an earlier page is recognisably stale instead of silently
pointing at whatever took its number. They are a function of the episode's history
alone (not of Playwright's counters), so a restored snapshot shows the same refs
(`RefBook.export` / `RefBook.restore`).

A long page is shown a window of lines at a time (`View.render`), with a note saying
which lines are shown; ``scroll`` moves the window. Every ref on the page is valid,
shown or not. Left out: iframes' inner documents beyond what Playwright inlines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentenv.envs.browser.arguments import MAX_URL_CHARS  # goto takes no longer URL either

__all__ = ["ACTIONABLE_ROLES", "Node", "RefBook", "View", "parse"]

ACTIONABLE_ROLES = frozenset(
    {
        "button",
        "checkbox",
        "combobox",
        "link",
        "listbox",
        "menuitem",
        "menuitemcheckbox",
        "menuitemradio",
        "radio",
        "searchbox",
        "slider",
        "spinbutton",
        "switch",
        "tab",
        "textbox",
        "treeitem",
    }
)
"""Roles that get a ref. Any other element gets one when the page styles it as clickable
(``cursor: pointer``); clickables.py gives the ones that take clicks by a listener a role."""
FILLABLE_ROLES = frozenset({"textbox", "searchbox", "combobox", "spinbutton"})
SELECTABLE_ROLES = frozenset({"combobox", "listbox"})
_HIDDEN_ATTRS = frozenset({"active", "cursor=pointer"})
_LINE = re.compile(r"^( *)- (.*)$")
_ROLE = re.compile(r"[A-Za-z/][\w/-]*")
_ATTR = re.compile(r" \[([^\[\]]*)\]")
_DECODER = json.JSONDecoder()
MAX_LINE_CHARS = 400
"""A longer line (a paragraph of text) is cut with an ellipsis."""


@dataclass(frozen=True, slots=True)
class Node:
    """An element the agent can act on."""

    ref: str
    """The env's ref, ``e12``."""
    target: str
    """Playwright's aria ref for it in the current document."""
    role: str
    name: str
    disabled: bool
    line: int
    """Its line in `View.lines`."""


@dataclass(frozen=True, slots=True)
class View:
    """One look at the page."""

    url: str
    """The page's address on the site: path, query and fragment (the origin is the site's)."""
    title: str
    lines: tuple[str, ...]
    nodes: Mapping[str, Node]
    """Every actionable element, by ref, in document order."""

    def window(self, offset: int, max_chars: int) -> tuple[int, int]:
        """The lines ``[start, end)`` shown from ``offset``: as many as fit in ``max_chars``
        (at least one), ``start`` clamped so that a window past the end still shows lines."""
        n = len(self.lines)
        start = max(0, min(offset, n - 1))
        end, used = start, 0
        while end < n and (end == start or used + len(self.lines[end]) + 1 <= max_chars):
            used += len(self.lines[end]) + 1
            end += 1
        return start, end

    def render(self, offset: int, max_chars: int) -> str:
        """The page as the agent reads it: URL, title, and the tree's lines from ``offset``."""
        start, end = self.window(offset, max_chars)
        body = "\n".join(self.lines[start:end]) if self.lines else "(the page is empty)"
        text = f"URL: {self.url}\nTitle: {self.title}\n{body}"
        if start > 0 or end < len(self.lines):
            more = []
            if start > 0:
                more.append("scroll up for earlier lines")
            if end < len(self.lines):
                more.append("scroll down for more")
            text += f"\n[lines {start + 1}-{end} of {len(self.lines)} shown; {' and '.join(more)}]"
        return text


class RefBook:
    """Hands out the env's refs for one episode (see the module docstring)."""

    def __init__(self) -> None:
        self.next = 1
        self._by_target: dict[str, str] = {}
        self._expected: list[tuple[str, str, str]] = []

    def ref_for(self, target: str, role: str, name: str) -> str:
        ref = self._by_target.get(target)
        if ref is None:
            if self._expected and self._expected[0][1:] == (role, name):
                ref = self._expected.pop(0)[0]
            else:
                ref = f"e{self.next}"
                self.next += 1
        return ref

    def settle(self, view: View) -> None:
        """Keep only the current view's elements: refs of removed elements are now stale."""
        self._by_target = {node.target: ref for ref, node in view.nodes.items()}
        self._expected = []

    def export(self, view: View | None) -> dict[str, Any]:
        nodes = view.nodes.values() if view is not None else ()
        return {"next": self.next, "view": [[n.ref, n.role, n.name] for n in nodes]}

    def restore(self, data: Mapping[str, Any]) -> None:
        """Continue an exported book: the next page parsed (the same page, reopened) gets
        the exported refs for the elements it still has, in order."""
        self.next = int(data["next"])
        self._by_target = {}
        self._expected = [(str(r), str(role), str(name)) for r, role, name in data["view"]]

    def issued(self, ref: str) -> bool:
        """Whether ``ref`` was ever handed out in this episode."""
        return ref.startswith("e") and ref[1:].isdigit() and 0 < int(ref[1:]) < self.next


def parse(snapshot: str, book: RefBook, *, url: str, title: str) -> View:
    """The `View` of a Playwright ``aria_snapshot(mode="ai")`` text; assigns refs from ``book``."""
    lines: list[str] = []
    nodes: dict[str, Node] = {}
    dropped: list[int] = []  # indents of the unnamed wrappers left out: their children move left
    for raw in snapshot.splitlines():
        match = _LINE.match(raw)
        if match is None:  # not a node: keep it as it is
            lines.append(_cut(raw))
            continue
        indent = len(match.group(1))
        while dropped and dropped[-1] >= indent:
            dropped.pop()
        key, rest = _split(match.group(2))
        parsed = _parse_key(key)
        if parsed is None:
            lines.append(_cut(" " * (indent - 2 * len(dropped)) + "- " + _strip_refs(match.group(2))))
            continue
        role, name, attrs = parsed
        target = next((a[4:] for a in attrs if a.startswith("ref=")), None)
        kept = [a for a in attrs if not a.startswith("ref=") and a not in _HIDDEN_ATTRS]
        actionable = target is not None and (role in ACTIONABLE_ROLES or "cursor=pointer" in attrs)
        if not actionable and role == "generic" and name is None and not kept:
            if rest == ":":
                dropped.append(indent)
                continue
            role = "text"
        label = role if name is None else f"{role} {json.dumps(name, ensure_ascii=False)}"
        label += "".join(f" [{a}]" for a in kept)
        if actionable:
            assert target is not None
            ref = book.ref_for(target, role, name or "")
            label = f"[{ref}] {label}"
            nodes[ref] = Node(ref, target, role, name or "", "disabled" in kept, len(lines))
        lines.append(_cut(" " * (indent - 2 * len(dropped)) + "- " + label + rest))
    # A form's GET puts what was typed into the URL (5,000 characters of emoji: a 60 KB URL)
    # and a page may title itself with it: both cut, as every line is, or they would carry
    # it into every later observation, the state and its history.
    view = View(url=_cut(url, MAX_URL_CHARS), title=_cut(title), lines=tuple(lines), nodes=nodes)
    book.settle(view)
    return view


def _split(body: str) -> tuple[str, str]:
    """A node's key and what follows it (``""``, ``":"`` or ``": value"``)."""
    if body.startswith("'"):  # a YAML single-quoted key: '' is a quote
        out, i = [], 1
        while i < len(body):
            if body[i] == "'":
                if body.startswith("''", i):
                    out.append("'")
                    i += 2
                    continue
                break
            out.append(body[i])
            i += 1
        return "".join(out), body[i + 1 :]
    cut = body.find(": ")
    if cut >= 0:
        return body[:cut], body[cut:]
    if body.endswith(":"):
        return body[:-1], ":"
    return body, ""


def _parse_key(key: str) -> tuple[str, str | None, list[str]] | None:
    """``role "name" [attr] [attr=value]`` as (role, name, attrs); None for another shape."""
    match = _ROLE.match(key)
    if match is None:
        return None
    role, rest = match.group(), key[match.end() :]
    name: str | None = None
    if rest.startswith(' "'):
        try:
            name, end = _DECODER.raw_decode(rest, 1)
        except ValueError:
            return None
        rest = rest[end:]
    attrs = _ATTR.findall(rest)
    if _ATTR.sub("", rest):  # something else left over
        return None
    return role, name, attrs


def _strip_refs(text: str) -> str:
    return re.sub(r" \[ref=[^\]]*\]| \[cursor=pointer\]| \[active\]", "", text)


def _cut(line: str, limit: int = MAX_LINE_CHARS) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def element_lines(text: str) -> Sequence[tuple[str, str, str]]:
    """(ref, role, name) of each element line in a rendered view: what a reader of the
    observation (the oracle) can know about the page."""
    found = []
    for match in re.finditer(r'^ *- \[(e\d+)\] ([\w/-]+)(?: ("(?:[^"\\]|\\.)*"))?', text, re.MULTILINE):
        name = json.loads(match.group(3)) if match.group(3) else ""
        found.append((match.group(1), match.group(2), name))
    return found
