"""The browser env against a raw Playwright floor on the same app, in one run.

    .venv/bin/python bench/browser_env.py [--site shop] [--rounds 5] [--resets 10] [--steps 20] [--episodes 8]

Rows:

- browser launch: Chromium started by the env's driver (its first reset), and by raw
  Playwright (``chromium.launch`` with the same flags) for comparison;
- reset: ``env.reset`` of one task (a fresh BrowserContext, the episode's database
  copied, the start page loaded and turned into the first observation), against the
  floor's reset: new context + new page + goto + ``page.aria_snapshot()``;
- step: ``env.step`` of a ``click`` on a link of the site's top navigation (it loads
  another page) with its new observation, against the floor's step: the same link's
  ``click()`` + ``page.aria_snapshot()``; the steps alternate between two links;
- 8 concurrent episodes: steps/s over 8 envs stepped from 8 threads, against 1.

The floor drives the same browser from the same event loop (the env's driver thread),
against the same app served by plain uvicorn over its own copy of the seed database:
no episode header, no route guard, no proxy, no accessibility-tree rewriting. Rounds
alternate env and floor; each figure is the median (p95 over all samples). Printed,
never asserted; the machine is shared and noisy, so only the ratios of one run mean
anything.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import uvicorn
from _common import header, table
from playwright.async_api import Browser, BrowserContext, Page

from agentenv import ToolCall
from agentenv.envs.browser import BrowserEnv, Site, driver, server, shutdown
from agentenv.envs.browser.apps import SITES
from agentenv.envs.browser.view import element_lines

LINKS = ("Cart", "Home")  # in every page's navigation on the shop; other sites: --links


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def p95(samples: list[float]) -> float:
    return sorted(samples)[max(0, int(len(samples) * 0.95) - 1)]


class Floor:
    """Raw Playwright on the env's browser and loop, against the app under plain uvicorn."""

    def __init__(self, site: Site, task_start: str) -> None:
        seed_db = server.seeds().path(site, 0)
        self.db = seed_db.with_name(f"floor-{site.name}.sqlite")
        shutil.copyfile(seed_db, self.db)
        self.db.chmod(0o600)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.origin = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.server = uvicorn.Server(
            uvicorn.Config(site.create_app(self.db), log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        )
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        self.start = task_start
        self.context: BrowserContext | None = None
        self.page: Page | None = None

    async def reset(self, browser: Browser) -> float:
        if self.context is not None:
            await self.context.close()
        t0 = time.perf_counter()
        self.context = await browser.new_context()
        self.page = await self.context.new_page()
        await self.page.goto(self.origin + self.start)
        await self.page.aria_snapshot()
        return time.perf_counter() - t0

    async def step(self, link: str) -> float:
        assert self.page is not None
        t0 = time.perf_counter()
        await self.page.get_by_role("link", name=link, exact=True).click()
        await self.page.aria_snapshot()
        return time.perf_counter() - t0

    async def close(self) -> None:
        if self.context is not None:
            await self.context.close()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def click(env: BrowserEnv, link: str) -> ToolCall:
    view = next(m["content"] for m in reversed(env.messages) if "URL: " in str(m["content"]))
    ref = next(r for r, role, name in element_lines(view) if (role, name) == ("link", link))
    return ToolCall("click", {"ref": ref})


def env_steps(env: BrowserEnv, task: str, steps: int, links: tuple[str, str]) -> list[float]:
    env.reset(seed=0, options={"task": task})
    times = []
    for i in range(steps):
        action = click(env, links[i % 2])
        t0 = time.perf_counter()
        *_, info = env.step(action)
        times.append(time.perf_counter() - t0)
        if info["error"] is not None:
            raise RuntimeError(f"the timed step failed: {info['error']}")
    return times


def concurrent_rate(envs: list[BrowserEnv], task: str, steps: int, links: tuple[str, str]) -> float:
    """Steps per second over ``envs``, each stepped ``steps`` times from its own thread."""
    for env in envs:
        env.reset(seed=0, options={"task": task})
    barrier = threading.Barrier(len(envs))

    def run(env: BrowserEnv) -> None:
        barrier.wait()
        for i in range(steps):
            *_, info = env.step(click(env, links[i % 2]))
            if info["error"] is not None:
                raise RuntimeError(f"a concurrent step failed: {info['error']}")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(envs)) as pool:
        list(pool.map(run, envs))
    return len(envs) * steps / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", default="shop", choices=sorted(SITES))
    parser.add_argument("--links", nargs=2, default=list(LINKS), help="two links of every page to click in turn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--resets", type=int, default=10, help="resets per round, each")
    parser.add_argument("--steps", type=int, default=20, help="steps per round, each")
    parser.add_argument("--episodes", type=int, default=8, help="concurrent episodes")
    args = parser.parse_args(argv)
    site, links = SITES[args.site], (args.links[0], args.links[1])
    task = site.agentenv_tasks()[0]
    print(header(f"browser env vs raw Playwright: site {site.name}, task {task.id}"))

    d = driver.driver()
    t0 = time.perf_counter()
    d.call(d.browser, 60, "launching the browser")
    launch_env = time.perf_counter() - t0
    env = BrowserEnv(site, max_turns=10_000)
    t0 = time.perf_counter()
    env.reset(seed=0, options={"task": task.id})
    first_reset = time.perf_counter() - t0
    floor = Floor(site, task.payload["start"])

    async def raw_launch() -> float:
        from playwright.async_api import async_playwright

        t = time.perf_counter()
        async with async_playwright() as p:  # the Playwright driver process started too, as the env's is
            browser = await p.chromium.launch(
                executable_path=driver.chromium_path(), headless=True, args=list(driver.CHROMIUM_ARGS)
            )
            elapsed = time.perf_counter() - t
            await browser.close()
        return elapsed

    launch_raw = d.call(raw_launch, 60, "a raw launch")

    async def floor_resets(n: int) -> list[float]:
        browser = await d.browser()
        return [await floor.reset(browser) for _ in range(n)]

    async def floor_steps(n: int) -> list[float]:
        browser = await d.browser()
        await floor.reset(browser)
        return [await floor.step(links[i % 2]) for i in range(n)]

    resets: dict[str, list[float]] = {"env": [], "floor": []}
    steps: dict[str, list[float]] = {"env": [], "floor": []}
    medians: dict[str, list[float]] = {"env reset": [], "floor reset": [], "env step": [], "floor step": []}
    env_steps(env, task.id, 4, links)  # warm up both paths
    d.call(lambda: floor_steps(4), 120, "warming the floor")
    for _ in range(args.rounds):
        r_env = []
        for _ in range(args.resets):
            t = time.perf_counter()
            env.reset(seed=0, options={"task": task.id})
            r_env.append(time.perf_counter() - t)
        r_floor = d.call(lambda: floor_resets(args.resets), 300, "the floor's resets")
        s_env = env_steps(env, task.id, args.steps, links)
        s_floor = d.call(lambda: floor_steps(args.steps), 300, "the floor's steps")
        for name, samples, store in (
            ("env reset", r_env, resets["env"]),
            ("floor reset", r_floor, resets["floor"]),
            ("env step", s_env, steps["env"]),
            ("floor step", s_floor, steps["floor"]),
        ):
            store.extend(samples)
            medians[name].append(statistics.median(samples))
    d.call(floor.close, 30, "closing the floor")
    floor.stop()

    envs = [BrowserEnv(site, max_turns=10_000) for _ in range(args.episodes)]
    one = statistics.median(concurrent_rate(envs[:1], task.id, args.steps, links) for _ in range(args.rounds))
    many = statistics.median(concurrent_rate(envs, task.id, args.steps, links) for _ in range(args.rounds))

    def ratio(a: str, b: str) -> str:
        return f"{statistics.median(medians[a]) / statistics.median(medians[b]):.2f}x"

    reset_env, reset_floor = statistics.median(medians["env reset"]), statistics.median(medians["floor reset"])
    step_env, step_floor = statistics.median(medians["env step"]), statistics.median(medians["floor step"])
    print(
        table(
            ["measure", "env", "raw Playwright floor", "env / floor", "target"],
            [
                ["browser launch", ms(launch_env), ms(launch_raw), "", ""],
                ["first reset (site server, seed database)", ms(first_reset), "", "", ""],
                ["reset p50", ms(reset_env), ms(reset_floor), ratio("env reset", "floor reset"), "<= 1.2x"],
                ["reset p95", ms(p95(resets["env"])), ms(p95(resets["floor"])), "", ""],
                ["step p50 (click + view)", ms(step_env), ms(step_floor), ratio("env step", "floor step"), "<= 1.5x"],
                ["step p95", ms(p95(steps["env"])), ms(p95(steps["floor"])), "", ""],
                ["steps/s, 1 episode", f"{one:.1f}", "", "", ""],
                [f"steps/s, {args.episodes} concurrent", f"{many:.1f}", "", f"{many / one:.2f}x of 1", ""],
            ],
        )
    )
    for e in [env, *envs]:
        e.close()
    shutdown()


if __name__ == "__main__":
    main()
