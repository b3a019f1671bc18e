"""Envs stepped from many threads at once share one browser and one server per site, and
each episode reaches only its own database."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import agentenv
from agentenv.envs.browser import Action, BrowserEnv, SiteTask, Target, driver, oracle
from tests.envs.browser import todo_site
from tests.envs.browser.test_faults import descendants

pytestmark = pytest.mark.slow  # eight episodes in one browser

REPO = Path(__file__).resolve().parents[3]


def add_task(i: int) -> SiteTask:
    title = f"Errand {i}"
    return SiteTask(
        id=f"add-{i}",
        prompt=f"Add a to-do {title!r}.",
        golden=[
            Action("fill", Target("textbox", "Title"), title),
            Action("select", Target("combobox", "Priority"), "High"),
            Action("click", Target("button", "Add")),
        ],
        check="added",
        check_args={"title": title, "priority": "High"},
    )


def play(env: BrowserEnv, policy: agentenv.Policy, task: str, seed: int) -> float | None:
    """One episode of ``policy``; its task reward."""
    env.reset(seed=seed, options={"task": task})
    while True:
        conv = agentenv.Conversation(0, list(env.messages), env.tool_schemas(), env.task)
        (action,) = policy.act([conv])
        *_, terminated, truncated, info = env.step(action)  # type: ignore[arg-type]
        if terminated or truncated:
            return info["task_reward"]


def test_eight_episodes_stepped_from_eight_threads(make_env):
    site = todo_site.make_site(tasks=[add_task(i) for i in range(8)])
    envs = [make_env(site) for _ in range(8)]
    envs[0].reset(seed=0)  # the browser is up before the threads start
    launches = driver.driver().launches
    policy = oracle()

    def episode(i: int) -> tuple[float | None, list[str]]:
        env = envs[i]
        reward = play(env, policy, f"todo/add-{i}", seed=i)
        db = sqlite3.connect(env._db_path("todo"))
        try:
            titles = [t for (t,) in db.execute("SELECT title FROM todos WHERE title LIKE 'Errand %'")]
        finally:
            db.close()
        return reward, titles

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(episode, range(8)))

    assert results == [(1.0, [f"Errand {i}"]) for i in range(8)]  # each episode wrote its own database only
    assert driver.driver().launches == launches
    browsers = [p for p, cmd in descendants(os.getpid()) if "chromium" in cmd and "--type=" not in cmd]
    assert len(browsers) == 1
    assert len({env._server for env in envs}) == 1


def test_the_same_env_can_be_stepped_from_different_threads(make_env):
    env = make_env(todo_site.SITE)
    env.reset(seed=0, options={"task": "todo/done"})
    policy = oracle()
    with ThreadPoolExecutor(max_workers=3) as pool:  # each step on another thread of the pool
        for _ in range(3):
            conv = agentenv.Conversation(0, list(env.messages), env.tool_schemas(), env.task)
            (action,) = policy.act([conv])
            *_, info = pool.submit(env.step, action).result()
            assert info["error"] is None
    assert info["task_reward"] == 1.0


def test_an_env_refuses_to_wait_on_the_drivers_own_thread():
    d = driver.driver()
    with pytest.raises(RuntimeError, match="driver's own thread"):
        d.call(lambda: _call_from_loop(d), 10, "a nested call")


async def _call_from_loop(d: driver.Driver) -> None:
    d.call(_nothing, 1, "nothing")


async def _nothing() -> None:
    return None


def test_an_env_made_but_never_reset_starts_nothing():
    code = (
        "from agentenv.envs.browser import BrowserEnv, driver, server\n"
        "from tests.envs.browser.todo_site import SITE\n"
        "BrowserEnv(SITE).close()\n"
        "print(driver._driver is None, server._process.root is None, server._process.servers == {})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.stdout.split() == ["True", "True", "True"], out.stderr
