"""Serving the browser env's sites for tests: each app under uvicorn on a loopback port
over a database the test resets, one Chromium for the whole module, and a driver that
runs golden actions with raw Playwright."""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")

from agentenv.envs.browser.site import Site, SiteTask  # noqa: E402


def build_db(site: Site, seed: int, path: Path) -> Path:
    db = sqlite3.connect(path)
    try:
        with db:
            db.executescript(site.schema)
            site.seed(db, seed)
    finally:
        db.close()
    return path


@dataclass
class Served:
    """A site's app serving the database at ``db``; `reset` puts a fresh seeded copy there."""

    site: Site
    origin: str
    db: Path
    root: Path
    templates: dict[int, Path] = field(default_factory=dict)

    def reset(self, seed: int) -> Path:
        """A fresh episode database for ``seed``; returns its start copy (read-only)."""
        if seed not in self.templates:
            self.templates[seed] = build_db(self.site, seed, self.root / f"{self.site.name}-seed{seed}.sqlite")
        shutil.copyfile(self.templates[seed], self.db)
        return self.templates[seed]

    def score(self, task: SiteTask, start: Path, answer: str | None) -> float:
        db = sqlite3.connect(self.db)
        first = sqlite3.connect(f"file:{start}?mode=ro", uri=True)
        try:
            return self.site.checks[task.check](db, first, answer, **task.check_args)
        finally:
            db.close()
            first.close()


class Server:
    """uvicorn on a thread, on a socket bound before it starts (no port race)."""

    def __init__(self, app: object) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.origin = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.sock.close()


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Site], Served]]:
    """``serve(site)``: the site's app, started once per module."""
    root = tmp_path_factory.mktemp("sites")
    started: dict[str, tuple[Server, Served]] = {}

    def get(site: Site) -> Served:
        if site.name not in started:
            db = root / f"{site.name}.sqlite"
            build_db(site, 0, db)
            server = Server(site.create_app(db))
            started[site.name] = (server, Served(site, server.origin, db, root))
        return started[site.name][1]

    yield get
    for server, _ in started.values():
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = shutil.which("chromium")
    if executable is None:
        if os.environ.get("AGENTENV_REQUIRE_BROWSER") == "1":  # scripts/test.sh installs it: a skip would hide a bug
            pytest.fail("AGENTENV_REQUIRE_BROWSER=1 but Chromium is not installed")
        pytest.skip("Chromium is not installed")
    from agentenv.envs.browser.driver import CHROMIUM_ARGS  # the env's own launch flags

    playwright = sync_api.sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=executable, headless=True, args=list(CHROMIUM_ARGS))
        yield chromium
        chromium.close()
    finally:
        playwright.stop()


def run_golden(page: Any, origin: str, task: SiteTask) -> str | None:
    """Drive ``task``'s golden actions from its start page; returns the answer it gives, if any."""
    page.goto(urljoin(origin, task.start))
    given = None
    for action in task.golden:
        if action.tool == "answer":
            given = action.text
        elif action.tool == "goto":
            page.goto(urljoin(origin, action.text))
        elif action.tool == "back":
            page.go_back()
        elif action.tool == "scroll":
            page.mouse.wheel(0, -600 if action.text == "up" else 600)
        elif action.tool == "press":
            page.keyboard.press(action.text)
        else:
            assert action.target is not None
            target = action.target
            element = page.get_by_role(target.role, name=target.name, exact=True).nth(target.nth)
            if action.tool == "click":
                element.click()
            elif action.tool == "fill":
                element.fill(action.text)
            elif action.tool == "select":
                element.select_option(label=action.text)
            else:
                raise AssertionError(f"unknown tool {action.tool!r}")
        page.wait_for_load_state()
    return given


@dataclass
class Episode:
    """A site's app under Starlette's TestClient over a fresh database, and its start copy."""

    site: Site
    client: Any
    db: Path
    start: Path

    def task(self, task_id: str) -> SiteTask:
        return next(t for t in self.site.tasks if t.id == task_id)

    def score(self, task_id: str, answer: str | None = None, **args: object) -> float:
        """The task's check on the episode so far (``args`` replace its check arguments)."""
        task = self.task(task_id)
        db = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        start = sqlite3.connect(f"file:{self.start}?mode=ro", uri=True)
        try:
            return self.site.checks[task.check](db, start, answer, **{**task.check_args, **args})
        finally:
            db.close()
            start.close()

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        db = sqlite3.connect(self.db)
        try:
            return db.execute(sql, params).fetchall()
        finally:
            db.close()


@pytest.fixture
def episode(tmp_path: Path) -> Callable[..., Episode]:
    """``episode(site, seed=0)``: a fresh database for the site and a TestClient on its app."""
    from starlette.testclient import TestClient

    made = itertools.count()

    def make(site: Site, seed: int = 0) -> Episode:
        n = next(made)
        start = build_db(site, seed, tmp_path / f"{site.name}-{n}-start.sqlite")
        db = tmp_path / f"{site.name}-{n}.sqlite"
        shutil.copyfile(start, db)
        return Episode(site, TestClient(site.create_app(db)), db, start)

    return make
