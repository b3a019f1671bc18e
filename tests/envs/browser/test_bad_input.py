"""Bad actions, one test per case: each is a clear error observation with the format penalty,
nothing reaches the browser, and the browser never leaves the site's origin: a server on
another port, linked from the site in every way a page can, never sees a connection."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agentenv import ToolCall, tool_call_text
from agentenv.envs.browser import BrowserEnv, SiteTask
from tests.envs.browser import todo_site
from tests.envs.browser.test_env import ref, rows, step, text_of
from tests.envs.browser.todo_site import SITE

pytestmark = pytest.mark.slow  # a browser and a site server


class Outside:
    """A server on another loopback port that records every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.origin = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.seen: list[bytes] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(1)
            try:
                self.seen.append(conn.recv(4096) or b"(connected)")
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            except OSError:
                self.seen.append(b"(connected)")
            finally:
                conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def outside() -> Iterator[Outside]:
    server = Outside()
    yield server
    server.close()


@pytest.fixture
def env(make_env) -> BrowserEnv:
    env = make_env(SITE)
    env.reset(seed=0, options={"task": "todo/add"})
    return env


def assert_format_error(info: dict[str, Any], reward: float, *words: str) -> None:
    assert info["error_kind"] == "format", info
    assert info["rewards"]["format"] == -0.1 and reward == pytest.approx(-0.1)
    for word in words:
        assert word in info["error"], info["error"]


def test_a_ref_that_does_not_exist(env):
    obs, reward, terminated, truncated, info = step(env, "click", ref="e999")
    assert_format_error(info, reward, "there is no element e999 on this page")
    assert obs[-1]["content"].startswith("Error: ") and not terminated and not truncated


def test_a_ref_that_is_not_a_ref(env):
    *_, reward, _, _, info = step(env, "click", ref="button")
    assert_format_error(info, reward, "a ref looks like e12")


def test_a_stale_ref_after_navigation(env):
    add = ref(env.messages, "button", "Add")
    step(env, "click", ref=ref(env.messages, "link", "About"))
    _, reward, _, _, info = step(env, "click", ref=add)
    assert_format_error(info, reward, f"{add} is no longer on the page")
    assert env.state.url == "/about"


def test_fill_on_an_element_that_takes_no_text(env):
    _, reward, _, _, info = step(env, "fill", ref=ref(env.messages, "button", "Add"), text="x")
    assert_format_error(info, reward, "is a button, not a text field")


@pytest.mark.parametrize("text", ["bell\x07", "nul\x00", "escape\x1b[31m", "del\x7f", "c1\x85"])
def test_text_with_control_characters(env, text):
    for action in (
        tool_call_text("fill", ref=ref(env.messages, "textbox", "Title"), text=text),
        ToolCall("fill", {"ref": ref(env.messages, "textbox", "Title"), "text": text}),
    ):
        _, reward, _, _, info = env.step(action)
        assert_format_error(info, reward, "argument 'text'", "control character")


def test_text_with_a_lone_surrogate(env):
    _, reward, _, _, info = step(env, "fill", ref=ref(env.messages, "textbox", "Title"), text="half \udcff")
    assert_format_error(info, reward, "lone surrogate")


def test_text_a_megabyte_long(env):
    title = ref(env.messages, "textbox", "Title")
    for action in (
        tool_call_text("fill", ref=title, text="x" * 1_000_000),
        ToolCall("fill", {"ref": title, "text": "x" * 1_000_000}),
    ):
        _, reward, _, _, info = env.step(action)
        assert_format_error(info, reward)
        assert "1000" in info["error"] and ("limit" in info["error"] or "at most" in info["error"])


@pytest.mark.parametrize("key", ["NoSuchKey", "Ctrl+a", "", "Enter Enter", "\x00", "é", "Shift+€", "😀"])
def test_keys_that_do_not_exist(env, key):
    _, reward, _, _, info = step(env, "press", key=key)
    assert_format_error(info, reward, "argument 'key'")


@pytest.mark.parametrize(
    ("copy", "paste"),
    [("Control+c", "Control+v"), ("Control+x", "Shift+Insert"), ("Control+Insert", "Control+Shift+KeyV"),
     ("Shift+Delete", "ControlOrMeta+V")],
)  # fmt: skip
def test_no_clipboard_carries_text_between_episodes(make_env, copy, paste):
    # Chromium's clipboard is the browser's, shared by every context: text copied in one
    # episode was pasted in the next one, or in the rollout beside it.
    first, second = make_env(SITE), make_env(SITE)
    first.reset(seed=0, options={"task": "todo/add"})
    second.reset(seed=0, options={"task": "todo/add"})
    step(first, "fill", ref=ref(first.messages, "textbox", "Title"), text="from the other episode")
    step(first, "press", key="Control+a")
    _, reward, _, _, info = step(first, "press", key=copy)
    assert_format_error(info, reward, "clipboard")
    step(second, "click", ref=ref(second.messages, "textbox", "Title"))
    obs, reward, _, _, info = step(second, "press", key=paste)
    assert_format_error(info, reward, "clipboard")
    obs, *_ = step(second, "press", key="x")
    assert "from the other episode" not in text_of(obs[-1])


def test_goto_another_origin(env, outside):
    for url in (f"{outside.origin}/x", "http://example.com/", "//example.com/x", "https://127.0.0.1/"):
        env.reset(seed=0, options={"task": "todo/add"})  # three invalid actions in a row would end the episode
        _, reward, _, _, info = step(env, "goto", url=url)
        assert_format_error(info, reward, "goto opens pages of this site only")
    assert outside.seen == [] and env.state.url == "/"


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "data:text/html,<h1>hi</h1>", "about:blank", "chrome://version", "view-source:/"]
)
def test_goto_other_schemes(env, url):
    _, reward, _, _, info = step(env, "goto", url=url)
    assert_format_error(info, reward, "goto opens pages of this site only")
    assert env.state.url == "/"


def test_javascript_urls(env):
    for url in ("javascript:alert(1)", "JavaScript:document.body.innerHTML=''", " javascript:alert(1)"):
        env.reset(seed=0, options={"task": "todo/add"})
        _, reward, _, _, info = step(env, "goto", url=url)
        assert_format_error(info, reward)
    obs, *_ = step(env, "scroll", direction="down")
    assert '[e9] button "Add"' in text_of(obs[-1])  # the page is untouched


def test_a_path_on_the_site_in_full_is_fine(env):
    origin = env._server.origin
    *_, info = step(env, "goto", url=f"{origin}/about")
    assert info["error"] is None and env.state.url == "/about"


def test_the_browser_never_leaves_the_site(make_env, outside):
    site = todo_site.make_site(
        "hostile",
        outside=outside.origin,
        tasks=[SiteTask(id="h", prompt="p", golden=[], check="added", start="/hostile")],
    )
    env = make_env(site)
    obs, _ = env.reset(seed=0)
    for name, role in [
        ("Outside link", "link"),
        ("Outside form", "button"),
        ("Outside popup", "link"),
        ("Script link", "link"),
        ("Redirect away", "button"),  # last: it leaves the page (for the site's own /away)
    ]:
        *_, truncated, info = step(env, "click", ref=ref(env.messages, role, name))
        assert not truncated and info["failure"] is None, info  # never infra
        assert env.state.url == "/hostile" or name == "Redirect away"
    obs, *_ = step(env, "goto", url="/away")  # the site's redirect off the origin
    assert "A redirect off this site was blocked." in text_of(obs[-1])
    assert outside.seen == []
    blocked = env._session.blocked
    for path in ("/link", "/form", "/image.png", "/style.css", "/script.js", "/frame", "/fetch", "/beacon"):
        assert f"{outside.origin}{path}" in blocked, path


def test_a_link_off_the_site_is_a_tool_error_with_a_penalty(make_env, outside):
    site = todo_site.make_site(
        "hostile",
        outside=outside.origin,
        tasks=[SiteTask(id="h", prompt="p", golden=[], check="added", start="/hostile")],
    )
    env = make_env(site)
    env.reset(seed=0)
    _, reward, _, _, info = step(env, "click", ref=ref(env.messages, "link", "Outside link"))
    assert info["error_kind"] == "tool" and "leads off this site" in info["error"]
    assert info["rewards"]["valid_action"] == -0.1 and reward == pytest.approx(-0.1)
    assert outside.seen == []


def test_one_browser_action_a_turn(env):
    # Each call on a covered element waits out the action timeout: 463 of them in one action
    # held a step for about 40 minutes, for one valid_action penalty.
    before = rows(env)
    title, add = ref(env.messages, "textbox", "Title"), ref(env.messages, "button", "Add")
    _, reward, _, _, info = env.step(tool_call_text("fill", ref=title, text="a") + tool_call_text("click", ref=add))
    assert_format_error(info, reward, "at most 1 tool call per turn here, got 2")
    assert rows(env) == before  # neither call ran


def test_a_bad_action_never_raises_and_repeated_ones_end_the_episode(env):
    for _ in range(2):
        *_, terminated, truncated, info = step(env, "click", ref="e999")
        assert not (terminated or truncated)
    *_, terminated, truncated, info = step(env, "press", key="Nope")
    assert terminated and info["failure"] == "format"
