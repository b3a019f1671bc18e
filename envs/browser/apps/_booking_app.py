"""The room-booking app: a day schedule, rooms, a list of bookings in pages, and forms
to book, edit and cancel (confirmed in a modal).

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

The site around it (schema, seed, checks, tasks) is `agentenv.envs.browser.apps.booking`.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from starlette.responses import Response

from agentenv.envs.browser.apps._chrome import Chrome, NavItem, confirm_dialog, post_form
from agentenv.envs.browser.apps._html import html, number_input, pager, select, text_input, textarea
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

__all__ = ["TODAY", "create_app"]

TITLE = "Northwind Rooms"
TODAY = date(2025, 6, 16)
BOOKABLE_DAYS = 60
PER_PAGE = 10
MAX_HOURS = 4
START_TIMES = [f"{h:02d}:{m:02d}" for h in range(8, 19) for m in (0, 30)]
END_TIMES = [*START_TIMES[1:], "19:00"]


def _long_date(day: date) -> str:
    return f"{day:%A} {day.day} {day:%B %Y}"


def _rooms(db: sqlite3.Connection) -> list[tuple[int, str, int, int, int]]:
    return db.execute("SELECT id, name, floor, capacity, projector FROM rooms ORDER BY name").fetchall()


# -- pages ----------------------------------------------------------------------------


def _nav(db: sqlite3.Connection | None) -> list[NavItem]:
    return [
        NavItem("Schedule", "/"),
        NavItem("Rooms", "/rooms"),
        NavItem("Bookings", "/bookings"),
        NavItem("New booking", "/bookings/new"),
    ]


CHROME = Chrome(TITLE, _nav)


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
    if day in (date.min, date.max):  # its previous or next day does not exist
        raise HttpError(400, f"The schedule shows days from 0001-01-02 to 9999-12-30; got {raw!r}.")
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
    return CHROME.page(db, "Schedule", main, current="/")


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
    return CHROME.page(db, "Rooms", main, current="/rooms")


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
    return CHROME.page(db, name, main)


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
    return CHROME.page(db, "Bookings", main, current="/bookings")


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
        modal = confirm_dialog(
            f"Cancel \u201c{title}\u201d?",
            f"{room_name}, {day}, {start}-{end}. The room becomes free for others.",
            action=f"/bookings/{i}/cancel",
            confirm="Yes, cancel booking",
            back=f"/bookings/{i}",
            keep="Keep booking",
        )
    return CHROME.page(db, title, main, notice=NOTICES.get(req.query.get("notice", "")), modal=modal)


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
    main = post_form(
        action,
        select(
            "room",
            "Room",
            [("", "Choose a room"), *((str(i), n) for i, n, *_ in rooms)],
            v("room", ""),
            error=e("room"),
            hint="Seats: " + ", ".join(f"{n} {c}" for _, n, _, c, _ in rooms),
        ),
        text_input("day", "Date", v("day", ""), error=e("day"), hint="YYYY-MM-DD, Monday to Friday"),
        select(
            "start_time",
            "Start time",
            [("", "Choose"), *((t, t) for t in START_TIMES)],
            v("start_time", ""),
            error=e("start_time"),
        ),
        select(
            "end_time",
            "End time",
            [("", "Choose"), *((t, t) for t in END_TIMES)],
            v("end_time", ""),
            error=e("end_time"),
        ),
        text_input("title", "Title", v("title", ""), error=e("title")),
        number_input("attendees", "Number of attendees", v("attendees", ""), lo=1, hi=100, error=e("attendees")),
        text_input("organizer", "Organizer email", v("organizer", ""), error=e("organizer"), kind="email"),
        textarea("notes", "Notes", v("notes", ""), error=e("notes"), rows=3),
        submit="Save changes" if booking_id else "Book room",
        errors=errors,
    )
    title = "Edit booking" if booking_id else "New booking"
    return CHROME.page(db, title, main, current=None if booking_id else "/bookings/new", status=422 if errors else 200)


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
    return build_app(db_path, endpoints, CHROME.error_page)
