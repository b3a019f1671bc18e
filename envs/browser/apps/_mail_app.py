"""The webmail's app: one user (Sam Rivera) with folders in pages, reading, replying,
composing, stars, labels, archive, trash and search.

Pages: ``/`` and ``/folder/{inbox|archive|sent|trash}`` (10 a page, newest first, with
checkboxes and bulk actions), ``/label/{id}``, ``/search?q=`` (subject, body and sender,
every folder but trash), ``/message/{id}`` (opening marks it read; reply, star, edit
labels in a modal, archive, trash, mark unread), ``/compose`` (new or reply) and
``/labels`` (create a label).

Rules the app enforces: recipients are 1 to 10 email addresses separated by commas;
subject and message are required; label names are 1 to 30 characters and unique
whatever their case. The clock is fixed (`NOW`), so episodes replay.

The site around it (schema, seed, checks, tasks) is `agentenv.envs.browser.apps.mail`.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from pydantic import Field, field_validator
from starlette.responses import Response

from agentenv.envs.browser.apps._chrome import Chrome, NavItem, button_form, dialog, post_form
from agentenv.envs.browser.apps._html import Html, checkbox, html, join, pager, text_input, textarea
from agentenv.envs.browser.apps._web import (
    EMAIL_PATTERN,
    MAX_ID,
    Endpoint,
    Form,
    HttpError,
    Req,
    build_app,
    see_other,
    validate,
)

__all__ = ["ME", "NOW", "create_app"]

TITLE = "Northwind Mail"
ME = ("Sam Rivera", "sam.rivera@northwind.test")
NOW = datetime(2025, 6, 16, 9, 30)
PER_PAGE = 10
FOLDERS = {"inbox": "Inbox", "archive": "Archive", "sent": "Sent", "trash": "Trash"}
MAX_RECIPIENTS = 10
NOTICES = {
    "archived": "Message archived.",
    "trashed": "Message moved to the trash.",
    "inboxed": "Message moved to the inbox.",
    "unread": "Message marked as unread.",
    "sent": "Message sent.",
    "replied": "Your reply has been sent.",
    "labels": "Labels saved.",
    "label-created": "Label created.",
    "bulk": "The selected messages were updated.",
    "none-selected": "Select at least one message first.",
}


# -- pages ----------------------------------------------------------------------------


def _nav(db: sqlite3.Connection | None) -> list[NavItem]:
    unread = (
        db.execute("SELECT count(*) FROM messages WHERE folder = 'inbox' AND is_read = 0").fetchone()[0] if db else None
    )
    return [
        NavItem("Inbox", "/folder/inbox", None if unread is None else f"({unread} unread)"),
        NavItem("Archive", "/folder/archive"),
        NavItem("Sent", "/folder/sent"),
        NavItem("Trash", "/folder/trash"),
        NavItem("Labels", "/labels"),
        NavItem("Compose", "/compose"),
    ]


CHROME = Chrome(TITLE, _nav, search="Search mail")


def _notice(req: Req) -> str | None:
    return NOTICES.get(req.query.get("notice", ""))


def _when(sent_at: str) -> str:
    return datetime.strptime(sent_at, "%Y-%m-%d %H:%M").strftime("%d %b %Y, %H:%M")


Row = tuple[int, str, str, str, str, str, int, int]  # id, folder, sender name, recipients, subject, sent at, read, star


def _message_list(
    db: sqlite3.Connection, rows: Sequence[Row], total: int, page_no: int, path: str, extra: Mapping[str, str]
) -> Html:
    """Messages as a table with a checkbox each and the bulk actions, then the pager."""
    if total == 0:
        return html("<p>No messages here.</p>")
    labels: dict[int, list[str]] = {}
    for message_id, name in db.execute(
        "SELECT ml.message_id, l.name FROM message_labels ml JOIN labels l ON l.id = ml.label_id ORDER BY l.name"
    ):
        labels.setdefault(message_id, []).append(name)
    body = [
        html(
            '<tr class="{cls}"><td>{box}</td><td>{who}</td><td><a href="/message/{i}">{subject}</a>{state}</td>'
            "<td>{labels}</td><td>{when}</td></tr>",
            cls="unread" if not read else "read",
            box=checkbox("ids", str(i), f"Select {subject}", key=f"sel-{i}"),
            who=f"To: {recipients}" if folder == "sent" else sender,
            i=i,
            subject=subject,
            state=Html(
                (' <span class="visually-hidden">(unread)</span>' if not read else "")
                + (' <span title="Starred">(starred)</span>' if starred else "")
            ),
            labels=", ".join(labels.get(i, [])),
            when=_when(sent_at),
        )
        for i, folder, sender, recipients, subject, sent_at, read, starred in rows
    ]
    here = {**extra, "page": str(page_no)} if page_no > 1 else dict(extra)
    back = f"{path}?{urlencode(here)}" if here else path
    return html(
        '<form method="post" action="/bulk"><input type="hidden" name="back" value="{back}">'
        '<div role="toolbar" aria-label="Selected messages">'
        '<button type="submit" name="action" value="archive">Archive selected</button> '
        '<button type="submit" name="action" value="read">Mark selected as read</button> '
        '<button type="submit" name="action" value="trash">Move selected to trash</button></div>'
        "<table><caption>{count}</caption><thead><tr><th>Select</th><th>From</th><th>Subject</th><th>Labels</th>"
        "<th>Date</th></tr></thead><tbody>{body}</tbody></table></form>{pager}",
        back=back,
        count=f"{total} {'message' if total == 1 else 'messages'}",
        body=body,
        pager=pager(page_no, max(1, -(-total // PER_PAGE)), path, extra),
    )


def _page_no(req: Req, total: int) -> int:
    return min(req.query_int("page", default=1, lo=1, hi=10_000), max(1, -(-total // PER_PAGE)))


def folder(db: sqlite3.Connection, req: Req) -> Response:
    name = req.params.get("name", "inbox")
    if name not in FOLDERS:
        raise HttpError(404, f"There is no folder {name!r}.")
    total = db.execute("SELECT count(*) FROM messages WHERE folder = ?", (name,)).fetchone()[0]
    page_no = _page_no(req, total)
    rows = db.execute(
        "SELECT id, folder, sender_name, recipients, subject, sent_at, is_read, starred FROM messages "
        "WHERE folder = ? ORDER BY sent_at DESC, id DESC LIMIT ? OFFSET ?",
        (name, PER_PAGE, (page_no - 1) * PER_PAGE),
    ).fetchall()
    main = _message_list(db, rows, total, page_no, f"/folder/{name}", {})
    return CHROME.page(db, FOLDERS[name], main, current=f"/folder/{name}", notice=_notice(req))


def label_view(db: sqlite3.Connection, req: Req) -> Response:
    row = db.execute("SELECT id, name FROM labels WHERE id = ?", (req.params["id"],)).fetchone()
    if row is None:
        raise HttpError(404, "There is no such label.")
    total = db.execute(
        "SELECT count(*) FROM message_labels ml JOIN messages m ON m.id = ml.message_id "
        "WHERE ml.label_id = ? AND m.folder != 'trash'",
        (row[0],),
    ).fetchone()[0]
    page_no = _page_no(req, total)
    rows = db.execute(
        "SELECT m.id, m.folder, m.sender_name, m.recipients, m.subject, m.sent_at, m.is_read, m.starred "
        "FROM messages m JOIN message_labels ml ON ml.message_id = m.id WHERE ml.label_id = ? AND m.folder != 'trash' "
        "ORDER BY m.sent_at DESC, m.id DESC LIMIT ? OFFSET ?",
        (row[0], PER_PAGE, (page_no - 1) * PER_PAGE),
    ).fetchall()
    main = _message_list(db, rows, total, page_no, f"/label/{row[0]}", {})
    return CHROME.page(db, f"Label: {row[1]}", main, notice=_notice(req))


def search(db: sqlite3.Connection, req: Req) -> Response:
    query = req.query_text("q", max_length=100)
    pattern = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    where = {"q": query, "pat": pattern}
    total = db.execute(
        "SELECT count(*) FROM messages WHERE folder != 'trash' AND :q != '' AND (subject LIKE :pat ESCAPE '\\' "
        "OR body LIKE :pat ESCAPE '\\' OR sender_name LIKE :pat ESCAPE '\\' OR sender_email LIKE :pat ESCAPE '\\')",
        where,
    ).fetchone()[0]
    page_no = _page_no(req, total)
    rows = db.execute(
        "SELECT id, folder, sender_name, recipients, subject, sent_at, is_read, starred FROM messages "
        "WHERE folder != 'trash' AND :q != '' AND (subject LIKE :pat ESCAPE '\\' OR body LIKE :pat ESCAPE '\\' "
        "OR sender_name LIKE :pat ESCAPE '\\' OR sender_email LIKE :pat ESCAPE '\\') "
        "ORDER BY sent_at DESC, id DESC LIMIT :limit OFFSET :offset",
        {**where, "limit": PER_PAGE, "offset": (page_no - 1) * PER_PAGE},
    ).fetchall()
    title = f"Search results for \u201c{query}\u201d" if query else "Search"
    main = (
        _message_list(db, rows, total, page_no, "/search", {"q": query})
        if query
        else html("<p>Type words to look for in the search box.</p>")
    )
    return CHROME.page(db, title, main, query=query, notice=_notice(req))


def _message(db: sqlite3.Connection, message_id: int) -> tuple[Any, ...]:
    row = db.execute(
        "SELECT id, folder, sender_name, sender_email, recipients, subject, body, sent_at, starred, in_reply_to "
        "FROM messages WHERE id = ?",
        (message_id,),
    ).fetchone()
    if row is None:
        raise HttpError(404, "There is no such message.")
    return tuple(row)


def message(db: sqlite3.Connection, req: Req) -> Response:
    message_id = req.params["id"]
    i, box, sender, email, recipients, subject, body, sent_at, starred, reply_to = _message(db, message_id)
    db.execute("UPDATE messages SET is_read = 1 WHERE id = ?", (i,))
    labels = db.execute(
        "SELECT l.id, l.name, ml.message_id IS NOT NULL FROM labels l LEFT JOIN message_labels ml "
        "ON ml.label_id = l.id AND ml.message_id = ? ORDER BY l.name",
        (i,),
    ).fetchall()
    original = db.execute("SELECT id, subject FROM messages WHERE id = ?", (reply_to,)).fetchone() if reply_to else None
    move = (
        html('<button type="submit" formaction="/message/{i}/move/inbox">Move to inbox</button>', i=i)
        if box in ("archive", "trash")
        else html('<button type="submit" formaction="/message/{i}/move/archive">Archive</button>', i=i)
    )
    trash = (
        html(' <button type="submit" formaction="/message/{i}/move/trash">Move to trash</button>', i=i)
        if box != "trash"
        else Html("")
    )
    main = html(
        '<dl class="headers"><dt>From</dt><dd>{sender} &lt;{email}&gt;</dd><dt>To</dt><dd>{to}</dd>'
        "<dt>Date</dt><dd>{when}</dd><dt>Folder</dt><dd>{box}</dd><dt>Labels</dt><dd>{labels}</dd>{thread}</dl>"
        '<form method="post" class="actions" aria-label="Message actions">'
        '<a href="/compose?reply_to={i}">Reply</a> '
        '<button type="submit" formaction="/message/{i}/star" aria-pressed="{star}">Star</button> '
        '<a href="/message/{i}?dialog=labels">Edit labels</a> {move}{trash} '
        '<button type="submit" formaction="/message/{i}/unread">Mark as unread</button></form>'
        '<div class="body" style="white-space: pre-wrap">{body}</div>',
        sender=sender,
        email=email,
        to=recipients,
        when=_when(sent_at),
        box=FOLDERS[box],
        labels=", ".join(name for _, name, on in labels if on) or "none",
        thread=html('<dt>In reply to</dt><dd><a href="/message/{o}">{s}</a></dd>', o=original[0], s=original[1])
        if original
        else Html(""),
        i=i,
        star="true" if starred else "false",
        move=move,
        trash=trash,
        body=body,
    )
    modal = None
    if req.query.get("dialog") == "labels":
        boxes = join(
            html("<p>{b}</p>", b=checkbox("label", str(lid), name, checked=bool(on), key=f"label-{lid}"))
            for lid, name, on in labels
        )
        modal = dialog(
            "labels",
            "Labels for this message",
            html(
                '{save}<p><a href="/message/{i}">Cancel</a></p>',
                save=button_form(
                    f"/message/{i}/labels",
                    "Save labels",
                    body=html("<fieldset><legend>Labels</legend>{boxes}</fieldset>", boxes=boxes),
                ),
                i=i,
            ),
        )
    return CHROME.page(db, subject, main, notice=_notice(req), modal=modal)


def star(db: sqlite3.Connection, req: Req) -> Response:
    message_id = _message(db, req.params["id"])[0]
    db.execute("UPDATE messages SET starred = 1 - starred WHERE id = ?", (message_id,))
    return see_other(f"/message/{message_id}")


def mark_unread(db: sqlite3.Connection, req: Req) -> Response:
    message_id, box = _message(db, req.params["id"])[:2]
    db.execute("UPDATE messages SET is_read = 0 WHERE id = ?", (message_id,))
    return see_other(f"/folder/{box}?notice=unread")


def move(db: sqlite3.Connection, req: Req) -> Response:
    message_id, box = _message(db, req.params["id"])[:2]
    target = req.params["folder"]
    if target not in ("inbox", "archive", "trash"):
        raise HttpError(404, f"Messages cannot be moved to {target!r}.")
    db.execute("UPDATE messages SET folder = ? WHERE id = ?", (target, message_id))
    notice = {"archive": "archived", "trash": "trashed", "inbox": "inboxed"}[target]
    return see_other(f"/folder/{box}?notice={notice}")


def _ids(values: Sequence[str], what: str) -> list[int]:
    """Ids from a form's repeated field, each a positive whole number (400 otherwise)."""
    if len(values) > 100:
        raise HttpError(400, f"Select at most 100 {what} at once.")
    if not all(v.isascii() and v.isdecimal() and len(v) <= 12 and 0 < int(v) <= MAX_ID for v in values):
        raise HttpError(400, f"The form names {what} that do not exist.")
    return sorted({int(v) for v in values})


def set_labels(db: sqlite3.Connection, req: Req) -> Response:
    message_id = _message(db, req.params["id"])[0]
    wanted = _ids(req.form.getlist("label"), "labels")
    known = {lid for (lid,) in db.execute("SELECT id FROM labels")}
    if not set(wanted) <= known:
        raise HttpError(400, "The form names labels that do not exist.")
    db.execute("DELETE FROM message_labels WHERE message_id = ?", (message_id,))
    db.executemany(
        "INSERT INTO message_labels (message_id, label_id) VALUES (?, ?)", [(message_id, lid) for lid in wanted]
    )
    return see_other(f"/message/{message_id}?notice=labels")


def _local(url: str) -> str:
    """``url`` if it is a path on this site, else the inbox (never a redirect elsewhere)."""
    ok = url.startswith("/") and not url.startswith("//") and "\\" not in url and len(url) <= 300
    return url if ok and url.isascii() and url.isprintable() else "/folder/inbox"


def bulk(db: sqlite3.Connection, req: Req) -> Response:
    back = _local(req.form.get("back", ""))
    ids = _ids(req.form.getlist("ids"), "messages")
    action = req.form.get("action", "")
    if action not in ("archive", "read", "trash"):
        raise HttpError(400, "Choose one of the actions: archive, mark as read, move to trash.")
    sep = "&" if "?" in back else "?"
    if not ids:
        return see_other(f"{back}{sep}notice=none-selected")
    for message_id in ids:
        _message(db, message_id)
        if action == "read":
            db.execute("UPDATE messages SET is_read = 1 WHERE id = ?", (message_id,))
        else:
            db.execute("UPDATE messages SET folder = ? WHERE id = ?", (action, message_id))
    return see_other(f"{back}{sep}notice=bulk")


class ComposeForm(Form):
    multiline = frozenset({"body"})

    to: Annotated[str, Field(min_length=1, max_length=1000, title="To")]
    subject: Annotated[str, Field(min_length=1, max_length=200, title="Subject")]
    body: Annotated[str, Field(min_length=1, max_length=10_000, title="Message")]

    @field_validator("to")
    @classmethod
    def _recipients(cls, value: str) -> str:
        addresses = [a.strip() for a in value.split(",") if a.strip()]
        if not addresses or not all(re.match(EMAIL_PATTERN, a) for a in addresses):
            raise ValueError("must be email addresses separated by commas, like ana@example.com")
        if len(addresses) > MAX_RECIPIENTS:
            raise ValueError(f"can hold at most {MAX_RECIPIENTS} addresses")
        return ", ".join(addresses)


def _reply_to(db: sqlite3.Connection, raw: str) -> tuple[Any, ...] | None:
    if not raw:
        return None
    if not (raw.isascii() and raw.isdecimal() and len(raw) <= 12):
        raise HttpError(400, "The message to reply to does not exist.")
    return _message(db, int(raw))


def compose(db: sqlite3.Connection, req: Req) -> Response:
    original = _reply_to(db, req.query.get("reply_to", ""))
    values = {"to": "", "subject": "", "body": ""}
    if original:
        subject = original[5]
        values = {"to": original[3], "subject": subject if subject.startswith("Re: ") else f"Re: {subject}", "body": ""}
    return _compose_page(db, values, {}, original)


def _compose_page(
    db: sqlite3.Connection, values: Mapping[str, str], errors: Mapping[str, str], original: tuple[Any, ...] | None
) -> Response:
    hidden = html('<input type="hidden" name="reply_to" value="{i}">', i=original[0]) if original else Html("")
    main = post_form(
        "/compose",
        hidden,
        text_input("to", "To", values.get("to", ""), error=errors.get("to"), hint="Addresses separated by commas"),
        text_input("subject", "Subject", values.get("subject", ""), error=errors.get("subject")),
        textarea("body", "Message", values.get("body", ""), error=errors.get("body")),
        submit="Send",
        errors=errors,
    )
    title = f"Reply to \u201c{original[5]}\u201d" if original else "New message"
    return CHROME.page(db, title, main, current="/compose", status=422 if errors else 200)


def send(db: sqlite3.Connection, req: Req) -> Response:
    original = _reply_to(db, req.form.get("reply_to", ""))
    form = validate(ComposeForm, req.form)
    if isinstance(form, dict):
        values = {k: req.form.get(k, "")[:10_000] for k in ("to", "subject", "body")}
        return _compose_page(db, values, form, original)
    db.execute(
        "INSERT INTO messages (folder, sender_name, sender_email, recipients, subject, body, sent_at, is_read, "
        "in_reply_to) VALUES ('sent', ?, ?, ?, ?, ?, ?, 1, ?)",
        (*ME, form.to, form.subject, form.body, NOW.strftime("%Y-%m-%d %H:%M"), original[0] if original else None),
    )
    return see_other(f"/message/{original[0]}?notice=replied" if original else "/folder/sent?notice=sent")


class LabelForm(Form):
    name: Annotated[str, Field(min_length=1, max_length=30, title="Label name")]


def labels(db: sqlite3.Connection, req: Req) -> Response:
    return _labels_page(db, "", None, notice=_notice(req))


def _labels_page(db: sqlite3.Connection, value: str, error: str | None, *, notice: str | None = None) -> Response:
    rows = db.execute(
        "SELECT l.id, l.name, count(m.id) FROM labels l LEFT JOIN message_labels ml ON ml.label_id = l.id "
        "LEFT JOIN messages m ON m.id = ml.message_id AND m.folder != 'trash' GROUP BY l.id ORDER BY l.name"
    ).fetchall()
    main = html(
        "<ul>{items}</ul><h2>New label</h2>{new}",
        items=[html('<li><a href="/label/{i}">{n}</a> ({c})</li>', i=i, n=n, c=c) for i, n, c in rows],
        new=post_form(
            "/labels",
            text_input("name", "Label name", value, error=error),
            submit="Create label",
            errors={"name": error} if error else {},
        ),
    )
    return CHROME.page(db, "Labels", main, current="/labels", notice=notice, status=422 if error else 200)


def create_label(db: sqlite3.Connection, req: Req) -> Response:
    form = validate(LabelForm, req.form)
    value = req.form.get("name", "")[:100]
    if isinstance(form, dict):
        return _labels_page(db, value, form["name"])
    if db.execute("SELECT 1 FROM labels WHERE name = ?", (form.name,)).fetchone():
        return _labels_page(db, value, f"A label named {form.name} already exists.")
    db.execute("INSERT INTO labels (name) VALUES (?)", (form.name,))
    return see_other("/labels?notice=label-created")


def create_app(db_path: Path) -> Any:
    endpoints = [
        Endpoint("/", folder),
        Endpoint("/folder/{name}", folder),
        Endpoint("/label/{id:int}", label_view),
        Endpoint("/search", search),
        Endpoint("/message/{id:int}", message),
        Endpoint("/message/{id:int}/star", star, ("POST",)),
        Endpoint("/message/{id:int}/unread", mark_unread, ("POST",)),
        Endpoint("/message/{id:int}/move/{folder}", move, ("POST",)),
        Endpoint("/message/{id:int}/labels", set_labels, ("POST",)),
        Endpoint("/bulk", bulk, ("POST",)),
        Endpoint("/compose", compose),
        Endpoint("/compose", send, ("POST",)),
        Endpoint("/labels", labels),
        Endpoint("/labels", create_label, ("POST",)),
    ]
    return build_app(db_path, endpoints, CHROME.error_page)
