"""BrowserEnv on the test to-do site: the oracle, check_env, what the agent sees, rewards,
isolation between episodes, snapshots."""

from __future__ import annotations

import base64
import sqlite3
from typing import Any

import pytest

import agentenv
from agentenv import check_env, tool_call_text
from agentenv.envs.browser import BrowserEnv, SiteTask, oracle
from agentenv.envs.browser.view import element_lines
from tests.envs.browser import todo_site
from tests.envs.browser.todo_site import SITE

pytestmark = pytest.mark.slow  # a browser and a site server


def text_of(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else content[0]["text"]


def ref(messages: list[dict[str, Any]], role: str, name: str, nth: int = 0) -> str:
    """The ref of an element in the latest page view among ``messages``."""
    view = next(text for m in reversed(messages) if "URL: " in (text := text_of(m)))
    found = [r for r, ro, na in element_lines(view) if (ro, na) == (role, name)]
    return found[nth]


def step(env: BrowserEnv, tool: str, **args: Any) -> tuple[Any, ...]:
    return env.step(tool_call_text(tool, **args))


def rows(env: BrowserEnv) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(env._db_path(env.state.site))
    try:
        return db.execute("SELECT title, priority, done FROM todos ORDER BY id").fetchall()
    finally:
        db.close()


def test_the_oracle_solves_every_task_and_doing_nothing_scores_zero_on_writes():
    tasks = BrowserEnv(SITE).tasks
    trajs = agentenv.rollout(lambda: BrowserEnv(SITE), oracle(), tasks=tasks.ids, seeds=[0, 1, 2, 3, 4], concurrency=2)
    assert [(t.task.id, t.task_reward) for t in trajs] == [(t.task.id, 1.0) for t in trajs]
    assert all(t.error is None and not any(x.error for x in t.transitions) for t in trajs)
    writes = [t.id for t in tasks if t.payload["writes"]]
    assert len(writes) >= 3
    idle = agentenv.ScriptedPolicy(lambda conv: tool_call_text("answer", text="done"))
    trajs = agentenv.rollout(lambda: BrowserEnv(SITE), idle, tasks=writes, concurrency=2)
    assert [t.task_reward for t in trajs] == [0.0] * len(writes)


def test_the_oracle_scrolls_to_a_target_beyond_the_view(make_env):
    env = make_env(SITE, max_view_chars=2_000)
    (traj,) = agentenv.rollout(lambda: env, oracle(), tasks=["todo/pick"])
    tools = [x.calls[0].name for x in traj.transitions]
    assert traj.task_reward == 1.0
    assert tools.count("scroll") >= 5  # entry 250 of 300 is far below the first 2,000 characters


def test_check_env_passes_with_the_oracles_actions(make_env):
    task = SITE.agentenv_tasks()[0]  # add: fill, select, click
    (traj,) = agentenv.rollout(lambda: BrowserEnv(SITE, tasks=[task]), oracle(), seeds=[0])
    env = make_env(SITE, tasks=[task])
    report = check_env(env, seed=0, actions=[x.action for x in traj.transitions])
    assert report.actions == 4 and "snapshot" in report.passed


def test_the_observation_is_the_tree_with_refs_the_url_the_title_and_the_result(make_env):
    env = make_env(SITE)
    obs, _ = env.reset(seed=0, options={"task": "todo/add"})
    intro = text_of(obs[-1])
    assert intro.startswith("Add a to-do 'Buy milk' with high priority.\n\nURL: /\nTitle: To do\n")
    assert '- [e9] button "Add"' in intro and '[e7] textbox "Title"' in intro
    assert '- heading "To do" [level=1]' in intro  # not actionable: no ref
    obs, *_ = step(env, "click", ref=ref(obs, "link", "Pay rent"))
    shown = text_of(obs[-1])
    assert shown.startswith("Clicked e5.\nURL: /todo/2\nTitle: Pay rent\n")
    assert obs[-1]["role"] == "tool" and obs[-1]["name"] == "click"
    assert env.state.url == "/todo/2" and env.state.history == ["/", "/todo/2"]


def test_a_long_page_is_bounded_and_scrolling_shows_the_rest(make_env):
    env = make_env(SITE, max_view_chars=3_000)
    obs, _ = env.reset(seed=0, options={"task": "todo/pick"})
    obs, *_ = step(env, "click", ref=ref(obs, "link", "Long list"))
    first = text_of(obs[-1])
    assert len(first) < 3_300 and "scroll down for more]" in first and 'button "Pick 300"' not in first
    seen = first
    for _ in range(60):
        obs, reward, *_, info = step(env, "scroll", direction="down")
        seen = text_of(obs[-1])
        if "scroll down for more" not in seen:
            break
    assert 'button "Pick 300"' in seen and info["error"] is None and reward == 0.0
    obs, *_ = step(env, "scroll", direction="down")
    assert text_of(obs[-1]).startswith("Already at the end of the page.")


def test_screenshots_come_as_png_image_parts(make_env):
    env = make_env(SITE, screenshot=True)
    obs, _ = env.reset(seed=0, options={"task": "todo/add"})
    for message in (obs[-1], step(env, "scroll", direction="down")[0][-1]):
        text, image = message["content"]
        assert text["type"] == "text" and "URL: /" in text["text"]
        assert image["image_url"]["url"].startswith("data:image/png;base64,")
        assert base64.b64decode(image["image_url"]["url"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert env.observation_space.contains(obs)


def test_subgoal_progress_is_rewarded_once_and_failed_actions_cost(make_env):
    env = make_env(SITE)
    obs, _ = env.reset(seed=0, options={"task": "todo/add"})
    step(env, "fill", ref=ref(obs, "textbox", "Title"), text="Buy milk")
    *_, info = step(env, "click", ref=ref(obs, "button", "Add"))
    assert info["rewards"]["progress"] == pytest.approx(0.1) and env.state.reached == [0]
    *_, info = step(env, "scroll", direction="down")
    assert info["rewards"]["progress"] == 0.0  # reached already
    obs, *_ = step(env, "click", ref=ref(env.messages, "link", "About"))
    _, reward, *_, info = step(env, "click", ref=ref(obs, "button", "Subscribe"))  # a disabled button
    assert info["error_kind"] == "tool" and "disabled" in info["error"]
    assert info["rewards"]["valid_action"] == -0.1 and reward == pytest.approx(-0.1)


def test_each_episode_has_its_own_database_and_browser_storage(make_env):
    page = (
        "<button onclick=\"localStorage.setItem('k', 'v'); document.cookie = 'c=1'\">Remember</button>"
        "<p id='s'></p><script>document.getElementById('s').textContent = "
        "'stored: ' + (localStorage.getItem('k') || 'nothing') + ' ' + (document.cookie || 'no cookie')</script>"
    )
    from agentenv.envs.browser import static_site

    site = static_site("store", {"/": page}, tasks=[SiteTask(id="t", prompt="p", golden=[], check="page")])
    env = make_env(site)
    obs, _ = env.reset(seed=0)
    assert "stored: nothing no cookie" in text_of(obs[-1])
    step(env, "click", ref=ref(obs, "button", "Remember"))
    obs, *_ = step(env, "goto", url="/")
    assert "stored: v c=1" in text_of(obs[-1])
    obs, _ = env.reset(seed=0)
    assert "stored: nothing no cookie" in text_of(obs[-1])

    todo = make_env(SITE)
    obs, _ = todo.reset(seed=0, options={"task": "todo/add"})
    step(todo, "fill", ref=ref(obs, "textbox", "Title"), text="Mine")
    step(todo, "click", ref=ref(obs, "button", "Add"))
    assert ("Mine", "Normal", 0) in rows(todo)
    todo.reset(seed=0, options={"task": "todo/add"})
    assert ("Mine", "Normal", 0) not in rows(todo)


def test_dialogs_are_accepted_and_reported(make_env):
    task = SiteTask(id="c", prompt="p", golden=[], check="answer", start="/confirm", check_args={"expect": ""})
    env = make_env(todo_site.make_site(tasks=[task]))
    obs, _ = env.reset(seed=0)
    obs, *_ = step(env, "click", ref=ref(obs, "button", "Ask"))
    text = text_of(obs[-1])
    assert "The page showed a dialog: 'Really?' (accepted)." in text and "Confirmed" in text


def test_back_returns_to_the_previous_page(make_env):
    env = make_env(SITE)
    obs, _ = env.reset(seed=0, options={"task": "todo/done"})
    _, _, _, _, info = step(env, "back")
    assert info["error_kind"] == "tool" and "no earlier page" in info["error"]
    step(env, "click", ref=ref(obs, "link", "About"))
    obs, *_ = step(env, "back")
    assert text_of(obs[-1]).startswith("Opened /.\nURL: /\n") and env.state.history == ["/"]


def test_snapshot_carries_the_database_the_page_and_unsubmitted_form_text(make_env):
    env = make_env(SITE)
    obs, _ = env.reset(seed=0, options={"task": "todo/add"})
    step(env, "fill", ref=ref(obs, "textbox", "Title"), text="First")
    step(env, "click", ref=ref(obs, "button", "Add"))
    obs, *_ = step(env, "fill", ref=ref(env.messages, "textbox", "Title"), text="Half typed")
    snap = env.snapshot()
    step(env, "click", ref=ref(env.messages, "link", "About"))
    step(env, "goto", url="/")
    step(env, "fill", ref=ref(env.messages, "textbox", "Title"), text="Other")
    step(env, "click", ref=ref(env.messages, "button", "Add"))
    assert ("Other", "Normal", 0) in rows(env)

    fresh = make_env(SITE)  # another env restores it: same database, page, refs and form text
    for target in (env, fresh):
        messages = target.restore(snap.model_dump_json())
        assert messages == snap.messages
        assert rows(target) == [*rows_of_seed(), ("First", "Normal", 0)]
        obs, *_ = step(target, "click", ref=ref(messages, "button", "Add"))  # the refs of the saved view
        assert target.state.url == "/" and rows(target)[-1] == ("Half typed", "Normal", 0)


def test_a_restore_refuses_a_database_that_is_not_the_sites(make_env):
    """A snapshot on disk may be edited: SQL put in its database (a trigger) must never run."""
    env = make_env(SITE)
    env.reset(seed=0, options={"task": "todo/add"})
    snap = env.snapshot().model_dump(mode="json")
    db = sqlite3.connect(":memory:")
    db.deserialize(base64.b64decode(snap["external"]["db"]))
    db.execute("CREATE TRIGGER t AFTER INSERT ON todos BEGIN UPDATE todos SET done = 1; END")
    db.commit()
    fresh = make_env(SITE)
    for data, match in ((db.serialize(), "schema"), (b"not a database" * 100, "not a SQLite database")):
        snap["external"]["db"] = base64.b64encode(data).decode()
        with pytest.raises(ValueError, match=match):
            fresh.restore(snap)


def test_a_restore_refuses_a_snapshot_without_the_sites_state(make_env):
    """An edited snapshot with no page or database went on over what the env's last episode
    left there (its writes: a task it had solved)."""
    env = make_env(SITE)
    env.reset(seed=0, options={"task": "todo/add"})
    snap = {**env.snapshot().model_dump(mode="json"), "external": None}
    env.reset(seed=0, options={"task": "todo/add"})
    with pytest.raises(ValueError, match="holds no page or database"):
        env.restore(snap)


@pytest.mark.parametrize("url", ["@example.com/", "javascript:alert(1)", "//example.com/"])
def test_a_restore_refuses_pages_off_the_site(make_env, url):
    env = make_env(SITE)
    env.reset(seed=0, options={"task": "todo/add"})
    snap = env.snapshot().model_dump(mode="json")
    for field, value in (("url", url), ("history", [url, "/"])):
        edited = {**snap, "state": {**snap["state"], field: value}}
        with pytest.raises(ValueError, match="not a path on the site"):
            make_env(SITE).restore(edited)


def test_a_site_without_tables_snapshots_and_restores(make_env):
    from agentenv.envs.browser import static_site

    page = "<input aria-label='Note'><script>window.agentenvReward = () => 0</script>"
    site = static_site("plain", {"/": page}, tasks=[SiteTask(id="t", prompt="p", golden=[], check="page")])
    env = make_env(site)
    obs, _ = env.reset(seed=0)
    step(env, "fill", ref=ref(obs, "textbox", "Note"), text="kept")
    fresh = make_env(site)
    fresh.restore(env.snapshot().model_dump_json())
    assert fresh._view().render(0, 10_000) == env._view().render(0, 10_000)
    assert fresh._run(lambda s: s.evaluate("document.querySelector('input').value"), 5, "reading") == "kept"


def rows_of_seed() -> list[tuple[Any, ...]]:
    db = sqlite3.connect(":memory:")
    db.executescript(todo_site.SCHEMA)
    todo_site.seed(db, 0)
    return db.execute("SELECT title, priority, done FROM todos ORDER BY id").fetchall()


def test_the_task_set_is_checked_against_the_sites():
    bad = SiteTask(id="x", prompt="p", golden=[], check="no_such_check")
    with pytest.raises(ValueError, match="has no check 'no_such_check'"):
        BrowserEnv(todo_site.make_site(tasks=[bad]))
    with pytest.raises(ValueError, match="two sites are named 'todo'"):
        BrowserEnv([SITE, todo_site.make_site()])


def test_the_state_names_what_an_episode_changed_in_the_sites_database(make_env):
    """A right answer after collateral damage scores 0, and the final state says why."""
    from agentenv.envs.browser.apps.booking import SITE as BOOKING

    env = make_env(BOOKING)
    env.reset(seed=0, options={"task": "booking/capacity-cedar"})
    *_, info = step(env, "answer", text="12")
    assert (info["task_reward"], env.state.db_changes) == (1.0, [])

    env.reset(seed=0, options={"task": "booking/capacity-cedar"})
    db = sqlite3.connect(env._db_path("booking"))  # what clicking "Cancel" on bookings 1 and 2 leaves
    with db:
        db.execute("UPDATE bookings SET status = 'cancelled' WHERE id IN (1, 2)")
    db.close()
    *_, info = step(env, "answer", text="12")
    assert (info["task_reward"], env.state.db_changes) == (0.0, ["bookings 1: changed", "bookings 2: changed"])
