"""The site server: each request reaches only its own episode's app (by a token the page and
the app never see), redirects off the site and proxy requests are refused, and seed
databases are built once per (site, seed)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentenv.envs.browser import server
from agentenv.envs.browser.server import EPISODE_HEADER, SiteServer
from tests.envs.browser import todo_site

pytestmark = pytest.mark.slow  # a uvicorn server


def spy(name: str, seen: list[Any]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((name, scope["path"], dict(scope["headers"])))
        if scope["path"] == "/out":
            headers = [(b"location", b"http://127.0.0.1:9/x")]
            await send({"type": "http.response.start", "status": 302, "headers": headers})
        elif scope["path"] == "/in":
            await send({"type": "http.response.start", "status": 303, "headers": [(b"location", b"/done")]})
        else:
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": name.encode()})

    return app


@pytest.fixture
def site_server() -> Iterator[SiteServer]:
    s = SiteServer(todo_site.make_site("spy"))
    yield s
    s.stop()


def test_each_request_reaches_its_own_episode_and_the_token_stays_out_of_the_app(site_server):
    seen: list[Any] = []
    a = site_server.register(spy("a", seen))
    b = site_server.register(spy("b", seen))
    with httpx.Client(base_url=site_server.origin) as client:
        assert client.get("/", headers={EPISODE_HEADER: a}).text == "a"
        assert client.get("/", headers={EPISODE_HEADER: b}).text == "b"
        assert client.get("/").status_code == 403
        assert client.get("/", headers={EPISODE_HEADER: "0" * 32}).status_code == 403
        site_server.unregister(a)
        assert client.get("/", headers={EPISODE_HEADER: a}).status_code == 403
    assert [name for name, _, _ in seen] == ["a", "b"]
    assert all(EPISODE_HEADER.encode() not in headers for _, _, headers in seen)


def test_redirects_off_the_site_and_proxy_requests_are_refused(site_server):
    seen: list[Any] = []
    token = site_server.register(spy("a", seen))
    with httpx.Client(base_url=site_server.origin, headers={EPISODE_HEADER: token}) as client:
        out = client.get("/out")
        assert out.status_code == 403 and out.text == "A redirect off this site was blocked."
        assert "location" not in out.headers
        inside = client.get("/in")
        assert inside.status_code == 303 and inside.headers["location"] == "/done"
    with httpx.Client(proxy=site_server.origin, headers={EPISODE_HEADER: token}) as proxied:
        assert proxied.get("http://example.com/page").status_code == 403
    assert [path for _, path, _ in seen] == ["/out", "/in"]


def test_a_stopped_server_is_not_alive_and_acquire_starts_another():
    site = todo_site.make_site("restart")
    first = server.acquire(site)
    assert server.acquire(site) is first and first.alive()
    first.stop()
    assert not first.alive()
    second = server.acquire(site)
    assert second is not first and second.alive() and second.origin != ""
    second.stop()


def test_seed_databases_are_built_once_per_seed_and_read_only():
    site = todo_site.make_site("seeds")
    cache = server.seeds()
    one, again, other = cache.path(site, 1), cache.path(site, 1), cache.path(site, 2)
    assert one == again and one != other
    assert one.stat().st_mode & 0o222 == 0
    for path, seed in ((one, 1), (other, 2)):
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        rows = db.execute("SELECT count(*) FROM todos").fetchone()[0]
        db.close()
        assert rows == 3 + seed % 3
