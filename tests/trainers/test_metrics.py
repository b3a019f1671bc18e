"""A step's figures from its episodes, and how they are written: metrics.jsonl and the
console line."""

from __future__ import annotations

import io
import json
import math

import pytest

from agentenv import Task, Trajectory, Transition
from agentenv.core.types import Failure
from agentenv.trainers.metrics import MetricsLogger, advantage_metrics, rollout_metrics, truncate_metrics


def _traj(task_reward: float | None, step_rewards: list[float], *, failure: Failure = Failure.NONE) -> Trajectory:
    transitions = [
        Transition(
            turn=k,
            action="a",
            calls=[],
            observation=[],
            rewards={"length": r},
            task_rewards={},
            state_diff=[],
            duration_s=0.0,
            error="bad call" if r < -0.5 else None,
            error_kind="format" if r < -0.5 else None,
        )
        for k, r in enumerate(step_rewards)
    ]
    return Trajectory(
        task=Task(id="t", prompt="p"),
        messages=[],
        transitions=transitions,
        rewards=step_rewards,
        task_reward=task_reward,
        success=task_reward == 1.0,
        failure=failure,
    )


def test_rollout_metrics_leave_infra_episodes_out_of_rewards_and_success() -> None:
    trajs = [
        _traj(1.0, [-0.1, -1.0]),
        _traj(0.0, [-0.3]),
        _traj(None, [5.0], failure=Failure.INFRA),
    ]
    m = rollout_metrics(trajs)
    assert m["episodes"] == 3 and m["failure/infra"] == 1 / 3
    assert m["reward/task"] == 0.5 and m["success_rate"] == 0.5
    assert math.isclose(m["reward/length"], (-1.1 - 0.3) / 2)
    assert m["turn/0/episodes"] == 2 and m["turn/1/episodes"] == 1
    assert m["turn/1/format_error_rate"] == 1.0 and m["turn/0/format_error_rate"] == 0.0


def test_no_figure_is_negative_zero() -> None:
    m = rollout_metrics([_traj(-0.0, [-0.0]), _traj(-0.0, [-0.0])])
    assert all(math.copysign(1.0, v) > 0 for v in m.values() if isinstance(v, float) and v == 0)
    adv = advantage_metrics([[-0.0, -0.0]])
    assert all(math.copysign(1.0, v) > 0 for v in adv.values())


def test_advantage_metrics_use_the_population_std() -> None:
    assert advantage_metrics([[1.0, -1.0], [1.0, -1.0]]) == {
        "adv/mean": 0.0,
        "adv/std": 1.0,
        "adv/min": -1.0,
        "adv/max": 1.0,
    }
    assert advantage_metrics([]) == {"adv/mean": 0.0, "adv/std": 0.0, "adv/min": 0.0, "adv/max": 0.0}


def test_the_log_never_shows_minus_zero(tmp_path) -> None:
    stream = io.StringIO()
    logger = MetricsLogger(tmp_path, total_steps=2, stream=stream)
    logger.log(1, {"reward/task": -0.0, "loss": -1e-9, "reward/length": -0.0, "approx_kl": float("nan")})
    logger.close()
    line = stream.getvalue()
    assert "reward 0.000" in line and "loss +0.0000" in line and "-0" not in line
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert row["reward/length"] == 0.0 and math.copysign(1.0, row["reward/length"]) > 0
    assert row["approx_kl"] is None  # JSON has no NaN


def test_a_resume_drops_a_last_line_cut_short_and_refuses_a_bad_one_before_it(tmp_path) -> None:
    """A run killed while writing a step's line left it cut short; resuming then failed in
    json (every later resume too) until the file was edited by hand."""
    path = tmp_path / "metrics.jsonl"
    whole = '{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.25}\n'
    path.write_text(whole + '{"step": 3, "loss": 0.')
    logger = MetricsLogger(tmp_path, total_steps=4, stream=io.StringIO(), resume_step=2)
    logger.log(3, {"loss": 0.125})
    assert [r["step"] for r in logger.records()] == [1, 2, 3]
    logger.close()

    for bad in ('{"step": "2"}', "{}"):  # a record without its step was kept, and printing the curve failed
        edited = f'{{"step": 1, "loss": 0.5}}\n{bad}\n{{"step": 2, "loss": 0.25}}\n'
        path.write_text(edited)
        with pytest.raises(ValueError, match=r"metrics\.jsonl: line 2 is not a metrics record"):
            MetricsLogger(tmp_path, total_steps=4, stream=io.StringIO(), resume_step=2)
        assert path.read_text() == edited


def test_the_warm_starts_rows_have_no_step_and_a_resume_keeps_them(tmp_path) -> None:
    """The warm start's rows (`log_sft`) sit before the steps' in metrics.jsonl: a resume
    keeps them, and the records the trainer reads back are the steps' alone."""
    logger = MetricsLogger(tmp_path, total_steps=3, stream=io.StringIO())
    for n in (1, 2):
        logger.log_sft(n, {"sft/loss": 1.0 / n, "sft/lr": 1e-3, "time/sft_s": 0.5 * n})
    for step in (1, 2, 3):
        logger.log(step, {"loss": 0.1})
    logger.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0] == {"sft_step": 1, "sft/loss": 1.0, "sft/lr": 1e-3, "time/sft_s": 0.5}

    resumed = MetricsLogger(tmp_path, total_steps=3, stream=io.StringIO(), resume_step=2)
    assert [r["step"] for r in resumed.records()] == [1, 2]
    resumed.close()
    kept = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("sft_step", r.get("step")) for r in kept] == [1, 2, 1, 2]


def test_a_run_resumed_in_its_warm_start_drops_the_warm_starts_later_rows(tmp_path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"sft_step": n, "sft/loss": 1.0}) + "\n" for n in (1, 2, 3)) + '{"sft_st')
    truncate_metrics(path, 0, sft_step=2)
    assert [json.loads(line)["sft_step"] for line in path.read_text().splitlines()] == [1, 2]
