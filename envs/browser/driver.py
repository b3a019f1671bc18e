"""The process's one browser, driven from one owner thread.

Playwright's sync API is bound to the thread that started it, and the rollout
engine steps envs from a thread pool. So one daemon thread runs an asyncio loop,
the async API lives on it, and every env submits coroutines to it
(`Driver.call`, `asyncio.run_coroutine_threadsafe`) and waits with a timeout: any
thread may step any env, and episodes on different threads interleave on the loop
while the browser does the work.

The browser is Debian's Chromium (``executable_path=shutil.which("chromium")``),
headless, launched on first use and shared by every env of the process; each episode
has its own BrowserContext (session.py).

What the browser itself may do is locked down at launch, where no page can undo it
(`CHROMIUM_ARGS`; session.py's context proxy and route guard do the rest): WebRTC
sends no UDP (``--webrtc-ip-handling-policy=disable_non_proxied_udp``: no STUN, TURN
or ICE check to any port; TCP only through the context's proxy, which refuses it),
no host name is ever looked up (``--host-resolver-rules``: every name but 127.0.0.1,
the sites' address, fails to resolve, so no DNS query leaves the machine), and a
link to ``mailto:`` or another scheme the desktop handles opens nothing: Chromium
runs ``xdg-open`` / ``xdg-email`` for those, and finds this driver's own, which do
nothing, first on its PATH (`_no_handlers`).

A browser that died (crashed, killed) is relaunched on the next `Driver.browser` call,
and the Playwright driver process with it when that died too; the env calls it at reset, so the next reset recovers.
`shutdown` (atexit) closes everything. Left out: a pool of several browsers (one
Chromium serves many contexts), browsers other than Chromium.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
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
    # WebRTC: no UDP at all (no STUN, TURN or ICE connectivity check to any address); what
    # it may send over TCP goes through the context's proxy, the site's server, which refuses it.
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    # No name lookups: a DNS query would carry what a page put in a host name off the machine.
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
)
"""Chromium's switches. The WebRTC one is Chromium's own name for the policy (the
``--force-webrtc-ip-handling-policy`` that some guides give is ignored by this Chromium;
tests/envs/browser/test_channels.py fails if WebRTC sends anything)."""
DESKTOP_HANDLERS = ("xdg-open", "xdg-email")
"""What Chromium runs on Linux for a URL of a scheme it does not handle itself (mailto:, ssh:, ...)."""
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
        self._handlers: Path | None = None
        self.launches = 0
        """How many times a browser was launched (a relaunch after a crash counts)."""

    def call(self, work: Callable[[], Awaitable[T]], timeout_s: float, what: str) -> T:
        """Run ``work()`` on the loop and wait for it; past ``timeout_s`` it is cancelled and
        `InfraError` raised. Exceptions of ``work`` come through as they are."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("Driver.call from the driver's own thread would wait for itself")
        coroutine = _run(work)
        try:
            future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        except RuntimeError:  # the loop is closed (after `shutdown`)
            coroutine.close()
            raise
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
        if self._handlers is None:
            self._handlers = _no_handlers()
        path = os.pathsep.join([str(self._handlers), os.environ.get("PATH", os.defpath)])
        return await self._playwright.chromium.launch(
            executable_path=chromium_path(),
            headless=True,
            args=list(CHROMIUM_ARGS),
            env={**os.environ, "PATH": path},  # the browser's own environment; this process's is untouched
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
        if self._handlers is not None:
            shutil.rmtree(self._handlers, ignore_errors=True)


def _no_handlers() -> Path:
    """A folder of `DESKTOP_HANDLERS` that do nothing, to put first on the browser's PATH: a page
    (or an agent's click) on a ``mailto:`` link ran the desktop's ``xdg-open`` on the host."""
    folder = Path(tempfile.mkdtemp(prefix="agentenv-chromium-"))
    for name in DESKTOP_HANDLERS:
        handler = folder / name
        handler.write_text(
            "#!/bin/sh\n# agentenv: a page of the browser env opens nothing outside the browser\nexit 0\n"
        )
        handler.chmod(0o755)
    return folder


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
