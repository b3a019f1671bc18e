"""The ledger (EMA, infra, pool exits, quarantine) and the PLR priorities, by hand."""

import numpy as np
import pytest

from agentenv import Task
from agentenv.miner import Ledger, MinerConfig, rank_priorities, replay_distribution, staleness_priorities
from agentenv.miner.priority import learnability
from tests.miner.helpers import traj

TASK = Task(id="t", prompt="p", metadata={"family": "fam", "difficulty": 2})


def test_ema_of_visit_success_rates_is_hand_computed():
    ledger = Ledger(MinerConfig(ema_alpha=0.5))
    ledger.record_visit(TASK, 0, 1, [traj(TASK, True), traj(TASK, False), traj(TASK, False), traj(TASK, False)])
    r = ledger.get("t")
    assert r.ema == pytest.approx(0.25) and r.attempts == 4 and r.successes == 1 and r.last_step == 1
    ledger.record_visit(TASK, 0, 3, [traj(TASK, True)] * 4)
    assert r.ema == pytest.approx(0.5 * 0.25 + 0.5 * 1.0) and r.last_step == 3
    assert r.failures == {"policy": 3} and r.family == "fam" and r.difficulty == 2


def test_infra_failures_are_requeued_and_never_counted():
    ledger = Ledger(MinerConfig())
    visit = ledger.record_visit(TASK, 0, 1, [traj(TASK, infra=True)] * 4)
    r = ledger.get("t")
    assert visit.requeue and r.attempts == 0 and r.infra == 4 and r.ema is None and not r.seen
    visit = ledger.record_visit(TASK, 0, 2, [traj(TASK, infra=True), traj(TASK, True), traj(TASK, False)])
    assert not visit.requeue and r.attempts == 2 and r.infra == 5 and r.ema == pytest.approx(0.5)
    assert "infra" not in r.failures


def test_a_task_whose_env_stays_broken_is_quarantined_after_max_requeues_and_returns_once_it_runs():
    ledger = Ledger(MinerConfig(max_requeues=2, quarantine_after=3))
    lost = [traj(TASK, infra=True)] * 4
    visits = [ledger.record_visit(TASK, 0, step, lost) for step in range(4)]
    assert [v.requeue for v in visits] == [True, True, False, False]
    assert [v.status_change for v in visits] == [None, None, "quarantined", None]
    r = ledger.get("t")
    assert r.status == "quarantined" and r.status_step == 3 and r.attempts == 0
    # Its retest runs and fails by the policy's doing: a broken env, not a hard task, put it there.
    visit = ledger.record_visit(TASK, 0, 13, [traj(TASK, False), traj(TASK, infra=True)])
    assert visit.status_change == "active" and r.infra_streak == 0 and r.attempts == 1
    assert ledger.record_visit(TASK, 0, 14, lost).requeue  # the count restarted
    assert not Ledger(MinerConfig(max_requeues=0)).record_visit(TASK, 0, 0, lost).requeue


def test_a_task_quarantined_for_failing_stays_there_until_a_win():
    ledger = Ledger(MinerConfig(quarantine_after=2))
    for step in range(2):
        ledger.record_visit(TASK, 0, step, [traj(TASK, False)] * 2)
    assert ledger.get("t").status == "quarantined"
    assert ledger.record_visit(TASK, 0, 12, [traj(TASK, False)] * 2).status_change is None
    assert ledger.record_visit(TASK, 0, 22, [traj(TASK, True), traj(TASK, False)]).status_change == "active"


def test_tasks_solved_90_percent_over_the_window_leave_the_pool():
    ledger = Ledger(MinerConfig(solved_window=10, solved_threshold=0.9))
    ledger.record_visit(TASK, 0, 1, [traj(TASK, True)] * 4 + [traj(TASK, False)])  # 4/5, window not full
    assert ledger.get("t").status == "active"
    visit = ledger.record_visit(TASK, 0, 2, [traj(TASK, True)] * 5)  # 9/10 = 0.9
    assert visit.status_change == "solved" and ledger.get("t").status == "solved"


def test_quarantine_after_k_all_fail_visits_and_release_on_a_passed_retest():
    ledger = Ledger(MinerConfig(quarantine_after=2))
    ledger.record_visit(TASK, 0, 1, [traj(TASK, False)] * 4)
    ledger.record_visit(TASK, 0, 2, [traj(TASK, True)] + [traj(TASK, False)] * 3)  # streak broken
    ledger.record_visit(TASK, 0, 3, [traj(TASK, False)] * 4)
    assert ledger.get("t").status == "active"
    ledger.record_visit(TASK, 0, 4, [traj(TASK, False)] * 4)
    r = ledger.get("t")
    assert r.status == "quarantined" and r.status_step == 4
    ledger.record_visit(TASK, 0, 9, [traj(TASK, False)] * 4)  # failed retest: the wait restarts
    assert r.status == "quarantined" and r.status_step == 9
    ledger.record_visit(TASK, 0, 14, [traj(TASK, True)] + [traj(TASK, False)] * 3)
    assert r.status == "active" and r.all_fail_streak == 0


def test_rank_priorities_with_temperature():
    scores = learnability(np.array([0.5, 0.0, 0.9]))  # 0.25, 0, 0.09 -> ranks 1, 3, 2
    p = rank_priorities(scores, temperature=0.5)  # h^(1/0.5) = 1, 1/9, 1/4
    expected = np.array([1, 1 / 9, 1 / 4]) / (1 + 1 / 9 + 1 / 4)
    assert p == pytest.approx(expected)
    assert rank_priorities(np.array([0.1, 0.1]), 1.0) == pytest.approx([2 / 3, 1 / 3])  # ties keep order


def test_staleness_and_the_replay_mix():
    assert staleness_priorities(np.array([8, 5, 10]), 10) == pytest.approx([2 / 7, 5 / 7, 0])
    assert staleness_priorities(np.array([10, 10]), 10) == pytest.approx([0.5, 0.5])
    p = replay_distribution(np.array([0.5, 0.0]), np.array([9, 6]), 10, temperature=1.0, staleness_coef=0.2)
    rank = np.array([1, 1 / 2]) / 1.5
    stale = np.array([1, 4]) / 5
    assert p == pytest.approx(0.8 * rank + 0.2 * stale) and p.sum() == pytest.approx(1.0)
