"""The registered browser envs: the oracle solves every task of every site through the env
(refs read from the page view), doing nothing scores 0 on every task that writes, and each
env passes check_env with the oracle's actions."""

from __future__ import annotations

import pytest

import agentenv
from agentenv import check_env, tool_call_text
from agentenv.envs.browser.apps import SITES
from tests.envs._oracle import oracle_plan

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
