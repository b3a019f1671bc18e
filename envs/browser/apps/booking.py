"""Booking: meeting-room booking for an office, with a day schedule, rooms, a list of
bookings in pages, and forms to book, edit and cancel (confirmed in a modal).

Pages: ``/?date=`` (the day's schedule, room by room), ``/rooms`` and ``/rooms/{id}``,
``/bookings`` (filter by room, search title or organizer, 10 a page),
``/bookings/{id}`` (details; ``?dialog=cancel`` asks to confirm the cancellation),
``/bookings/new`` and ``/bookings/{id}/edit`` (the form, errors shown in the page).

Rules the app enforces, each a message beside its field: a booking is on a weekday
from today (`TODAY`, fixed so episodes replay) to 60 days ahead, between 08:00 and
19:00 on the half hour, ends after it starts and lasts at most 4 hours; its
attendees fit the room; it overlaps no other confirmed booking of the room; a title
(1 to 80 characters) and an organizer's email are required. Cancelled bookings
stay listed and can no longer change.

Seed: the six rooms and the nine bookings tasks name are fixed; eighteen other
bookings sit in fixed slots (so every task's free slot stays free and every page
holds the same bookings in the same places) with a title, organizer and attendee
count drawn from the seed; no filler is organised by anyone a task names.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from starlette.responses import Response

from agentenv.envs.browser.apps._golden import answer, choose, click, fill
from agentenv.envs.browser.apps._html import (
    Html,
    NavItem,
    dialog,
    error_summary,
    html,
    number_input,
    page,
    pager,
    select,
    text_input,
    textarea,
)
from agentenv.envs.browser.apps._verify import State, answer_int, answer_text, changes, keyed, normalise
from agentenv.envs.browser.apps._web import (
    EMAIL_PATTERN,
    Endpoint,
    Form,
    HttpError,
    Req,
    build_app,
    see_other,
    validate,
)
from agentenv.envs.browser.site import Site, SiteTask

__all__ = ["SITE", "TODAY"]

TITLE = "Northwind Rooms"
TODAY = date(2025, 6, 16)
BOOKABLE_DAYS = 60
PER_PAGE = 10
MAX_HOURS = 4
START_TIMES = [f"{h:02d}:{m:02d}" for h in range(8, 19) for m in (0, 30)]
END_TIMES = [*START_TIMES[1:], "19:00"]

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


def _long_date(day: date) -> str:
    return f"{day:%A} {day.day} {day:%B %Y}"


def _rooms(db: sqlite3.Connection) -> list[tuple[int, str, int, int, int]]:
    return db.execute("SELECT id, name, floor, capacity, projector FROM rooms ORDER BY name").fetchall()


# -- pages ----------------------------------------------------------------------------


def _page(
    title: str,
    main: Html,
    *,
    current: str | None = None,
    notice: str | None = None,
    modal: Html | None = None,
    status: int = 200,
) -> Response:
    nav = [
        NavItem("Schedule", "/"),
        NavItem("Rooms", "/rooms"),
        NavItem("Bookings", "/bookings"),
        NavItem("New booking", "/bookings/new"),
    ]
    return page(
        site=TITLE, nav=nav, title=title, main=main, current=current, notice=notice, dialog=modal, status=status
    )


def _error_page(status: int, message: str) -> Response:
    return _page("Something went wrong" if status >= 500 else "Sorry", html("<p>{m}</p>", m=message), status=status)


def _parse_day(raw: str) -> date | None:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw):
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        return None


def schedule(db: sqlite3.Connection, req: Req) -> Response:
    raw = req.query_text("date", max_length=20)
    day = _parse_day(raw) if raw else TODAY
    if day is None:
        raise HttpError(400, f"The date must be written YYYY-MM-DD, like {TODAY.isoformat()}; got {raw!r}.")
    bookings: dict[int, list[tuple[int, str, str, str]]] = {}
    for room_id, i, title, start, end in db.execute(
        "SELECT room_id, id, title, start_time, end_time FROM bookings WHERE day = ? AND status = 'confirmed' "
        "ORDER BY start_time",
        (day.isoformat(),),
    ):
        bookings.setdefault(room_id, []).append((i, title, start, end))
    rows = [
        html(
            '<tr><th scope="row"><a href="/rooms/{r}">{n}</a></th><td>{c}</td><td><ul>{items}</ul></td></tr>',
            r=room_id,
            n=name,
            c=capacity,
            items=[
                html('<li>{s}-{e} <a href="/bookings/{i}">{t}</a></li>', s=s, e=e, i=i, t=t)
                for i, t, s, e in bookings.get(room_id, [])
            ]
            or html("<li>Free all day</li>"),
        )
        for room_id, name, _, capacity, _ in _rooms(db)
    ]
    main = html(
        "<p>Today is {today}.</p>"
        '<form method="get" action="/">{field}<button type="submit">Show</button></form>'
        '<nav aria-label="Days"><a href="/?date={prev}">Previous day</a> <a href="/?date={next}">Next day</a></nav>'
        "<h2>{day}</h2><table><thead><tr><th>Room</th><th>Seats</th><th>Bookings</th></tr></thead>"
        "<tbody>{rows}</tbody></table>",
        today=_long_date(TODAY),
        field=text_input("date", "Date", day.isoformat(), hint="YYYY-MM-DD"),
        prev=(day - timedelta(days=1)).isoformat(),
        next=(day + timedelta(days=1)).isoformat(),
        day=_long_date(day),
        rows=rows,
    )
    return _page("Schedule", main, current="/")


def rooms(db: sqlite3.Connection, req: Req) -> Response:
    rows = [
        html(
            '<tr><th scope="row"><a href="/rooms/{i}">{n}</a></th><td>{f}</td><td>{c}</td><td>{p}</td></tr>',
            i=i,
            n=n,
            f=f,
            c=c,
            p="Yes" if p else "No",
        )
        for i, n, f, c, p in _rooms(db)
    ]
    main = html(
        "<table><thead><tr><th>Room</th><th>Floor</th><th>Seats</th><th>Projector</th></tr></thead>"
        "<tbody>{rows}</tbody></table>",
        rows=rows,
    )
    return _page("Rooms", main, current="/rooms")


def room(db: sqlite3.Connection, req: Req) -> Response:
    row = db.execute("SELECT id, name, floor, capacity, projector FROM rooms WHERE id = ?", (req.params["id"],))
    found = row.fetchone()
    if found is None:
        raise HttpError(404, "There is no such room.")
    room_id, name, floor, capacity, projector = found
    upcoming = db.execute(
        "SELECT id, title, day, start_time, end_time FROM bookings WHERE room_id = ? AND status = 'confirmed' "
        "AND day >= ? ORDER BY day, start_time",
        (room_id, TODAY.isoformat()),
    ).fetchall()
    main = html(
        "<p>Floor {f}. Seats {c}. {p}.</p>"
        '<p><a href="/bookings/new?room={i}">Book {n}</a></p><h2>Upcoming bookings</h2><ul>{items}</ul>',
        f=floor,
        c=capacity,
        p="Has a projector" if projector else "No projector",
        i=room_id,
        n=name,
        items=[
            html('<li>{d} {s}-{e} <a href="/bookings/{b}">{t}</a></li>', d=d, s=s, e=e, b=b, t=t)
            for b, t, d, s, e in upcoming
        ]
        or html("<li>None</li>"),
    )
    return _page(name, main)


def bookings(db: sqlite3.Connection, req: Req) -> Response:
    query = req.query_text("q", max_length=100)
    room_names = {str(i): n for i, n, *_ in _rooms(db)}
    room_id = req.query.get("room", "")
    if room_id and room_id not in room_names:
        raise HttpError(400, "Choose a room from the list.")
    pattern = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    where = {"room": int(room_id) if room_id else None, "q": query, "pat": pattern}
    total = db.execute(
        "SELECT count(*) FROM bookings WHERE (:room IS NULL OR room_id = :room) "
        "AND (:q = '' OR title LIKE :pat ESCAPE '\\' OR organizer LIKE :pat ESCAPE '\\')",
        where,
    ).fetchone()[0]
    pages = max(1, -(-total // PER_PAGE))
    page_no = min(req.query_int("page", default=1, lo=1, hi=10_000), pages)
    rows = db.execute(
        "SELECT b.id, b.title, r.name, b.day, b.start_time, b.end_time, b.organizer, b.status "
        "FROM bookings b JOIN rooms r ON r.id = b.room_id WHERE (:room IS NULL OR b.room_id = :room) "
        "AND (:q = '' OR b.title LIKE :pat ESCAPE '\\' OR b.organizer LIKE :pat ESCAPE '\\') "
        "ORDER BY b.day, b.start_time, r.name LIMIT :limit OFFSET :offset",
        {**where, "limit": PER_PAGE, "offset": (page_no - 1) * PER_PAGE},
    ).fetchall()
    filters = html(
        '<form method="get" action="/bookings">{room}'
        '<p class="field"><label for="q">Search bookings</label><input type="search" id="q" name="q" value="{q}">'
        '<span class="hint">Title or organizer</span></p><button type="submit">Filter</button></form>',
        room=select("room", "Room", [("", "All rooms"), *room_names.items()], room_id),
        q=query,
    )
    table = html(
        "<table><caption>{count}</caption><thead><tr><th>Booking</th><th>Room</th><th>Date</th><th>Time</th>"
        "<th>Organizer</th><th>Status</th></tr></thead><tbody>{body}</tbody></table>",
        count=f"{total} {'booking' if total == 1 else 'bookings'}",
        body=[
            html(
                '<tr><td><a href="/bookings/{i}">{t}</a></td><td>{r}</td><td>{d}</td><td>{s}-{e}</td><td>{o}</td>'
                "<td>{st}</td></tr>",
                i=i,
                t=t,
                r=r,
                d=d,
                s=s,
                e=e,
                o=o,
                st=st.capitalize(),
            )
            for i, t, r, d, s, e, o, st in rows
        ],
    )
    extra = {k: v for k, v in (("room", room_id), ("q", query)) if v}
    main = html("{f}{t}{p}", f=filters, t=table, p=pager(page_no, pages, "/bookings", extra))
    return _page("Bookings", main, current="/bookings")


def _booking(db: sqlite3.Connection, booking_id: int) -> tuple[Any, ...]:
    row = db.execute(
        "SELECT b.id, b.room_id, r.name, b.title, b.organizer, b.day, b.start_time, b.end_time, b.attendees, "
        "b.status, b.notes FROM bookings b JOIN rooms r ON r.id = b.room_id WHERE b.id = ?",
        (booking_id,),
    ).fetchone()
    if row is None:
        raise HttpError(404, "There is no such booking.")
    return tuple(row)


NOTICES = {
    "booked": "Your booking is confirmed.",
    "saved": "Your changes are saved.",
    "cancelled": "The booking is cancelled.",
}


def booking(db: sqlite3.Connection, req: Req) -> Response:
    i, _, room_name, title, organizer, day, start, end, attendees, status, notes = _booking(db, req.params["id"])
    actions = (
        html(
            '<p><a href="/bookings/{i}/edit">Edit booking</a> <a href="/bookings/{i}?dialog=cancel">Cancel booking</a>'
            "</p>",
            i=i,
        )
        if status == "confirmed"
        else html("<p>This booking was cancelled.</p>")
    )
    main = html(
        "<dl><dt>Room</dt><dd>{room}</dd><dt>Date</dt><dd>{day}</dd><dt>Time</dt><dd>{start}-{end}</dd>"
        "<dt>Organizer</dt><dd>{organizer}</dd><dt>Attendees</dt><dd>{attendees}</dd><dt>Status</dt>"
        "<dd>{status}</dd><dt>Notes</dt><dd>{notes}</dd></dl>{actions}",
        room=room_name,
        day=_long_date(date.fromisoformat(day)),
        start=start,
        end=end,
        organizer=organizer,
        attendees=attendees,
        status=status.capitalize(),
        notes=notes or "none",
        actions=actions,
    )
    modal = None
    if req.query.get("dialog") == "cancel" and status == "confirmed":
        modal = dialog(
            "cancel",
            f"Cancel \u201c{title}\u201d?",
            html(
                "<p>{room}, {day}, {start}-{end}. The room becomes free for others.</p>"
                '<form method="post" action="/bookings/{i}/cancel"><button type="submit">Yes, cancel booking</button>'
                '</form><p><a href="/bookings/{i}">Keep booking</a></p>',
                room=room_name,
                day=day,
                start=start,
                end=end,
                i=i,
            ),
        )
    return _page(title, main, notice=NOTICES.get(req.query.get("notice", "")), modal=modal)


def cancel(db: sqlite3.Connection, req: Req) -> Response:
    found = _booking(db, req.params["id"])
    booking_id, status = found[0], found[9]
    if status != "confirmed":
        raise HttpError(409, "This booking is already cancelled.")
    db.execute("UPDATE bookings SET status = 'cancelled' WHERE id = ?", (booking_id,))
    return see_other(f"/bookings/{booking_id}?notice=cancelled")


class BookingForm(Form):
    multiline = frozenset({"notes"})

    room: Annotated[str, Field(min_length=1, max_length=20, title="Room")]
    day: Annotated[str, Field(min_length=1, max_length=20, title="Date")]
    start_time: Annotated[str, Field(min_length=1, max_length=5, title="Start time")]
    end_time: Annotated[str, Field(min_length=1, max_length=5, title="End time")]
    title: Annotated[str, Field(min_length=1, max_length=80, title="Title")]
    attendees: Annotated[int, Field(ge=1, le=100, title="Number of attendees")]
    organizer: Annotated[str, Field(min_length=1, max_length=120, title="Organizer email")]
    notes: Annotated[str, Field(max_length=1000, title="Notes")] = ""

    @field_validator("day")
    @classmethod
    def _day(cls, value: str) -> str:
        day = _parse_day(value)
        if day is None:
            raise ValueError(f"must be a date written YYYY-MM-DD, like {TODAY + timedelta(days=2)}")
        if day < TODAY:
            raise ValueError("is in the past")
        if day > TODAY + timedelta(days=BOOKABLE_DAYS):
            raise ValueError(f"must be at most {BOOKABLE_DAYS} days ahead")
        if day.weekday() >= 5:
            raise ValueError("falls on a weekend: the office is open Monday to Friday")
        return value

    @field_validator("start_time")
    @classmethod
    def _start(cls, value: str) -> str:
        if value not in START_TIMES:
            raise ValueError("must be one of the times in the list (08:00 to 18:30)")
        return value

    @field_validator("end_time")
    @classmethod
    def _end(cls, value: str) -> str:
        if value not in END_TIMES:
            raise ValueError("must be one of the times in the list (08:30 to 19:00)")
        return value

    @field_validator("organizer")
    @classmethod
    def _email(cls, value: str) -> str:
        if not re.match(EMAIL_PATTERN, value):
            raise ValueError("must be an email address, like ana@example.com")
        return value


def _rules(db: sqlite3.Connection, form: BookingForm, booking_id: int | None) -> dict[str, str]:
    """The business rules a valid form can still break: room, times, capacity, overlap."""
    found = None
    if form.room.isascii() and form.room.isdecimal():
        found = db.execute("SELECT id, name, capacity FROM rooms WHERE id = ?", (int(form.room),)).fetchone()
    if found is None:
        return {"room": "Choose a room from the list."}
    _, name, capacity = found
    errors = {}
    start = datetime.strptime(form.start_time, "%H:%M")
    end = datetime.strptime(form.end_time, "%H:%M")
    if end <= start:
        errors["end_time"] = "End time must be after the start time."
    elif end - start > timedelta(hours=MAX_HOURS):
        errors["end_time"] = f"A booking lasts at most {MAX_HOURS} hours."
    if form.attendees > capacity:
        errors["attendees"] = f"{name} seats at most {capacity} people; choose a larger room."
    clash = db.execute(
        "SELECT title, start_time, end_time FROM bookings WHERE room_id = ? AND day = ? AND status = 'confirmed' "
        "AND start_time < ? AND end_time > ? AND id != ? ORDER BY start_time LIMIT 1",
        (found[0], form.day, form.end_time, form.start_time, booking_id or 0),
    ).fetchone()
    if clash and "end_time" not in errors:
        errors["start_time"] = (
            f"{name} is already booked from {clash[1]} to {clash[2]} on {form.day} ({clash[0]}); "
            "choose another time or room."
        )
    return errors


def _form_page(
    db: sqlite3.Connection,
    values: Mapping[str, str],
    errors: Mapping[str, str],
    *,
    booking_id: int | None,
) -> Response:
    rooms = _rooms(db)
    v, e = values.get, errors.get
    action = f"/bookings/{booking_id}/edit" if booking_id else "/bookings/new"
    main = html(
        '<form method="post" action="{action}" novalidate>{errs}{room}{day}{start}{end}{title}{attendees}'
        '{organizer}{notes}<button type="submit">{submit}</button></form>',
        action=action,
        errs=error_summary(errors),
        room=select(
            "room",
            "Room",
            [("", "Choose a room"), *((str(i), n) for i, n, *_ in rooms)],
            v("room", ""),
            error=e("room"),
            hint="Seats: " + ", ".join(f"{n} {c}" for _, n, _, c, _ in rooms),
        ),
        day=text_input("day", "Date", v("day", ""), error=e("day"), hint="YYYY-MM-DD, Monday to Friday"),
        start=select(
            "start_time",
            "Start time",
            [("", "Choose"), *((t, t) for t in START_TIMES)],
            v("start_time", ""),
            error=e("start_time"),
        ),
        end=select(
            "end_time",
            "End time",
            [("", "Choose"), *((t, t) for t in END_TIMES)],
            v("end_time", ""),
            error=e("end_time"),
        ),
        title=text_input("title", "Title", v("title", ""), error=e("title")),
        attendees=number_input(
            "attendees", "Number of attendees", v("attendees", ""), lo=1, hi=100, error=e("attendees")
        ),
        organizer=text_input("organizer", "Organizer email", v("organizer", ""), error=e("organizer"), kind="email"),
        notes=textarea("notes", "Notes", v("notes", ""), error=e("notes"), rows=3),
        submit="Save changes" if booking_id else "Book room",
    )
    title = "Edit booking" if booking_id else "New booking"
    return _page(title, main, current=None if booking_id else "/bookings/new", status=422 if errors else 200)


FIELDS = ("room", "day", "start_time", "end_time", "title", "attendees", "organizer", "notes")


def new_booking(db: sqlite3.Connection, req: Req) -> Response:
    room_id = req.query.get("room", "")
    return _form_page(db, {"room": room_id if room_id.isdecimal() else ""}, {}, booking_id=None)


def edit_booking(db: sqlite3.Connection, req: Req) -> Response:
    i, room_id, _, title, organizer, day, start, end, attendees, status, notes = _booking(db, req.params["id"])
    if status != "confirmed":
        raise HttpError(409, "A cancelled booking cannot be edited.")
    values = dict(zip(FIELDS, map(str, (room_id, day, start, end, title, attendees, organizer, notes)), strict=True))
    return _form_page(db, values, {}, booking_id=i)


def _submitted(db: sqlite3.Connection, req: Req, booking_id: int | None) -> BookingForm | Response:
    form = validate(BookingForm, req.form)
    errors = form if isinstance(form, dict) else _rules(db, form, booking_id)
    if isinstance(form, dict) or errors:
        values = {k: req.form.get(k, "")[:1000] for k in FIELDS}
        return _form_page(db, values, errors, booking_id=booking_id)
    return form


def create_booking(db: sqlite3.Connection, req: Req) -> Response:
    form = _submitted(db, req, None)
    if isinstance(form, Response):
        return form
    cursor = db.execute(
        "INSERT INTO bookings (room_id, title, organizer, day, start_time, end_time, attendees, notes) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            int(form.room),
            form.title,
            form.organizer,
            form.day,
            form.start_time,
            form.end_time,
            form.attendees,
            form.notes,
        ),
    )
    return see_other(f"/bookings/{cursor.lastrowid}?notice=booked")


def update_booking(db: sqlite3.Connection, req: Req) -> Response:
    found = _booking(db, req.params["id"])
    booking_id, status = found[0], found[9]
    if status != "confirmed":
        raise HttpError(409, "A cancelled booking cannot be edited.")
    form = _submitted(db, req, booking_id)
    if isinstance(form, Response):
        return form
    db.execute(
        "UPDATE bookings SET room_id = ?, title = ?, organizer = ?, day = ?, start_time = ?, end_time = ?, "
        "attendees = ?, notes = ? WHERE id = ?",
        (
            int(form.room),
            form.title,
            form.organizer,
            form.day,
            form.start_time,
            form.end_time,
            form.attendees,
            form.notes,
            booking_id,
        ),
    )
    return see_other(f"/bookings/{booking_id}?notice=saved")


def create_app(db_path: Path) -> Any:
    endpoints = [
        Endpoint("/", schedule),
        Endpoint("/rooms", rooms),
        Endpoint("/rooms/{id:int}", room),
        Endpoint("/bookings", bookings),
        Endpoint("/bookings/new", new_booking),
        Endpoint("/bookings/new", create_booking, ("POST",)),
        Endpoint("/bookings/{id:int}", booking),
        Endpoint("/bookings/{id:int}/edit", edit_booking),
        Endpoint("/bookings/{id:int}/edit", update_booking, ("POST",)),
        Endpoint("/bookings/{id:int}/cancel", cancel, ("POST",)),
    ]
    return build_app(db_path, endpoints, _error_page)


# -- checks ---------------------------------------------------------------------------

COLUMNS = ("id", "room_id", "title", "organizer", "day", "start_time", "end_time", "attendees", "status", "notes")


def _state(db: sqlite3.Connection) -> State:
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


def check_capacity(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, room: str) -> float:
    """The answer is the number of seats of the room."""
    row = start.execute("SELECT capacity FROM rooms WHERE id = ?", (_room_id(start, room),)).fetchone()
    return float(answer_int(answer) == row[0])


def check_organizer(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, title: str) -> float:
    """The answer is the email of the booking's organizer."""
    row = start.execute("SELECT organizer FROM bookings WHERE id = ?", (_booking_id(start, title),)).fetchone()
    return float(answer_text(answer) == normalise(row[0]))


def check_room_with(
    db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, floor: int, projector: bool
) -> float:
    """The answer is the name of the one room on the floor with (or without) a projector."""
    rows = start.execute("SELECT name FROM rooms WHERE floor = ? AND projector = ?", (floor, int(projector))).fetchall()
    if len(rows) != 1:
        raise ValueError(f"{len(rows)} rooms on floor {floor} match, not one")
    return float(answer_text(answer) == normalise(rows[0][0]))


def check_count_on(
    db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, room: str, day: str
) -> float:
    """The answer is the number of confirmed bookings of the room on the day."""
    row = start.execute(
        "SELECT count(*) FROM bookings WHERE room_id = ? AND day = ? AND status = 'confirmed'",
        (_room_id(start, room), day),
    ).fetchone()
    return float(answer_int(answer) == row[0])


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
    subgoals={"booking_exists": booking_exists, "booking_has": booking_has},
)
