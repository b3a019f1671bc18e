"""Cumulative compute in the metrics rows (`agentenv.trainers.compute`), and a real
short run that `agentenv forecast` and the report fit."""

from __future__ import annotations

import itertools
import json

import pytest
from typer.testing import CliRunner

from agentenv.cli import app
from agentenv.report import build_report
from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trainers.compute import ComputeMeter
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer


def test_the_meter_adds_generated_and_trained_tokens_and_device_hours():
    meter = ComputeMeter(devices=4)
    meter.add({"tokens/generated": 100, "tokens/trained": 300}, seconds=900.0)
    totals = meter.add({"tokens/generated": 50, "tokens/trained": 150}, seconds=1800.0)
    assert totals == {"compute/tokens": 600, "compute/device_hours": 3.0, "compute/devices": 4}


def test_a_resumed_meter_continues_from_the_last_row_with_totals():
    rows = [
        {"step": 1, "compute/tokens": 10, "compute/device_hours": 0.5},
        {"step": 2, "compute/tokens": 25, "compute/device_hours": 1.0},
        {"step": 3, "eval/success_rate": 0.5},  # an old row without the totals
    ]
    meter = ComputeMeter.resumed(rows)
    assert meter.totals()["compute/tokens"] == 25 and meter.totals()["compute/device_hours"] == 1.0
    assert ComputeMeter.resumed([]).totals()["compute/tokens"] == 0
    with pytest.raises(ValueError, match="devices >= 1"):
        ComputeMeter(devices=0)


def test_a_resumed_meter_passes_over_totals_that_are_not_counts():
    # metrics.jsonl is read back on resume: an edited 1e309 (inf) failed the resume in int().
    good = {"step": 1, "compute/tokens": 10, "compute/device_hours": 0.5}
    for tokens in (float("inf"), float("nan"), -1, True, "10"):
        meter = ComputeMeter.resumed([good, {"step": 2, "compute/tokens": tokens, "compute/device_hours": 1.0}])
        assert meter.totals()["compute/tokens"] == 10 and meter.totals()["compute/device_hours"] == 0.5


class OneTurnSay(SayEnv):
    """One turn, and success at a low bar: held-out success moves as the weights move."""

    max_turns = 1
    success_threshold = 0.05


def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # a training run: about 15 s on 2 cores
def test_a_short_run_records_compute_and_is_forecast(tmp_path):
    tokenizer = tiny_tokenizer()
    run = tmp_path / "run"
    config = dict(
        output_dir=str(run),
        steps=5,
        group_size=4,
        batch_size=8,
        max_new_tokens=12,
        max_seq_len=256,
        eval_episodes=16,
        eval_every=1,
        eval_temperature=1.0,
        save_every=5,
        report_to=[],
        learning_rate=1e-2,
    )
    GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[OneTurnSay], config=GRPOConfig(**config)).train()
    rows = _rows(run)
    assert [r["step"] for r in rows] == list(range(6))
    assert rows[0]["compute/tokens"] == 0 and rows[0]["compute/device_hours"] == 0.0  # R0: before any training
    tokens = [r["compute/tokens"] for r in rows]
    hours = [r["compute/device_hours"] for r in rows]
    assert all(b > a for a, b in itertools.pairwise(tokens))
    assert all(b > a for a, b in itertools.pairwise(hours))
    for before, row in itertools.pairwise(rows):
        step = row["tokens/generated"] + row["tokens/trained"]
        assert row["tokens/generated"] > 0 and row["tokens/trained"] > 0
        assert row["compute/tokens"] - before["compute/tokens"] == step
    assert {r["compute/devices"] for r in rows} == {1}

    result = CliRunner().invoke(app, ["forecast", str(run), "--json", "--bootstrap", "200"])
    assert result.exit_code == 0, result.output
    forecast = json.loads(result.stdout)
    assert len(forecast["points"]) == 5 and forecast["r0"] == rows[0]["eval/success_rate"]
    assert forecast["run_compute"] == tokens[-1]
    assert [p["compute"] for p in forecast["predictions"]] == [2 * tokens[-1], 10 * tokens[-1]]
    page = build_report(run).path.read_text(encoding="utf-8")
    assert "Held-out reward against compute" in page and "No forecast" not in page

    # Resumed from the step-5 checkpoint, the totals go on from where they were.
    longer = GRPOConfig(**{**config, "steps": 6})
    GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[OneTurnSay], config=longer).train()
    resumed = _rows(run)
    assert resumed[-1]["step"] == 6
    assert resumed[-1]["compute/tokens"] == tokens[-1] + resumed[-1]["tokens/generated"] + resumed[-1]["tokens/trained"]
    assert resumed[-1]["compute/device_hours"] > hours[-1]


@pytest.mark.slow  # a training run
def test_a_run_with_too_few_evaluations_says_so(tmp_path):
    tokenizer = tiny_tokenizer()
    run = tmp_path / "run"
    config = GRPOConfig(
        output_dir=str(run),
        steps=2,
        group_size=4,
        batch_size=8,
        max_new_tokens=8,
        max_seq_len=256,
        eval_episodes=4,
        eval_every=1,
        report_to=[],
        resume=False,
    )
    GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[OneTurnSay], config=config).train()
    result = CliRunner().invoke(app, ["forecast", str(run)])
    assert result.exit_code == 1
    assert "too few points to fit: 2 evaluations after training began, a fit needs 5" in result.stderr
    assert "No forecast: too few points" in build_report(run).path.read_text(encoding="utf-8")
