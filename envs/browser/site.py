"""The authoring contract of the browser env: a site is a web app over SQLite, its tasks,
and the checks that verify them on the app's database.

A `Site` is the app and everything about it that the env needs:

- ``schema`` and ``seed(db, seed)``: the tables and an episode's starting rows (a
  fresh SQLite file per episode, filled once per seed and copied);
- ``create_app(db_path)``: a Starlette/FastAPI ASGI app serving server-rendered
  HTML over that file (opened per request, so snapshot/restore can swap it);
- ``checks``: named verifier functions ``(db, start, answer, **args) -> float`` in
  [0, 1], reading the database after the episode beside a copy of it as the episode
  began (so a check can require that nothing else changed: an agent that places ten
  orders to be sure of one scores 0), and, for information tasks, the agent's final
  answer;
- ``subgoals``: named predicates ``(db, **args) -> bool`` a task may list as step
  progress;
- ``tasks``: `SiteTask` data;
- ``page_reward`` (optional, added after the first version; None keeps the behaviour
  above): a fixed JavaScript expression of the site's own, for pages that score
  themselves in the browser (MiniWoB-style). When set, the task reward is its value
  on the page as the episode ends, a number in [0, 1], and a task's ``check`` is not
  looked up. Only the task's own pages count (``SiteTask.end_pages``): on a site whose
  tasks start on different pages, an easy task's page would otherwise pay a hard one.
  The env evaluates exactly this expression; no text of the agent's ever
  runs as script. `agentenv.envs.browser.static_site` builds such a site from HTML files.

A task is data, not code, so task sets load from JSONL like every other env's: its
golden actions name elements the way the accessibility tree does (ARIA role and
accessible name, `Target`), so the same golden run drives raw Playwright
(``page.get_by_role(role, name=name, exact=True).nth(nth)``) and the env (whose
observation gives each element a short ref: the oracle looks the target up there).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentenv import Task, TaskMeta

__all__ = ["SEEDS", "Action", "Check", "Site", "SiteTask", "Subgoal", "Target", "site_task"]

ToolName = Literal["click", "fill", "select", "press", "scroll", "goto", "back", "answer"]
Check = Callable[..., float]
"""``(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, **args) -> float`` in [0, 1]."""
Subgoal = Callable[..., bool]
"""``(db: sqlite3.Connection, **args) -> bool``."""
SEEDS = 2**31
"""A site's ``seed(db, seed)`` gets a seed in ``[0, SEEDS)``: the reset's seed modulo this (a
reset without one draws a 128-bit seed, which SQLite's 64-bit INTEGER cannot hold). Any
column, Python ``random.Random`` or page script takes it as it is."""


@dataclass(frozen=True)
class Target:
    """An element as the accessibility tree names it."""

    role: str
    """ARIA role: ``link``, ``button``, ``textbox``, ``combobox``, ``checkbox``, ..."""
    name: str
    """Accessible name, matched exactly."""
    nth: int = 0
    """Which one when several share role and name, in document order."""


@dataclass(frozen=True)
class Action:
    """One golden action: a browser tool and its arguments."""

    tool: ToolName
    target: Target | None = None
    """The element of click, fill and select."""
    text: str | None = None
    """fill's text, select's option label, press's key, scroll's direction
    (``up``/``down``), goto's path (relative to the site's origin), answer's text."""

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": self.tool}
        if self.target is not None:
            out["target"] = {"role": self.target.role, "name": self.target.name, "nth": self.target.nth}
        if self.text is not None:
            out["text"] = self.text
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Action:
        target = data.get("target")
        return cls(
            tool=data["tool"],
            target=Target(target["role"], target["name"], int(target.get("nth", 0))) if target else None,
            text=data.get("text"),
        )


@dataclass(frozen=True)
class SiteTask:
    """A task on one site, as authored. `site_task` turns it into an agentenv `Task`."""

    id: str
    prompt: str
    """What the user asks, as the agent reads it."""
    golden: Sequence[Action]
    """Actions that solve the task from ``start``; the last is ``answer`` for information tasks."""
    check: str
    """Name of the site's check that scores the episode."""
    check_args: Mapping[str, Any] = field(default_factory=dict)
    start: str = "/"
    """Path the episode opens on."""
    difficulty: int = 0
    """0 (one or two actions on the start page) to 3 (many pages, forms, validation)."""
    family: str = "default"
    writes: bool = True
    """Whether solving it changes the database (then doing nothing must score 0)."""
    subgoals: Sequence[tuple[str, Mapping[str, Any]]] = ()
    """``(subgoal name, its args)``: step progress, each rewarded once when it first holds."""
    end_pages: Sequence[str] | None = None
    """On a site with ``page_reward``: the paths whose page reward counts; an episode that
    ends on another page scores 0. None: any page when every task of the site starts on
    one page, else ``start`` alone (another task's page would pay that task's reward)."""


def site_task(site: str, task: SiteTask) -> Task:
    """The agentenv `Task` of ``task`` on ``site``: everything in the payload as JSON data."""
    return Task(
        id=f"{site}/{task.id}",
        prompt=task.prompt,
        payload={
            "site": site,
            "start": task.start,
            "golden": [a.as_json() for a in task.golden],
            "check": task.check,
            "check_args": dict(task.check_args),
            "writes": task.writes,
            "subgoals": [[name, dict(args)] for name, args in task.subgoals],
            "end_pages": None if task.end_pages is None else list(task.end_pages),
        },
        metadata=TaskMeta(family=f"{site}/{task.family}", difficulty=task.difficulty),
    )


@dataclass
class Site:
    """A web app, its data and its tasks."""

    name: str
    schema: str
    """SQL run once on an empty database."""
    seed: Callable[[sqlite3.Connection, int], None]
    """Fill the database for an episode seed in ``[0, SEEDS)`` (deterministic in it)."""
    create_app: Callable[[Path], Any]
    """An ASGI app serving the site over the SQLite file at the path."""
    checks: Mapping[str, Check]
    tasks: Sequence[SiteTask]
    subgoals: Mapping[str, Subgoal] = field(default_factory=dict)
    page_reward: str | None = None
    """A fixed JavaScript expression whose value on the final page is the task reward (see above)."""
    state: Callable[[sqlite3.Connection], Mapping[str, Mapping[Hashable, Any]]] | None = None
    """The site's database as its checks compare it (`_verify.State`: rows by key, per table;
    the side effects of looking left out). When given, the env records what an episode
    changed there (``BrowserState.db_changes``), the reason a check's frame did not hold."""

    def agentenv_tasks(self) -> list[Task]:
        return [site_task(self.name, t) for t in self.tasks]
