"""Request handling the browser env's apps share: one SQLite connection and one
transaction per request, forms read with limits and decoded strictly, typed form
models with messages a person can act on, and every error a page, never a crash.

A site writes handlers ``(db, req) -> Response`` over an open connection and lists
them as `Endpoint`s; `build_app` wraps each so that:

- the database file is opened per request (``mode=rw``: a missing file is an error,
  never a new empty database), and a handler that raises rolls back what it wrote;
- a POST body, if any, must be ``application/x-www-form-urlencoded`` (415), at most
  `MAX_FORM_BYTES` (413), ASCII with percent-escapes that decode as UTF-8 and at most
  `MAX_FORM_FIELDS` fields (400): a lone surrogate or stray byte is a 400 page;
- a path id past `MAX_ID` is a 404 (it never reaches SQLite as an overflow);
- `HttpError` from a handler, an unknown path (404) and a wrong method (405) render
  the site's error page.

Form models (`Form`) strip whitespace, refuse control characters outside the fields
they name multi-line, and report each problem under the field's label (`validate`).

Left out: sessions and cookies (an episode has one user and all of its state is in
the database, so snapshots carry it), CSRF (one user on loopback), file uploads.
"""

from __future__ import annotations

import sqlite3
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import ImmutableMultiDict
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from agentenv.envs.browser.apps._chrome import APP_JS, STYLE_CSS

__all__ = [
    "EMAIL_PATTERN",
    "MAX_FORM_BYTES",
    "MAX_FORM_FIELDS",
    "MAX_ID",
    "Endpoint",
    "ErrorPage",
    "Form",
    "Handler",
    "HttpError",
    "Req",
    "build_app",
    "see_other",
    "validate",
]

MAX_FORM_BYTES = 64 * 1024
MAX_FORM_FIELDS = 200
MAX_ID = 2**62
EMAIL_PATTERN = r"^[^@\s<>\"',;]+@[^@\s<>\"',;]+\.[A-Za-z]{2,}$"

F = TypeVar("F", bound="Form")


class HttpError(Exception):
    """A request the app refuses: rendered as the site's error page with this status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Req:
    """What a handler reads of a request."""

    params: Mapping[str, Any]
    """Path parameters, converted (``{id:int}`` is an int no larger than `MAX_ID`)."""
    query: ImmutableMultiDict[str, str]
    form: ImmutableMultiDict[str, str]
    """The POST form (empty for GET)."""

    def query_int(self, name: str, *, default: int, lo: int, hi: int) -> int:
        raw = self.query.get(name, "").strip()
        if not raw:
            return default
        if not (raw.isdecimal() and raw.isascii() and len(raw) <= 12 and lo <= int(raw) <= hi):
            raise HttpError(400, f"The {name} must be a whole number from {lo} to {hi}, got {raw[:20]!r}.")
        return int(raw)

    def query_text(self, name: str, *, max_length: int) -> str:
        raw = " ".join(self.query.get(name, "").split())
        if len(raw) > max_length or any(unicodedata.category(c) == "Cc" for c in raw):
            raise HttpError(400, f"The {name} must be at most {max_length} printable characters.")
        return raw


Handler = Callable[[sqlite3.Connection, Req], Response]
ErrorPage = Callable[[int, str], Response]


@dataclass(frozen=True)
class Endpoint:
    path: str
    handler: Handler
    methods: tuple[str, ...] = ("GET",)


def build_app(db_path: Path, endpoints: Sequence[Endpoint], error_page: ErrorPage) -> Starlette:
    """The ASGI app serving ``endpoints`` over the SQLite file at ``db_path``."""
    uri = Path(db_path).resolve().as_uri() + "?mode=rw"

    def wrap(handler: Handler) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                form = await _read_form(request) if request.method == "POST" else ImmutableMultiDict()
                req = Req(_checked_params(request.path_params), request.query_params, form)
            except HttpError as e:
                return error_page(e.status, e.message)
            return await run_in_threadpool(_run, uri, handler, req, error_page)

        return endpoint

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 400)
        message = {404: "There is no page at this address.", 405: "This page does not accept that request."}
        return error_page(status, message.get(status, str(getattr(exc, "detail", "Bad request."))))

    async def style(request: Request) -> Response:
        return Response(STYLE_CSS, media_type="text/css")

    async def script(request: Request) -> Response:
        return Response(APP_JS, media_type="text/javascript")

    routes = [Route(e.path, wrap(e.handler), methods=list(e.methods)) for e in endpoints]
    routes += [Route("/static/style.css", style), Route("/static/app.js", script)]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


def see_other(url: str) -> Response:
    """The redirect after a successful POST (so reloading never repeats it)."""
    return RedirectResponse(url, status_code=303)


def _run(uri: str, handler: Handler, req: Req, error_page: ErrorPage) -> Response:
    db = sqlite3.connect(uri, uri=True, timeout=10)
    try:
        with db:  # commits what the handler wrote, or rolls it back if it raised
            return handler(db, req)
    except HttpError as e:
        return error_page(e.status, e.message)
    finally:
        db.close()


def _checked_params(params: Mapping[str, Any]) -> dict[str, Any]:
    for value in params.values():
        if isinstance(value, int) and value > MAX_ID:
            raise HttpError(404, "There is no such record.")
    return dict(params)


async def _read_form(request: Request) -> ImmutableMultiDict[str, str]:
    declared = request.headers.get("content-length", "")
    if len(declared) > 12 or (declared.isdigit() and int(declared) > MAX_FORM_BYTES):
        raise HttpError(413, f"The form is too large: at most {MAX_FORM_BYTES // 1024} KB.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise HttpError(413, f"The form is too large: at most {MAX_FORM_BYTES // 1024} KB.")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if body and kind != "application/x-www-form-urlencoded":
        raise HttpError(415, "Send the form as application/x-www-form-urlencoded.")
    try:
        pairs = parse_qsl(
            body.decode("ascii"),
            keep_blank_values=True,
            encoding="utf-8",
            errors="strict",
            max_num_fields=MAX_FORM_FIELDS,
        )
    except UnicodeDecodeError:
        raise HttpError(400, "The form is not valid UTF-8 text.") from None
    except ValueError:
        raise HttpError(400, f"The form has too many fields: at most {MAX_FORM_FIELDS}.") from None
    return ImmutableMultiDict(pairs)


class Form(BaseModel):
    """A form's fields, validated. Give each field a ``title``: it is the label messages use.
    Single-line text must hold no control characters; name multi-line fields in ``multiline``."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True, frozen=True)

    multiline: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="after")
    @classmethod
    def _printable(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            allowed = "\n\r\t" if info.field_name in cls.multiline else ""
            if any(unicodedata.category(c) == "Cc" and c not in allowed for c in value):
                raise ValueError("must not contain control characters")
        return value


def validate(form_type: type[F], form: Mapping[str, str]) -> F | dict[str, str]:
    """The validated form, or a message per field (keyed by field name) that names its label."""
    data = {name: form[name] for name in form_type.model_fields if name in form}
    try:
        return form_type.model_validate(data)
    except ValidationError as e:
        errors: dict[str, str] = {}
        for err in e.errors(include_url=False):
            name = str(err["loc"][0]) if err["loc"] else "form"
            field = form_type.model_fields.get(name)
            label = (field.title if field is not None else None) or name.replace("_", " ").capitalize()
            errors.setdefault(name, _message(label, err["type"], err.get("ctx") or {}, err["msg"]))
        return errors


def _message(label: str, kind: str, ctx: Mapping[str, Any], msg: str) -> str:
    if kind == "missing" or (kind == "string_too_short" and ctx.get("min_length") == 1):
        return f"{label} is required."
    if kind == "string_too_short":
        return f"{label} must be at least {ctx['min_length']} characters."
    if kind == "string_too_long":
        return f"{label} must be at most {ctx['max_length']} characters."
    if kind.startswith("int_"):
        return f"{label} must be a whole number."
    if kind == "greater_than_equal":
        return f"{label} must be at least {ctx['ge']}."
    if kind == "less_than_equal":
        return f"{label} must be at most {ctx['le']}."
    if kind in ("literal_error", "enum"):
        return f"Choose a {label.lower()} from the list."
    if kind == "value_error":
        return f"{label} {ctx['error']}."
    return f"{label}: {msg}."
