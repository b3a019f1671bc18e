"""The HTTP service of one domain: a Starlette app served by uvicorn in its own process.

Routes: ``GET /health`` and ``POST /call/{tool}`` with the request model as the
JSON body and the episode's database named by the ``X-Episode`` header (a file
``DIR/<episode>.sqlite`` the env created by copying the seed). Every call runs in
one transaction on its own connection, so a refused or failed call leaves the
database as it was. Errors are JSON ``{"error": kind, ...}``:

    400 bad_json / 404 not_found / 409 rule_violation (with "rule") /
    413 too_large / 422 validation (with "field") / 500 server_error / 410 unknown_episode

The process around it is serve.py. Left out: auth, TLS, anything but loopback.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse
from starlette.routing import Route as HttpRoute

from agentenv.envs.tools.domain import Domain, NotFound, Route, RuleViolation

__all__ = ["EPISODE_HEADER", "MAX_BODY_BYTES", "build_app"]

EPISODE_HEADER = "X-Episode"
MAX_BODY_BYTES = 64 * 1024
_EPISODE_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a file name, never a path


def build_app(domain: Domain, data_dir: Path) -> Starlette:
    """The ASGI app serving ``domain`` over the episode databases in ``data_dir``."""

    async def health(_: HttpRequest) -> JSONResponse:
        return JSONResponse({"ok": True, "domain": domain.name, "tools": sorted(domain.routes)})

    async def call(request: HttpRequest) -> JSONResponse:
        route = domain.routes.get(request.path_params["tool"])
        if route is None:
            return _error(404, "unknown_tool", f"no tool {request.path_params['tool']!r}")
        episode = request.headers.get(EPISODE_HEADER, "")
        db_path = data_dir / f"{episode}.sqlite"
        if not _EPISODE_RE.match(episode) or not db_path.is_file():
            return _error(410, "unknown_episode", f"no episode database {episode!r}")
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return _error(413, "too_large", f"the request is {len(body)} bytes; the limit is {MAX_BODY_BYTES}")
        try:
            req = route.request.model_validate_json(body)
        except ValidationError as e:
            return _validation_error(e)
        return await run_in_threadpool(_run, route, db_path, req)

    return Starlette(routes=[
        HttpRoute("/health", health, methods=["GET"]),
        HttpRoute("/call/{tool}", call, methods=["POST"]),
    ])


def _run(route: Route, db_path: Path, req: Any) -> JSONResponse:
    db = sqlite3.connect(db_path, isolation_level="DEFERRED")
    db.execute("PRAGMA synchronous = OFF")  # episode databases are disposable; durability buys nothing
    try:
        with db:  # commit on return, roll back on any exception
            result = route.handler(db, req)
        return JSONResponse({"result": result})
    except RuleViolation as e:
        return _error(409, "rule_violation", e.message, rule=e.rule)
    except NotFound as e:
        return _error(404, "not_found", str(e))
    except Exception as e:  # noqa: BLE001 - a bug in a route is the service's error, reported as data
        return _error(500, "server_error", f"{type(e).__name__}: {e}")
    finally:
        db.close()


def _error(status: int, kind: str, message: str, **extra: str) -> JSONResponse:
    return JSONResponse({"error": kind, "message": message, **extra}, status_code=status)


def _validation_error(error: ValidationError) -> JSONResponse:
    errors = error.errors()
    if errors and errors[0]["type"] == "json_invalid":
        return _error(400, "bad_json", f"the body is not valid JSON: {errors[0]['msg']}")
    first = errors[0]
    field = ".".join(str(p) for p in first["loc"]) or "(body)"
    return _error(422, "validation", f"field {field!r}: {first['msg']}", field=field)
