"""A page reached by a POST (a form whose response is a page, not a redirect) restores as
that POST's result: the restored page is the response the agent saw, served again, and the
POST is not sent again (its side effects are in the saved database already). A snapshot
that cannot keep such a page is refused with a clear error, never reopened as a GET."""

from __future__ import annotations

import html
import json
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from agentenv import InfraError
from agentenv.envs.browser import Site, SiteTask
from tests.envs.browser.test_env import ref, step, text_of

pytestmark = pytest.mark.slow  # a browser and a site server

POSTS: list[str] = []
"""The paths of every POST the sites of this module answered."""


def create_app(db_path: Path) -> Starlette:
    def home(request: Request) -> Response:
        return HTMLResponse(
            "<title>Guestbook</title><h1>Guestbook</h1><form method=post action=/sign>"
            "<label>Name <input name=name></label><button>Sign</button></form>"
        )

    async def sign(request: Request) -> Response:
        POSTS.append(request.url.path)
        name = dict(parse_qsl((await request.body()).decode())).get("name", "")
        db = sqlite3.connect(db_path)
        with db:
            entry = db.execute("INSERT INTO entries (name) VALUES (?)", (name,)).lastrowid
        db.close()
        padding = "x" * int(request.query_params.get("pad", "0"))
        return HTMLResponse(
            f"<title>Signed</title><h1>Thanks, {html.escape(name)}!</h1><p>You are entry {entry}.</p>"
            f"<a href='/'>Back to the guestbook</a><label>Comment <input></label><p hidden>{padding}</p>"
        )

    return Starlette(routes=[Route("/", home), Route("/sign", sign, methods=["POST"])])


def seed(db: sqlite3.Connection, seed: int) -> None:
    db.executemany("INSERT INTO entries (name) VALUES (?)", [("Grace",), ("Linus",)])


SITE = Site(
    name="guestbook",
    schema="CREATE TABLE entries (id INTEGER PRIMARY KEY, name TEXT NOT NULL);",
    seed=seed,
    create_app=create_app,
    checks={"none": lambda *args, **kwargs: 0.0},
    tasks=[SiteTask(id="sign", prompt="Sign the guestbook.", golden=[], check="none")],
)


def entries(env: Any) -> list[str]:
    db = sqlite3.connect(env._db_path("guestbook"))
    try:
        return [name for (name,) in db.execute("SELECT name FROM entries ORDER BY id")]
    finally:
        db.close()


def signed(make_env: Any) -> Any:
    """An env whose page is the result of signing the guestbook as Ada (a POST answered with a page)."""
    env = make_env(SITE)
    obs, _ = env.reset(seed=0)
    step(env, "fill", ref=ref(obs, "textbox", "Name"), text="Ada")
    obs, *_ = step(env, "click", ref=ref(env.messages, "button", "Sign"))
    assert "Thanks, Ada!" in text_of(obs[-1]) and env.state.url == "/sign"
    return env


def test_a_page_reached_by_a_post_restores_as_that_posts_result(make_env):
    env = signed(make_env)
    step(env, "fill", ref=ref(env.messages, "textbox", "Comment"), text="typed, not sent")
    before, posts = env.snapshot(), len(POSTS)
    other = make_env(SITE)
    messages = other.restore(json.loads(json.dumps(before.model_dump(mode="json"))))  # through JSON, as on disk
    page = other._session.view.render(0, 10_000)
    assert "Thanks, Ada!" in page and "You are entry 3." in page and other.state.url == "/sign"
    assert len(POSTS) == posts  # served from the snapshot: the form was not sent again
    assert entries(other) == ["Grace", "Linus", "Ada"]  # once, not twice
    assert messages == env.messages
    field = other._run(lambda s: s.evaluate("document.querySelector('input').value"), 10, "reading")
    assert field == "typed, not sent"  # the form's state came back over the POST page


def test_a_restored_post_page_goes_on_and_snapshots_again(make_env):
    env = signed(make_env)
    other = make_env(SITE)
    other.restore(env.snapshot())
    third = make_env(SITE)
    third.restore(other.snapshot())  # the restored page is still the POST's result
    assert "You are entry 3." in third._session.view.render(0, 10_000)
    obs, *_ = step(third, "click", ref=ref(third.messages, "link", "Back to the guestbook"))
    assert third.state.url == "/" and "Sign" in text_of(obs[-1])  # and it goes on like any page
    obs, *_ = step(third, "goto", url="/sign")  # a later GET of its URL asks the site, as a browser would
    assert "Thanks" not in text_of(obs[-1])


def test_a_page_reached_by_a_get_after_a_post_restores_by_get(make_env):
    env = signed(make_env)
    step(env, "click", ref=ref(env.messages, "link", "Back to the guestbook"))
    saved = env.snapshot()
    assert saved.external["posted"] is None
    other = make_env(SITE)
    other.restore(saved)
    assert other.state.url == "/" and "Guestbook" in other._session.view.title


def test_a_post_page_too_large_to_keep_is_refused_clearly(make_env, monkeypatch):
    monkeypatch.setattr("agentenv.envs.browser.session.MAX_POSTED_BYTES", 1_000)
    env = make_env(SITE)
    env.reset(seed=0)
    step(env, "goto", url="/")
    step(env, "fill", ref=ref(env.messages, "textbox", "Name"), text="Ada")
    # The same form, sent to /sign?pad=5000: a response of about 5 KB.
    env._run(lambda s: s.evaluate("document.querySelector('form').action = '/sign?pad=5000'"), 10, "editing")
    step(env, "click", ref=ref(env.messages, "button", "Sign"))
    with pytest.raises(InfraError, match=r"result of a form sent by POST.*over the 1,000 a snapshot keeps"):
        env.snapshot()


@pytest.mark.parametrize(
    ("posted", "words"),
    [
        ({"status": 200, "content_type": "text/html", "body": "not base64!"}, "not base64"),
        ({"status": 99, "content_type": "text/html", "body": ""}, "status"),
        ({"status": 200, "content_type": "text/html", "body": "", "script": "x"}, "script"),
    ],
)
def test_an_edited_post_page_is_refused_on_restore(make_env, posted, words):
    env = signed(make_env)
    saved = env.snapshot().model_dump(mode="json")
    saved["external"]["posted"] = posted
    other = make_env(SITE)
    with pytest.raises(ValueError, match=words):
        other.restore(saved)
