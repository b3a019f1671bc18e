"""Nothing leaves the site's origin, by any channel a page has (channels_site.py): for each,
a hostile page served through the env's own server tries to reach a TCP and a UDP listener
on other loopback ports, as it loads (no agent action) and when the agent clicks its button,
and neither listener receives a byte. The browser's own network log (``--log-net-log``,
written as it closes) must show no UDP datagram sent at all (so no DNS query either) and no
TCP connection to anything but the site's server.

Each probe is shown to be live: the same page in a Chromium without the env's lockdown
reaches its listener (or resolves its host name, or runs the desktop's mail handler), so
a probe that stopped working fails here instead of passing for the wrong reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import async_playwright

from agentenv.envs.browser import BrowserEnv
from agentenv.envs.browser import driver as drivers
from agentenv.envs.browser.server import EPISODE_HEADER, SiteServer
from agentenv.envs.browser.session import Session
from tests.envs.browser.channels_site import PROBES, ChannelSite, Outside
from tests.envs.browser.test_env import ref, step

pytestmark = pytest.mark.slow  # a browser per test

NETWORK = sorted(set(PROBES) - {"handlers"})
BARE_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-features=LocalNetworkAccessChecks")
"""A Chromium without the env's lockdown (and without the checks that would stop a page
reaching loopback on their own, which are Chromium's policy of the day, not the env's)."""


@dataclass(frozen=True)
class Traffic:
    """What Chromium's network log says the browser did on the network."""

    tcp: frozenset[str]
    """Every address it tried to open a TCP connection to."""
    udp: tuple[str, ...]
    """Every UDP datagram it sent, by destination ("" where the log names none, as for DNS)."""
    names: frozenset[str]
    """Every host name it was asked to resolve."""


def traffic(path: Path) -> Traffic:
    text = path.read_text()
    try:
        log = json.loads(text)
    except json.JSONDecodeError:  # a log the browser did not finish writing
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    kinds = {number: name for name, number in log["constants"]["logEventTypes"].items()}
    tcp, udp, names = set(), [], set()
    for event in log["events"]:
        kind, params = kinds.get(event["type"]), event.get("params", {})
        if kind == "TCP_CONNECT_ATTEMPT" and "address" in params:
            tcp.add(params["address"])
        elif kind == "UDP_BYTES_SENT":
            udp.append(params.get("address", ""))
        elif kind in ("HOST_RESOLVER_MANAGER_REQUEST", "HOST_RESOLVER_MANAGER_JOB") and "host" in params:
            names.add(str(params["host"]))
    return Traffic(frozenset(tcp), tuple(udp), frozenset(names))


@pytest.fixture
def outside() -> Iterator[Outside]:
    listeners = Outside()
    yield listeners
    listeners.close()


@pytest.fixture
def netlog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The next reset launches a browser that logs its network to the returned path."""
    drivers.shutdown()
    path = tmp_path / "netlog.json"
    monkeypatch.setattr(drivers, "CHROMIUM_ARGS", (*drivers.CHROMIUM_ARGS, f"--log-net-log={path}"))
    yield path
    drivers.shutdown()  # the next test's browser is launched without the log


def settle(env: BrowserEnv, attempts: int) -> None:
    """Wait (no agent action) until the page's attempt has run to its end ``attempts`` times."""

    async def wait(session: Session) -> None:
        await session._page().wait_for_function("n => window.settled >= n", arg=attempts, timeout=30_000)

    env._run(wait, 40, "waiting for the page's attempts")


def click(env: BrowserEnv, role: str, name: str) -> None:
    *_, truncated, info = step(env, "click", ref=ref(env.messages, role, name))
    assert not truncated and info["failure"] is None, info  # a blocked attempt is never infra


@pytest.mark.parametrize("channel", NETWORK)
def test_no_channel_of_a_page_reaches_another_port(make_env, outside, netlog, channel):
    site = ChannelSite(channel, outside)
    env = make_env(site.site())
    env.reset(seed=0)
    settle(env, 1)  # the page's attempt as it loads
    assert outside.seen == [], "reached with no agent action"
    click(env, "button", "Go")  # and again, with the user activation of the agent's click
    settle(env, 2)
    origin = env._server.origin.split("//", 1)[1]
    drivers.shutdown()  # the browser writes out its network log as it closes
    assert outside.seen == []
    seen = traffic(netlog)
    assert seen.udp == (), f"UDP sent to {sorted(set(seen.udp))}"
    assert seen.tcp <= {origin}, f"TCP to {sorted(seen.tcp - {origin})}"
    assert ("GET", "/") in site.requests  # the page was served through the env's server


def test_a_mailto_link_runs_nothing_outside_the_browser(make_env, outside, tmp_path, monkeypatch):
    """Chromium hands mailto: (and other schemes the desktop handles) to xdg-open: a click on a
    mail link ran a program on the host. The desktop's handlers here record that they ran."""
    ran = recording_handlers(tmp_path / "bin", monkeypatch)
    drivers.shutdown()  # the next browser is launched with that PATH
    env = make_env(ChannelSite("handlers", outside).site())
    env.reset(seed=0)
    settle(env, 1)  # the page sends itself to mailto: as it loads
    click(env, "link", "Write to us")
    click(env, "button", "Go")
    settle(env, 2)
    drivers.shutdown()
    assert not ran.exists(), ran.read_text()


# -- the probes are live: without the lockdown each one gets through -----------------


@pytest.mark.parametrize("channel", sorted(set(NETWORK) - {"names"}))
def test_without_the_lockdown_each_probe_reaches_its_listener(outside, channel):
    site = ChannelSite(channel, outside)
    visit_bare(site, reached=lambda: bool(outside.seen))
    assert outside.seen, f"the {channel} page reached nothing even in a browser without the lockdown"


def test_without_the_lockdown_the_names_page_makes_the_browser_resolve_a_name(outside, tmp_path):
    path = tmp_path / "netlog.json"
    visit_bare(ChannelSite("names", outside), args=(f"--log-net-log={path}",))
    assert any("agentenv-leak-probe.test" in name for name in traffic(path).names)


def test_without_the_lockdown_a_mailto_link_runs_the_desktops_handler(outside, tmp_path, monkeypatch):
    ran = recording_handlers(tmp_path / "bin", monkeypatch)
    visit_bare(ChannelSite("handlers", outside), click="text=Write to us", reached=ran.exists)
    assert "mailto:" in ran.read_text()


def recording_handlers(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An xdg-open and xdg-email first on PATH that append their arguments to the returned file."""
    folder.mkdir()
    ran = folder / "ran.txt"
    for name in drivers.DESKTOP_HANDLERS:
        handler = folder / name
        handler.write_text(f'#!/bin/sh\necho "$0 $@" >> {ran}\n')
        handler.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return ran


def visit_bare(
    site: ChannelSite, *, args: tuple[str, ...] = (), click: str = "#go", reached: Callable[[], bool] = lambda: False
) -> None:
    """Open the site's page in a plain Chromium (no proxy, no routes, no lockdown switches),
    click, and wait up to 10 s for ``reached()``."""
    server = SiteServer(site.site())
    token = server.register(site.app(Path()))

    async def visit() -> None:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=drivers.chromium_path(), args=[*BARE_ARGS, *args], env=dict(os.environ)
            )
            context = await browser.new_context(extra_http_headers={EPISODE_HEADER: token})
            page = await context.new_page()
            await page.goto(server.origin + "/", wait_until="domcontentloaded")
            await page.click(click)
            deadline = time.monotonic() + 10
            while not reached() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await browser.close()

    try:
        asyncio.run(visit())
    finally:
        server.stop()
