"""The frame of a tool-API task is the whole database: every task of both domains, solved by its
golden actions and then wrecked through the tools (every order cancelled, re-addressed or
refunded, every booking cancelled, every room booked, logged in as each user in turn),
scores 0 and names the rows that differ, while the golden actions alone score 1."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import agentenv
from agentenv import Task, tool_call_text
from agentenv.envs.tools import ToolsEnv
from agentenv.envs.tools.domain import Domain, row_differences
from agentenv.envs.tools.domains import calendar, retail

pytestmark = pytest.mark.slow  # domain services

Call = tuple[str, dict[str, Any]]
CALLS_PER_ACTION = 16  # the core's limit


def _retail_attacks() -> dict[str, list[Call]]:
    orders: dict[str, list[tuple[str, str, list]]] = {}
    for order_id, customer, status, _, items in retail._orders():
        orders.setdefault(customer, []).append((order_id, status, items))
    logins = {c: ("authenticate", {"email": email, "zip": zip_code}) for c, _, email, zip_code in retail._customers()}

    def each(make: Callable[[str, str, list], list[Call]]) -> list[Call]:
        return [
            call
            for customer, held in sorted(orders.items())
            for call in [logins[customer], *(c for o, s, i in held for c in make(o, s, i))]
        ]

    return {
        "cancel every order": each(lambda o, s, i: [("cancel_order", {"order_id": o, "reason": "no_longer_needed"})]),
        "re-address every order": each(
            lambda o, s, i: [("update_address", {"order_id": o, "address": "1 Nowhere Road, Elsewhere"})]
        ),
        "refund every item": each(
            lambda o, s, i: [
                ("return_item", {"order_id": o, "product_id": p, "quantity": q, "reason": "not_needed"})
                for p, q, _ in i
            ]
        ),
    }


def _calendar_attacks() -> dict[str, list[Call]]:
    people = calendar._people()
    owned: dict[str, list[int]] = {}
    for booking_id, (_, organiser, *_) in enumerate(calendar._bookings(), start=1):  # ids are 1.. in seed order
        owned.setdefault(organiser, []).append(booking_id)

    def as_each_organiser(make: Callable[[int], Call]) -> list[Call]:
        return [
            call
            for employee, _, email, pin in people
            for call in [("authenticate", {"email": email, "pin": pin}), *map(make, owned.get(employee, []))]
        ]

    return {
        "cancel every booking": as_each_organiser(lambda b: ("cancel_booking", {"booking_id": b})),
        "move every booking": as_each_organiser(
            lambda b: ("reschedule_booking", {"booking_id": b, "day": "2025-03-07", "start_hour": 17, "end_hour": 18})
        ),
        "book every room": [
            ("authenticate", {"email": people[0][2], "pin": people[0][3]}),
            *(
                (
                    "book_room",
                    {
                        "room_id": room,
                        "day": "2025-03-03",
                        "start_hour": 8,
                        "end_hour": 9,
                        "title": "x",
                        "attendees": 1,
                    },
                )
                for room, _, _ in calendar.ROOMS
            ),
        ],
    }


ATTACKS = {"retail-v0": _retail_attacks, "calendar-v0": _calendar_attacks}


def _text(calls: list[Call]) -> str:
    return "".join(tool_call_text(name, **args) for name, args in calls)


def _play(env: ToolsEnv, task: Task, attack: list[Call]) -> dict[str, Any]:
    """The golden actions, ``attack`` in actions of as many calls as one may hold, then the
    golden answer."""
    env.reset(options={"task": task})
    *calls, answer = [(a["name"], a["arguments"]) for a in task.payload["actions"]]
    for call in calls:
        env.step(_text([call]))
    for start in range(0, len(attack), CALLS_PER_ACTION):
        _, _, _, _, info = env.step(_text(attack[start : start + CALLS_PER_ACTION]))
        assert info["error_kind"] in (None, "tool"), (task.id, info["error"])  # run, if refused
    _, _, terminated, _, info = env.step(_text([answer]))
    assert terminated and info["failure"] != "infra", (task.id, info["error"])
    return info


def _rows(env: ToolsEnv) -> dict[str, list]:
    return env.domain.compared_rows(env.service.db_path(env.episode))


@pytest.mark.parametrize("env_id", sorted(ATTACKS))
def test_wrecking_what_the_task_does_not_name_scores_0_on_every_task(env_id: str) -> None:
    attacks = ATTACKS[env_id]()
    env = agentenv.make(env_id, max_turns=60)  # room for every attack, whatever a real episode allows
    swept = 0
    try:
        for task in env.tasks:
            info = _play(env, task, [])
            assert info["task_reward"] == 1.0 and env.state.db_diff == [], task.id
            gold = _rows(env)
            for label, calls in attacks.items():
                info = _play(env, task, calls)
                if _rows(env) == gold:  # every call refused: nothing was wrecked
                    assert info["task_reward"] == 1.0, (task.id, label)
                    continue
                assert info["task_reward"] == 0.0 and info["rewards"]["db_match"] == 0.0, (task.id, label)
                assert env.state.db_diff == row_differences(gold, _rows(env)) != [], (
                    task.id,
                    label,
                )
                swept += 1
    finally:
        env.close()
    assert swept >= 3 * len(env.tasks) - 2  # nearly every attack wrecks something on every task


def test_a_row_diff_names_the_tables_and_rows_and_is_bounded() -> None:
    want = {"orders": [("O1", "pending"), ("O2", "pending")], "refunds": []}
    got = {"orders": [("O1", "pending"), ("O2", "cancelled")], "refunds": [("O3", 1)] * 30}
    found = row_differences(want, got)
    assert found[:2] == ["orders: missing ('O2', 'pending')", "orders: unexpected ('O2', 'cancelled')"]
    assert len(found) == 21 and found[-1] == "... and 12 more"
    assert row_differences(want, {"orders": [("O2", "pending"), ("O1", "pending")], "refunds": []}) == []


SCHEMA = """
CREATE TABLE items (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, qty INTEGER NOT NULL);
CREATE TABLE session (user TEXT);
CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT);
"""


def _domain(**kwargs: Any) -> Domain:
    return Domain("frame", schema=SCHEMA, seed=lambda db: None, instructions="", **kwargs)


def test_every_table_and_column_is_compared_but_the_ignored_ones() -> None:
    assert _domain().compare == {
        "items": ("id", "name", "qty"),
        "notes": ("id", "body"),
        "session": ("user",),
    }  # sqlite_sequence, AUTOINCREMENT's own table, is no table of the domain
    both = _domain(ignore_tables=("session",), ignore_columns={"items": ("id",)})
    assert both.compare == {"items": ("name", "qty"), "notes": ("id", "body")}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ignore_tables": ("sessions",)}, "no table 'sessions'.*Did you mean 'session'"),
        ({"ignore_columns": {"items": ("ids",)}}, "no column 'ids'"),
        ({"ignore_columns": {"item": ("id",)}}, "no table 'item'"),
    ],
)
def test_ignoring_what_the_schema_does_not_have_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _domain(**kwargs)


def test_the_old_compare_argument_says_what_replaced_it() -> None:
    with pytest.raises(TypeError, match="ignore_tables= and ignore_columns="):
        _domain(compare={"items": ("name",)})


def test_compared_rows_read_the_database_read_only(tmp_path) -> None:
    domain = _domain(ignore_tables=("session",), ignore_columns={"items": ("id",)})
    path = tmp_path / "db.sqlite"
    domain.create_seed(str(path))
    db = sqlite3.connect(path)
    with db:
        db.executemany("INSERT INTO items (name, qty) VALUES (?, ?)", [("b", 2), ("a", 1)])
    db.close()
    assert domain.compared_rows(path) == {"items": [("a", 1), ("b", 2)], "notes": []}
