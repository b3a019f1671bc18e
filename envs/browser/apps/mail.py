"""Mail: a webmail's data, tasks and checks (the web app is `_mail_app`).

Seed: 34 inbox messages in fixed time slots. The 16 that tasks name (and their read
state) are fixed, and so is the read state of every slot; the other 18 take their
sender (ten senders, at most two messages each), subject and text from the seed, and
no filler mentions a word a task searches for. The archive (6) and sent (4) folders
and the labels Finance, Travel and Team are fixed.

Tasks (14): lookups (the newest subject, the unread count, a fact in a message, how
many messages one person sent, who sent the most) and writes (archive, trash, star,
label, reply; archive all of one sender's messages; reply then archive; create a label
and put it on two messages). A writing check wants exactly the intended change to the
messages and labels and nothing else; a lookup wants them as they were (a right answer
after trashing every message scores 0). The read state is left out, since reading a
message marks it read, but no check passes once a message read before the episode is
unread again (marking messages unread is a change, not a look). A reply must be one
message to the sender alone, with the subject ``Re: ...``, saying the phrase asked for
in at most 2,000 characters. An answer is one value, never a list.
"""

from __future__ import annotations

import functools
import random
import sqlite3
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from agentenv.envs.browser.apps._golden import answer, click, fill, press
from agentenv.envs.browser.apps._mail_app import ME, create_app
from agentenv.envs.browser.apps._verify import (
    Check,
    State,
    TableChange,
    answer_int,
    answer_text,
    changes,
    keyed,
    normalise,
    read_only,
)
from agentenv.envs.browser.site import Site, SiteTask

__all__ = ["SITE"]

SCHEMA = """
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, folder TEXT NOT NULL,
                       sender_name TEXT NOT NULL, sender_email TEXT NOT NULL, recipients TEXT NOT NULL,
                       subject TEXT NOT NULL, body TEXT NOT NULL, sent_at TEXT NOT NULL,
                       is_read INTEGER NOT NULL DEFAULT 0, starred INTEGER NOT NULL DEFAULT 0,
                       in_reply_to INTEGER REFERENCES messages(id));
CREATE TABLE labels (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE COLLATE NOCASE);
CREATE TABLE message_labels (message_id INTEGER NOT NULL REFERENCES messages(id),
                             label_id INTEGER NOT NULL REFERENCES labels(id), PRIMARY KEY (message_id, label_id));
"""
LENA = ("Lena Novak", "lena.novak@northwind.test")
TOMAS = ("Tomas Berg", "tomas.berg@northwind.test")
PRIYA = ("Priya Shah", "priya.shah@northwind.test")
INBOX_SLOTS = 34
UNREAD_SLOTS = frozenset({0, 1, 2, 6, 9, 15, 18})
FIXED_INBOX: dict[int, tuple[tuple[str, str], str, str]] = {  # slot -> (sender, subject, body)
    0: (LENA, "Planning offsite", "Hi Sam,\n\nFor the team offsite I suggest Thursday 26 June. I have asked "
        "facilities to hold room 4B for us from 10:00.\n\nCould you confirm that Thursday works for you?\n\nLena"),
    2: (("PaperCo Billing", "billing@paperco.test"), "Invoice 2291",
        "Invoice 2291 covers the May office supplies.\n\nAmount due: $1,240.00 by 30 June 2025."),
    3: (("SwissTravel", "bookings@swisstravel.test"), "Flight confirmation LX318",
        "Your flight LX318 from Zurich to London on 3 July departs at 07:40. Seat 14C."),
    4: (("Swift Couriers", "tracking@swiftcouriers.test"), "Parcel update",
        "Your parcel SC-55102 will be delivered tomorrow between 12:00 and 14:00."),
    5: (("IT Helpdesk", "helpdesk@northwind.test"), "VPN access ticket",
        "Hello,\n\nWe have opened ticket INC-48213 for your VPN access request. Quote it if you call us.\n\n"
        "IT Helpdesk"),
    7: (("Northwind Weekly", "digest@northwind.test"), "Weekly digest",
        "This week: the new coffee machine, the summer party date and three new starters."),
    9: (TOMAS, "Draft budget", "Sam, the draft of next year's numbers is in the shared folder. Tomas"),
    13: (TOMAS, "Budget figures v2", "Updated figures attached; travel is down 8%."),
    16: (("Paper & Ink Books", "orders@paperandink.test"), "Receipt for your order",
         "Thank you for your order PI-7731. This receipt confirms a payment of $38.20."),
    18: (PRIYA, "Lunch on Friday?", "Hi Sam, are you free for lunch on Friday? The new place on Dock Street? Priya"),
    20: (TOMAS, "Budget timeline", "We need sign-off by the end of the month."),
    23: (PRIYA, "Conference badge", "Your badge for the product conference is at reception."),
    25: (("StreamBox", "billing@streambox.test"), "Receipt: June subscription",
         "Your receipt for the June subscription: $11.99, paid by card."),
    27: (TOMAS, "Budget sign-off", "Signed off. Thanks for the quick turnaround."),
    30: (PRIYA, "Old project notes", "I found my notes from the Atlas project; happy to share them."),
    33: (("Northwind Mail", "welcome@northwind.test"), "Welcome to Northwind Mail",
         "Your mailbox is ready. Use labels to keep things organised."),
}  # fmt: skip
FILLER_SENDERS = [
    ("Marta Kowalski", "marta.kowalski@northwind.test"),
    ("Jonas Weber", "jonas.weber@northwind.test"),
    ("Aiko Sato", "aiko.sato@northwind.test"),
    ("Diego Alvarez", "diego.alvarez@northwind.test"),
    ("Fatima Noor", "fatima.noor@northwind.test"),
    ("Oliver Grant", "oliver.grant@northwind.test"),
    ("Community Garden", "hello@communitygarden.test"),
    ("City Library", "notices@citylibrary.test"),
    ("Harbor Yoga", "classes@harboryoga.test"),
    ("Harbor Bank", "alerts@harborbank.test"),
]
FILLER_SUBJECTS = [
    "Team lunch photos", "Library book due soon", "Garden volunteers needed", "New yoga timetable",
    "Statement available", "Quarterly all-hands agenda", "Desk move on Monday", "Parking permits",
    "Fire drill on Wednesday", "Printer on floor 2", "Summer party RSVP", "Welcome our new starters",
    "Recycling changes", "Reading group picks", "Bike to work week", "Coffee machine is fixed",
    "Plant swap", "Office closed on the 4th", "Survey: hybrid working", "Lost and found",
    "Car share scheme", "Charity bake sale", "Kitchen rota", "Wi-Fi maintenance window",
]  # fmt: skip
FILLER_LINES = [
    "Just a quick note so you have it in writing.",
    "Let me know if anything is unclear.",
    "More details will follow later this week.",
    "No action is needed from you for now.",
    "Thanks to everyone who helped out.",
    "Reply if you would like to join.",
    "The details are on the notice board as well.",
    "See you there!",
]
ARCHIVE = [  # (sender, subject, body, sent at)
    (("Marta Kowalski", "marta.kowalski@northwind.test"), "Holiday rota", "The rota for July is final.",
     "2025-05-20 10:12"),
    (("Harbor Bank", "alerts@harborbank.test"), "New card on its way", "Your new card will arrive in 5 days.",
     "2025-05-14 08:03"),
    (("Jonas Weber", "jonas.weber@northwind.test"), "Slides for Tuesday", "Here are my slides for Tuesday.",
     "2025-05-09 16:40"),
    (("City Library", "notices@citylibrary.test"), "Membership renewed", "Your membership runs until May 2026.",
     "2025-05-02 09:15"),
    (("Aiko Sato", "aiko.sato@northwind.test"), "Onboarding checklist", "The checklist is in the wiki.",
     "2025-04-28 11:55"),
    (("Oliver Grant", "oliver.grant@northwind.test"), "Welcome drinks", "Drinks at six on Friday.",
     "2025-04-25 13:30"),
]  # fmt: skip
SENT = [  # (recipient, subject, body, sent at)
    ("lena.novak@northwind.test", "Offsite ideas", "Could we look at dates in late June?", "2025-06-02 15:20"),
    ("helpdesk@northwind.test", "VPN access", "Please give me VPN access for remote work.", "2025-06-04 09:05"),
    ("marta.kowalski@northwind.test", "Re: Holiday rota", "Looks good to me.", "2025-05-20 11:00"),
    ("diego.alvarez@northwind.test", "Lunch next week", "Free on Wednesday?", "2025-05-30 12:45"),
]
LABELS = ["Finance", "Travel", "Team"]
SEED_LABELS = [(3, "Finance"), (1, "Team")]  # (message id, label): Invoice 2291 and Planning offsite


def _slot_time(slot: int) -> str:
    return (datetime(2025, 6, 16, 8, 0) - timedelta(hours=7, minutes=13) * slot).strftime("%Y-%m-%d %H:%M")


def seed(db: sqlite3.Connection, seed: int) -> None:
    rng = random.Random(seed)
    senders = rng.sample(FILLER_SENDERS, len(FILLER_SENDERS))
    subjects = rng.sample(FILLER_SUBJECTS, INBOX_SLOTS - len(FIXED_INBOX))
    fillers = iter(range(INBOX_SLOTS - len(FIXED_INBOX)))
    rows = []
    for slot in range(INBOX_SLOTS):  # message id = slot + 1
        if slot in FIXED_INBOX:
            sender, subject, body = FIXED_INBOX[slot]
        else:
            k = next(fillers)
            sender, subject = senders[k % len(senders)], subjects[k]
            body = f"Hello Sam,\n\n{' '.join(rng.sample(FILLER_LINES, 2))}\n\n{sender[0]}"
        rows.append(("inbox", *sender, ME[1], subject, body, _slot_time(slot), int(slot not in UNREAD_SLOTS)))
    rows += [("archive", *s, ME[1], subject, body, at, 1) for s, subject, body, at in ARCHIVE]
    rows += [("sent", *ME, to, subject, body, at, 1) for to, subject, body, at in SENT]
    db.executemany(
        "INSERT INTO messages (folder, sender_name, sender_email, recipients, subject, body, sent_at, is_read) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    db.executemany("INSERT INTO labels (name) VALUES (?)", [(name,) for name in LABELS])
    db.executemany(
        "INSERT INTO message_labels (message_id, label_id) SELECT ?, id FROM labels WHERE name = ?", SEED_LABELS
    )


# -- checks ---------------------------------------------------------------------------


def _state(db: sqlite3.Connection) -> State:
    """Every table and column but the read state (opening a message marks it read: a side effect,
    not a change; `_keeps_read_state` holds the rest of it)."""
    return {
        "messages": keyed(
            db.execute(
                "SELECT id, folder, sender_name, sender_email, recipients, subject, body, sent_at, starred, "
                "in_reply_to FROM messages"
            )
        ),
        "labels": keyed(db.execute("SELECT id, name FROM labels")),
        "message_labels": keyed(db.execute("SELECT message_id, label_id FROM message_labels"), width=2),
    }


def _keeps_read_state(check: Check) -> Check:
    """``check``, scoring 0 when a message read as the episode began is unread at its end:
    reading may mark messages read, and only an act of the agent's marks one unread."""

    @functools.wraps(check)
    def checked(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, **args: Any) -> float:
        score = check(db, start, answer, **args)
        read = {row[0] for row in start.execute("SELECT id FROM messages WHERE is_read = 1")}
        unread = {row[0] for row in db.execute("SELECT id FROM messages WHERE is_read = 0")}
        return 0.0 if read & unread else score

    return checked


def _message_id(db: sqlite3.Connection, subject: str) -> int:
    rows = db.execute("SELECT id FROM messages WHERE subject = ?", (subject,)).fetchall()
    if len(rows) != 1:
        raise ValueError(f"{len(rows)} messages have the subject {subject!r}, not one")
    return int(rows[0][0])


def _moved_only(change: Any, moves: Mapping[int, str]) -> bool:
    """``change`` (of messages) is exactly these moves: each message's folder, nothing else."""
    if change is None or change.added or change.removed or set(change.changed) != set(moves):
        return False
    for message_id, (old, new) in change.changed.items():
        if new[1] != moves[message_id] or old[1] == new[1] or old[:1] + old[2:] != new[:1] + new[2:]:
            return False
    return True


def check_moved(
    db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, subjects: list, folder: str
) -> float:
    """Exactly these messages moved to ``folder``; nothing else about any message or label changed."""
    moves = {_message_id(start, s): folder for s in subjects}
    changed = changes(_state(start), _state(db))
    return float(set(changed) == {"messages"} and _moved_only(changed["messages"], moves))


def check_starred(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, subject: str) -> float:
    """The message is starred (it was not), and nothing else changed."""
    message_id = _message_id(start, subject)
    changed = changes(_state(start), _state(db))
    change = changed.get("messages")
    if set(changed) != {"messages"} or change is None or change.added or change.removed:
        return 0.0
    if set(change.changed) != {message_id}:
        return 0.0
    old, new = change.changed[message_id]
    return float(old[8] == 0 and new[8] == 1 and old[:8] + old[9:] == new[:8] + new[9:])


def check_labelled(
    db: sqlite3.Connection,
    start: sqlite3.Connection,
    answer: str | None,
    *,
    subjects: list,
    label: str,
    create: bool = False,
) -> float:
    """Exactly these messages gained the label (the one label created in the episode when ``create``;
    names compared whitespace and case aside); no other label or message changed."""
    ids = [_message_id(start, s) for s in subjects]
    before, after = _state(start), _state(db)
    changed = changes(before, after)
    names = {normalise(row[1]): key for key, row in after["labels"].items()}
    label_id = names.get(normalise(label))
    if label_id is None or set(changed) - {"labels", "message_labels"}:
        return 0.0
    labels_ch = changed.get("labels")
    if create:
        if labels_ch is None or labels_ch.removed or labels_ch.changed:
            return 0.0
        if [normalise(name) for _, name in labels_ch.added.values()] != [normalise(label)]:
            return 0.0
    elif labels_ch:
        return 0.0
    links = changed.get("message_labels")
    want = {(i, label_id) for i in ids}
    return float(links is not None and not links.removed and set(links.added) == want)


def check_replied(
    db: sqlite3.Connection,
    start: sqlite3.Connection,
    answer: str | None,
    *,
    subject: str,
    phrase: str,
    then_folder: str | None = None,
) -> float:
    """Exactly one new message: a reply to the message, to its sender alone, subject ``Re: <subject>``,
    saying ``phrase`` (at most 2,000 characters); and, with ``then_folder``, the original moved there.
    Nothing else changed."""
    original = _message_id(start, subject)
    sender = start.execute("SELECT sender_email FROM messages WHERE id = ?", (original,)).fetchone()[0]
    changed = changes(_state(start), _state(db))
    change = changed.get("messages")
    if set(changed) != {"messages"} or change is None or change.removed or len(change.added) != 1:
        return 0.0
    (reply,) = change.added.values()
    _, box, _, from_email, recipients, reply_subject, body, _, _, in_reply_to = reply
    if not (box == "sent" and from_email == ME[1] and in_reply_to == original):
        return 0.0
    if normalise(recipients) != normalise(sender) or normalise(reply_subject) != normalise(f"Re: {subject}"):
        return 0.0
    if normalise(phrase) not in normalise(body) or len(body) > 2000:
        return 0.0
    if then_folder is None:
        return float(not change.changed)
    moved = TableChange(changed=change.changed)
    return float(_moved_only(moved, {original: then_folder}))


@read_only(_state)
def check_newest_subject(
    db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, folder: str
) -> float:
    """The answer is the subject of the folder's newest message."""
    row = start.execute(
        "SELECT subject FROM messages WHERE folder = ? ORDER BY sent_at DESC, id DESC LIMIT 1", (folder,)
    ).fetchone()
    return float(row is not None and answer_text(answer) == normalise(row[0]))


@read_only(_state)
def check_unread_count(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, folder: str) -> float:
    """The answer is the number of unread messages in the folder as the episode began."""
    row = start.execute("SELECT count(*) FROM messages WHERE folder = ? AND is_read = 0", (folder,)).fetchone()
    return float(answer_int(answer) == row[0])


@read_only(_state)
def check_fact(
    db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, subject: str, value: str
) -> float:
    """The answer is ``value``, a fact written in the message with that subject."""
    body = start.execute("SELECT body FROM messages WHERE id = ?", (_message_id(start, subject),)).fetchone()[0]
    if normalise(value) not in normalise(body):
        raise ValueError(f"the message {subject!r} does not say {value!r}")
    return float(answer_text(answer) == normalise(value))


@read_only(_state)
def check_count_from(
    db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, sender: str, folder: str
) -> float:
    """The answer is how many messages from ``sender`` (a name) the folder held."""
    row = start.execute(
        "SELECT count(*) FROM messages WHERE folder = ? AND sender_name = ?", (folder, sender)
    ).fetchone()
    return float(answer_int(answer) == row[0])


@read_only(_state)
def check_top_sender(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, folder: str) -> float:
    """The answer is the name of the one sender with the most messages in the folder."""
    rows = start.execute(
        "SELECT sender_name, count(*) AS n FROM messages WHERE folder = ? GROUP BY sender_name ORDER BY n DESC LIMIT 2",
        (folder,),
    ).fetchall()
    if not rows or (len(rows) == 2 and rows[0][1] == rows[1][1]):
        raise ValueError(f"no single top sender in {folder!r}: {rows}")
    return float(answer_text(answer) == normalise(rows[0][0]))


def in_folder(db: sqlite3.Connection, *, subject: str, folder: str) -> bool:
    row = db.execute("SELECT folder FROM messages WHERE subject = ?", (subject,)).fetchall()
    return row == [(folder,)]


def has_label(db: sqlite3.Connection, *, subject: str, label: str) -> bool:
    row = db.execute(
        "SELECT 1 FROM message_labels ml JOIN messages m ON m.id = ml.message_id JOIN labels l ON l.id = ml.label_id "
        "WHERE m.subject = ? AND l.name = ?",
        (subject, label),
    ).fetchone()
    return row is not None


def label_exists(db: sqlite3.Connection, *, name: str) -> bool:
    return db.execute("SELECT 1 FROM labels WHERE name = ?", (name,)).fetchone() is not None


def replied_to(db: sqlite3.Connection, *, subject: str) -> bool:
    row = db.execute(
        "SELECT 1 FROM messages r JOIN messages m ON m.id = r.in_reply_to WHERE m.subject = ? AND r.folder = 'sent'",
        (subject,),
    ).fetchone()
    return row is not None


# -- tasks ----------------------------------------------------------------------------

TOMAS_SUBJECTS = ["Draft budget", "Budget figures v2", "Budget timeline", "Budget sign-off"]
RECEIPTS = ["Receipt for your order", "Receipt: June subscription"]


def _label_steps(subject: str, label: str) -> list:
    return [
        fill("searchbox", "Search mail", "receipt"),
        press("Enter"),
        click("link", subject),
        click("link", "Edit labels"),
        click("checkbox", label),
        click("button", "Save labels"),
    ]


TASKS = [
    SiteTask(
        id="newest-subject",
        prompt="What is the subject of the newest message in my inbox? Answer with the subject only.",
        golden=[answer("Planning offsite")],
        check="newest_subject",
        check_args={"folder": "inbox"},
        difficulty=0,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="unread-count",
        prompt="How many unread messages are in my inbox? Answer with a number.",
        golden=[answer("7")],
        check="unread_count",
        check_args={"folder": "inbox"},
        difficulty=0,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="archive-digest",
        prompt="Archive this message.",
        golden=[click("button", "Archive")],
        check="moved",
        check_args={"subjects": ["Weekly digest"], "folder": "archive"},
        start="/message/8",
        difficulty=0,
        family="organise",
    ),
    SiteTask(
        id="offsite-room",
        prompt="Which room did Lena suggest for the team offsite? Answer with the room code only, like 2A.",
        golden=[click("link", "Planning offsite"), answer("4B")],
        check="fact",
        check_args={"subject": "Planning offsite", "value": "4B"},
        difficulty=1,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="star-invoice",
        prompt="Star the message about invoice 2291 so I remember to pay it.",
        golden=[click("link", "Invoice 2291"), click("button", "Star")],
        check="starred",
        check_args={"subject": "Invoice 2291"},
        difficulty=1,
        family="organise",
    ),
    SiteTask(
        id="label-flight",
        prompt="Put the label Travel on my flight confirmation message.",
        golden=[
            click("link", "Flight confirmation LX318"),
            click("link", "Edit labels"),
            click("checkbox", "Travel"),
            click("button", "Save labels"),
        ],
        check="labelled",
        check_args={"subjects": ["Flight confirmation LX318"], "label": "Travel"},
        difficulty=1,
        family="organise",
    ),
    SiteTask(
        id="trash-parcel",
        prompt="Delete the parcel update from Swift Couriers (move it to the trash).",
        golden=[click("link", "Parcel update"), click("button", "Move to trash")],
        check="moved",
        check_args={"subjects": ["Parcel update"], "folder": "trash"},
        difficulty=1,
        family="organise",
    ),
    SiteTask(
        id="vpn-ticket",
        prompt="IT opened a ticket for my VPN access. What is its number? Answer with the ticket number only.",
        golden=[
            fill("searchbox", "Search mail", "VPN"),
            press("Enter"),
            click("link", "VPN access ticket"),
            answer("INC-48213"),
        ],
        check="fact",
        check_args={"subject": "VPN access ticket", "value": "INC-48213"},
        difficulty=2,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="reply-offsite",
        prompt="Reply to Lena's message about the offsite and tell her: Thursday works for me.",
        golden=[
            click("link", "Planning offsite"),
            click("link", "Reply"),
            fill("textbox", "Message", "Thursday works for me."),
            click("button", "Send"),
        ],
        check="replied",
        check_args={"subject": "Planning offsite", "phrase": "Thursday works for me"},
        difficulty=2,
        family="reply",
    ),
    SiteTask(
        id="priya-count",
        prompt="How many messages from Priya Shah are in my inbox? Answer with a number.",
        golden=[fill("searchbox", "Search mail", "Priya Shah"), press("Enter"), answer("3")],
        check="count_from",
        check_args={"sender": "Priya Shah", "folder": "inbox"},
        difficulty=2,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="archive-tomas",
        prompt="Archive every message from Tomas Berg that is in my inbox, and nothing else.",
        golden=[
            fill("searchbox", "Search mail", "Tomas Berg"),
            press("Enter"),
            *[click("checkbox", f"Select {s}") for s in TOMAS_SUBJECTS],
            click("button", "Archive selected"),
        ],
        check="moved",
        check_args={"subjects": TOMAS_SUBJECTS, "folder": "archive"},
        difficulty=3,
        family="organise",
        subgoals=[("in_folder", {"subject": s, "folder": "archive"}) for s in TOMAS_SUBJECTS],
    ),
    SiteTask(
        id="reply-archive-lunch",
        prompt="Answer Priya's lunch invitation with: Friday at noon is perfect. Then archive her message.",
        golden=[
            click("link", "Next page"),
            click("link", "Lunch on Friday?"),
            click("link", "Reply"),
            fill("textbox", "Message", "Friday at noon is perfect."),
            click("button", "Send"),
            click("button", "Archive"),
        ],
        check="replied",
        check_args={"subject": "Lunch on Friday?", "phrase": "Friday at noon is perfect", "then_folder": "archive"},
        difficulty=3,
        family="reply",
        subgoals=[
            ("replied_to", {"subject": "Lunch on Friday?"}),
            ("in_folder", {"subject": "Lunch on Friday?", "folder": "archive"}),
        ],
    ),
    SiteTask(
        id="receipts-label",
        prompt="Create a label called Receipts and put it on both receipts in my inbox.",
        golden=[
            click("link", "Labels"),
            fill("textbox", "Label name", "Receipts"),
            click("button", "Create label"),
            *_label_steps(RECEIPTS[0], "Receipts"),
            *_label_steps(RECEIPTS[1], "Receipts"),
        ],
        check="labelled",
        check_args={"subjects": RECEIPTS, "label": "Receipts", "create": True},
        difficulty=3,
        family="organise",
        subgoals=[
            ("label_exists", {"name": "Receipts"}),
            *[("has_label", {"subject": s, "label": "Receipts"}) for s in RECEIPTS],
        ],
    ),
    SiteTask(
        id="top-sender",
        prompt="Who sent the most of the messages in my inbox? Answer with their name.",
        golden=[
            click("link", "Next page"),
            click("link", "Next page"),
            click("link", "Next page"),
            answer("Tomas Berg"),
        ],
        check="top_sender",
        check_args={"folder": "inbox"},
        difficulty=3,
        family="lookup",
        writes=False,
    ),
]

_CHECKS: dict[str, Check] = {
    "moved": check_moved,
    "starred": check_starred,
    "labelled": check_labelled,
    "replied": check_replied,
    "newest_subject": check_newest_subject,
    "unread_count": check_unread_count,
    "fact": check_fact,
    "count_from": check_count_from,
    "top_sender": check_top_sender,
}
"""The checks as written; the site's are these, each also wanting the read state kept."""

SITE = Site(
    name="mail",
    schema=SCHEMA,
    seed=seed,
    create_app=create_app,
    checks={name: _keeps_read_state(check) for name, check in _CHECKS.items()},
    tasks=TASKS,
    state=_state,
    subgoals={"in_folder": in_folder, "has_label": has_label, "label_exists": label_exists, "replied_to": replied_to},
)
