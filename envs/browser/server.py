"""Serving sites: each site's ASGI app under uvicorn on a loopback port, one database per episode.

One `SiteServer` per site per process, shared by every env on that site. It serves a
`Dispatcher`: each request carries its episode's token in `EPISODE_HEADER` (the
browser context of the episode sends it on every request, `set_extra_http_headers`),
and the dispatcher hands the request, without that header, to the app instance made
by ``site.create_app(db_path)`` for that episode's database. A request without a
live token gets a 403 page, so neither another local process nor a page of another
episode reaches an episode's data: the token is 128 random bits, drawn per episode,
never shown to the page or the agent (no agent action can set a header or run script).

The dispatcher also refuses a redirect that leaves the site's origin (403 in its
place): Playwright's request interception sees only the first request of a redirect
chain, so the env's route guard cannot stop it; here it never reaches the browser.
And it refuses proxy requests (an absolute URL, CONNECT) and WebSockets: the
browser's proxy for every host but the site is this server (session.py).

Databases (`SeedCache`): a site's seed database is built once per (site, seed) by
running ``site.schema`` and ``site.seed(db, seed)`` on an empty SQLite file, kept
read-only, and copied for each episode; the episode's start copy is a hard link to
it (the check reads it beside the episode's database). All of it lives in one
temporary directory per process, removed by `shutdown_all` (atexit). A snapshot's
database is restored only with its seed's schema (`check_saved_database`).

The server runs on a thread with its own event loop, not in a subprocess: sites are
Python objects (a test's or a notebook's site has no import path a subprocess could
load). A server that stops (`SiteServer.stop`, or its thread dying) is `alive() ==
False`; the env treats that as an infrastructure failure and the next reset starts a
new one. Left out: several replicas per site, app lifespan events (apps are made per
episode and must not need startup hooks).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import secrets
import shutil
import socket
import sqlite3
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import uvicorn

from agentenv.core.errors import InfraError
from agentenv.envs._sqlite import check_same_schema
from agentenv.envs.browser.site import Site

__all__ = [
    "EPISODE_HEADER",
    "Dispatcher",
    "SeedCache",
    "SiteServer",
    "acquire",
    "check_saved_database",
    "seeds",
    "shutdown_all",
]

EPISODE_HEADER = "x-agentenv-episode"
START_TIMEOUT_S = 10.0
MAX_SEED_DBS = 256
"""Seed databases kept per process; the least recently used beyond it are deleted."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Dispatcher:
    """The ASGI app a site server runs: routes each request to its episode's app."""

    def __init__(self) -> None:
        self.apps: dict[str, ASGIApp] = {}
        self.origin = ""
        """Set once the server has its port: redirects must stay on it."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            return
        token, host, headers = "", "", []
        for key, value in scope["headers"]:
            if key == EPISODE_HEADER.encode():
                token = value.decode("latin-1")
            else:
                host = value.decode("latin-1") if key == b"host" else host
                headers.append((key, value))
        app = self.apps.get(token) if token else None
        if app is None:
            await _plain(send, 403, "This page belongs to no live episode.")
            return
        # An absolute URL is a proxy request; so is a Host other than this server's (httptools,
        # which uvicorn prefers when installed, hands the path alone on for an absolute URL).
        proxied = not scope.get("raw_path", b"/").startswith(b"/") or host != self.origin.split("://", 1)[1]
        if proxied or scope.get("method") == "CONNECT":
            # A proxy request (the browser's proxy for anything off the site is this server): never served.
            await _plain(send, 403, "Only this site's own pages are served here.")
            return
        await app({**scope, "headers": headers}, receive, self._guard_redirects(scope, send))

    def _guard_redirects(self, scope: Scope, send: Send) -> Send:
        here = f"{self.origin}{scope.get('path', '/')}"
        blocked = False

        async def guarded(message: Message) -> None:
            nonlocal blocked
            if message["type"] == "http.response.start" and 300 <= message["status"] < 400:
                location = next((v for k, v in message.get("headers", ()) if k.lower() == b"location"), None)
                if location is not None and not same_origin(urljoin(here, location.decode("latin-1")), self.origin):
                    blocked = True
                    await send(_start(403))
                    return
            if blocked:
                if message["type"] == "http.response.body" and not message.get("more_body", False):
                    await send({"type": "http.response.body", "body": b"A redirect off this site was blocked."})
                return
            await send(message)

        return guarded


def same_origin(url: str, origin: str) -> bool:
    """Whether ``url`` (absolute) is on ``origin`` (``scheme://host:port``)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    here = urlsplit(origin)
    return (parts.scheme, parts.hostname, port) == (here.scheme, here.hostname, here.port)


def _start(status: int) -> Message:
    return {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]}


async def _plain(send: Send, status: int, text: str) -> None:
    await send(_start(status))
    await send({"type": "http.response.body", "body": text.encode()})


class SiteServer:
    """One site's dispatcher under uvicorn on a free loopback port, on its own thread."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.dispatcher = Dispatcher()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", 0))  # the kernel picks the port: no race with other processes
        self.origin = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.dispatcher.origin = self.origin
        config = uvicorn.Config(
            self.dispatcher,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
            http="h11",  # the parser this server's checks were written against, whatever else is installed
        )
        self._server = _Server(config)
        self._thread = threading.Thread(
            target=self._serve, args=(sock,), name=f"agentenv-site-{site.name}", daemon=True
        )
        self._thread.start()
        if not self._server.ready.wait(START_TIMEOUT_S) or not self.alive():
            self.stop()
            raise InfraError(f"the {site.name} site server did not start within {START_TIMEOUT_S} s")

    def _serve(self, sock: socket.socket) -> None:
        try:
            asyncio.run(self._server.serve(sockets=[sock]))
        finally:
            self._server.ready.set()  # a server that failed to start: stop waiting for it
            sock.close()

    def alive(self) -> bool:
        return self._thread.is_alive() and self._server.started and not self._server.should_exit

    def register(self, app: ASGIApp) -> str:
        """Serve ``app`` to requests carrying the returned token."""
        token = secrets.token_hex(16)
        self.dispatcher.apps[token] = app
        return token

    def unregister(self, token: str) -> None:
        self.dispatcher.apps.pop(token, None)

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not threading.current_thread():
            self._thread.join(START_TIMEOUT_S)


class _Server(uvicorn.Server):
    """uvicorn's Server with an event set once it listens, off the main thread."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


class SeedCache:
    """Seed databases of every site, one per (site, seed), in this process's data directory."""

    def __init__(self, root: Path, limit: int = MAX_SEED_DBS) -> None:
        self.root = root
        self.limit = limit
        # Keyed by the site object's id, and holding the site: no other site can get its id meanwhile.
        self._paths: OrderedDict[tuple[int, int], tuple[Site, Path]] = OrderedDict()
        self._lock = threading.Lock()

    def path(self, site: Site, seed: int) -> Path:
        """The read-only seed database of ``site`` for ``seed``, built on first use."""
        key = (id(site), seed)
        with self._lock:
            found = self._paths.get(key)
            if found is not None and found[1].exists():
                self._paths.move_to_end(key)
                return found[1]
            path = self.root / f"{safe_name(site.name)}-{id(site):x}-{seed}.sqlite"
            _build(site, seed, path)
            self._paths[key] = (site, path)
            while len(self._paths) > self.limit:  # live episodes keep theirs through a hard link
                _, (_, old) = self._paths.popitem(last=False)
                old.unlink(missing_ok=True)
            return path


def _build(site: Site, seed: int, path: Path) -> None:
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    db = sqlite3.connect(partial)
    try:
        if site.schema:
            db.executescript(site.schema)
        site.seed(db, seed)
        db.commit()
    finally:
        db.close()
    partial.chmod(0o444)
    os.replace(partial, path)


def check_saved_database(data: bytes, seed_db: Path) -> None:
    """Refuse a saved episode database (a snapshot's) that is not SQLite, is damaged, or whose
    schema is not its seed's (`agentenv.envs._sqlite`)."""
    check_same_schema(data, seed_db.read_bytes())


def safe_name(name: str) -> str:
    """``name`` as a file name."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40] or "site"


class _Process:
    """What this process runs for every env: the data directory, the seed cache, the servers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.root: Path | None = None
        self.seeds: SeedCache | None = None
        self.servers: dict[int, SiteServer] = {}

    def data_dir(self) -> Path:
        with self.lock:
            if self.root is None:
                self.root = Path(tempfile.mkdtemp(prefix="agentenv-browser-"))  # 0700: this user only
                (self.root / "seeds").mkdir()
                (self.root / "episodes").mkdir()
                self.seeds = SeedCache(self.root / "seeds")
                atexit.register(shutdown_all)
            return self.root


_process = _Process()


def seeds() -> SeedCache:
    _process.data_dir()
    assert _process.seeds is not None
    return _process.seeds


def episode_dir() -> Path:
    return _process.data_dir() / "episodes"


def acquire(site: Site) -> SiteServer:
    """The live server of ``site``, started (or restarted, when it died) here."""
    _process.data_dir()
    with _process.lock:
        server = _process.servers.get(id(site))
        if server is not None and not server.alive():
            server.stop()
            server = None
        if server is None:
            server = SiteServer(site)
            _process.servers[id(site)] = server
        return server


def shutdown_all() -> None:
    """Stop every site server and remove the data directory (atexit; tests)."""
    with _process.lock:
        servers = list(_process.servers.values())
        _process.servers.clear()
        root, _process.root, _process.seeds = _process.root, None, None
    for server in servers:
        server.stop()
    if root is not None:
        with contextlib.suppress(OSError):
            shutil.rmtree(root)
