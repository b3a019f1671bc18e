"""`agentenv miner show` on run directories a crash or another program left: one line naming
the file, never a traceback; a metrics line cut short is skipped, as the report skips it.
(The command on a real run: tests/miner/test_trainer_integration.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentenv.cli import app
from tests.report.conftest import CORRUPT_STATES, write_checkpoint

RECORD = {"family": "arith", "attempts": 4, "successes": 1, "failures": {"policy": 3}, "ema": 0.25}


def show(run: Path):
    return CliRunner().invoke(app, ["miner", "show", str(run)])


@pytest.mark.parametrize("case", list(CORRUPT_STATES))
def test_a_corrupt_trainer_state_is_one_line_naming_the_file(tmp_path: Path, case: str) -> None:
    state, why = CORRUPT_STATES[case]
    path = write_checkpoint(tmp_path / "run", state)
    result = show(tmp_path / "run")
    assert result.exit_code == 2, result.output
    error = " ".join(result.stderr.split())
    assert error.startswith(f"error: {path}: {why}") and "Traceback" not in result.output


def test_a_mined_entry_that_is_not_an_object_is_one_line(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "run", json.dumps({"step": 1, "sampler": {"ledger": {}, "mined": [1]}}))
    result = show(tmp_path / "run")
    assert result.exit_code == 2 and f"error: {path}: not a readable miner state (sampler.mined.0" in result.stderr


def test_a_metrics_line_cut_short_is_skipped_and_said(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_checkpoint(run, json.dumps({"step": 1, "sampler": {"ledger": {"t0": RECORD}}}))
    (run / "metrics.jsonl").write_text('{"step": 1, "miner/informative_frac": 0.5}\n{"step": 2, "mi')
    result = show(run)
    assert result.exit_code == 0, result.output
    assert "skipped: metrics.jsonl: 1 unreadable line(s)" in result.stderr
    assert "step 1" in result.stdout and "50%" in result.stdout and "arith" in result.stdout


def test_a_metrics_value_of_the_wrong_type_is_shown_not_fatal(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_checkpoint(run, json.dumps({"step": 1, "sampler": {"ledger": {"t0": RECORD}}}))
    (run / "metrics.jsonl").write_text('{"step": 1, "miner/informative_frac": "lots"}\n')
    result = show(run)
    assert result.exit_code == 0, result.output
    assert "lots" in result.stdout


@pytest.mark.parametrize("name", ["../../elsewhere/step-000001", "step-000001/../../../elsewhere/step-000001", "."])
def test_a_pointer_to_anything_but_a_checkpoint_folder_beside_it_is_refused_not_followed(
    tmp_path: Path, name: str
) -> None:
    # The trainer's rule (a resumed run refuses the same pointer): a state elsewhere is not this run's.
    elsewhere = tmp_path / "elsewhere" / "step-000001"
    elsewhere.mkdir(parents=True)
    (elsewhere / "trainer_state.json").write_text(json.dumps({"step": 7, "sampler": {"ledger": {"t0": RECORD}}}))
    run = tmp_path / "run"
    write_checkpoint(run, json.dumps({"step": 1, "sampler": {"ledger": {"t0": RECORD}}}))
    (run / "checkpoints" / "latest").write_text(name)
    result = show(run)
    assert result.exit_code == 2, result.output
    assert "not a step-NNNNNN folder beside it" in " ".join(result.stderr.split())
