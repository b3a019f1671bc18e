"""A small to-do site for the browser env's tests: server-rendered pages over SQLite, a form
with a text field and a drop-down, a long page, a page that asks for confirmation, and
(when built with an ``outside`` origin) links, forms, images, a redirect and a script
pointing at another server that must never be reached."""

from __future__ import annotations

import html
import sqlite3
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from agentenv.envs.browser import Action, Site, SiteTask, Target

SCHEMA = """
CREATE TABLE todos (id INTEGER PRIMARY KEY, title TEXT NOT NULL, priority TEXT NOT NULL, done INTEGER NOT NULL);
CREATE TABLE picks (n INTEGER PRIMARY KEY);
"""
PRIORITIES = ("Low", "Normal", "High")
CONTACT = "help@todo.test"
LONG_ITEMS = 300


def seed(db: sqlite3.Connection, seed: int) -> None:
    rows = [("Water plants", "Normal"), ("Pay rent", "High"), ("Read book", "Low")]
    rows += [(f"Filler {k}", "Low") for k in range(seed % 3)]  # the seed changes nothing a task names
    db.executemany("INSERT INTO todos (title, priority, done) VALUES (?, ?, 0)", rows)


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><title>{html.escape(title)}</title></head><body>"
        f"<nav><a href='/'>Home</a> <a href='/about'>About</a> <a href='/long'>Long list</a></nav>"
        f"<main><h1>{html.escape(title)}</h1>{body}</main></body></html>"
    )


def create_app(db_path: Path, outside: str = "", hang: threading.Event | None = None) -> Starlette:
    uri = Path(db_path).resolve().as_uri() + "?mode=rw"

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True)

    async def form(request: Request) -> dict[str, str]:
        return dict(parse_qsl((await request.body()).decode("ascii"), keep_blank_values=True))

    def home(request: Request) -> Response:
        db = connect()
        try:
            rows = db.execute("SELECT id, title, priority, done FROM todos ORDER BY id").fetchall()
        finally:
            db.close()
        items = "".join(
            f"<li><a href='/todo/{i}'>{html.escape(t)}</a> ({p}{', done' if d else ''})</li>" for i, t, p, d in rows
        )
        options = "".join(f"<option{' selected' if p == 'Normal' else ''}>{p}</option>" for p in PRIORITIES)
        return _page(
            "To do",
            f"<ul>{items}</ul><form method='post' action='/add'>"
            f"<label>Title <input name='title'></label> <label>Priority <select name='priority'>{options}"
            "</select></label> <button>Add</button></form>",
        )

    async def add(request: Request) -> Response:
        fields = await form(request)
        title = " ".join(fields.get("title", "").split())
        if not title or fields.get("priority") not in PRIORITIES:
            return _page("Not added", "<p>A to-do needs a title.</p>")
        db = connect()
        with db:
            db.execute("INSERT INTO todos (title, priority, done) VALUES (?, ?, 0)", (title, fields["priority"]))
        db.close()
        return RedirectResponse("/", status_code=303)

    def todo(request: Request) -> Response:
        db = connect()
        try:
            row = db.execute("SELECT title, done FROM todos WHERE id = ?", (request.path_params["id"],)).fetchone()
        finally:
            db.close()
        if row is None:
            return _page("No such to-do", "")
        action = f"/todo/{request.path_params['id']}/done"
        button = "" if row[1] else f"<form method='post' action='{action}'><button>Mark done</button></form>"
        return _page(row[0], f"<p>{'Done' if row[1] else 'Open'}</p>{button}")

    def done(request: Request) -> Response:
        db = connect()
        with db:
            db.execute("UPDATE todos SET done = 1 WHERE id = ?", (request.path_params["id"],))
        db.close()
        return RedirectResponse(f"/todo/{request.path_params['id']}", status_code=303)

    def about(request: Request) -> Response:
        return _page(
            "About",
            f"<p>Questions? Write to {CONTACT}.</p><button disabled>Subscribe</button><a href='/slow'>Slow page</a>",
        )

    def long(request: Request) -> Response:
        items = "".join(
            f"<li>Entry {n} <form method='post' action='/pick/{n}'><button>Pick {n}</button></form></li>"
            for n in range(1, LONG_ITEMS + 1)
        )
        return _page("Long list", f"<ol>{items}</ol>")

    def pick(request: Request) -> Response:
        db = connect()
        with db:
            db.execute("INSERT OR IGNORE INTO picks (n) VALUES (?)", (request.path_params["n"],))
        db.close()
        return RedirectResponse("/long", status_code=303)

    def confirm(request: Request) -> Response:
        return _page(
            "Confirm",
            "<button onclick=\"document.getElementById('out').textContent = confirm('Really?') ? 'Confirmed' : 'No'\">"
            "Ask</button><p id='out'>Waiting</p>",
        )

    def hostile(request: Request) -> Response:
        return _page(
            "Elsewhere",
            f"<a href='{outside}/link'>Outside link</a>"
            f"<form method='post' action='{outside}/form'><button>Outside form</button></form>"
            f"<form method='get' action='/away'><button>Redirect away</button></form>"
            f"<a href='{outside}/popup' target='_blank'>Outside popup</a>"
            f"<img src='{outside}/image.png' alt='outside image'>"
            f"<link rel='stylesheet' href='{outside}/style.css'>"
            f"<script src='{outside}/script.js'></script>"
            f"<iframe src='{outside}/frame'></iframe>"
            f"<script>fetch('{outside}/fetch').catch(() => 0); new Image().src = '{outside}/beacon';"
            f"try {{ new WebSocket('{outside.replace('http', 'ws')}/socket') }} catch (e) {{}}</script>"
            f"<a href='javascript:void(0)'>Script link</a>",
        )

    def away(request: Request) -> Response:
        return RedirectResponse(f"{outside}/redirected", status_code=302)

    async def slow(request: Request) -> Response:
        import asyncio

        while hang is not None and not hang.is_set():
            await asyncio.sleep(0.05)
        return PlainTextResponse("finally")

    return Starlette(
        routes=[
            Route("/", home),
            Route("/add", add, methods=["POST"]),
            Route("/todo/{id:int}", todo),
            Route("/todo/{id:int}/done", done, methods=["POST"]),
            Route("/about", about),
            Route("/long", long),
            Route("/pick/{n:int}", pick, methods=["POST"]),
            Route("/confirm", confirm),
            Route("/hostile", hostile),
            Route("/away", away),
            Route("/slow", slow),
        ]
    )


def _rows(db: sqlite3.Connection) -> set[Any]:
    return set(db.execute("SELECT id, title, priority, done FROM todos").fetchall())


def check_added(
    db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, title: str, priority: str
) -> float:
    new = _rows(db) - _rows(start)
    return float(_rows(start) <= _rows(db) and [(t, p, d) for _, t, p, d in new] == [(title, priority, 0)])


def check_done(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, title: str) -> float:
    changed = _rows(db) ^ _rows(start)
    return float({(t, d) for _, t, _, d in changed} == {(title, 0), (title, 1)})


def check_picked(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, n: int) -> float:
    return float(db.execute("SELECT n FROM picks").fetchall() == [(n,)] and _rows(db) == _rows(start))


def check_answer(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, expect: str) -> float:
    return float(answer is not None and answer.strip().lower() == expect and _rows(db) == _rows(start))


def todo_exists(db: sqlite3.Connection, title: str) -> bool:
    return db.execute("SELECT 1 FROM todos WHERE title = ?", (title,)).fetchone() is not None


TASKS = [
    SiteTask(
        id="add",
        prompt="Add a to-do 'Buy milk' with high priority.",
        golden=[
            Action("fill", Target("textbox", "Title"), "Buy milk"),
            Action("select", Target("combobox", "Priority"), "High"),
            Action("click", Target("button", "Add")),
        ],
        check="added",
        check_args={"title": "Buy milk", "priority": "High"},
        subgoals=[("todo_exists", {"title": "Buy milk"})],
    ),
    SiteTask(
        id="add-enter",
        prompt="Add a to-do 'Call mom'.",
        golden=[Action("fill", Target("textbox", "Title"), "Call mom"), Action("press", text="Enter")],
        check="added",
        check_args={"title": "Call mom", "priority": "Normal"},
    ),
    SiteTask(
        id="done",
        prompt="Mark 'Pay rent' as done.",
        golden=[Action("click", Target("link", "Pay rent")), Action("click", Target("button", "Mark done"))],
        check="done",
        check_args={"title": "Pay rent"},
    ),
    SiteTask(
        id="pick",
        prompt="On the long list, pick entry 250.",
        golden=[Action("click", Target("link", "Long list")), Action("click", Target("button", "Pick 250"))],
        check="picked",
        check_args={"n": 250},
    ),
    SiteTask(
        id="contact",
        prompt="What address should questions be written to?",
        golden=[Action("click", Target("link", "About")), Action("answer", text=CONTACT)],
        check="answer",
        check_args={"expect": CONTACT},
        writes=False,
    ),
]


def make_site(
    name: str = "todo", *, outside: str = "", hang: threading.Event | None = None, tasks: list[SiteTask] | None = None
) -> Site:
    return Site(
        name=name,
        schema=SCHEMA,
        seed=seed,
        create_app=lambda db_path: create_app(db_path, outside, hang),
        checks={"added": check_added, "done": check_done, "picked": check_picked, "answer": check_answer},
        tasks=TASKS if tasks is None else tasks,
        subgoals={"todo_exists": todo_exists},
    )


SITE = make_site()
