"""``agentenv export``: a run directory and an ``eval --out`` file to datasets on disk, and
the one-line errors for what cannot be exported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentenv import ScriptedPolicy, rollout, tool_call_text
from agentenv.cli import app
from tests.toy_envs import CounterEnv

datasets = pytest.importorskip("datasets")
runner = CliRunner()


def invoke(*args: str | Path) -> Any:
    return runner.invoke(app, [str(a) for a in args])


def _act(c):
    """Even episodes reach the target (2) and submit; odd ones submit at once (reward 0)."""
    if c.turn < 2 and c.id % 2 == 0:
        return tool_call_text("add", amount=1)
    return tool_call_text("submit")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory: one training step of two groups of 4 (same task and seed each) and
    one held-out evaluation; and next to it the same episodes as an ``eval --out`` file."""
    root = tmp_path_factory.mktemp("cli-export")
    trajs = rollout(
        CounterEnv, ScriptedPolicy(_act), tasks=["t0"] * 8, seeds=[1] * 4 + [2] * 4, out=root / "eval.jsonl"
    )
    for folder in ("trajectories", "evals"):
        (root / "run" / folder).mkdir(parents=True)
        (root / "run" / folder / "step-000001.jsonl").write_text("".join(t.to_json() + "\n" for t in trajs))
    return root / "run"


@pytest.mark.parametrize(("format", "rows"), [("sft", 4), ("dpo", 2), ("turns", 4 * 3 + 4 * 1)])
def test_export_writes_each_format_for_load_from_disk(run: Path, tmp_path: Path, format: str, rows: int) -> None:
    out = tmp_path / format
    result = invoke("export", run, "--format", format, "--out", out)
    assert result.exit_code == 0, result.output
    assert f"wrote {rows} {format} rows to {out}" in result.output
    loaded = datasets.load_from_disk(str(out))
    assert len(loaded) == rows
    if format == "dpo":
        assert all(r["chosen_reward"] == 1.0 and r["rejected_reward"] == 0.0 for r in loaded)
    if format == "sft":
        roles = [m["role"] for m in loaded[0]["messages"]]
        assert roles == ["system", "user"] + ["assistant", "tool"] * 3
        assert loaded[0]["messages"][2]["tool_calls"][0]["function"] == {"name": "add", "arguments": {"amount": 1}}


def test_export_reads_an_eval_out_file_and_a_split(run: Path, tmp_path: Path) -> None:
    result = invoke(
        "export", run.parent / "eval.jsonl", "--format", "sft", "--min-reward", "0", "--out", tmp_path / "a"
    )
    assert result.exit_code == 0, result.output
    assert len(datasets.load_from_disk(str(tmp_path / "a"))) == 8
    result = invoke("export", run, "--split", "held-out", "--out", tmp_path / "b")
    assert result.exit_code == 0, result.output
    assert datasets.load_from_disk(str(tmp_path / "b"))["episode_id"][0] == "evals/step-000001.jsonl:1"


def _error(result: Any) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_a_folder_that_is_not_a_run_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    result = invoke("export", tmp_path, "--out", tmp_path / "ds")
    assert result.exit_code == 2
    assert "is neither a run directory" in _error(result)
    result = invoke("export", tmp_path / "missing", "--out", tmp_path / "ds")
    assert result.exit_code == 2 and "no such file or directory" in _error(result)
    not_trajectories = tmp_path / "a.json"
    not_trajectories.write_text(json.dumps({"hello": 1}))
    result = invoke("export", not_trajectories, "--out", tmp_path / "ds")
    assert result.exit_code == 2 and "a.json:1" in _error(result)
    assert not (tmp_path / "ds").exists()


def test_nothing_to_export_says_why_and_exits_1(run: Path, tmp_path: Path) -> None:
    result = invoke("export", run, "--min-reward", "5", "--out", tmp_path / "ds")
    assert result.exit_code == 1
    assert "no sft rows" in _error(result) and "8 episodes read" in result.output
    assert not (tmp_path / "ds").exists()


def test_an_existing_out_is_kept_unless_overwrite_replaces_a_dataset(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    assert invoke("export", run, "--out", out).exit_code == 0
    result = invoke("export", run, "--format", "turns", "--out", out)
    assert result.exit_code == 2 and "is not empty" in _error(result)
    assert "messages" in datasets.load_from_disk(str(out)).column_names  # the sft dataset, untouched
    assert invoke("export", run, "--format", "turns", "--out", out, "--overwrite").exit_code == 0
    assert "reward" in datasets.load_from_disk(str(out)).column_names
    result = invoke("export", run, "--out", run, "--overwrite")  # the run itself is no dataset to replace
    assert result.exit_code == 2 and "not a saved dataset" in _error(result)
    assert (run / "trajectories" / "step-000001.jsonl").is_file()


def test_help_shows_an_example() -> None:
    result = invoke("export", "--help")
    assert result.exit_code == 0
    assert "agentenv export runs/tiny --format sft --out runs/tiny-sft" in result.output
