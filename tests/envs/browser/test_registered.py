"""The registered browser envs: the oracle solves every task of every site through the env
(refs read from the page view), doing nothing scores 0 on every task that writes, and each
env passes check_env with the oracle's actions."""

from __future__ import annotations

import asyncio

import pytest

import agentenv
from agentenv import check_env, tool_call_text
from agentenv.envs.browser.apps import SITES
from tests.envs._oracle import oracle_plan
from tests.envs.browser.test_env import ref, step

pytestmark = pytest.mark.slow  # a browser, three sites, every task

SITE_IDS = [f"browser-{name}-v0" for name in SITES]


def test_the_ids_are_registered_with_their_sites_and_oracle():
    assert set(SITE_IDS) | {"browser-v0"} <= {spec.id for spec in agentenv.envs_list()}
    everything = agentenv.make("browser-v0")
    try:
        assert sorted(everything.tasks.ids) == sorted(t.id for site in SITES.values() for t in site.agentenv_tasks())
    finally:
        everything.close()
    for env_id in SITE_IDS:
        assert agentenv.spec(env_id).oracle is not None


@pytest.mark.parametrize("env_id", SITE_IDS)
def test_the_oracle_solves_every_task_and_doing_nothing_scores_zero_on_writes(env_id):
    probe = agentenv.make(env_id)
    tasks, writes = probe.tasks.ids, [t.id for t in probe.tasks if t.payload["writes"]]
    probe.close()
    assert len(tasks) >= 10 and writes
    seeds = list(range(len(tasks)))  # each task on another seed: a task holds on every seed
    trajs = agentenv.rollout(env_id, agentenv.spec(env_id).make_oracle(), tasks=tasks, seeds=seeds, concurrency=4)
    assert {t.task.id: t.task_reward for t in trajs} == dict.fromkeys(tasks, 1.0), [
        (t.task.id, t.error or [x.error for x in t.transitions]) for t in trajs if t.task_reward != 1.0
    ]
    idle = agentenv.ScriptedPolicy(lambda conv: tool_call_text("answer", text="done"))
    trajs = agentenv.rollout(env_id, idle, tasks=writes, concurrency=4)
    assert {t.task.id: t.task_reward for t in trajs} == dict.fromkeys(writes, 0.0)


@pytest.mark.parametrize("env_id", SITE_IDS)
def test_check_env_passes_with_the_oracles_actions(env_id):
    env = agentenv.make(env_id)
    try:
        check_env(env, seed=3, actions=oracle_plan(env_id, 3))
    finally:
        env.close()


def test_agent_text_in_a_playwright_error_never_makes_it_infra():
    # The fault was classified on Playwright's call log, which quotes the text typed and the
    # element's HTML: "net::ERR_" typed into a number field ended the episode as infra, and so
    # did a covered link whose subject (written by the agent) held "navigation".
    booking = agentenv.make("browser-booking-v0")
    mail = agentenv.make("browser-mail-v0")
    try:
        booking.reset(seed=0, options={"task": "booking/book-interview"})
        step(booking, "goto", url="/bookings/new")
        *_, truncated, info = step(
            booking, "fill", ref=ref(booking.messages, "spinbutton", "Number of attendees"), text="four net::ERR_"
        )
        assert not truncated and info["error_kind"] == "tool" and info["failure"] is None
        mail.reset(seed=0, options={"task": "mail/unread-count"})
        step(mail, "goto", url="/compose")
        for name, text in (("To", "sam.rivera@northwind.test"), ("Subject", "navigation"), ("Message", "x")):
            step(mail, "fill", ref=ref(mail.messages, "textbox", name), text=text)
        step(mail, "click", ref=ref(mail.messages, "button", "Send"))
        sent = 45  # the seed database holds 44 messages
        step(mail, "goto", url=f"/message/{sent}")
        assert "navigation" in mail.messages[-1]["content"]
        step(mail, "goto", url=f"/compose?reply_to={sent}")
        step(mail, "fill", ref=ref(mail.messages, "textbox", "Message"), text="y")
        step(mail, "click", ref=ref(mail.messages, "button", "Send"))
        step(mail, "goto", url=f"/message/{sent + 1}?dialog=labels")  # a modal over the page
        *_, truncated, info = step(mail, "click", ref=ref(mail.messages, "link", "navigation"))  # behind it
        assert not truncated and info["error_kind"] == "tool" and "covered" in info["error"]
    finally:
        booking.close()
        mail.close()


def test_background_tabs_a_key_opens_are_closed():
    env = agentenv.make("browser-booking-v0")
    try:
        env.reset(seed=0, options={"task": "booking/book-interview"})
        step(env, "press", key="Tab")
        step(env, "press", key="Tab")  # a link has the focus
        for _ in range(8):
            *_, info = env.step(tool_call_text("press", key="Control+Enter"))
            assert info["error"] is None
        context = env._session.context

        async def pages_left() -> int:  # each tab is closed as it opens: wait for the closes to land
            for _ in range(50):
                if len(context.pages) == 1:
                    break
                await asyncio.sleep(0.1)
            return len(context.pages)

        assert env._driver.call(pages_left, 10, "counting the pages") == 1
    finally:
        env.close()


def test_a_failed_episode_gives_back_the_sub_goals_it_reached():
    """Archiving Tomas's four messages and one more: "exactly these" fails, and the four
    sub-goals it reached on the way are taken back; the honest run keeps them."""
    from agentenv.envs.browser.apps._golden import click, fill, press
    from agentenv.envs.browser.oracle import oracle

    probe = agentenv.make("browser-mail-v0")
    task = probe.tasks.get("mail/archive-tomas")
    probe.close()
    extra = [fill("searchbox", "Search mail", "Priya"), press("Enter")]
    extra += [click("checkbox", "Select Lunch on Friday?"), click("button", "Archive selected")]
    golden = [*task.payload["golden"], *(a.as_json() for a in extra)]
    over = task.model_copy(
        update={"id": "mail/archive-tomas-and-one-more", "payload": {**task.payload, "golden": golden}}
    )
    honest, overdone = agentenv.rollout("browser-mail-v0", oracle(), tasks=[task, over], concurrency=1)
    progress = lambda traj: [t.rewards.get("progress", 0.0) for t in traj.transitions]  # noqa: E731
    assert honest.success and sum(progress(honest)) == pytest.approx(0.4)
    assert not overdone.success and overdone.task_reward == 0.0
    assert max(progress(overdone)) > 0 and sum(progress(overdone)) == pytest.approx(0.0)
    assert overdone.transitions[-1].closing == {"progress": pytest.approx(-0.4)}
