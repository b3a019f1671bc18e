"""A run directory in each state the report meets: in its warm start (rows with an
``sft_step`` and no ``step``), trained by a live process or left by a dead one, a
folder that is no run, and a run whose files name its absolute path. Fixtures are
written by hand, as the trainer writes them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentenv.cli import app
from agentenv.report import build_report
from agentenv.report.rundir import CLAIM_FILE, RunClaim, RunDir, runs_below
from tests.report.conftest import write_checkpoint

runner = CliRunner()

WARM_LOSSES = [2.5, 1.75, 1.25, 0.875, 0.625]


def write_run(run: Path, *, steps: int = 3, sft_steps: int = 5, warm: int = 5, claim: RunClaim | None = None) -> Path:
    """A run directory: config.json, ``warm`` warm-start rows, then ``steps`` rows of steps 1.."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps({"output_dir": str(run), "steps": 10, "sft_steps": sft_steps}))
    rows = [
        {"sft_step": i, "sft/loss": WARM_LOSSES[i - 1], "sft/lr": 1e-3 * i, "time/sft_s": 30.0 * i}
        for i in range(1, warm + 1)
    ]
    rows += [{"step": s, "loss": 0.1 * s, "reward/task": 0.2 * s, "success_rate": 0.25} for s in range(1, steps + 1)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if claim is not None:
        (run / CLAIM_FILE).write_text(claim.model_dump_json())
    return run


def section(page: str, id: str) -> str:
    match = re.search(rf'<section class="block" id="{id}">(.*?)</section>', page, re.DOTALL)
    assert match, id
    return match.group(1)


def subtitle(page: str) -> str:
    match = re.search(r'<header class="top"><h1>.*?</h1><div class="muted">(.*?)</div>', page, re.DOTALL)
    assert match
    return match.group(1)


def ended_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# -- the warm start --------------------------------------------------------------------------


def test_warm_start_rows_are_their_own_figures_and_stay_out_of_the_steps(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    data = RunDir(run)
    assert [r.sft_step for r in data.warm_start] == [1, 2, 3, 4, 5]
    assert [r.loss for r in data.warm_start] == WARM_LOSSES
    assert [step for step, _ in data.numbers()] == [1, 2, 3]  # what every step chart and the forecast read
    report = build_report(run)
    assert report.skipped == [] and report.status is None  # a run past its warm start, not trained now
    page = report.path.read_text(encoding="utf-8")
    warm = section(page, "warm-start")
    assert "Warm-start loss" in warm and warm.count("<svg") == 2  # the loss and the learning rate
    assert "first loss (step 1)</span><b>2.5</b>" in warm and "last loss (step 5)</span><b>0.625</b>" in warm
    assert "warm-start steps logged</span><b>5 of 5</b>" in warm
    assert "time in the warm start</span><b>2.5 min</b>" in warm  # the last row's time since it began
    assert "sft/loss" not in section(page, "other")  # not drawn again as an unknown figure
    assert "3 logged steps" in subtitle(page)


def test_a_run_without_a_warm_start_has_no_warm_start_section(tmp_path: Path) -> None:
    page = build_report(write_run(tmp_path / "run", warm=0, sft_steps=0)).path.read_text(encoding="utf-8")
    assert 'id="warm-start"' not in page and 'id="curves"' in page


def test_a_run_still_in_its_warm_start_shows_its_progress_not_an_empty_run(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", steps=0, warm=3, sft_steps=50)
    report = build_report(run)
    assert not any("empty run" in note for note in report.skipped)
    assert report.status == "in its warm start: step 3 of 50, loss 1.25"
    page = report.path.read_text(encoding="utf-8")
    assert "in its warm start: step 3 of 50, loss 1.25" in subtitle(page)
    assert "warm-start steps logged</span><b>3 of 50</b>" in section(page, "warm-start")
    result = runner.invoke(app, ["forecast", str(run)])
    assert result.exit_code == 1
    assert f"{run} is in its warm start (step 3 of 50, loss 1.25): nothing to forecast yet" in result.stderr


def test_a_warm_start_whose_loss_went_to_nan_shows_it_and_keeps_the_line(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", steps=0, warm=2, sft_steps=5)
    with (run / "metrics.jsonl").open("a") as f:  # the trainer writes a NaN loss as null
        f.write('{"sft_step": 3, "sft/loss": null, "sft/lr": 0.003, "time/sft_s": 90.0}\n')
    report = build_report(run)
    assert report.skipped == []
    assert report.status == "in its warm start: step 3 of 5, loss not finite"
    assert "last loss (step 3)</span><b>not finite</b>" in report.path.read_text(encoding="utf-8")


def test_a_line_with_neither_step_nor_sft_step_is_skipped_and_said(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", steps=1, warm=1)
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"loss": 1.0}\n{"sft_step": 2, "sft/loss": "high"}\n{"sft_step": 0, "sft/loss": 1.0}\n')
    data = RunDir(run)
    notes = "\n".join(data.skipped.all())
    assert "line 3: step: Field required" in notes
    assert "line 4: sft/loss: Input should be a valid number" in notes
    assert "line 5: sft_step: Input should be greater than or equal to 1" in notes
    assert [r.sft_step for r in data.warm_start] == [1] and [r.step for r in data.rows] == [1]


# -- in progress ------------------------------------------------------------------------------


def test_a_run_claimed_by_a_live_process_is_in_progress(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", steps=0, warm=2, sft_steps=5, claim=RunClaim.of_this_process())
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert "the run: in progress, in its warm start: step 2 of 5, loss 1.75" in result.output
    page = (run / "report.html").read_text(encoding="utf-8")
    assert "in progress, in its warm start: step 2 of 5" in subtitle(page)
    # Past the warm start: the step it is at, of the config's steps.
    write_run(run, steps=4, claim=RunClaim.of_this_process())
    assert build_report(run).status == "in progress, at step 4 of 10"


def test_a_live_run_that_has_written_nothing_yet_is_a_run_in_progress(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / CLAIM_FILE).write_text(RunClaim.of_this_process().model_dump_json())
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert "the run: in progress" in result.output


@pytest.mark.parametrize("whose", ["an ended process", "a reused pid"])
def test_a_claim_whose_process_is_gone_is_not_in_progress(tmp_path: Path, whose: str) -> None:
    me = RunClaim.of_this_process()
    if whose == "an ended process":
        claim = me.model_copy(update={"pid": ended_pid()})
    else:
        if me.started is None:
            pytest.skip("no /proc here: a reused pid cannot be told from its process")
        claim = me.model_copy(update={"started": str(int(me.started) - 1)})  # started before this process did
    run = write_run(tmp_path / "run", steps=2, claim=claim)
    report = build_report(run)
    assert report.status == "stopped (the process that trained it is gone)"
    assert "in progress" not in report.path.read_text(encoding="utf-8")


def test_a_claim_from_another_host_is_named_not_judged(tmp_path: Path) -> None:
    claim = RunClaim(pid=os.getpid(), host="other-node-7", started=None)
    report = build_report(write_run(tmp_path / "run", steps=2, claim=claim))
    assert report.status == "claimed by a process on other-node-7 (not checked from here)"


# -- a folder that is no run ------------------------------------------------------------------


def test_a_folder_that_is_no_run_is_refused_naming_the_runs_below_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_run(Path("runs/tiny"))
    write_run(Path("runs/sweep/lr-1e-3"), warm=0)
    (Path("runs/sweep/lr-1e-3/checkpoints")).mkdir()  # a run's own folders are not listed as runs
    Path("runs/notes").mkdir()
    Path("runs/.cache/hidden-run").mkdir(parents=True)
    (Path("runs/.cache/hidden-run/metrics.jsonl")).write_text("")
    result = runner.invoke(app, ["report", "runs"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: runs is not a training run's directory (no metrics.jsonl, trajectories/, evals/ or checkpoints/); "
        "did you mean a run below it: runs/sweep/lr-1e-3, runs/tiny?"
    )
    assert not Path("runs/report.html").exists()
    result = runner.invoke(app, ["report", "runs/notes"])
    assert result.exit_code == 2 and result.stderr.strip().endswith("; no run below it either")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_run_killed_before_its_first_step_is_still_a_run_but_a_model_folder_is_not(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"output_dir": "runs/x", "steps": 3}))
    model = tmp_path / "final"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    assert runs_below(tmp_path) == [run]
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    assert runner.invoke(app, ["report", str(model)]).exit_code == 2


# -- paths in the page ------------------------------------------------------------------------


def test_the_page_names_no_absolute_path_of_the_machine_that_wrote_it(tmp_path: Path, monkeypatch) -> None:
    run = write_run(tmp_path / "deep" / "run")
    write_checkpoint(run, "[1, 2]")  # a corrupt ledger: its note names the file
    (run / "metrics.jsonl").write_text('{"step": 1, "miner/pool/active": 3}\n{"sft_step": 1, "sft/loss": 2.0}\n')
    for given in (run, Path("deep/run")):  # as an absolute path, and relative to the current directory
        monkeypatch.chdir(tmp_path)
        report = build_report(given)
        page = report.path.read_text(encoding="utf-8")
        assert str(tmp_path) not in page and str(tmp_path.resolve()) not in page
        assert "the miner&#x27;s ledger: checkpoints/step-000001/trainer_state.json: not a readable" in page
        assert "<td>output_dir</td><td>.</td>" in page  # config.json's output_dir: the run directory itself
        assert "agentenv run · run" in page
