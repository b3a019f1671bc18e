"""Elements a person can click that the accessibility tree does not offer, given a ref.

Playwright's snapshot (view.py) gives a ref to every element with an interactive role and
marks the outermost element styled ``cursor: pointer``, but it leaves out an inline
element whose only child is text, merging that text into its parent's line: a
``<span onclick>Reply</span>``, an ``<a onclick>`` without ``href``, a ``cursor: pointer``
span inside a paragraph. And it cannot know that a ``<div>`` takes clicks through a
listener when nothing in its style says so. So before each snapshot (`Clickables.marked`)
this module finds the elements that take clicks:

- by a listener for a click-like event (``click``, ``mousedown``, ``pointerdown``, ...),
  as Chromium's DevTools sees them (``DOMDebugger.getEventListeners`` over the whole
  document: ``onclick`` attributes and properties and ``addEventListener`` alike, in open
  and closed shadow roots and same-origin frames), and
- by cursor: the outermost element of a region styled ``cursor: pointer``,

and gives each that has no interactive role, is not inside an interactive element and
contains none (nor another such element: one ref per thing to click, never one for each
ancestor of it) the role ``button`` (``link`` for an ``<a>``) for the length of the
snapshot; the page gets its own roles back right after. The ref stays valid: Playwright
resolves a ref to the element it saw, not by role.

The script runs in an isolated world of the env's own (``Page.createIsolatedWorld``): page
script neither sees it nor can change what it calls. What the page can see is the role
attribute appear and go between two of its tasks. Left out: listeners on the document, the
``<html>`` or ``<body>`` (a page-wide delegated handler: one ref for the whole page would
say nothing), the children of a container that delegates clicks to plain spans (the
container gets the one ref), elements past the first `MAX_LISTENED` with listeners or
`MAX_WALKED` walked for their cursor. Nothing here raises: a page this cannot read is
shown as Playwright sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from playwright.async_api import CDPSession
from playwright.async_api import Error as PlaywrightError

__all__ = ["CLICK_EVENTS", "Clickables"]

CLICK_EVENTS = frozenset(
    {"click", "dblclick", "auxclick", "mousedown", "mouseup", "pointerdown", "pointerup", "touchstart", "touchend"}
)
MAX_LISTENED = 1_000
MAX_WALKED = 20_000
_WORLD = "agentenv-clickables"
_GROUP = "agentenv-clickables"

_MARK = """function (interactive, maxWalked, ...listened) {
  const marks = [];
  try { mark(); } catch (error) {}  // what was marked before a failure is returned, to be unmarked
  return marks;

  function mark() {
    const candidates = new Set(listened.filter((node) => node.nodeType === 1));
    // The outermost element of each cursor: pointer region, walked in document order.
    const stack = [[document.documentElement, false]];
    for (let walked = 0; stack.length && walked < maxWalked; walked++) {
      const [element, parentPointer] = stack.pop();
      if (!element) continue;
      const pointer = getComputedStyle(element).cursor === 'pointer';
      if (pointer && !parentPointer) candidates.add(element);
      const children = [...element.children, ...(element.shadowRoot ? element.shadowRoot.children : [])];
      const inner = element.tagName === 'IFRAME' ? element.contentDocument : null;  // null when cross-origin
      if (inner) children.push(inner.documentElement);
      for (const child of children.reverse()) stack.push([child, pointer]);
    }
    const outer = new Set();  // candidates holding another: the inner one is the thing to click
    for (const element of candidates) {
      for (let up = element.parentElement; up; up = up.parentElement) if (candidates.has(up)) outer.add(up);
    }
    for (const element of candidates) {
      const page = element.ownerDocument;
      if (element === page.documentElement || element === page.body || outer.has(element)) continue;
      if (element.matches(interactive) || element.querySelector(interactive)) continue;
      if (element.parentElement && element.parentElement.closest(interactive)) continue;
      marks.push([element, element.getAttribute('role')]);
      element.setAttribute('role', element.tagName === 'A' ? 'link' : 'button');
    }
  }
}"""
_UNMARK = """function () {
  for (const [element, role] of this) {
    if (role === null) element.removeAttribute('role'); else element.setAttribute('role', role);
  }
}"""


class Clickables:
    """Marks one page's unlabelled clickable elements around each snapshot (see the module docstring)."""

    def __init__(self, cdp: CDPSession, interactive_roles: frozenset[str]) -> None:
        self._cdp = cdp
        self._frame: str | None = None
        natives = "a[href], area[href], button, input:not([type='hidden']), select, textarea, summary, option"
        editable = "[contenteditable]:not([contenteditable='false'])"
        roles = ", ".join(f"[role~='{role}']" for role in sorted(interactive_roles))
        self._interactive = f"{natives}, {editable}, {roles}"

    @contextlib.asynccontextmanager
    async def marked(self) -> AsyncIterator[None]:
        """The page with its unlabelled clickable elements marked, for a snapshot taken inside."""
        marks = await self._mark()
        try:
            yield
        finally:
            await self._unmark(marks)

    async def _mark(self) -> str | None:
        try:
            context = await self._world()
            document = await self._send("Runtime.evaluate", expression="document", contextId=context)
            found = await self._cdp.send(
                "DOMDebugger.getEventListeners", {"objectId": document["objectId"], "depth": -1, "pierce": True}
            )
            nodes = dict.fromkeys(
                listener["backendNodeId"]
                for listener in found["listeners"]
                if listener.get("type") in CLICK_EVENTS and "backendNodeId" in listener
            )
            resolved = await asyncio.gather(
                *(
                    self._send("DOM.resolveNode", backendNodeId=node, executionContextId=context)
                    for node in list(nodes)[:MAX_LISTENED]
                ),
                return_exceptions=True,
            )
            listened = [{"objectId": r["objectId"]} for r in resolved if isinstance(r, dict)]
            marks = await self._send(
                "Runtime.callFunctionOn",
                functionDeclaration=_MARK,
                executionContextId=context,
                arguments=[{"value": self._interactive}, {"value": MAX_WALKED}, *listened],
            )
            return str(marks["objectId"])
        except (PlaywrightError, KeyError):  # a page gone, navigating or unreadable: shown as Playwright sees it
            await self._release()
            return None

    async def _unmark(self, marks: str | None) -> None:
        if marks is not None:
            with contextlib.suppress(PlaywrightError):  # the document is gone, and the marks with it
                await self._cdp.send("Runtime.callFunctionOn", {"functionDeclaration": _UNMARK, "objectId": marks})
        await self._release()

    async def _world(self) -> int:
        """This world's execution context in the page's current document."""
        if self._frame is None:
            tree = await self._cdp.send("Page.getFrameTree")
            self._frame = str(tree["frameTree"]["frame"]["id"])
        try:
            world = await self._cdp.send("Page.createIsolatedWorld", {"frameId": self._frame, "worldName": _WORLD})
        except PlaywrightError:
            self._frame = None  # the main frame was replaced: found again on the next look
            raise
        return int(world["executionContextId"])

    async def _send(self, method: str, **params: Any) -> dict[str, Any]:
        """The remote object a method returns, held in this module's object group until `_release`."""
        answer = await self._cdp.send(method, {**params, "objectGroup": _GROUP})
        return dict(answer["object"] if method == "DOM.resolveNode" else answer["result"])

    async def _release(self) -> None:
        with contextlib.suppress(PlaywrightError):
            await self._cdp.send("Runtime.releaseObjectGroup", {"objectGroup": _GROUP})
