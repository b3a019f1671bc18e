"""Faults: a crashed page, a killed browser or Playwright driver, a hung navigation, a stopped
site server or a lost database ends the episode as ``infra`` (step never raises), and the
next reset recovers."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from agentenv.envs.browser import BrowserEnv, driver
from tests.envs.browser import todo_site
from tests.envs.browser.test_env import ref, step, text_of
from tests.envs.browser.todo_site import SITE

pytestmark = pytest.mark.slow  # browsers launched and killed


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process below ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = [], list(children.get(pid, []))
    while stack:
        child = stack.pop()
        try:
            cmdline = (Path("/proc") / str(child) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        found.append((child, cmdline))
        stack.extend(children.get(child, []))
    return found


def kill(pick: Callable[[str], bool]) -> None:
    """SIGKILL the one process below this one whose command line ``pick`` accepts."""
    (pid,) = [p for p, cmd in descendants(os.getpid()) if pick(cmd)]
    os.kill(pid, signal.SIGKILL)


def assert_infra(result: tuple, *words: str, in_verifier: bool = False) -> None:
    obs, _, terminated, truncated, info = result
    assert truncated and not terminated and info["failure"] == "infra", info
    assert info["success"] is None and "task" not in info["rewards"]
    if not in_verifier:  # a fault met by the verifier comes after the action's observation
        assert info["error_kind"] == "infra" and "the environment failed" in text_of(obs[-1])
    for word in words:
        assert word in info["error"], info["error"]


def assert_recovers(env: BrowserEnv) -> None:
    obs, _ = env.reset(seed=0, options={"task": "todo/contact"})
    step(env, "click", ref=ref(obs, "link", "About"))
    *_, terminated, _, info = step(env, "answer", text=todo_site.CONTACT)
    assert terminated and info["task_reward"] == 1.0


@pytest.fixture
def env(make_env) -> BrowserEnv:
    env = make_env(SITE)
    env.reset(seed=0, options={"task": "todo/contact"})
    return env


def test_a_crashed_page(env):
    page = env._session.page
    with pytest.raises(Exception):  # noqa: B017 - Playwright's error for a page that died under it
        env._driver.call(lambda: page.goto("chrome://crash"), 10, "crashing the page")
    assert_infra(step(env, "click", ref=ref(env.messages, "link", "About")), "crashed")
    assert_recovers(env)


def test_a_killed_browser(env):
    launches = driver.driver().launches
    kill(lambda cmd: "chromium" in cmd and "--type=" not in cmd)  # the browser process, not a renderer
    assert_infra(step(env, "click", ref=ref(env.messages, "link", "About")))
    assert_recovers(env)
    assert driver.driver().launches == launches + 1


def test_a_killed_playwright_driver(env):
    kill(lambda cmd: "run-driver" in cmd)
    assert_infra(step(env, "click", ref=ref(env.messages, "link", "About")))
    assert_recovers(env)


def test_a_hung_navigation(make_env):
    hang = threading.Event()
    env = make_env(todo_site.make_site(hang=hang, tasks=todo_site.TASKS), navigation_timeout_s=1)
    try:
        env.reset(seed=0, options={"task": "todo/contact"})
        step(env, "click", ref=ref(env.messages, "link", "About"))
        assert_infra(step(env, "click", ref=ref(env.messages, "link", "Slow page")), "did not load in time")
        env.reset(seed=0, options={"task": "todo/contact"})
        assert_infra(step(env, "goto", url="/slow"), "did not load in time")
        assert_recovers(env)
    finally:
        hang.set()


def test_a_stopped_site_server(env):
    old = env._server
    old.stop()
    assert_infra(step(env, "click", ref=ref(env.messages, "link", "About")), "server is down")
    assert_recovers(env)
    assert env._server is not old and env._server.alive()


def test_a_lost_database(env):
    env._db_path(env.state.site).unlink()
    assert_infra(step(env, "answer", text="x"), "database", in_verifier=True)
    assert_recovers(env)


def test_a_fault_in_one_episode_leaves_the_others_alone(make_env):
    first, second = make_env(SITE), make_env(SITE)
    first.reset(seed=0, options={"task": "todo/contact"})
    second.reset(seed=0, options={"task": "todo/contact"})
    page = first._session.page
    with pytest.raises(Exception):  # noqa: B017
        first._driver.call(lambda: page.goto("chrome://crash"), 10, "crashing the page")
    assert_infra(step(first, "click", ref=ref(first.messages, "link", "About")))
    obs, *_, info = step(second, "click", ref=ref(second.messages, "link", "About"))
    assert info["error"] is None and "Questions? Write to" in text_of(obs[-1])


def test_an_env_outlives_a_shutdown_of_the_browser_and_servers(env):
    from agentenv.envs.browser import shutdown

    shutdown()
    assert_recovers(env)
