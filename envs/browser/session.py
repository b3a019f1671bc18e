"""One env's side of the browser: its BrowserContext and page, driven on the driver's loop.

Every method here is a coroutine run on the driver's loop (driver.py); the env calls
them through `Driver.call`. A `Session` lives as long as its env; each episode
`open`s a fresh context (cookies, storage and cache isolated), the previous one
closed in the background.

The guard (`Session._guard`): ``context.route`` with a pattern that matches every URL
but the site's origin's (Playwright's server matches it, so the site's own requests
pay no round trip to this process). What it catches is refused: a navigation with an
empty 204 answer (the page stays where it was, no error page), any other request
aborted. WebSockets are refused outright, service workers blocked (Playwright's block
is a script a page can get around: what a service worker fetches still meets the
proxy below), downloads refused, and popups closed (one tab per episode). Redirects
are checked by the site server (server.py), since routing sees only a chain's first
request. Below routing, the context's proxy for every host but the site is the site's
own server, which refuses proxy requests: what routing does not see (Chromium's
speculative connections, a service worker's requests, WebTransport, WebRTC's TCP)
opens no socket to any other port either. What no proxy carries (WebRTC's UDP, DNS,
the desktop's URL handlers) is switched off at launch (driver.py).

Faults (`Session._fault`): a crashed page, a browser that died, a site server that
stopped, a page that did not load within the navigation timeout, or a network
error on the site's own origin is `InfraError`; anything else Playwright refuses
(an element that cannot take a click, a value a field will not hold) is
`ToolError`, the agent's to see. Every Playwright call has a timeout (the context's
defaults) and the driver bounds each call as a whole.

Captured for snapshots (`capture` / `open(restore=...)`): cookies and localStorage
(Playwright's storage state), and the values, checked states and selections of the
page's form fields, which field has the focus, and the scroll position, read and
written by two fixed scripts of this module (never text from the agent; the values
travel as data), and for a page that is a POST's result, that response (posted.py: a
restore serves it again rather than send the POST twice; one it cannot keep makes
`capture` raise). Not captured: the page's script state in memory, sessionStorage,
and the browser's own history (the env keeps its own list of pages).

Before each snapshot of the page, the elements it lets a person click but gives no
role are marked so that the view gives them refs (clickables.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
from playwright.async_api import Browser, BrowserContext, Dialog, Page, Request, Route, WebSocketRoute
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from agentenv.core.errors import InfraError, ToolError
from agentenv.envs.browser.clickables import Clickables
from agentenv.envs.browser.driver import describe
from agentenv.envs.browser.posted import MAX_POSTED_BYTES, Documents, PostedPage, bare, serving
from agentenv.envs.browser.server import EPISODE_HEADER
from agentenv.envs.browser.view import ACTIONABLE_ROLES, Node, RefBook, View, parse

__all__ = ["Session", "Settings"]

_CAPTURE_FORM = """() => {
  const fields = Array.from(document.querySelectorAll('input, textarea, select'));
  return {
    fields: fields.map((e) => e.tagName === 'SELECT'
      ? {kind: 'select', selected: Array.from(e.options, (o) => o.selected)}
      : (e.type === 'checkbox' || e.type === 'radio') ? {kind: 'check', checked: e.checked}
      : e.type === 'file' ? {kind: 'skip'} : {kind: 'value', value: e.value}),
    focus: fields.indexOf(document.activeElement),
    scroll: [window.scrollX, window.scrollY],
  };
}"""
_RESTORE_FORM = """(state) => {
  const fields = Array.from(document.querySelectorAll('input, textarea, select'));
  if (fields.length === state.fields.length) {
    fields.forEach((e, i) => {
      const f = state.fields[i];
      let changed = false;
      if (f.kind === 'select' && e.tagName === 'SELECT') {
        Array.from(e.options).forEach((o, j) => {
          if (o.selected !== !!f.selected[j]) { o.selected = !!f.selected[j]; changed = true; }
        });
      } else if (f.kind === 'check' && (e.type === 'checkbox' || e.type === 'radio')) {
        if (e.checked !== f.checked) { e.checked = f.checked; changed = true; }
      } else if (f.kind === 'value' && e.tagName !== 'SELECT' && e.type !== 'file') {
        if (e.value !== f.value) { e.value = f.value; changed = true; }
      }
      if (changed) {
        e.dispatchEvent(new Event('input', {bubbles: true}));
        e.dispatchEvent(new Event('change', {bubbles: true}));
      }
    });
    if (state.focus >= 0) fields[state.focus].focus();
  }
  window.scrollTo(state.scroll[0], state.scroll[1]);
}"""
_PROBE_TIMEOUT_S = 3.0
"""How long the site's server may take to answer the probe after a timed-out action."""
_GONE = ("has been closed", "Connection closed", "Target crashed", "Target closed", "Browser closed")
"""What Playwright says when the page, the browser or its own driver is gone: never the agent's doing
(an agent cannot close its page; popups are other pages)."""
_OPTIONS = "(e) => e instanceof HTMLSelectElement ? Array.from(e.options, (o) => o.label) : null"


@dataclass(frozen=True, slots=True)
class Settings:
    viewport: tuple[int, int]
    action_timeout_s: float
    navigation_timeout_s: float
    screenshot: bool


class Session:
    """A browser context and its one page, for one env (see the module docstring)."""

    def __init__(self, settings: Settings, server_alive: Callable[[], bool]) -> None:
        self.settings = settings
        self.server_alive = server_alive
        self.context: BrowserContext | None = None
        self.page: Page | None = None
        self.clickables: Clickables | None = None
        self.documents: Documents | None = None
        self.browser: Browser | None = None
        self.origin = ""
        self.book = RefBook()
        self.view: View | None = None
        self.screenshot: bytes | None = None
        self.blocked: list[str] = []
        """Every off-site request refused in this episode (a test reads it)."""
        self._navigations_blocked: list[str] = []
        self._dialogs: list[str] = []
        self._popups = 0
        self._loading: set[Request] = set()
        """Navigation requests of the page that have not finished: a page the site is slow to send."""
        self._crashed = False
        self._closing: set[asyncio.Task[None]] = set()

    # -- lifecycle ---------------------------------------------------------------

    async def open(
        self, browser: Browser, origin: str, token: str, path: str, restore: dict[str, Any] | None = None
    ) -> View:
        """A fresh context and page on ``origin``, opened at ``path``; ``restore`` is what
        `capture` returned (plus ``refs``, a `RefBook.export`)."""
        self._close_in_background()
        self.browser, self.origin = browser, origin
        self._loading.clear()
        self.book = RefBook()
        self.blocked, self._crashed = [], False
        storage = _with_origin((restore or {}).get("storage"), origin)
        ms = self.settings.action_timeout_s * 1000
        try:
            context = await browser.new_context(
                viewport={"width": self.settings.viewport[0], "height": self.settings.viewport[1]},
                service_workers="block",
                accept_downloads=False,
                extra_http_headers={EPISODE_HEADER: token},
                # Everything but the site goes to a proxy that is the site's own server, which
                # refuses it: even a preconnect the route guard cannot see reaches no other port.
                proxy={"server": origin, "bypass": f"<-loopback>,{origin.split('//', 1)[1]}"},
                storage_state=storage,  # type: ignore[arg-type]  # Playwright's TypedDict of the same JSON
            )
            self.context = context
            context.set_default_timeout(ms)
            context.set_default_navigation_timeout(self.settings.navigation_timeout_s * 1000)
            # Every URL but the site's: the site's own requests are let through by Playwright's
            # server without a round trip to this process (the pattern is matched there).
            await context.route(re.compile(f"^(?!{re.escape(origin)}/)"), self._guard)
            await context.route_web_socket(re.compile(".*"), self._refuse_socket)
            page = await context.new_page()
            # Any other page of the context is closed: popups, and the background tabs that
            # Control+Enter or Shift+Enter on a focused link opens without a popup event.
            context.on("page", self._on_page)
            page.on("request", self._on_request)
            page.on("requestfinished", self._on_request_done)
            page.on("requestfailed", self._on_request_done)
            page.on("dialog", self._on_dialog)
            page.on("crash", self._on_crash)
            self.page = page
            self.clickables = Clickables(await context.new_cdp_session(page), ACTIONABLE_ROLES)
            self.documents = Documents(page)
            await self._reopen(page, origin + path, (restore or {}).get("posted"))
            if restore is not None and restore.get("form") is not None:
                await page.evaluate(_RESTORE_FORM, restore["form"])
            if restore is not None and restore.get("refs") is not None:
                self.book.restore(restore["refs"])
            return await self.look()
        except PlaywrightError as e:
            raise await self._fault(e, "opening the page") from None

    async def close(self) -> None:
        self._close_in_background()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _close_in_background(self) -> None:
        context, self.context, self.page, self.view = self.context, None, None, None
        self.clickables, self.documents = None, None
        if context is not None:
            task = asyncio.ensure_future(_close_quietly(context))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    # -- what the agent sees ---------------------------------------------------------

    async def look(self) -> View:
        """Take the page's accessibility snapshot (and its screenshot, when asked for)."""
        page = self._page()
        for attempt in (1, 2):
            try:
                async with self._marked():
                    snapshot = await page.aria_snapshot(mode="ai")
                title = await page.title()
                break
            except PlaywrightError as e:
                if attempt == 2 or "context was destroyed" not in str(e):  # a navigation raced the snapshot
                    raise
                await page.wait_for_load_state("domcontentloaded")
        self.view = parse(snapshot, self.book, url=self.site_url(page.url), title=title)
        if self.settings.screenshot:
            self.screenshot = await page.screenshot(type="png")
        return self.view

    def site_url(self, url: str) -> str:
        """``url`` relative to the site's origin (absolute when it is elsewhere)."""
        if url == self.origin or url.startswith(self.origin + "/"):
            return url[len(self.origin) :] or "/"
        return url

    # -- actions -----------------------------------------------------------------------

    async def click(self, node: Node) -> str:
        async def click() -> str:
            await self._page().get_by_ref(node.target).click()
            return f"Clicked {node.ref}."

        return await self._act(click)

    async def fill(self, node: Node, text: str) -> str:
        async def fill() -> str:
            await self._page().get_by_ref(node.target).fill(text)
            return f"Filled {node.ref}."

        return await self._act(fill)

    async def select(self, node: Node, option: str) -> str:
        async def select() -> str:
            element = self._page().get_by_ref(node.target)
            labels = await element.evaluate(_OPTIONS)
            if labels is None:
                raise ToolError(f"{node.ref} is not a list of options (click it instead)")
            if option not in labels:
                shown = ", ".join(repr(label) for label in labels[:30])
                raise ToolError(f"{node.ref} has no option {option!r}; its options: {shown}")
            await element.select_option(label=option)
            return f"Selected {option!r} in {node.ref}."

        return await self._act(select)

    async def press(self, key: str) -> str:
        async def press() -> str:
            # On the focused element (the page's body when nothing has the focus) rather than
            # the bare keyboard: an element's press waits for a navigation it starts (Enter in
            # a form), as click does, so the view shows the page it leads to.
            await self._page().locator("body, body :focus").last.press(key)
            return f"Pressed {key}."

        return await self._act(press)

    async def scroll(self, dy: int) -> str:
        async def scroll() -> str:
            await self._page().mouse.wheel(0, dy)
            return ""

        return await self._act(scroll)

    async def goto(self, path: str) -> str:
        async def goto() -> str:
            response = await self._page().goto(self.origin + path)
            status = response.status if response is not None else 0
            return f"Opened {path}" + (f" (HTTP {status})." if status >= 400 else ".")

        return await self._act(goto)

    async def capture(self) -> dict[str, Any]:
        """What a snapshot keeps of the browser side (see the module docstring)."""
        context, page = self.context, self._page()
        assert context is not None
        for attempt in (1, 2):
            try:
                storage = await context.storage_state()
                form = await page.evaluate(_CAPTURE_FORM)
                break
            except PlaywrightError as e:
                if attempt == 1 and "context was destroyed" in str(e):  # a navigation raced it
                    with contextlib.suppress(PlaywrightError):
                        await page.wait_for_load_state("domcontentloaded")
                    continue
                # never the agent's doing: a snapshot must not fail on it
                fault = await self._fault(e, "saving the page")
                raise (
                    fault if isinstance(fault, InfraError) else InfraError(f"could not save the page: {fault}")
                ) from None
        return {"storage": _without_origin(dict(storage), self.origin), "form": form, "posted": await self._posted()}

    async def _posted(self) -> PostedPage | None:
        """The POST response the page shows, to be served again on restore (posted.py); a
        snapshot that cannot keep it is refused rather than reopened as a GET of its URL."""
        posted = await self.documents.current() if self.documents is not None else None
        if posted is None:
            return None
        if posted.body is None:
            raise InfraError(
                "this page is the result of a form sent by POST, and the browser could not give back its "
                "response, so a snapshot cannot show it again (a GET of its URL is another page)"
            )
        if len(posted.body) > MAX_POSTED_BYTES:
            raise InfraError(
                f"this page is the result of a form sent by POST, and its response ({len(posted.body):,} bytes) "
                f"is over the {MAX_POSTED_BYTES:,} a snapshot keeps (a GET of its URL is another page)"
            )
        return posted

    async def _reopen(self, page: Page, url: str, posted: PostedPage | None) -> None:
        """Open ``url``; a page that was a POST's result is served that result again, not sent the POST."""
        if posted is None:
            await page.goto(url)
            return
        async with serving(page, url, posted):
            await page.goto(url)
        assert self.documents is not None
        self.documents.restored(PostedPage(bare(page.url), posted.status, posted.content_type, posted.body))

    async def evaluate(self, expression: str) -> Any:
        """The value of a fixed expression of the site's (never the agent's) on the page."""
        try:
            return await self._page().evaluate(expression)
        except PlaywrightError as e:
            raise await self._fault(e, "reading the page's reward") from None

    # -- internals -----------------------------------------------------------------------

    def _marked(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The page with the elements it lets a person click but gives no role marked (clickables.py)."""
        return self.clickables.marked() if self.clickables is not None else contextlib.nullcontext()

    def _page(self) -> Page:
        if self.page is None:
            raise InfraError("the episode has no page (it failed to open); reset again")
        return self.page

    async def _act(self, action: Callable[[], Awaitable[str]]) -> str:
        """Run one action, let the page settle, look at it; returns what happened, in words."""
        self._navigations_blocked, self._dialogs, self._popups = [], [], 0
        page = self._page()
        try:
            said = await action()
            try:
                await page.wait_for_load_state("load")
            except PlaywrightTimeoutError:
                raise InfraError(
                    f"the page did not finish loading within {self.settings.navigation_timeout_s:g} s"
                ) from None
            left = await self._stay_on_site(page)
            await self.look()
        except PlaywrightError as e:
            fault = await self._fault(e, "the action")
            if isinstance(fault, ToolError):  # the page may have changed under the action: show it as it is
                with contextlib.suppress(PlaywrightError):
                    await self.look()
            raise fault from None
        notes = [said] if said else []
        notes += [f"The page showed a dialog: {text!r} (accepted)." for text in self._dialogs]
        if self._popups:
            notes.append("The page tried to open a new window; it was closed (this browser has one tab).")
        if self._navigations_blocked or left:
            where = self._navigations_blocked[0] if self._navigations_blocked else left
            raise ToolError(
                f"{said} It leads off this site ({where[:200]}); the browser only opens pages of this site, "
                "so it stayed here."
            )
        return " ".join(notes)

    async def _stay_on_site(self, page: Page) -> str:
        """Bring the page back to the site if it ended elsewhere; returns where it was ('' if on the site)."""
        url = page.url
        if url == self.origin or url.startswith(self.origin + "/"):
            return ""
        if url.startswith("chrome-error:") and not self.server_alive():
            raise InfraError("the site's server is down")
        back = self.view.url if self.view is not None else "/"
        await page.goto(self.origin + back)
        return url

    async def _fault(self, error: PlaywrightError, what: str) -> Exception:
        """`InfraError` when the browser, the page or the server failed; `ToolError` otherwise.
        Decided on state, never on the error's call log: that quotes the element and the text
        the agent typed, so words in them ("navigating", "net::ERR_") would pass for infra."""
        text = describe(error)
        if self._crashed:
            return InfraError("the page crashed")
        if self.browser is not None and not self.browser.is_connected():
            return InfraError("the browser died")
        if self.page is None or self.page.is_closed():
            return InfraError(f"the page was closed during {what}")
        if any(marker in text for marker in _GONE):
            return InfraError(f"the browser failed during {what}: {text}")
        if not self.server_alive():
            return InfraError("the site's server is down")
        timeout = isinstance(error, PlaywrightTimeoutError)
        if timeout and (what != "the action" or self._loading):
            return InfraError(f"a page of the site did not load in time ({text})")
        if (timeout or "net::ERR_" in text) and not await self._server_answers():
            return InfraError(f"the site's server did not answer ({text})")
        if timeout:
            return ToolError(
                f"the element did not take the action within {self.settings.action_timeout_s:g} s "
                "(it is hidden, covered, or gone from the page)"
            )
        return ToolError(_agent_text(text))

    async def _server_answers(self) -> bool:
        """Whether the site's server answers an HTTP request within a few seconds (any status)."""
        if not self.origin:
            return False
        try:
            async with httpx.AsyncClient(timeout=_PROBE_TIMEOUT_S, trust_env=False) as client:
                await client.get(self.origin + "/")
        except httpx.HTTPError:
            return False
        return True

    async def _guard(self, route: Route) -> None:
        request = route.request
        url = request.url
        try:
            if url.startswith(self.origin + "/"):
                await route.continue_()
                return
            self.blocked.append(url)
            if request.is_navigation_request():
                self._navigations_blocked.append(url)
                await route.fulfill(status=204)
            else:
                await route.abort("blockedbyclient")
        except PlaywrightError:  # the context closed while the request waited
            pass

    async def _refuse_socket(self, socket: WebSocketRoute) -> None:
        self.blocked.append(socket.url)
        with contextlib.suppress(PlaywrightError):
            await socket.close()

    def _on_request(self, request: Request) -> None:
        if request.is_navigation_request():
            self._loading.add(request)

    def _on_request_done(self, request: Request) -> None:
        self._loading.discard(request)

    async def _on_page(self, page: Page) -> None:
        if page is self.page:
            return
        self._popups += 1
        with contextlib.suppress(PlaywrightError):
            await page.close()

    async def _on_dialog(self, dialog: Dialog) -> None:
        self._dialogs.append(dialog.message[:300])
        with contextlib.suppress(PlaywrightError):
            await dialog.accept()

    def _on_crash(self, _: Page) -> None:
        self._crashed = True


async def _close_quietly(context: BrowserContext) -> None:
    with contextlib.suppress(PlaywrightError):
        await context.close()


def _agent_text(text: str) -> str:
    """A Playwright error as the agent reads it: Playwright's method names and refs left out."""
    text = re.sub(r"^(Locator|Page|Keyboard|Mouse|Frame|ElementHandle)\.\w+: ", "", text)
    return re.sub(r"locator\('aria-ref=[^']*'\)|get_by_ref\([^)]*\)", "the element", text)[:500]


def _without_origin(storage: dict[str, Any], origin: str) -> dict[str, Any]:
    """Storage state with this server's origin written as "": a snapshot restores on another port."""
    origins = [
        {**o, "origin": "" if o.get("origin") == origin else o.get("origin")} for o in storage.get("origins", [])
    ]
    return {"cookies": storage.get("cookies", []), "origins": origins}


def _with_origin(storage: dict[str, Any] | None, origin: str) -> dict[str, Any] | None:
    if storage is None:
        return None
    origins = [{**o, "origin": o["origin"] or origin} for o in storage.get("origins", [])]
    return {"cookies": storage.get("cookies", []), "origins": origins}
