"""Calendar: meeting-room booking for an office — find rooms, book, reschedule, cancel.

Rules (each refusal is a `RuleViolation` with this name): ``identity_required``
(authenticate the employee with email + PIN before any change),
``no_double_booking`` (a room holds one meeting at a time), ``office_hours``
(8:00-18:00, whole hours), ``room_capacity`` (attendees fit the room),
``not_your_booking`` (only the organiser changes a booking). Days are the five
working days of one fixed week, so the seed and the tasks never depend on today.

The answer fields (`CalendarAnswer`): the refusing rule, a room id, a day, a
booking id, a capacity, an organiser. Tasks (48): single requests (book, cancel,
move, ask), requests a rule forbids (``calendar-refuse-*``: the golden actions only
read, the bookings must stay unchanged, and the answer gives the rule and the fact
behind it, read from the database), and two-write requests (``calendar-multi``).
Left out: recurring meetings, time zones, invitations.
"""

from __future__ import annotations

import random
import sqlite3
from typing import Annotated, Literal

from pydantic import Field

from agentenv import Task
from agentenv.envs.tools.domain import Answer, Domain, NotFound, Request, RuleViolation, gold_task

DAYS = ("2025-03-03", "2025-03-04", "2025-03-05", "2025-03-06", "2025-03-07")
Day = Literal["2025-03-03", "2025-03-04", "2025-03-05", "2025-03-06", "2025-03-07"]
Hour = Annotated[int, Field(ge=0, le=23, description="Hour of the day, 0-23.")]
Id = Annotated[str, Field(min_length=1, max_length=40)]
BookingId = Annotated[int, Field(ge=1, le=10**6)]
Rule = Literal[
    "identity_required", "identity_failed", "no_double_booking", "office_hours", "room_capacity", "not_your_booking"
]

SCHEMA = """
CREATE TABLE rooms (id TEXT PRIMARY KEY, name TEXT NOT NULL, capacity INTEGER NOT NULL);
CREATE TABLE employees (id TEXT PRIMARY KEY, name TEXT NOT NULL, email TEXT UNIQUE NOT NULL, pin TEXT NOT NULL);
CREATE TABLE bookings (id INTEGER PRIMARY KEY AUTOINCREMENT, room_id TEXT NOT NULL, organiser_id TEXT NOT NULL,
                       day TEXT NOT NULL, start_hour INTEGER NOT NULL, end_hour INTEGER NOT NULL,
                       title TEXT NOT NULL, attendees INTEGER NOT NULL, status TEXT NOT NULL);
CREATE TABLE session (employee_id TEXT NOT NULL);
"""
ROOMS = [("R1", "Aurora", 4), ("R2", "Borealis", 6), ("R3", "Cirrus", 8), ("R4", "Delta", 12), ("R5", "Ember", 20)]
PEOPLE = ["Ana Ruiz", "Bo Chen", "Cara Diaz", "Dan Ito", "Eve Park", "Finn Roy", "Gia Luca", "Hal Moss"]
TITLES = ["Standup", "Design review", "1:1", "Planning", "Retro", "Hiring sync"]


class CalendarAnswer(Answer):
    rule: Rule | None = Field(None, description="Only when you refuse: the rule that forbids the request.")
    room_id: Id | None = Field(
        None, description="The room the employee asked about, or the room of a booking you refuse, by id (e.g. R1)."
    )
    day: Day | None = Field(None, description="The day the employee asked about.")
    booking_id: BookingId | None = Field(
        None, description="When a room is taken at the time asked: the id of the booking that holds it."
    )
    capacity: Annotated[int, Field(ge=1, le=1000)] | None = Field(
        None, description="When you refuse for the room's size: how many people the room holds."
    )
    organiser_id: Id | None = Field(
        None, description="When you refuse to change someone else's booking: the employee id of its organiser."
    )


calendar = Domain(
    "calendar",
    schema=SCHEMA,
    seed=lambda db: _seed(db),
    ignore_tables=("session",),  # who is logged in: bookkeeping
    ignore_columns={"bookings": ("id",)},  # drawn by the database, not chosen by the agent
    instructions=(
        "You are an office assistant that books meeting rooms. Authenticate the employee (email + PIN) before "
        "any change. Rooms hold one meeting at a time, between 8:00 and 18:00, and only as many attendees as "
        "their capacity. Only the organiser may cancel or move a booking."
    ),
    tasks=lambda: _tasks(),
    answer=CalendarAnswer,
)
DOMAIN = calendar


class Authenticate(Request):
    email: Annotated[str, Field(min_length=3, max_length=120)]
    pin: Annotated[str, Field(min_length=4, max_length=8, description="The employee's PIN.")]


class ListRooms(Request):
    min_capacity: Annotated[int, Field(ge=1, le=100)] = 1


class RoomDay(Request):
    room_id: Id
    day: Day


class EmployeeRef(Request):
    employee_id: Id


class BookingRef(Request):
    booking_id: BookingId


class BookRoom(Request):
    room_id: Id
    day: Day
    start_hour: Hour
    end_hour: Hour
    title: Annotated[str, Field(min_length=1, max_length=80)]
    attendees: Annotated[int, Field(ge=1, le=100)]


class Reschedule(Request):
    booking_id: BookingId
    day: Day
    start_hour: Hour
    end_hour: Hour


@calendar.route(write=True)
def authenticate(db: sqlite3.Connection, req: Authenticate) -> dict:
    """Verify the employee's identity with email and PIN; required before any change."""
    row = db.execute("SELECT id, name FROM employees WHERE email = ? AND pin = ?", (req.email, req.pin)).fetchone()
    if row is None:
        raise RuleViolation("identity_failed", "email and PIN do not match an employee")
    db.execute("DELETE FROM session")
    db.execute("INSERT INTO session (employee_id) VALUES (?)", (row[0],))
    return {"employee_id": row[0], "name": row[1]}


@calendar.route()
def list_rooms(db: sqlite3.Connection, req: ListRooms) -> list:
    """Rooms holding at least min_capacity people: id, name, capacity."""
    rows = db.execute("SELECT id, name, capacity FROM rooms WHERE capacity >= ? ORDER BY id", (req.min_capacity,))
    return [{"room_id": i, "name": n, "capacity": c} for i, n, c in rows]


@calendar.route()
def room_schedule(db: sqlite3.Connection, req: RoomDay) -> list:
    """The confirmed bookings of a room on a day: booking id, hours, title."""
    _room(db, req.room_id)
    rows = db.execute(
        "SELECT id, start_hour, end_hour, title FROM bookings WHERE room_id = ? AND day = ? "
        "AND status = 'confirmed' ORDER BY start_hour",
        (req.room_id, req.day),
    )
    return [{"booking_id": i, "start_hour": s, "end_hour": e, "title": t} for i, s, e, t in rows]


@calendar.route()
def list_bookings(db: sqlite3.Connection, req: EmployeeRef) -> list:
    """An employee's confirmed bookings as organiser."""
    rows = db.execute(
        "SELECT id, room_id, day, start_hour, end_hour, title FROM bookings WHERE organiser_id = ? "
        "AND status = 'confirmed' ORDER BY day, start_hour",
        (req.employee_id,),
    )
    return [
        {"booking_id": i, "room_id": r, "day": d, "start_hour": s, "end_hour": e, "title": t}
        for i, r, d, s, e, t in rows
    ]


@calendar.route()
def get_booking(db: sqlite3.Connection, req: BookingRef) -> dict:
    """One booking: room, day, hours, title, attendees, status."""
    row = db.execute(
        "SELECT room_id, organiser_id, day, start_hour, end_hour, title, attendees, status FROM bookings WHERE id = ?",
        (req.booking_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"no booking {req.booking_id}")
    keys = ("room_id", "organiser_id", "day", "start_hour", "end_hour", "title", "attendees", "status")
    return {"booking_id": req.booking_id, **dict(zip(keys, row, strict=True))}


@calendar.route(write=True)
def book_room(db: sqlite3.Connection, req: BookRoom) -> dict:
    """Book a room for the authenticated employee."""
    me = _me(db)
    if req.attendees > _room(db, req.room_id):
        raise RuleViolation("room_capacity", f"room {req.room_id} holds {_room(db, req.room_id)} people")
    _check_slot(db, req.room_id, req.day, req.start_hour, req.end_hour, exclude=0)
    cur = db.execute(
        "INSERT INTO bookings (room_id, organiser_id, day, start_hour, end_hour, title, attendees, status)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, 'confirmed')",
        (req.room_id, me, req.day, req.start_hour, req.end_hour, req.title, req.attendees),
    )
    return {"booking_id": cur.lastrowid, "status": "confirmed"}


@calendar.route(write=True)
def cancel_booking(db: sqlite3.Connection, req: BookingRef) -> str:
    """Cancel a booking the authenticated employee organises."""
    _own_booking(db, req.booking_id)
    db.execute("UPDATE bookings SET status = 'cancelled' WHERE id = ?", (req.booking_id,))
    return f"booking {req.booking_id} cancelled"


@calendar.route(write=True)
def reschedule_booking(db: sqlite3.Connection, req: Reschedule) -> str:
    """Move a booking the authenticated employee organises to another day or time, same room."""
    room = _own_booking(db, req.booking_id)
    _check_slot(db, room, req.day, req.start_hour, req.end_hour, exclude=req.booking_id)
    db.execute(
        "UPDATE bookings SET day = ?, start_hour = ?, end_hour = ? WHERE id = ?",
        (req.day, req.start_hour, req.end_hour, req.booking_id),
    )
    return f"booking {req.booking_id} moved to {req.day} {req.start_hour}:00-{req.end_hour}:00"


def _me(db: sqlite3.Connection) -> str:
    row = db.execute("SELECT employee_id FROM session").fetchone()
    if row is None:
        raise RuleViolation("identity_required", "authenticate the employee before changing bookings")
    return row[0]


def _room(db: sqlite3.Connection, room_id: str) -> int:
    row = db.execute("SELECT capacity FROM rooms WHERE id = ?", (room_id,)).fetchone()
    if row is None:
        raise NotFound(f"no room {room_id!r}")
    return row[0]


def _own_booking(db: sqlite3.Connection, booking_id: int) -> str:
    """The booking's room, after the identity and organiser rules."""
    me = _me(db)
    row = db.execute("SELECT organiser_id, room_id, status FROM bookings WHERE id = ?", (booking_id,)).fetchone()
    if row is None or row[2] != "confirmed":
        raise NotFound(f"no confirmed booking {booking_id}")
    if row[0] != me:
        raise RuleViolation("not_your_booking", f"booking {booking_id} is organised by someone else")
    return row[1]


def _check_slot(db: sqlite3.Connection, room: str, day: str, start: int, end: int, *, exclude: int) -> None:
    if not 8 <= start < end <= 18:
        raise RuleViolation("office_hours", "bookings are whole hours between 8:00 and 18:00, start before end")
    clash = db.execute(
        "SELECT id FROM bookings WHERE room_id = ? AND day = ? AND status = 'confirmed' AND id != ? "
        "AND start_hour < ? AND end_hour > ?",
        (room, day, exclude, end, start),
    ).fetchone()
    if clash is not None:
        raise RuleViolation("no_double_booking", f"room {room} is taken then (booking {clash[0]})")


# -- seed data and tasks (deterministic) ---------------------------------------------


def _people() -> list[tuple[str, str, str, str]]:
    rng = random.Random(11)
    return [
        (f"E{10 + i}", name, f"{name.split()[0].lower()}@office.example", f"{rng.randint(1000, 9999)}")
        for i, name in enumerate(PEOPLE)
    ]


def _bookings() -> list[tuple[str, str, str, int, int, str, int]]:
    """(room, organiser, day, start, end, title, attendees), non-overlapping; ids are 1.. in this order."""
    rng = random.Random(12)
    taken: set[tuple[str, str, int]] = set()
    out: list[tuple[str, str, str, int, int, str, int]] = []
    while len(out) < 30:
        room, capacity = rng.choice([(r, c) for r, _, c in ROOMS])
        day, start, length = rng.choice(DAYS), rng.randint(8, 16), rng.randint(1, 2)
        hours = {(room, day, h) for h in range(start, min(start + length, 18))}
        if hours & taken:
            continue
        taken |= hours
        out.append(
            (
                room,
                f"E{10 + len(out) % len(PEOPLE)}",
                day,
                start,
                start + len(hours),
                rng.choice(TITLES),
                rng.randint(2, capacity),
            )
        )
    return out


def _seed(db: sqlite3.Connection) -> None:
    db.executemany("INSERT INTO rooms VALUES (?, ?, ?)", ROOMS)
    db.executemany("INSERT INTO employees VALUES (?, ?, ?, ?)", _people())
    db.executemany(
        "INSERT INTO bookings (room_id, organiser_id, day, start_hour, end_hour, title, attendees, status) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, 'confirmed')",
        _bookings(),
    )


def _free(bookings: list, room: str, day: str, start: int, end: int) -> bool:
    return not any(r == room and d == day and s < end and e > start for r, _, d, s, e, _, _ in bookings)


def _tasks() -> list[Task]:
    return _single_tasks() + _refusal_tasks() + _multi_step_tasks()


def _introduce(employee_id: str) -> tuple[str, tuple[str, dict]]:
    """The employee's self-introduction and the authenticate action it allows."""
    _, name, email, pin = {p[0]: p for p in _people()}[employee_id]
    return f"Hi, this is {name} ({email}, PIN {pin}).", ("authenticate", {"email": email, "pin": pin})


def _colleague(employee_id: str) -> str:
    """Another employee than this one (the next in the staff list)."""
    return f"E{10 + (int(employee_id[1:]) - 9) % len(PEOPLE)}"


def _free_slots(bookings: list, room: str, length: int = 1) -> list[tuple[str, int]]:
    """(day, start hour) where the room is free for ``length`` hours in the seed, in calendar order."""
    return [(d, h) for d in DAYS for h in range(8, 19 - length) if _free(bookings, room, d, h, h + length)]


def _single_tasks() -> list[Task]:
    people = {p[0]: p for p in _people()}
    bookings = _bookings()
    rng = random.Random(13)
    tasks: list[Task] = []
    for k, (room, organiser, day, _start, _end, _title, _attendees) in enumerate(bookings[:24]):
        booking_id = k + 1
        _, name, email, pin = people[organiser]
        me = f"Hi, this is {name} ({email}, PIN {pin})."
        auth = ("authenticate", {"email": email, "pin": pin})
        kind = ("book", "cancel", "move", "ask")[k % 4]
        if kind == "book":
            new_day, hour = next(
                (d, h)
                for d, h in ((rng.choice(DAYS), rng.randint(8, 16)) for _ in range(100))
                if _free(bookings, room, d, h, h + 1)
            )
            args = {
                "room_id": room,
                "day": new_day,
                "start_hour": hour,
                "end_hour": hour + 1,
                "title": "Budget review",
                "attendees": 2,
            }
            tasks.append(
                gold_task(
                    f"calendar-book-{k}",
                    f"{me} Book room {room} on {new_day} from {hour}:00 to {hour + 1}:00 "
                    'for 2 people, titled "Budget review".',
                    [auth, ("room_schedule", {"room_id": room, "day": new_day}), ("book_room", args)],
                    answer=f"Room {room} is booked on {new_day} at {hour}:00.",
                    family="calendar-book",
                    difficulty=1,
                )
            )
        elif kind == "cancel":
            tasks.append(
                gold_task(
                    f"calendar-cancel-{k}",
                    f"{me} Please cancel my booking {booking_id}.",
                    [auth, ("cancel_booking", {"booking_id": booking_id})],
                    answer=f"Booking {booking_id} is cancelled.",
                    family="calendar-cancel",
                    difficulty=1,
                )
            )
        elif kind == "move":
            new_day = next(d for d in DAYS[::-1] if _free(bookings, room, d, 16, 17))
            tasks.append(
                gold_task(
                    f"calendar-move-{k}",
                    f"{me} Move my booking {booking_id} to {new_day}, 16:00 to 17:00, same room.",
                    [
                        auth,
                        (
                            "reschedule_booking",
                            {"booking_id": booking_id, "day": new_day, "start_hour": 16, "end_hour": 17},
                        ),
                    ],
                    answer=f"Booking {booking_id} now runs on {new_day} from 16:00.",
                    family="calendar-move",
                    difficulty=2,
                )
            )
        else:
            tasks.append(
                gold_task(
                    f"calendar-ask-{k}",
                    f"{me} Which room is my booking {booking_id} in, and on what day?",
                    [("get_booking", {"booking_id": booking_id})],
                    answer=f"Booking {booking_id} is in room {room} on {day}.",
                    expect={"room_id": room, "day": day},
                    family="calendar-ask",
                    difficulty=0,
                )
            )
    return tasks


def _refusal_tasks() -> list[Task]:
    """Requests a rule forbids: read enough to know why, change nothing, give the rule and the fact read."""
    bookings = _bookings()
    tasks: list[Task] = []
    for booking_id in range(25, 31):  # a clash with another employee's booking; the answer gives its id
        room, organiser, day, start, _, title, _ = bookings[booking_id - 1]
        me, auth = _introduce(_colleague(organiser))
        tasks.append(
            gold_task(
                f"calendar-refuse-taken-{booking_id}",
                f"{me} Book room {room} on {day} from {start}:00 to {start + 1}:00 for 2 people, "
                'titled "Budget review".',
                [auth, ("room_schedule", {"room_id": room, "day": day})],
                answer=f'Room {room} is already taken on {day} at {start}:00 by "{title}" (booking {booking_id}); '
                "I did not book it.",
                expect={"rule": "no_double_booking", "booking_id": booking_id},
                family="calendar-refuse-taken",
                difficulty=2,
            )
        )
    for k, (start, end) in enumerate(((17, 19), (7, 9), (18, 20), (6, 8))):
        room, name, _ = ROOMS[k]  # asked for by name: its id, which the answer gives, takes a read
        me, _ = _introduce(f"E{10 + k}")
        tasks.append(
            gold_task(
                f"calendar-refuse-hours-{k}",
                f"{me} Book the {name} room on {DAYS[k]} from {start}:00 to {end}:00 for 2 people, "
                'titled "Offsite prep".',
                [("list_rooms", {"min_capacity": 1})],
                answer=f"Rooms can only be booked between 8:00 and 18:00, so I cannot book {name} ({room}) "
                f"from {start}:00 to {end}:00.",
                expect={"rule": "office_hours", "room_id": room},
                family="calendar-refuse-hours",
                difficulty=1,
            )
        )
    for k, (room, name, capacity) in enumerate(ROOMS[:4]):
        me, auth = _introduce(f"E{14 + k}")
        day, hour = _free_slots(bookings, room)[5 * k]
        wanted = capacity + 1 + k  # another excess each time: the request does not give the capacity away
        tasks.append(
            gold_task(
                f"calendar-refuse-capacity-{room}",
                f"{me} Book room {room} on {day} from {hour}:00 to {hour + 1}:00 for {wanted} people, "
                'titled "All hands".',
                [auth, ("list_rooms", {"min_capacity": 1})],
                answer=f"Room {room} ({name}) holds only {capacity} people, not {wanted}; I did not book it.",
                expect={"rule": "room_capacity", "capacity": capacity},
                family="calendar-refuse-capacity",
                difficulty=2,
            )
        )
    for booking_id in (2, 7, 12, 21):
        room, organiser, day, _, _, _, _ = bookings[booking_id - 1]
        me, auth = _introduce(_colleague(organiser))
        ask = (
            f"move booking {booking_id} to {day}, 17:00 to 18:00"
            if booking_id == 21
            else f"cancel booking {booking_id}"
        )
        tasks.append(
            gold_task(
                f"calendar-refuse-other-{booking_id}",
                f"{me} My colleague is away; please {ask} for them.",
                [auth, ("get_booking", {"booking_id": booking_id})],
                answer=f"Booking {booking_id} is organised by {organiser}, not you; only its organiser can change it.",
                expect={"rule": "not_your_booking", "organiser_id": organiser},
                family="calendar-refuse-other",
                difficulty=2,
            )
        )
    return tasks


def _multi_step_tasks() -> list[Task]:
    """Two writes in one request: two rooms at once, or a cancellation and a move."""
    bookings = _bookings()
    tasks: list[Task] = []
    for k in range(3):
        me, auth = _introduce(f"E{11 + k}")
        day, hour = sorted(set(_free_slots(bookings, "R2")) & set(_free_slots(bookings, "R3")))[7 * k + 3]
        books = [
            (
                "book_room",
                {
                    "room_id": r,
                    "day": day,
                    "start_hour": hour,
                    "end_hour": hour + 1,
                    "title": "Team split",
                    "attendees": 5,
                },
            )
            for r in ("R2", "R3")
        ]
        tasks.append(
            gold_task(
                f"calendar-multi-two-rooms-{k}",
                f"{me} Book both R2 and R3 on {day} from {hour}:00 to {hour + 1}:00 for 5 people each, "
                'titled "Team split".',
                [
                    auth,
                    ("room_schedule", {"room_id": "R2", "day": day}),
                    ("room_schedule", {"room_id": "R3", "day": day}),
                    *books,
                ],
                answer=f"R2 and R3 are both booked on {day} at {hour}:00.",
                family="calendar-multi",
                difficulty=3,
            )
        )
    for k, organiser in enumerate(("E10", "E13", "E16")):
        me, auth = _introduce(organiser)
        mine = [i + 1 for i, b in enumerate(bookings) if b[1] == organiser]
        drop, keep = mine[1], mine[2]
        room = bookings[keep - 1][0]
        day = next(d for d in DAYS[::-1] if _free(bookings, room, d, 8, 9))
        tasks.append(
            gold_task(
                f"calendar-multi-cancel-move-{k}",
                f"{me} Please cancel my booking {drop}, and move my booking {keep} to {day}, 8:00 to 9:00, same room.",
                [
                    auth,
                    ("list_bookings", {"employee_id": organiser}),
                    ("cancel_booking", {"booking_id": drop}),
                    ("reschedule_booking", {"booking_id": keep, "day": day, "start_hour": 8, "end_hour": 9}),
                ],
                answer=f"Booking {drop} is cancelled and booking {keep} now runs on {day} from 8:00.",
                family="calendar-multi",
                difficulty=3,
            )
        )
    return tasks
