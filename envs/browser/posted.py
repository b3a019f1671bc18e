"""Pages reached by a POST, kept so that a restored snapshot shows them again.

A restored episode reopens its page by URL. For a page that came from a POST (a form
whose response is a page rather than a redirect) a GET of that URL is another page, or an
error. Sending the POST again is no better: its side effects (a row inserted, an order
placed) are in the saved database already and would happen twice. So `Documents` keeps
the response of each POST navigation of the page's main frame (status, content type and
body, read as it arrives), `Documents.current` says whether the page shown came from one,
and a restore serves that response to the reopened page (`serving`) instead of asking the
site: the page is the POST's result, its subresources loaded from the site as usual.

Left out: the response's other headers (its cookies are in the saved storage already), a
POST page inside a frame, and a POST response over `MAX_POSTED_BYTES` or one the browser
cannot give back: a snapshot of such a page is refused (session.py), never saved as
something else.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Frame, Page, Response, Route

__all__ = ["MAX_POSTED_BYTES", "Documents", "PostedPage", "serving"]

MAX_POSTED_BYTES = 5_000_000
"""The largest POST response a snapshot keeps."""


@dataclass(frozen=True, slots=True)
class PostedPage:
    """The response a POST navigation committed."""

    url: str
    """Its absolute URL, without a fragment."""
    status: int
    content_type: str
    body: bytes | None
    """None when the browser could not give it back."""


class Documents:
    """Which response the main frame's current document came from: a POST's (kept) or another."""

    def __init__(self, page: Page) -> None:
        self._page = page
        self._arriving: tuple[str, asyncio.Task[PostedPage] | None] | None = None
        """The last navigation response of the main frame, until its document commits."""
        self._current: asyncio.Task[PostedPage] | PostedPage | None = None
        page.on("response", self._on_response)
        page.on("framenavigated", self._on_navigated)

    async def current(self) -> PostedPage | None:
        """The POST response the page shows; None for a page reached by a GET."""
        current = self._current
        if isinstance(current, asyncio.Task):
            current = self._current = await current
        if current is None or current.url != bare(self._page.url):
            # The URL changed with no response of its own: the page went back to an
            # earlier document (the browser's cache), or rewrote its URL. Not the POST's.
            return None
        return current

    def restored(self, posted: PostedPage | None) -> None:
        """The page was just reopened showing ``posted`` (served by `serving`)."""
        self._current, self._arriving = posted, None

    def _on_response(self, response: Response) -> None:
        request = response.request
        if response.frame is not self._page.main_frame or not request.is_navigation_request():
            return
        if 300 <= response.status < 400:  # a redirect: the response of where it leads follows
            return
        posted = None if request.method == "GET" else asyncio.ensure_future(_read(response))
        self._arriving = (bare(response.url), posted)

    def _on_navigated(self, frame: Frame) -> None:
        if frame is not self._page.main_frame or self._arriving is None:
            return
        url, posted = self._arriving
        if url == bare(frame.url):  # that response's document committed (a 204 commits none)
            self._current, self._arriving = posted, None


@contextlib.asynccontextmanager
async def serving(page: Page, url: str, posted: PostedPage) -> AsyncIterator[None]:
    """Inside, the page's next request for ``url`` is answered with ``posted``, not by the site."""
    target = bare(url)

    def matches(requested: str) -> bool:
        return bare(requested) == target

    async def answer(route: Route) -> None:
        await route.fulfill(status=posted.status, content_type=posted.content_type, body=posted.body or b"")

    await page.route(matches, answer, times=1)
    try:
        yield
    finally:
        with contextlib.suppress(PlaywrightError):  # unused (the page never asked): never answer a later GET
            await page.unroute(matches, answer)


async def _read(response: Response) -> PostedPage:
    try:
        body: bytes | None = await response.body()
    except PlaywrightError:  # the page went on before the body could be read
        body = None
    content_type = response.headers.get("content-type", "text/html")
    return PostedPage(bare(response.url), response.status, content_type, body)


def bare(url: str) -> str:
    """``url`` without its fragment."""
    return url.split("#", 1)[0]
