"""`BrowserEnv`: an agent using a real browser on local web apps, verified on the app's database.

The world: Debian's Chromium driven by Playwright from the process's one driver
thread (driver.py), a fresh BrowserContext per episode (session.py), and each
site's app under uvicorn on a loopback port over this episode's own SQLite copy
(server.py). The observation is the page's accessibility tree with a short ref per
actionable element, its URL and title, and what the last action did (view.py);
with ``screenshot=True`` also a PNG of the page, as an image part of the message.

Tools: ``click(ref)``, ``fill(ref, text)``, ``select(ref, option)``, ``press(key)``,
``scroll(direction)``, ``goto(url)``, ``back()`` and ``answer(text)`` (terminal). No
tool runs script the agent wrote. A ref that is not on the page (never issued, or
from a page since left), text with control characters or past its limit, an unknown
key or one that copies or pastes (Chromium's clipboard is shared by every episode), a
URL off the site or of another scheme: each is refused before the browser is touched,
as a ``format`` error with the format penalty. A navigation the page
attempts off the site is blocked (session.py), and the action is a ``tool`` error
with the ``valid_action`` penalty.

Rewards. Step: ``valid_action`` (``-tool_error_penalty`` when a call failed in the
browser, 0 otherwise; a bonus for merely valid actions is left out on purpose, a
policy would farm it with scrolls) and ``progress`` (``subgoal_reward`` for each of
the task's subgoals the first time it holds on the database). Task: the site's named
check on the episode's database beside its starting copy (and the answer), or the
page's own reward for a site with ``page_reward``, read on the task's own pages only
(`SiteTask.end_pages`; elsewhere 0).

Faults: a crashed page or browser, a hung navigation, a stopped site server or a
lost database is `InfraError` (truncated as ``infra``; `step` never raises for it);
the next reset relaunches what died. Snapshots carry the database, the URL and the
pages visited, cookies and localStorage, the form fields' values and focus, and the
response of a page that is a POST's result (served again on restore, never re-sent;
session.py says what is not kept); a restore refuses (ValueError) a database without the site's
schema (a trigger added by hand never runs), pages off the site, and a snapshot with no
page or database at all (the episode would go on over the last one's).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import importlib
import os
import shutil
import sqlite3
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator
from pydantic_core import PydanticCustomError

from agentenv import CallOutcome, Env, InfraError, Message, State, Task, TaskSet, ToolError, tool
from agentenv.core.spaces import MessagesSpace
from agentenv.core.tools import ToolSpec
from agentenv.envs.browser import driver as drivers
from agentenv.envs.browser import server as servers
from agentenv.envs.browser.apps._verify import changes
from agentenv.envs.browser.apps._verify import describe as describe_changes
from agentenv.envs.browser.arguments import AnswerText, InputText, Key, OptionLabel, Ref, SiteUrl
from agentenv.envs.browser.posted import MAX_POSTED_BYTES, PostedPage
from agentenv.envs.browser.session import Session, Settings
from agentenv.envs.browser.site import SEEDS, Site
from agentenv.envs.browser.view import FILLABLE_ROLES, SELECTABLE_ROLES, Node, View

__all__ = ["BrowserEnv", "BrowserPayload", "BrowserState", "load_site"]

T = TypeVar("T")
MAX_HISTORY = 50


class BrowserState(State):
    """Where the episode is. The page lives in the browser and the data in the
    episode's database; both are snapshotted apart (`BrowserEnv.snapshot_external`)."""

    site: str = ""
    url: str = "/"
    """The page's address on the site (path, query, fragment)."""
    title: str = ""
    history: list[str] = []
    """Pages opened in this episode, oldest first (``back`` walks it; at most 50)."""
    line: int = 0
    """First line of the page view shown (``scroll`` moves it; a new page starts at 0)."""
    db_seed: int = Field(0, ge=0, lt=SEEDS)
    """The seed the episode's database was filled with: the reset's seed (gymnasium's
    ``np_random_seed``) modulo `SEEDS`, so a seeded reset always gets the same data."""
    reached: list[int] = []
    """Indices of the task's subgoals reached so far."""
    answer: str | None = None
    db_changes: list[str] = []
    """What the episode changed in the site's database, one line a row (``"orders 1003:
    changed"``, `_verify.describe`), set when the task is verified on a site that gives its
    `Site.state`: why a writing task that changed more than asked, or a question answered
    after collateral damage, scored 0."""


class BrowserPayload(BaseModel):
    """A browser task's payload (what `site_task` writes)."""

    model_config = ConfigDict(extra="forbid")

    site: str
    start: str = "/"
    golden: list[dict[str, Any]] = []
    check: str = ""
    check_args: dict[str, Any] = {}
    writes: bool = True
    subgoals: list[tuple[str, dict[str, Any]]] = []
    end_pages: list[Annotated[str, Field(pattern=r"^/")]] | None = None
    """Where a page-scored task's reward counts (`SiteTask.end_pages`)."""


class _SavedPost(BaseModel):
    """The response of the POST the saved page came from (posted.py): served again on restore."""

    model_config = ConfigDict(extra="forbid")

    status: int = Field(ge=200, le=599)
    content_type: str = Field(max_length=200)
    body: str
    """Base64."""

    def page(self) -> PostedPage:
        try:
            body = base64.b64decode(self.body, validate=True)
        except binascii.Error:
            raise ValueError("the snapshot's POST page is not base64") from None
        if len(body) > MAX_POSTED_BYTES:
            raise ValueError(f"the snapshot's POST page is {len(body):,} bytes, over the {MAX_POSTED_BYTES:,} kept")
        return PostedPage("", self.status, self.content_type, body)


class _Saved(BaseModel):
    """What `BrowserEnv.snapshot_external` saves, checked on restore: a snapshot on disk may
    have been edited, so its database must have the site's schema and its pages be on the site."""

    model_config = ConfigDict(extra="forbid")

    db: str
    """The episode's database, serialised and base64-encoded."""
    storage: dict[str, Any] | None = None
    form: dict[str, Any] | None = None
    refs: dict[str, Any] | None = None
    posted: _SavedPost | None = None
    """Set when the page was a POST's result (older snapshots have none: their page reopens by GET)."""


def _end_pages(site: Site, payload: BrowserPayload) -> Sequence[str] | None:
    """The paths whose page reward counts for the task, None for any: see `SiteTask.end_pages`."""
    if payload.end_pages is not None:
        return payload.end_pages
    return None if {task.start for task in site.tasks} <= {payload.start} else [payload.start]


def _site_path(url: str) -> bool:
    """Whether ``url`` is a path on the site: the browser opens it as the site's origin + ``url``."""
    return url.startswith("/") and not url.startswith("//")


class _ViewSpace(MessagesSpace):
    """Messages whose content is text or OpenAI content parts (text and a page image)."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(m, dict)
            and m.get("role") in ("system", "user", "assistant", "tool")
            and (self.content.contains(m.get("content")) or _parts(m.get("content")))
            for m in x
        )


def _parts(content: Any) -> bool:
    return isinstance(content, list) and all(
        isinstance(p, dict) and (p.get("type") == "text" or p.get("type") == "image_url") for p in content
    )


class BrowserEnv(Env[BrowserState]):
    """A real browser on local web apps (see the module docstring)."""

    state_type = BrowserState
    payload_type = BrowserPayload
    max_turns = 30
    max_calls_per_action = 1
    """One browser action a turn: the refs of an action hold for the page it saw, and each
    call on a covered element waits out the action timeout (hundreds of them in one action
    held a step for most of an hour)."""
    instructions = (
        "You are using a web browser to do a task for a user. Each observation shows the page as an "
        "accessibility tree: one element per line with its role and name; elements you can act on carry a "
        "ref such as [e12]. Use the refs of the latest page view. When the task is done (or it asks for "
        "information), call answer with your final answer."
    )
    tool_error_penalty: float = 0.1
    subgoal_reward: float = 0.1

    def __init__(
        self,
        sites: Site | str | Sequence[Site | str],
        tasks: TaskSet | Sequence[Task] | None = None,
        *,
        screenshot: bool = False,
        max_view_chars: int = 20_000,
        action_timeout_s: float = 5.0,
        navigation_timeout_s: float = 15.0,
        viewport: tuple[int, int] = (1280, 720),
        **kwargs: Any,
    ) -> None:
        """
        Args:
            sites: The sites (a `Site`, or ``"module:ATTRIBUTE"`` naming one), or a list of them.
            tasks: Default: every task of every site.
            screenshot: Add a PNG of the page to each observation (for vision models).
            max_view_chars: The page view's size; a longer page is shown a window at a time.
            action_timeout_s: How long an action waits for its element to be ready.
            navigation_timeout_s: How long a page may take to load; longer is an infrastructure failure.
            viewport: The browser window's width and height in pixels.
            kwargs: Passed to `Env` (max_turns, parser, tool_prompt, render_mode, lean).
        """
        listed = [sites] if isinstance(sites, (Site, str)) else list(sites)
        if not listed:
            raise ValueError("BrowserEnv needs at least one site")
        self.sites: dict[str, Site] = {}
        for entry in listed:
            site = load_site(entry) if isinstance(entry, str) else entry
            if site.name in self.sites:
                raise ValueError(f"two sites are named {site.name!r}")
            self.sites[site.name] = site
        if max_view_chars < 200:
            raise ValueError(f"max_view_chars must be >= 200, got {max_view_chars}")
        if action_timeout_s <= 0 or navigation_timeout_s <= 0:
            raise ValueError("action_timeout_s and navigation_timeout_s must be > 0")
        self.max_view_chars = max_view_chars
        self.settings = Settings(
            viewport=(int(viewport[0]), int(viewport[1])),
            action_timeout_s=action_timeout_s,
            navigation_timeout_s=navigation_timeout_s,
            screenshot=screenshot,
        )
        self.tools = self._bound_tools()  # type: ignore[misc]  # per instance: validators that read the page
        self._driver: drivers.Driver | None = None
        self._session: Session | None = None
        self._server: servers.SiteServer | None = None
        self._token = ""
        self._apps: dict[str, Any] = {}
        self._name = uuid.uuid4().hex
        self._progress = 0
        super().__init__(tasks, **kwargs)
        for task in self.tasks:
            self._check_task(task)
        if screenshot:
            self.observation_space = _ViewSpace()

    # -- tools -----------------------------------------------------------------------

    @tool
    def click(self, ref: Ref) -> str:
        """Click an element of the page.

        Args:
            ref: The element's ref in the latest page view, e.g. "e12".
        """
        node = self._node(ref)
        if node.disabled:
            raise ToolError(f"{ref} is disabled")
        return self._do(lambda s: s.click(node))

    @tool
    def fill(self, ref: Ref, text: InputText) -> str:
        """Replace the text of a text field.

        Args:
            ref: The field's ref in the latest page view.
            text: The text to put in it.
        """
        node = self._node(ref)
        return self._do(lambda s: s.fill(node, text))

    @tool
    def select(self, ref: Ref, option: OptionLabel) -> str:
        """Choose an option of a drop-down list.

        Args:
            ref: The list's ref in the latest page view.
            option: The option's label, exactly as shown.
        """
        node = self._node(ref)
        return self._do(lambda s: s.select(node, option))

    @tool
    def press(self, key: Key) -> str:
        """Press a key on the element that has the focus (Enter submits a form from a field).

        Args:
            key: A key name (Enter, Tab, Escape, ArrowDown, Backspace, ...), an ASCII character,
                or a combination such as Control+a.
        """
        return self._do(lambda s: s.press(key))

    @tool
    def scroll(self, direction: Literal["up", "down"]) -> str:
        """Scroll the page; on a long page this shows the view's next (or previous) lines.

        Args:
            direction: "down" or "up".
        """
        view = self._view()
        start, end = view.window(self.state.line, self.max_view_chars)
        if direction == "down":
            line, edge = max(start + 1, end - 2), end >= len(view.lines)
        else:
            line, edge = max(0, start - (end - start) + 2), start == 0
        dy = self.settings.viewport[1] * 4 // 5
        said = self._do(lambda s: s.scroll(dy if direction == "down" else -dy), line=None if edge else line)
        if start == 0 and end >= len(view.lines):
            return f"The whole page is in the view already.\n{said}"
        if edge:
            return f"Already at the {'end' if direction == 'down' else 'top'} of the page.\n{said}"
        return said

    @tool
    def goto(self, url: SiteUrl) -> str:
        """Open a page of this site.

        Args:
            url: A path on the site, such as "/cart" (or the site's full URL).
        """
        return self._do(lambda s: s.goto(url))

    @tool
    def back(self) -> str:
        """Go back to the page before this one."""
        history = list(self.state.history)
        if len(history) < 2:
            raise ToolError("there is no earlier page in this episode")
        self.state.history = history[:-1]
        try:
            return self._do(lambda s: s.goto(history[-2]))
        except ToolError:
            self.state.history = history
            raise

    @tool(name="answer", terminal=True)  # the method's own name would replace Env.answer
    def give_answer(self, text: AnswerText) -> str:
        """Finish the task and give your final answer (or a short note when the task asked for no information).

        Args:
            text: The answer.
        """
        self.state.answer = text
        return "Answer recorded."

    # -- hooks ---------------------------------------------------------------------

    def default_tasks(self) -> TaskSet:
        return TaskSet([task for site in self.sites.values() for task in site.agentenv_tasks()])

    def initial_state(self, task: Task) -> BrowserState:
        payload: BrowserPayload = self.payload
        seed = int(self.np_random_seed) % SEEDS  # a reset without a seed draws 128 bits
        self._progress = 0
        view = self._open(self.sites[payload.site], seed, payload.start, restore=None)
        return BrowserState(site=payload.site, url=view.url, title=view.title, history=[view.url], db_seed=seed)

    def render_intro(self, task: Task) -> list[Message]:
        intro = f"{task.prompt}\n\n{self._page_text()}"
        return [
            {"role": "system", "content": self.system_prompt(task)},
            {"role": "user", "content": self._with_screenshot(intro)},
        ]

    def render_result(self, outcome: CallOutcome) -> Message:
        message = super().render_result(outcome)
        if outcome.ok and self.settings.screenshot and outcome.call.name != "answer":
            message["content"] = self._with_screenshot(message["content"])
        return message

    def step_rewards(self, outcomes: list[CallOutcome]) -> dict[str, float]:
        progress, self._progress = self._progress, 0
        failed = any(not o.ok and o.error_kind == "tool" for o in outcomes)
        return {"valid_action": -self.tool_error_penalty if failed else 0.0, "progress": self.subgoal_reward * progress}

    def closing_rewards(self, task_rewards: dict[str, float]) -> dict[str, float]:
        # Sub-goals hold on the way to a solve, and on the way to overdoing it: a task of
        # "exactly these and nothing else" done with one too many kept them all.
        if task_rewards["task"] >= self.success_threshold or not self.state.reached:
            return {}
        return {"progress": -self.subgoal_reward * len(self.state.reached)}

    def verify(self, task: Task) -> float:
        payload: BrowserPayload = self.payload
        site = self.sites[payload.site]
        if site.page_reward is not None:
            pages = _end_pages(site, payload)
            if pages is not None and urlsplit(self.state.url).path not in pages:
                return 0.0  # another task's page, scored by that task's reward
            expression = site.page_reward
            value = self._run(lambda s: s.evaluate(expression), self.settings.navigation_timeout_s, "the page's reward")
            return _unit(value, f"{site.name}'s page reward")
        with self._databases(site) as (db, start):
            value = site.checks[payload.check](db, start, self.state.answer, **payload.check_args)
            if site.state is not None:
                self.state.db_changes = describe_changes(changes(site.state(start), site.state(db)))
        return _unit(value, f"check {payload.check!r}")

    def snapshot_external(self) -> dict[str, Any] | None:
        session = self._session
        if session is None or session.view is None or self._state is None:
            return None
        captured = self._run(lambda s: s.capture(), self.settings.navigation_timeout_s, "saving the page")
        db = sqlite3.connect(f"file:{self._db_path(self.state.site)}?mode=ro", uri=True)
        try:  # a site with no tables has an empty file, which SQLite refuses to serialise
            data = db.serialize() if db.execute("PRAGMA page_count").fetchone()[0] else b""
        finally:
            db.close()
        posted: PostedPage | None = captured.pop("posted")
        return {
            **captured,
            "db": base64.b64encode(data).decode("ascii"),
            "refs": session.book.export(session.view),
            "posted": None if posted is None else _posted_json(posted),
        }

    def restore_external(self, data: Any) -> None:
        if data is None:
            # `snapshot` always saves a live episode's page and database. Without them the
            # episode would go on over the page and database this env's last episode left.
            raise ValueError("the snapshot holds no page or database of the site (its 'external' is null)")
        saved, state = _Saved.model_validate(data), self.state
        site = self.sites.get(state.site)
        if site is None:
            raise ValueError(f"the snapshot is of site {state.site!r}, not one of {sorted(self.sites)}")
        for url in (state.url, *state.history):
            if not _site_path(url):
                raise ValueError(f"the snapshot's page {url[:100]!r} is not a path on the site (such as /cart)")
        try:
            database = base64.b64decode(saved.db, validate=True)
        except binascii.Error:
            raise ValueError("the snapshot's database is not base64") from None
        posted = saved.posted.page() if saved.posted is not None else None
        servers.check_saved_database(database, servers.seeds().path(site, state.db_seed))
        self._progress = 0
        self._open(site, state.db_seed, state.url, restore={**saved.model_dump(), "db": database, "posted": posted})

    def on_close(self) -> None:
        session, self._session = self._session, None
        if session is not None and self._driver is not None:
            with contextlib.suppress(InfraError, RuntimeError):
                self._driver.call(session.close, self.settings.navigation_timeout_s, "closing the episode")
        if self._server is not None:
            self._server.unregister(self._token)
            shutil.rmtree(self._dir(), ignore_errors=True)

    # -- internals -------------------------------------------------------------------

    def _open(self, site: Site, seed: int, path: str, restore: dict[str, Any] | None) -> View:
        """This episode's database, server registration and page; one retry after a fault
        (a dead server or browser is replaced on the way)."""
        try:
            return self._open_once(site, seed, path, restore, verify=False)
        except InfraError:
            return self._open_once(site, seed, path, restore, verify=True)

    def _open_once(self, site: Site, seed: int, path: str, restore: dict[str, Any] | None, *, verify: bool) -> View:
        server = servers.acquire(site)
        if self._server is not None:
            self._server.unregister(self._token)
        self._server, self._token = server, ""
        self._dir().mkdir(parents=True, exist_ok=True)
        db, start = self._db_path(site.name), self._start_path(site.name)
        try:
            seed_db = servers.seeds().path(site, seed)
            start.unlink(missing_ok=True)
            os.link(seed_db, start)  # survives the seed's eviction from the cache
            if restore is not None:
                db.write_bytes(restore["db"])
            else:
                shutil.copyfile(seed_db, db)
            db.chmod(0o600)
        except OSError as e:
            raise InfraError(f"could not prepare the episode database: {e}") from None
        app = self._apps.get(str(db))  # keyed by path: after a shutdown the data directory is a new one
        if app is None:
            app = self._apps[str(db)] = site.create_app(db)
        self._token = server.register(app)
        current = drivers.driver()
        if self._driver is not current:  # first use, or the driver was shut down since: start afresh
            self._driver, self._session = current, None
        if self._session is None:
            self._session = Session(self.settings, self._server_alive)
        session, token, origin = self._session, self._token, server.origin
        driver = self._driver

        async def open_page() -> View:
            return await session.open(await driver.browser(verify=verify), origin, token, path, restore)

        timeout = drivers.LAUNCH_TIMEOUT_S + 2 * self.settings.navigation_timeout_s
        return driver.call(open_page, timeout, "opening the page")

    def _server_alive(self) -> bool:
        return self._server is not None and self._server.alive()

    def _do(self, work: Callable[[Session], Awaitable[str]], *, line: int | None = None) -> str:
        """Run one action in the browser and show its result: what it did and the page now."""
        timeout = self.settings.action_timeout_s + 2 * self.settings.navigation_timeout_s + 5
        before = self._session.view if self._session is not None else None
        try:
            said = self._run(work, timeout, "the action")
        except ToolError as e:
            if self._session is not None and self._session.view is not before:  # the page changed: show it
                raise ToolError(f"{e}\n{self._page_text()}") from None
            raise
        finally:
            self._sync(line)
        self._check_subgoals()
        return f"{said}\n{self._page_text()}" if said else self._page_text()

    def _run(self, work: Callable[[Session], Awaitable[T]], timeout_s: float, what: str) -> T:
        session, driver = self._session, self._driver
        if session is None or driver is None:
            raise InfraError("the episode has no browser page (it failed to open); reset again")
        return driver.call(lambda: work(session), timeout_s, what)

    def _sync(self, line: int | None) -> None:
        """The state's page fields from the session's latest view."""
        session = self._session
        view = session.view if session is not None else None
        if view is None:
            return
        state = self.state
        if view.url != state.url:
            state.line = 0
        elif line is not None:
            state.line = line
        state.line = view.window(state.line, self.max_view_chars)[0] if view.lines else 0
        state.url, state.title = view.url, view.title
        if not state.history or state.history[-1] != view.url:
            state.history = [*state.history, view.url][-MAX_HISTORY:]

    def _check_subgoals(self) -> None:
        payload: BrowserPayload = self.payload
        pending = [i for i in range(len(payload.subgoals)) if i not in self.state.reached]
        if not pending:
            return
        site = self.sites[payload.site]
        with self._databases(site) as (db, _):
            reached = [i for i in pending if site.subgoals[payload.subgoals[i][0]](db, **payload.subgoals[i][1])]
        if reached:
            self.state.reached = [*self.state.reached, *reached]
            self._progress += len(reached)

    @contextlib.contextmanager
    def _databases(self, site: Site) -> Iterator[tuple[sqlite3.Connection, sqlite3.Connection]]:
        """The episode's database and its starting copy, read-only."""
        paths = self._db_path(site.name), self._start_path(site.name)
        for path in paths:
            if not path.is_file():
                raise InfraError(f"the episode database {path.name} is gone")
        db, start = (sqlite3.connect(f"file:{p}?mode=ro", uri=True) for p in paths)
        try:
            yield db, start
        finally:
            db.close()
            start.close()

    def _dir(self) -> Path:
        """This env's folder of databases: one per site, and its starting copy."""
        return servers.episode_dir() / self._name

    def _db_path(self, site: str) -> Path:
        return self._dir() / f"{servers.safe_name(site)}.sqlite"

    def _start_path(self, site: str) -> Path:
        return self._dir() / f"{servers.safe_name(site)}-start.sqlite"

    def _view(self) -> View:
        view = self._session.view if self._session is not None else None
        if view is None:
            raise InfraError("the episode has no page view (the page failed to open); reset again")
        return view

    def _node(self, ref: str) -> Node:
        return self._view().nodes[ref]  # the bound validator checked that it is there

    def _page_text(self) -> str:
        return self._view().render(self.state.line if self._state is not None else 0, self.max_view_chars)

    def _with_screenshot(self, text: str) -> Any:
        shot = self._session.screenshot if self._session is not None else None
        if not self.settings.screenshot or shot is None:
            return text
        image = "data:image/png;base64," + base64.b64encode(shot).decode("ascii")
        return [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": image}}]

    def _check_task(self, task: Task) -> None:
        payload = BrowserPayload.model_validate(task.payload)
        site = self.sites.get(payload.site)
        if site is None:
            raise ValueError(f"task {task.id!r} is on site {payload.site!r}, not one of {sorted(self.sites)}")
        if site.page_reward is None and payload.check not in site.checks:
            raise ValueError(f"task {task.id!r}: site {site.name!r} has no check {payload.check!r}")
        for name, _ in payload.subgoals:
            if name not in site.subgoals:
                raise ValueError(f"task {task.id!r}: site {site.name!r} has no subgoal {name!r}")
        if not payload.start.startswith("/"):
            raise ValueError(f"task {task.id!r}: start must be a path on the site, got {payload.start!r}")

    # -- validators bound to this env: what needs the live page -----------------------

    def _bound_tools(self) -> dict[str, ToolSpec]:
        tools = {}
        for name, spec in type(self).tools.items():
            fields = spec.args_model.model_fields
            validators: dict[str, Any] = {}
            if "ref" in fields:
                validators["check_ref"] = field_validator("ref")(_bind(self._check_ref, name))
            if "url" in fields:
                validators["check_url"] = field_validator("url")(_bind(self._check_url, name))
            if validators:
                model = create_model(spec.args_model.__name__, __base__=spec.args_model, __validators__=validators)
                spec = dataclasses.replace(spec, args_model=model)
            tools[name] = spec
        return tools

    def _check_ref(self, tool_name: str, ref: str) -> str:
        session = self._session
        view = session.view if session is not None else None
        node = view.nodes.get(ref) if view is not None else None
        if node is None:
            if session is not None and session.book.issued(ref):
                raise _refused(f"{ref} is no longer on the page (it changed since); use a ref from the latest view")
            raise _refused(f"there is no element {ref} on this page; use a ref from the latest page view")
        if tool_name == "fill" and node.role not in FILLABLE_ROLES:
            raise _refused(f"{ref} is a {node.role}, not a text field; fill takes a textbox")
        if tool_name == "select" and node.role not in SELECTABLE_ROLES:
            raise _refused(f"{ref} is a {node.role}, not a list of options; select takes a combobox")
        return ref

    def _check_url(self, tool_name: str, url: str) -> str:
        if _site_path(url):
            return url
        origin = self._server.origin if self._server is not None else ""
        try:
            parts = urlsplit(url)
        except ValueError:
            raise _refused("that is not a URL; give a path on this site such as /cart") from None
        if parts.scheme in ("http", "https") and origin and servers.same_origin(url, origin):
            return (
                (parts.path or "/")
                + (f"?{parts.query}" if parts.query else "")
                + (f"#{parts.fragment}" if parts.fragment else "")
            )
        if parts.scheme and parts.scheme not in ("http", "https"):
            raise _refused(f"goto opens pages of this site only, not {parts.scheme}: URLs; give a path such as /cart")
        if parts.scheme or url.startswith("//"):
            raise _refused("goto opens pages of this site only, not other sites; give a path such as /cart")
        raise _refused("give a path that starts with / (such as /cart)")


def _bind(check: Callable[[str, str], str], tool_name: str) -> Any:
    def validate(cls: Any, value: str) -> str:
        return check(tool_name, value)

    return validate


def _refused(reason: str) -> PydanticCustomError:
    return PydanticCustomError("refused", "{reason}", {"reason": reason})


def _posted_json(posted: PostedPage) -> dict[str, Any]:
    body = base64.b64encode(posted.body or b"").decode("ascii")
    return {"status": posted.status, "content_type": posted.content_type, "body": body}


def _unit(value: Any, what: str) -> float:
    if not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:  # a bool is 0 or 1
        raise ValueError(f"{what} must give a number in [0, 1], got {value!r:.100}")
    return float(value)


def load_site(path: str) -> Site:
    """The `Site` named ``"module:ATTRIBUTE"``."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"a site is named 'module:ATTRIBUTE', got {path!r}")
    site = getattr(importlib.import_module(module_name), attr)
    if not isinstance(site, Site):
        raise TypeError(f"{path} is a {type(site).__name__}, not a Site")
    return site
