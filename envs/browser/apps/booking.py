"""Booking: meeting-room booking's data, tasks and checks (the web app is `_booking_app`).

Seed: the six rooms and the nine bookings tasks name are fixed; eighteen other
bookings sit in fixed slots (so every task's free slot stays free and every page
holds the same bookings in the same places) with a title, organizer and attendee
count drawn from the seed; no filler is organised by anyone a task names.

Tasks (14): lookups (a room's seats, a booking's organizer, the room with a projector
on a floor, a room's bookings on a day, one organizer's confirmed bookings) and writes
(cancel; book a given room; book any room that fits and is free; move, re-organise or
grow a booking; book a follow-up that copies another booking's details). A writing
check wants exactly one intended change to the bookings and nothing else: one new
booking with exactly these details (for "any room", one that seats the attendees and
was free), one booking changed in exactly the fields asked, or exactly these bookings
cancelled. A lookup wants the bookings and rooms as they were (a right answer after
cancelling or booking anything scores 0). An answer is one value, never a list.
"""

from __future__ import annotations

import random
import sqlite3

from agentenv.envs.browser.apps._booking_app import create_app
from agentenv.envs.browser.apps._golden import answer, choose, click, fill
from agentenv.envs.browser.apps._verify import State, answer_int, answer_text, changes, keyed, normalise, read_only
from agentenv.envs.browser.site import Site, SiteTask

__all__ = ["SITE"]

SCHEMA = """
CREATE TABLE rooms (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, floor INTEGER NOT NULL,
                    capacity INTEGER NOT NULL, projector INTEGER NOT NULL);
CREATE TABLE bookings (id INTEGER PRIMARY KEY AUTOINCREMENT, room_id INTEGER NOT NULL REFERENCES rooms(id),
                       title TEXT NOT NULL, organizer TEXT NOT NULL, day TEXT NOT NULL,
                       start_time TEXT NOT NULL, end_time TEXT NOT NULL, attendees INTEGER NOT NULL,
                       status TEXT NOT NULL DEFAULT 'confirmed', notes TEXT NOT NULL DEFAULT '');
"""
ROOMS = [  # (id, name, floor, capacity, projector)
    (1, "Aspen", 1, 4, 0),
    (2, "Birch", 1, 8, 1),
    (3, "Cedar", 2, 12, 1),
    (4, "Douglas", 2, 6, 0),
    (5, "Elm", 3, 20, 1),
    (6, "Fir", 3, 10, 0),
]
MEI, OMAR, ANA, BEN = (f"{n}@northwind.test" for n in ("mei.tan", "omar.haddad", "ana.lopez", "ben.clark"))
BOOKINGS = [  # (room, title, organizer, day, start, end, attendees, status): ids 1..9, in this order
    (3, "Design review", MEI, "2025-06-18", "10:00", "11:30", 8, "confirmed"),
    (2, "Budget sync", OMAR, "2025-06-17", "14:00", "15:00", 5, "confirmed"),
    (4, "Team retro", ANA, "2025-06-19", "09:00", "10:00", 6, "confirmed"),
    (3, "Quarterly planning prep", OMAR, "2025-06-20", "09:00", "12:00", 10, "confirmed"),
    (1, "Vendor call", BEN, "2025-06-17", "11:00", "11:30", 3, "confirmed"),
    (5, "Client workshop", ANA, "2025-06-18", "13:00", "17:00", 16, "confirmed"),
    (2, "Hiring sync", OMAR, "2025-06-17", "09:30", "10:00", 4, "confirmed"),
    (2, "Finance review", OMAR, "2025-06-17", "16:00", "17:00", 6, "cancelled"),
    (6, "Onboarding", MEI, "2025-06-20", "10:00", "12:00", 9, "confirmed"),
]
FILLER_SLOTS = [  # (room, day, start, end): never where a task needs a free room
    (1, "2025-06-16", "09:00", "09:30"), (2, "2025-06-16", "13:00", "14:00"), (3, "2025-06-16", "15:00", "16:00"),
    (4, "2025-06-17", "10:00", "11:00"), (2, "2025-06-17", "11:00", "12:00"), (5, "2025-06-17", "09:00", "12:00"),
    (6, "2025-06-18", "14:00", "15:30"), (1, "2025-06-18", "09:00", "10:00"), (4, "2025-06-19", "13:00", "14:00"),
    (5, "2025-06-19", "14:00", "16:00"), (3, "2025-06-20", "14:00", "15:00"), (2, "2025-06-20", "09:00", "10:00"),
    (1, "2025-06-23", "10:00", "11:00"), (6, "2025-06-23", "15:00", "16:00"), (3, "2025-06-24", "11:00", "12:00"),
    (5, "2025-06-25", "09:00", "10:30"), (4, "2025-06-26", "16:00", "17:00"), (2, "2025-06-27", "10:00", "11:30"),
]  # fmt: skip
FILLER_TITLES = [
    "Sprint planning", "Coffee chat", "Board prep", "Security training", "Product demo", "Roadmap check-in",
    "Partner call", "Design critique", "Interview debrief", "Marketing sync", "Data review", "Legal briefing",
    "Office hours", "Customer call", "Tech talk", "Support handover", "Release check", "Writing workshop",
    "Brainstorm", "Pricing review", "Retro prep", "Research readout",
]  # fmt: skip
FILLER_PEOPLE = ("lucas.meyer", "nina.petrova", "sara.costa", "yusuf.demir", "eva.lind", "kwame.mensah")
FILLER_ORGANIZERS = [f"{n}@northwind.test" for n in FILLER_PEOPLE]


def seed(db: sqlite3.Connection, seed: int) -> None:
    rng = random.Random(seed)
    db.executemany("INSERT INTO rooms (id, name, floor, capacity, projector) VALUES (?, ?, ?, ?, ?)", ROOMS)
    capacity = {r[0]: r[3] for r in ROOMS}
    titles = rng.sample(FILLER_TITLES, len(FILLER_SLOTS))
    rows = list(BOOKINGS)
    for (room, day, start, end), title in zip(FILLER_SLOTS, titles, strict=True):
        attendees = rng.randint(1, capacity[room])
        rows.append((room, title, rng.choice(FILLER_ORGANIZERS), day, start, end, attendees, "confirmed"))
    db.executemany(
        "INSERT INTO bookings (room_id, title, organizer, day, start_time, end_time, attendees, status) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


# -- checks ---------------------------------------------------------------------------

COLUMNS = ("id", "room_id", "title", "organizer", "day", "start_time", "end_time", "attendees", "status", "notes")


def _state(db: sqlite3.Connection) -> State:
    """Every table and column: the frame of every task."""
    return {
        "rooms": keyed(db.execute("SELECT id, name, floor, capacity, projector FROM rooms")),
        "bookings": keyed(
            db.execute(
                "SELECT id, room_id, title, organizer, day, start_time, end_time, attendees, status, notes "
                "FROM bookings"
            )
        ),
    }


def _booking_id(db: sqlite3.Connection, title: str) -> int:
    rows = db.execute("SELECT id FROM bookings WHERE title = ?", (title,)).fetchall()
    if len(rows) != 1:
        raise ValueError(f"{len(rows)} bookings have the title {title!r}, not one")
    return int(rows[0][0])


def _room_id(db: sqlite3.Connection, name: str) -> int:
    row = db.execute("SELECT id FROM rooms WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise ValueError(f"no room named {name!r}")
    return int(row[0])


def check_cancelled(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, titles: list) -> float:
    """Exactly these bookings went from confirmed to cancelled; nothing else changed."""
    ids = {_booking_id(start, t) for t in titles}
    changed = changes(_state(start), _state(db))
    change = changed.get("bookings")
    if set(changed) != {"bookings"} or change is None or change.added or change.removed or set(change.changed) != ids:
        return 0.0
    status = COLUMNS.index("status")
    return float(
        all(
            old[status] == "confirmed"
            and new[status] == "cancelled"
            and old[:status] == new[:status]
            and old[status + 1 :] == new[status + 1 :]
            for old, new in change.changed.values()
        )
    )


def check_booked(
    db: sqlite3.Connection,
    start: sqlite3.Connection,
    answer: str | None,
    *,
    title: str,
    day: str,
    start_time: str,
    end_time: str,
    attendees: int,
    organizer: str,
    room: str | None = None,
) -> float:
    """Exactly one new booking with these details, in ``room`` or, without it, in any room that seats the
    attendees and was free then; no other booking or room changed."""
    changed = changes(_state(start), _state(db))
    change = changed.get("bookings")
    if set(changed) != {"bookings"} or change is None or change.changed or change.removed or len(change.added) != 1:
        return 0.0
    (row,) = change.added.values()
    _, room_id, got_title, got_organizer, got_day, got_start, got_end, got_attendees, status, _ = row
    want = (normalise(title), normalise(organizer), day, start_time, end_time, attendees, "confirmed")
    got = (normalise(got_title), normalise(got_organizer), got_day, got_start, got_end, got_attendees, status)
    if got != want:
        return 0.0
    if room is not None:
        return float(room_id == _room_id(start, room))
    capacity = start.execute("SELECT capacity FROM rooms WHERE id = ?", (room_id,)).fetchone()[0]
    clash = start.execute(
        "SELECT 1 FROM bookings WHERE room_id = ? AND day = ? AND status = 'confirmed' AND start_time < ? "
        "AND end_time > ?",
        (room_id, day, end_time, start_time),
    ).fetchone()
    return float(capacity >= attendees and clash is None)


def check_edited(
    db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, title: str, fields: dict
) -> float:
    """The booking changed in exactly ``fields`` (column -> new value; ``room`` by name) and nowhere else;
    no other booking or room changed."""
    booking_id = _booking_id(start, title)
    want = {("room_id" if k == "room" else k): (_room_id(start, v) if k == "room" else v) for k, v in fields.items()}
    changed = changes(_state(start), _state(db))
    change = changed.get("bookings")
    if set(changed) != {"bookings"} or change is None or change.added or change.removed:
        return 0.0
    if set(change.changed) != {booking_id}:
        return 0.0
    old, new = change.changed[booking_id]
    diff = {col: new[k] for k, col in enumerate(COLUMNS) if old[k] != new[k]}
    return float(diff == want)


@read_only(_state)
def check_capacity(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, room: str) -> float:
    """The answer is the number of seats of the room."""
    row = start.execute("SELECT capacity FROM rooms WHERE id = ?", (_room_id(start, room),)).fetchone()
    return float(answer_int(answer) == row[0])


@read_only(_state)
def check_organizer(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, title: str) -> float:
    """The answer is the email of the booking's organizer."""
    row = start.execute("SELECT organizer FROM bookings WHERE id = ?", (_booking_id(start, title),)).fetchone()
    return float(answer_text(answer) == normalise(row[0]))


@read_only(_state)
def check_room_with(
    db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, floor: int, projector: bool
) -> float:
    """The answer is the name of the one room on the floor with (or without) a projector."""
    rows = start.execute("SELECT name FROM rooms WHERE floor = ? AND projector = ?", (floor, int(projector))).fetchall()
    if len(rows) != 1:
        raise ValueError(f"{len(rows)} rooms on floor {floor} match, not one")
    return float(answer_text(answer) == normalise(rows[0][0]))


@read_only(_state)
def check_count_on(
    db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, room: str, day: str
) -> float:
    """The answer is the number of confirmed bookings of the room on the day."""
    row = start.execute(
        "SELECT count(*) FROM bookings WHERE room_id = ? AND day = ? AND status = 'confirmed'",
        (_room_id(start, room), day),
    ).fetchone()
    return float(answer_int(answer) == row[0])


@read_only(_state)
def check_count_by(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, organizer: str) -> float:
    """The answer is the number of confirmed bookings the organizer made."""
    row = start.execute(
        "SELECT count(*) FROM bookings WHERE organizer = ? AND status = 'confirmed'", (organizer,)
    ).fetchone()
    return float(answer_int(answer) == row[0])


def booking_exists(db: sqlite3.Connection, *, title: str, day: str) -> bool:
    """A confirmed booking with this title (whitespace and case aside) is on the day."""
    rows = db.execute("SELECT title FROM bookings WHERE day = ? AND status = 'confirmed'", (day,)).fetchall()
    return any(normalise(t) == normalise(title) for (t,) in rows)


def booking_has(db: sqlite3.Connection, *, title: str, fields: dict) -> bool:
    """The booking holds these values (column -> value; ``room`` by name)."""
    row = db.execute(
        "SELECT r.name, b.title, b.organizer, b.day, b.start_time, b.end_time, b.attendees, b.status, b.notes "
        "FROM bookings b JOIN rooms r ON r.id = b.room_id WHERE b.title = ?",
        (title,),
    ).fetchone()
    if row is None:
        return False
    have = dict(zip(("room", *COLUMNS[2:]), row, strict=True))
    return all(have.get(k) == v for k, v in fields.items())


# -- tasks ----------------------------------------------------------------------------


def _book_steps(room: str, day: str, start: str, end: str, title: str, attendees: int, organizer: str) -> list:
    return [
        click("link", "New booking"),
        choose("Room", room),
        fill("textbox", "Date", day),
        choose("Start time", start),
        choose("End time", end),
        fill("textbox", "Title", title),
        fill("spinbutton", "Number of attendees", str(attendees)),
        fill("textbox", "Organizer email", organizer),
        click("button", "Book room"),
    ]


SAM = "sam.rivera@northwind.test"
QUARTERLY = {"title": "Quarterly planning", "day": "2025-06-20", "start_time": "10:00", "end_time": "12:00",
             "attendees": 12, "organizer": OMAR}  # fmt: skip

TASKS = [
    SiteTask(
        id="capacity-cedar",
        prompt="How many people does the Cedar room seat? Answer with a number.",
        golden=[answer("12")],
        check="capacity",
        check_args={"room": "Cedar"},
        start="/rooms",
        difficulty=0,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="cancel-vendor",
        prompt="Cancel this booking.",
        golden=[click("link", "Cancel booking"), click("button", "Yes, cancel booking")],
        check="cancelled",
        check_args={"titles": ["Vendor call"]},
        start="/bookings/5",
        difficulty=0,
        family="cancel",
    ),
    SiteTask(
        id="organizer-design",
        prompt="Who organised the Design review? Answer with their email address.",
        golden=[click("link", "Next page"), click("link", "Design review"), answer(MEI)],
        check="organizer",
        check_args={"title": "Design review"},
        start="/bookings",
        difficulty=1,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="cancel-budget",
        prompt="Cancel the Budget sync booking.",
        golden=[click("link", "Budget sync"), click("link", "Cancel booking"), click("button", "Yes, cancel booking")],
        check="cancelled",
        check_args={"titles": ["Budget sync"]},
        start="/bookings",
        difficulty=1,
        family="cancel",
    ),
    SiteTask(
        id="projector-floor3",
        prompt="Which room on floor 3 has a projector? Answer with the room's name.",
        golden=[click("link", "Rooms"), answer("Elm")],
        check="room_with",
        check_args={"floor": 3, "projector": True},
        difficulty=1,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="change-organizer",
        prompt="Ana is handing the Client workshop over to Ben: make ben.clark@northwind.test its organizer.",
        golden=[
            click("link", "Next page"),
            click("link", "Client workshop"),
            click("link", "Edit booking"),
            fill("textbox", "Organizer email", BEN),
            click("button", "Save changes"),
        ],
        check="edited",
        check_args={"title": "Client workshop", "fields": {"organizer": BEN}},
        start="/bookings",
        difficulty=2,
        family="edit",
    ),
    SiteTask(
        id="book-interview",
        prompt="Book Birch on 2025-06-19 from 10:00 to 11:00 for an 'Interview panel' of 4 people. "
        f"I am the organizer: {SAM}.",
        golden=_book_steps("Birch", "2025-06-19", "10:00", "11:00", "Interview panel", 4, SAM),
        check="booked",
        check_args={
            "room": "Birch",
            "title": "Interview panel",
            "day": "2025-06-19",
            "start_time": "10:00",
            "end_time": "11:00",
            "attendees": 4,
            "organizer": SAM,
        },
        difficulty=2,
        family="book",
    ),
    SiteTask(
        id="move-retro",
        prompt="Move the Team retro to 15:00-16:00 on the same day, in the same room.",
        golden=[
            click("link", "Next page"),
            click("link", "Team retro"),
            click("link", "Edit booking"),
            choose("Start time", "15:00"),
            choose("End time", "16:00"),
            click("button", "Save changes"),
        ],
        check="edited",
        check_args={"title": "Team retro", "fields": {"start_time": "15:00", "end_time": "16:00"}},
        start="/bookings",
        difficulty=2,
        family="edit",
    ),
    SiteTask(
        id="count-birch",
        prompt="How many bookings does the Birch room have on 2025-06-17 (cancelled ones aside)? Answer with a number.",
        golden=[fill("textbox", "Date", "2025-06-17"), click("button", "Show"), answer("3")],
        check="count_on",
        check_args={"room": "Birch", "day": "2025-06-17"},
        difficulty=2,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="phone-screen-tomorrow",
        prompt="Book Aspen tomorrow from 16:00 to 16:30 for a 'Phone screen' with 2 people. "
        f"I am the organizer: {SAM}.",
        golden=_book_steps("Aspen", "2025-06-17", "16:00", "16:30", "Phone screen", 2, SAM),
        check="booked",
        check_args={
            "room": "Aspen",
            "title": "Phone screen",
            "day": "2025-06-17",
            "start_time": "16:00",
            "end_time": "16:30",
            "attendees": 2,
            "organizer": SAM,
        },
        difficulty=2,
        family="book",
    ),
    SiteTask(
        id="quarterly-planning",
        prompt="I need a room for 12 people on 2025-06-20 from 10:00 to 12:00 for 'Quarterly planning', "
        f"organised by {OMAR}. Book any room that seats them and is free then.",
        golden=[
            fill("textbox", "Date", "2025-06-20"),
            click("button", "Show"),
            click("link", "Rooms"),
            *_book_steps("Elm", "2025-06-20", "10:00", "12:00", "Quarterly planning", 12, OMAR),
        ],
        check="booked",
        check_args=QUARTERLY,
        difficulty=3,
        family="book",
        subgoals=[("booking_exists", {"title": "Quarterly planning", "day": "2025-06-20"})],
    ),
    SiteTask(
        id="grow-design",
        prompt="The Design review now has 15 attendees. Update its booking; if its room is too small, move it to "
        "a room that seats 15 and is free at the same time.",
        golden=[
            click("link", "Next page"),
            click("link", "Design review"),
            click("link", "Edit booking"),
            choose("Room", "Elm"),
            fill("spinbutton", "Number of attendees", "15"),
            click("button", "Save changes"),
        ],
        check="edited",
        check_args={"title": "Design review", "fields": {"room": "Elm", "attendees": 15}},
        start="/bookings",
        difficulty=3,
        family="edit",
        subgoals=[
            ("booking_has", {"title": "Design review", "fields": {"attendees": 15}}),
            ("booking_has", {"title": "Design review", "fields": {"room": "Elm"}}),
        ],
    ),
    SiteTask(
        id="design-follow-up",
        prompt="Book a follow-up called 'Design review II' the day after the Design review, in the same room, at "
        "the same time, with the same organizer and number of attendees.",
        golden=[
            click("link", "Bookings"),
            click("link", "Next page"),
            click("link", "Design review"),
            *_book_steps("Cedar", "2025-06-19", "10:00", "11:30", "Design review II", 8, MEI),
        ],
        check="booked",
        check_args={
            "room": "Cedar",
            "title": "Design review II",
            "day": "2025-06-19",
            "start_time": "10:00",
            "end_time": "11:30",
            "attendees": 8,
            "organizer": MEI,
        },
        difficulty=3,
        family="book",
        subgoals=[("booking_exists", {"title": "Design review II", "day": "2025-06-19"})],
    ),
    SiteTask(
        id="omar-count",
        prompt=f"How many of the bookings organised by {OMAR} are still confirmed? Answer with a number.",
        golden=[
            click("link", "Bookings"),
            fill("searchbox", "Search bookings", "omar.haddad"),
            click("button", "Filter"),
            answer("3"),
        ],
        check="count_by",
        check_args={"organizer": OMAR},
        difficulty=3,
        family="lookup",
        writes=False,
    ),
]

SITE = Site(
    name="booking",
    schema=SCHEMA,
    seed=seed,
    create_app=create_app,
    checks={
        "cancelled": check_cancelled,
        "booked": check_booked,
        "edited": check_edited,
        "capacity": check_capacity,
        "organizer": check_organizer,
        "room_with": check_room_with,
        "count_on": check_count_on,
        "count_by": check_count_by,
    },
    tasks=TASKS,
    state=_state,
    subgoals={"booking_exists": booking_exists, "booking_has": booking_has},
)
