"""The HTTP service of one domain: a Starlette app served by uvicorn in its own process.

Routes: ``GET /health`` and ``POST /call/{tool}`` with the request model as the
JSON body and the episode's database named by the ``X-Episode`` header: a file
``<episodes dir>/<episode>.sqlite`` the env created by copying the seed. The seed
itself lives outside that directory (read-only), so no episode id can name it, and
the service never creates a database: an episode the env did not create does not
exist. Every request must be signed with the secret the env handed this process
(auth.py), and every answer to a signed request is signed back. Every call runs in
one transaction on its own connection, so a refused or failed call leaves the
database as it was. Errors are JSON ``{"error": kind, "message": ..., ...}``:

    400 bad_json / 401 unauthorized (unsigned) / 404 not_found, unknown_tool /
    409 rule_violation (with "rule") / 410 unknown_episode /
    413 too_large (unsigned) / 422 validation (with "field") / 500 server_error

The body is read as a stream and refused as soon as it passes `MAX_BODY_BYTES`
(the signature covers the body, so a 413 cannot be signed: the env never sends a
body that large). The process around it is serve.py. Left out: TLS, anything but
loopback.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as HttpRoute

from agentenv.envs.tools import auth
from agentenv.envs.tools.domain import Domain, NotFound, Route, RuleViolation

__all__ = ["EPISODE_HEADER", "MAX_BODY_BYTES", "build_app"]

EPISODE_HEADER = "X-Episode"
MAX_BODY_BYTES = 64 * 1024
_EPISODE_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a file name, never a path

Answer = tuple[int, dict[str, Any]]  # (HTTP status, JSON payload)


@dataclass(frozen=True, slots=True)
class _Call:
    """A call that passed every check: what `_run` needs."""

    route: Route
    db_path: Path
    request: Any


def build_app(domain: Domain, episodes_dir: Path, secret: bytes) -> Starlette:
    """The ASGI app serving ``domain`` over the episode databases in ``episodes_dir``."""

    async def health(request: HttpRequest) -> Response:
        nonce = _authentic(request, secret, b"")
        if nonce is None:
            return _unsigned(401, "unauthorized", "the request is not signed with this service's secret")
        return _signed(secret, nonce, (200, {"ok": True, "domain": domain.name, "tools": sorted(domain.routes)}))

    async def call(request: HttpRequest) -> Response:
        body = await _read_body(request, MAX_BODY_BYTES)
        if body is None:
            return _unsigned(413, "too_large", f"the request is over the limit of {MAX_BODY_BYTES} bytes")
        nonce = _authentic(request, secret, body)
        if nonce is None:
            return _unsigned(401, "unauthorized", "the request is not signed with this service's secret")
        checked = _check(domain, episodes_dir, request, body)
        if not isinstance(checked, _Call):
            return _signed(secret, nonce, checked)
        return await run_in_threadpool(lambda: _signed(secret, nonce, _run(checked)))

    return Starlette(
        routes=[
            HttpRoute("/health", health, methods=["GET"]),
            HttpRoute("/call/{tool}", call, methods=["POST"]),
        ]
    )


async def _read_body(request: HttpRequest, limit: int) -> bytes | None:
    """The body, or None as soon as it passes ``limit`` bytes (declared or streamed)."""
    declared = request.headers.get("content-length", "")
    if len(declared) > 12 or (declared.isdigit() and int(declared) > limit):
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _authentic(request: HttpRequest, secret: bytes, body: bytes) -> str | None:
    """The request's nonce if it is signed with ``secret``, else None."""
    nonce = request.headers.get(auth.NONCE_HEADER, "")
    if not auth.valid_nonce(nonce):
        return None
    expected = auth.request_mac(
        secret, nonce, request.method, request.scope["path"], request.headers.get(EPISODE_HEADER, ""), body
    )
    return nonce if auth.valid_mac(expected, request.headers.get(auth.AUTH_HEADER)) else None


def _check(domain: Domain, episodes_dir: Path, request: HttpRequest, body: bytes) -> _Call | Answer:
    """The route, database and validated request of a call, or the error to answer."""
    route = domain.routes.get(request.path_params["tool"])
    if route is None:
        return _error(404, "unknown_tool", f"no tool {request.path_params['tool']!r}")
    episode = request.headers.get(EPISODE_HEADER, "")
    db_path = episodes_dir / f"{episode}.sqlite"
    if not _EPISODE_RE.match(episode) or not db_path.is_file():
        return _error(410, "unknown_episode", f"no episode database {episode!r}")
    try:
        return _Call(route, db_path, route.request.model_validate_json(body))
    except ValidationError as e:
        return _validation_error(e)


def _run(call: _Call) -> Answer:
    try:
        # mode=rw: a database that vanished is an error, never a new empty file.
        db = sqlite3.connect(f"{call.db_path.as_uri()}?mode=rw", uri=True, isolation_level="DEFERRED")
    except sqlite3.Error as e:
        return _error(410, "unknown_episode", f"the episode database cannot be opened: {e}")
    db.execute("PRAGMA synchronous = OFF")  # episode databases are disposable; durability buys nothing
    try:
        with db:  # commit on return, roll back on any exception
            result = call.route.handler(db, call.request)
        return 200, {"result": result}
    except RuleViolation as e:
        return _error(409, "rule_violation", e.message, rule=e.rule)
    except NotFound as e:
        return _error(404, "not_found", str(e))
    except OverflowError as e:  # an integer SQLite cannot hold: the caller's value, not the service's fault
        return _error(422, "validation", f"an integer is out of range: {e}", field="(body)")
    except Exception as e:  # noqa: BLE001 - a bug in a route is the service's error, reported as data
        return _error(500, "server_error", f"{type(e).__name__}: {e}")
    finally:
        db.close()


def _signed(secret: bytes, nonce: str, answer: Answer) -> Response:
    status, payload = answer
    try:
        response = JSONResponse(payload, status_code=status)
    except (TypeError, ValueError) as e:  # a route returned something JSON cannot carry
        status, payload = _error(500, "server_error", f"the result is not JSON: {type(e).__name__}: {e}")
        response = JSONResponse(payload, status_code=status)
    response.headers[auth.PROOF_HEADER] = auth.response_mac(secret, nonce, status, bytes(response.body))
    return response


def _unsigned(status: int, kind: str, message: str) -> Response:
    return JSONResponse({"error": kind, "message": message}, status_code=status)


def _error(status: int, kind: str, message: str, **extra: str) -> Answer:
    return status, {"error": kind, "message": message, **extra}


def _validation_error(error: ValidationError) -> Answer:
    first = error.errors()[0]
    if first["type"] == "json_invalid":
        if "number out of range" in first["msg"]:  # valid JSON, a number no field can hold
            return _error(422, "validation", f"a number is out of range: {first['msg']}", field="(body)")
        return _error(400, "bad_json", f"the body is not valid JSON: {first['msg']}")
    field = ".".join(str(p) for p in first["loc"]) or "(body)"
    return _error(422, "validation", f"field {field!r}: {first['msg']}", field=field)
