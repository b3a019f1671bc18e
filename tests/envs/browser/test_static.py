"""Static pages that report their own reward through a function of the page's script."""

from __future__ import annotations

import pytest

from agentenv.envs.browser import BrowserEnv, SiteTask, static_site
from tests.envs.browser.test_env import ref, step

pytestmark = pytest.mark.slow  # a browser

PAGE = """<title>Counter</title><button onclick="window.n = (window.n || 0) + 1">Press</button>
<label>Note <input></label><a href="/other.html">Other page</a>
<script>window.agentenvReward = () => (window.n === 2 ? 1 : 0)</script>"""
TASK = SiteTask(id="twice", prompt="Press the button exactly twice.", golden=[], check="page")


def test_the_page_reward_is_the_task_reward(make_env):
    env = make_env(static_site("counter", {"/": PAGE}, tasks=[TASK]))
    for presses, expected in ((0, 0.0), (1, 0.0), (2, 1.0), (3, 0.0)):
        obs, _ = env.reset(seed=0)
        for _ in range(presses):
            step(env, "click", ref=ref(obs, "button", "Press"))
        *_, terminated, _, info = step(env, "answer", text="done")
        assert terminated and info["task_reward"] == expected, presses


def test_text_the_agent_types_never_runs(make_env):
    env = make_env(static_site("counter", {"/": PAGE}, tasks=[TASK]))
    obs, _ = env.reset(seed=0)
    step(env, "fill", ref=ref(obs, "textbox", "Note"), text="window.agentenvReward = () => 1")
    step(env, "press", key="Enter")
    *_, info = step(env, "answer", text="window.agentenvReward = () => 1")
    assert info["task_reward"] == 0.0


def test_a_page_without_a_reward_function_scores_zero_with_the_error_said(make_env):
    env = make_env(static_site("bare", {"/": "<title>Bare</title><p>Nothing</p>"}, tasks=[TASK]))
    env.reset(seed=0)
    *_, info = step(env, "answer", text="done")
    assert info["task_reward"] == 0.0 and info["failure"] == "policy"
    assert "verifier failed" in info["error"]


def test_a_folder_of_pages(make_env, tmp_path):
    (tmp_path / "index.html").write_text(PAGE)
    (tmp_path / "other.html").write_text("<title>Other</title><script>window.agentenvReward = () => 1</script>")
    env = make_env(static_site("folder", tmp_path, tasks=[TASK]))
    obs, _ = env.reset(seed=0)
    obs, *_ = step(env, "click", ref=ref(obs, "link", "Other page"))
    assert env.state.url == "/other.html"
    *_, info = step(env, "answer", text="done")
    assert info["task_reward"] == 1.0


def test_page_paths_must_be_paths():
    with pytest.raises(ValueError, match="start with '/'"):
        static_site("x", {"index.html": PAGE}, tasks=[TASK])


def test_a_static_site_needs_no_named_check():
    env = BrowserEnv(static_site("counter", {"/": PAGE}, tasks=[TASK]))
    assert env.tasks.ids == ["counter/twice"]
    env.close()


EASY = (
    "<title>Easy</title><button onclick='window.d = 1'>Go</button>"
    "<script>window.agentenvReward = () => window.d || 0</script>"
)
HARD = "<title>Hard</title><label>Code <input></label><script>window.agentenvReward = () => 0</script>"


def test_a_task_is_scored_on_its_own_pages_only(make_env):
    """Two tasks on one site: the hard one's episode that went to the easy one's page and did
    that was paid the easy page's reward."""
    tasks = [
        SiteTask(id="easy", prompt="Press Go.", golden=[], check="page", start="/easy.html"),
        SiteTask(id="hard", prompt="Type the code.", golden=[], check="page", start="/hard.html"),
        SiteTask(id="both", prompt="Press Go.", golden=[], check="page", start="/hard.html", end_pages=["/easy.html"]),
    ]
    env = make_env(static_site("two", {"/easy.html": EASY, "/hard.html": HARD}, tasks=tasks))
    for task, reward in (("two/hard", 0.0), ("two/both", 1.0), ("two/easy", 1.0)):
        obs, _ = env.reset(seed=0, options={"task": task})
        if task != "two/easy":
            obs, *_ = step(env, "goto", url="/easy.html")
        obs, *_ = step(env, "click", ref=ref(obs, "button", "Go"))
        *_, info = step(env, "answer", text="done")
        assert info["task_reward"] == reward, task
