"""``agentenv train``'s threads: ``--threads``, else the config's ``torch_threads``, else the
CPUs this process may use; and the curve it prints leaves the warm start's rows out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentenv.cli import app

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _threads_restored():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def seen(monkeypatch) -> list[tuple[int | None, int]]:
    """Each run's (torch_threads, torch's thread count) when it trains; rows as its history."""
    from agentenv.trainers import GRPOTrainer

    calls: list[tuple[int | None, int]] = []

    def train(self: GRPOTrainer) -> list[dict[str, Any]]:
        calls.append((self.config.torch_threads, torch.get_num_threads()))
        return [{"sft_step": 1, "sft/loss": 2.0}, {"step": 1, "success_rate": 0.25, "reward/task": 0.5}]

    monkeypatch.setattr(GRPOTrainer, "train", train)
    return calls


def _train(tmp_path: Path, *args: str, config: str = "") -> Any:
    path = tmp_path / "run.toml"
    path.write_text(f'output_dir = "{tmp_path / "run"}"\nsteps = 1\nreport_to = []\n{config}')
    return CliRunner().invoke(app, ["train", str(path), *args])


def test_threads_default_to_the_cpus_this_process_may_use(tmp_path, seen, monkeypatch) -> None:
    from agentenv.trainers import threads

    monkeypatch.setattr(threads, "available_cpus", lambda: 3)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    result = _train(tmp_path)
    assert result.exit_code == 0, result.output
    assert seen == [(3, 3)]
    assert "learning curve" in result.stdout and "25%" in result.stdout  # the warm start's row is left out


def test_the_threads_option_overrides_the_configs(tmp_path, seen) -> None:
    assert _train(tmp_path, config="torch_threads = 2\n").exit_code == 0
    assert _train(tmp_path, "--threads", "1", config="torch_threads = 2\n").exit_code == 0
    assert seen == [(2, 2), (1, 1)]
    refused = _train(tmp_path, "--threads", "0")
    assert refused.exit_code == 2 and "--threads" in refused.output
