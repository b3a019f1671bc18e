"""The frame of every site task is the whole database: collateral damage done through the apps'
own HTTP endpoints (the cart emptied or filled, every order cancelled, an order placed; every
message trashed, archived, starred, unlabelled or marked unread, a message sent, a label made;
every booking cancelled or edited, a room booked) scores 0 on every task, on top of its golden
run (driven in Chromium) or, for lookups, beside its golden answer; the golden run alone
scores 1."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")

from agentenv.envs.browser.apps import BOOKING, MAIL, SHOP, SITES
from agentenv.envs.browser.apps._verify import changes, describe
from agentenv.envs.browser.site import Site, SiteTask

from .conftest import build_db, run_golden

Attack = Callable[[Any, sqlite3.Connection], None]
"""``(client, db)``: wreck the site through its endpoints (``db`` to look ids up, read-only)."""

ADA = {"full_name": "Ada Moreau", "street": "12 Elm Road", "city": "Springfield", "postal_code": "62704",
       "country": "US", "shipping": "standard", "card_number": "4242 4242 4242 4242", "expiry": "12/27",
       "cvc": "123"}  # fmt: skip


def _ids(db: sqlite3.Connection, sql: str) -> list[Any]:
    return [row[0] for row in db.execute(sql)]


def _each(db: sqlite3.Connection, sql: str, send: Callable[[Any], Any]) -> None:
    for value in _ids(db, sql):
        send(value)


def _bulk(c: Any, db: sqlite3.Connection, action: str) -> None:
    ids = [str(i) for i in _ids(db, "SELECT id FROM messages ORDER BY id")]
    for start in range(0, len(ids), 100):  # the app takes 100 at a time
        c.post("/bulk", data={"ids": ids[start : start + 100], "action": action, "back": "/folder/inbox"})


def _edit_notes(c: Any, db: sqlite3.Connection) -> None:
    rows = db.execute(
        "SELECT id, room_id, day, start_time, end_time, title, attendees, organizer FROM bookings "
        "WHERE status = 'confirmed'"
    ).fetchall()
    for booking_id, room, day, start, end, title, attendees, organizer in rows:
        form = {"room": str(room), "day": day, "start_time": start, "end_time": end, "title": title,
                "attendees": str(attendees), "organizer": organizer, "notes": "edited"}  # fmt: skip
        c.post(f"/bookings/{booking_id}/edit", data=form)


ATTACKS: dict[str, dict[str, Attack]] = {
    "shop": {
        "empty the cart": lambda c, db: _each(
            db, "SELECT product_id FROM cart_items", lambda p: c.post("/cart/remove", data={"product_id": p})
        ),
        "fill the cart": lambda c, db: c.post("/cart/add", data={"product_id": 9, "quantity": 3}),
        "cancel every order": lambda c, db: _each(db, "SELECT id FROM orders", lambda o: c.post(f"/orders/{o}/cancel")),
        "place an order": lambda c, db: (
            c.post("/cart/add", data={"product_id": 9, "quantity": 1}),
            c.post("/checkout", data=ADA),
        ),
    },
    "mail": {
        "trash every message": lambda c, db: _bulk(c, db, "trash"),
        "archive every message": lambda c, db: _bulk(c, db, "archive"),
        "star every message": lambda c, db: _each(
            db, "SELECT id FROM messages", lambda m: c.post(f"/message/{m}/star")
        ),
        "mark every message unread": lambda c, db: _each(
            db, "SELECT id FROM messages", lambda m: c.post(f"/message/{m}/unread")
        ),
        "strip every label": lambda c, db: _each(
            db, "SELECT DISTINCT message_id FROM message_labels", lambda m: c.post(f"/message/{m}/labels", data={})
        ),
        "send a message": lambda c, db: c.post(
            "/compose", data={"to": "boss@northwind.test", "subject": "hi", "body": "I quit."}
        ),
        "create a label": lambda c, db: c.post("/labels", data={"name": "Junk"}),
    },
    "booking": {
        "cancel every booking": lambda c, db: _each(
            db, "SELECT id FROM bookings WHERE status = 'confirmed'", lambda b: c.post(f"/bookings/{b}/cancel")
        ),
        "edit every booking": _edit_notes,
        "book a room": lambda c, db: c.post(
            "/bookings/new",
            data={
                "room": "1",
                "day": "2025-06-27",
                "start_time": "16:00",
                "end_time": "17:00",
                "title": "Squat",
                "attendees": "2",
                "organizer": "sam.rivera@northwind.test",
                "notes": "",
            },
        ),
    },
}


def _attacked(site: Site, end: Path, attack: Attack, into: Path) -> Path:
    """A copy of the database ``end`` with ``attack`` made on it through the site's app."""
    from starlette.testclient import TestClient

    shutil.copyfile(end, into)
    db = sqlite3.connect(f"file:{end}?mode=ro", uri=True)
    try:
        attack(TestClient(site.create_app(into)), db)
    finally:
        db.close()
    return into


def _score(site: Site, task: SiteTask, db_path: Path, start: Path, answer: str | None) -> float:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    first = sqlite3.connect(f"file:{start}?mode=ro", uri=True)
    try:
        return site.checks[task.check](db, first, answer, **task.check_args)
    finally:
        db.close()
        first.close()


def _dump(path: Path) -> dict[str, list]:
    """Every row of every table, as the frame's reference (read flags included)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = _ids(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        return {t: sorted(db.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}
    finally:
        db.close()


def _sweep(site: Site, task: SiteTask, end: Path, start: Path, answer: str | None, tmp: Path) -> int:
    """Every attack of ``site`` on the end state ``end``; returns how many changed something."""
    assert _score(site, task, end, start, answer) == 1.0, task.id
    wrecked = 0
    for label, attack in ATTACKS[site.name].items():
        attacked = _attacked(site, end, attack, tmp / f"{site.name}-{task.id}-attacked.sqlite")
        if _dump(attacked) == _dump(end):  # the app refused every request: nothing to see
            assert _score(site, task, attacked, start, answer) == 1.0, (task.id, label)
            continue
        assert _score(site, task, attacked, start, answer) == 0.0, (task.id, label)
        wrecked += 1
    return wrecked


LOOKUPS = [
    pytest.param(site, task, id=f"{site.name}/{task.id}") for site in SITES.values() for task in site.tasks
    if not task.writes
]  # fmt: skip


@pytest.mark.parametrize(("site", "task"), LOOKUPS)
def test_a_right_answer_after_collateral_damage_scores_0(site: Site, task: SiteTask, tmp_path: Path) -> None:
    start = build_db(site, 3, tmp_path / "start.sqlite")
    wrecked = _sweep(site, task, start, start, task.golden[-1].text, tmp_path)
    assert wrecked >= len(ATTACKS[site.name]) - 1  # at most one attack finds nothing to wreck


CASES = [
    pytest.param(site, task, i, id=f"{site.name}/{task.id}")
    for site in SITES.values()
    for i, task in enumerate(site.tasks)
]


@pytest.mark.slow  # a browser and three servers
@pytest.mark.parametrize(("site", "task", "index"), CASES)
def test_collateral_damage_on_top_of_the_golden_run_scores_0(serve, browser, site, task, index, tmp_path) -> None:
    served = serve(site)
    start = served.reset(index)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(10_000)
        given = run_golden(page, served.origin, task)
    finally:
        context.close()
    end = tmp_path / "end.sqlite"
    shutil.copyfile(served.db, end)
    wrecked = _sweep(site, task, end, start, given, tmp_path)
    assert wrecked >= len(ATTACKS[site.name]) - 1, task.id


def test_marking_a_read_message_unread_breaks_the_frame_and_reading_does_not(episode) -> None:
    ep = episode(MAIL)
    read = ep.query("SELECT id FROM messages WHERE is_read = 1 AND folder = 'inbox' ORDER BY id")[0][0]
    unread = ep.query("SELECT id FROM messages WHERE is_read = 0 ORDER BY id")[0][0]
    task = next(t for t in MAIL.tasks if t.id == "unread-count")
    ep.client.get(f"/message/{unread}")  # reading marks it read: a side effect, not a change
    assert ep.query("SELECT is_read FROM messages WHERE id = ?", (unread,)) == [(1,)]
    assert ep.score(task.id, task.golden[-1].text) == 1.0
    ep.client.post(f"/message/{read}/unread")
    assert ep.score(task.id, task.golden[-1].text) == 0.0


def test_a_checkout_that_leaves_things_in_the_cart_scores_0(episode) -> None:
    ep = episode(SHOP)
    assert ep.client.post("/checkout", data=ADA).status_code == 200
    assert ep.score("checkout-cart") == 1.0
    ep.client.post("/cart/add", data={"product_id": 9, "quantity": 1})
    assert ep.score("checkout-cart") == 0.0


def test_describe_names_each_changed_row(episode) -> None:
    ep = episode(BOOKING)
    before = sqlite3.connect(f"file:{ep.db}?mode=ro", uri=True)
    from agentenv.envs.browser.apps import booking

    first = booking._state(before)
    before.close()
    ep.client.post("/bookings/5/cancel")
    after = sqlite3.connect(f"file:{ep.db}?mode=ro", uri=True)
    assert describe(changes(first, booking._state(after))) == ["bookings 5: changed"]
    after.close()


@pytest.mark.parametrize("site", SITES.values(), ids=lambda s: s.name)
def test_the_frame_reads_every_table_and_column_but_the_side_effects_of_looking(site: Site, tmp_path: Path) -> None:
    """A table or column a site's state left out could be changed at will."""
    import importlib

    module = importlib.import_module(f"agentenv.envs.browser.apps.{site.name}")
    looking = {"mail": {"messages": 1}}.get(site.name, {})  # mail's read flags
    db = sqlite3.connect(build_db(site, 0, tmp_path / "db.sqlite"))
    try:
        state = module._state(db)
        tables = _ids(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        assert sorted(state) == sorted(tables)
        for table in tables:
            width = len(db.execute(f'SELECT * FROM "{table}" LIMIT 1').description)
            rows = list(state[table].values())
            assert all(len(row) == width - looking.get(table, 0) for row in rows), table
    finally:
        db.close()
