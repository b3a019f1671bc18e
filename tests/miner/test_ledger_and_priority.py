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
