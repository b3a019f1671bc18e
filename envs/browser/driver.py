"""The process's one browser, driven from one owner thread.

Playwright's sync API is bound to the thread that started it, and the rollout
engine steps envs from a thread pool. So one daemon thread runs an asyncio loop,
the async API lives on it, and every env submits coroutines to it
(`Driver.call`, `asyncio.run_coroutine_threadsafe`) and waits with a timeout: any
thread may step any env, and episodes on different threads interleave on the loop
while the browser does the work.

The browser is Debian's Chromium (``executable_path=shutil.which("chromium")``),
headless, launched on first use and shared by every env of the process; each episode
has its own BrowserContext (session.py). A browser that died (crashed, killed) is
relaunched on the next `Driver.browser` call, and the Playwright driver process with
it when that died too; the env calls it at reset, so the next reset recovers.
`shutdown` (atexit) closes everything. Left out: a pool of several browsers (one
Chromium serves many contexts), browsers other than Chromium.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import shutil
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from playwright.async_api import Browser, Playwright, async_playwright
from playwright.async_api import Error as PlaywrightError

from agentenv.core.errors import InfraError

__all__ = ["CHROMIUM_ARGS", "Driver", "driver", "shutdown"]

T = TypeVar("T")

CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
)
LAUNCH_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 5.0


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise InfraError("no chromium on PATH: install Debian's chromium package (scripts/setup.sh does)")
    return path


class Driver:
    """An event loop on its own thread, and the browser on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agentenv-browser", daemon=True)
        self._thread.start()
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._lock: asyncio.Lock | None = None
        self.launches = 0
        """How many times a browser was launched (a relaunch after a crash counts)."""

    def call(self, work: Callable[[], Awaitable[T]], timeout_s: float, what: str) -> T:
        """Run ``work()`` on the loop and wait for it; past ``timeout_s`` it is cancelled and
        `InfraError` raised. Exceptions of ``work`` come through as they are."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("Driver.call from the driver's own thread would wait for itself")
        future = asyncio.run_coroutine_threadsafe(_run(work), self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise InfraError(f"the browser did not finish {what} within {timeout_s:g} s") from None

    async def browser(self, *, verify: bool = False) -> Browser:
        """The live browser, launched (or relaunched) here. On the loop. ``verify``: prove it
        answers (open and close a context) rather than trust its connected flag, which stays
        up for a while when the Playwright driver process dies."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._browser is not None and self._browser.is_connected():
                if not verify or await _answers(self._browser):
                    return self._browser
                await self._discard_playwright()  # the browser answers nothing: restart it all
            await self._discard_browser()
            try:
                self._browser = await self._launch()
            except PlaywrightError:  # the Playwright driver process itself is gone: start a new one
                await self._discard_playwright()
                try:
                    self._browser = await self._launch()
                except PlaywrightError as e:
                    raise InfraError(f"chromium did not start: {_first_line(e)}") from None
            self.launches += 1
            return self._browser

    async def _launch(self) -> Browser:
        if self._playwright is None:
            self._playwright = await async_playwright().start()
        return await self._playwright.chromium.launch(
            executable_path=chromium_path(),
            headless=True,
            args=list(CHROMIUM_ARGS),
            timeout=LAUNCH_TIMEOUT_S * 1000,
        )

    async def _discard_browser(self) -> None:
        browser, self._browser = self._browser, None
        if browser is not None:
            with contextlib.suppress(Exception):  # a dead connection fails in its own ways
                await asyncio.wait_for(browser.close(), CLOSE_TIMEOUT_S)

    async def _discard_playwright(self) -> None:
        await self._discard_browser()
        playwright, self._playwright = self._playwright, None
        if playwright is not None:
            with contextlib.suppress(Exception):  # its transport may be broken in any way
                await asyncio.wait_for(playwright.stop(), CLOSE_TIMEOUT_S)

    def connected(self) -> bool:
        return self._browser is not None and self._browser.is_connected()

    def close(self) -> None:
        """Close the browser and Playwright, and stop the loop."""
        if not self._thread.is_alive():
            return

        async def close_all() -> None:
            await self._discard_browser()
            await self._discard_playwright()

        with contextlib.suppress(InfraError):
            self.call(close_all, LAUNCH_TIMEOUT_S, "closing")
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(LAUNCH_TIMEOUT_S)
        if not self._thread.is_alive():
            self.loop.close()


async def _answers(browser: Browser) -> bool:
    try:
        context = await asyncio.wait_for(browser.new_context(), CLOSE_TIMEOUT_S)
        await asyncio.wait_for(context.close(), CLOSE_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - any failure means it does not answer
        return False
    return True


async def _run(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


_lock = threading.Lock()
_driver: Driver | None = None


def driver() -> Driver:
    """This process's driver, made on first use."""
    global _driver
    with _lock:
        if _driver is None:
            _driver = Driver()
            atexit.register(shutdown)
        return _driver


def shutdown() -> None:
    """Close the browser and stop the driver's thread (atexit; tests). The next use starts anew."""
    global _driver
    with _lock:
        current, _driver = _driver, None
    if current is not None:
        current.close()


def describe(error: BaseException) -> str:
    """A Playwright error's first line, without its call log."""
    return _first_line(error)
