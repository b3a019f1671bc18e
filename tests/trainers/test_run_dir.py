"""The run directory on its own: claiming output_dir, resuming from it, exporting into it
(`agentenv.trainers.run_dir.RunDir`), with a tiny model and no training."""

from __future__ import annotations

import json

import pytest
import torch

from agentenv import Task, Trajectory
from agentenv.core.env import Snapshot
from agentenv.core.types import Failure
from agentenv.trainers import GRPOConfig
from agentenv.trainers.distributed import DataParallel
from agentenv.trainers.run_dir import RunDir
from tests.trainers.toy import tiny_model, tiny_tokenizer


def _run(tmp_path, **kw) -> RunDir:
    config = GRPOConfig(output_dir=str(tmp_path / "run"), report_to=[], **kw)
    return RunDir(config, DataParallel())


def _model_and_optimizer(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()  # so the optimiser has state to save
    return model, optimizer


def test_a_new_run_writes_its_config_and_tokenizer(tmp_path):
    run = _run(tmp_path, seed=3)
    run.start(tiny_tokenizer(), resumed=False)
    assert json.loads((run.path / "config.json").read_text())["seed"] == 3
    assert (run.path / "tokenizer" / "tokenizer_config.json").exists()


def test_a_run_of_another_config_is_refused_and_kept(tmp_path):
    _run(tmp_path, seed=1).start(None, resumed=False)
    (tmp_path / "run" / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(FileExistsError, match=r"a run of another config \(seed: 1 -> 2\)"):
        _run(tmp_path, seed=2).start(None, resumed=False)
    assert (tmp_path / "run" / "metrics.jsonl").exists()


def test_the_same_config_started_again_replaces_the_earlier_run_and_keeps_other_files(tmp_path):
    _run(tmp_path).start(None, resumed=False)
    (tmp_path / "run" / "trajectories").mkdir()
    (tmp_path / "run" / "trajectories" / "step-000009.jsonl").write_text("old\n")
    (tmp_path / "run" / "notes.txt").write_text("mine")
    _run(tmp_path).start(None, resumed=False)
    assert not (tmp_path / "run" / "trajectories").exists()
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine"


def test_resume_restores_the_weights_optimiser_step_and_parts(tmp_path):
    run = _run(tmp_path)
    model, optimizer = _model_and_optimizer(seed=0)
    run.checkpoint(4, model, optimizer, {"sampler": {"seen": 7}})
    fresh = torch.nn.Linear(4, 3)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    restored: dict[str, dict] = {}
    step = run.resume(fresh, fresh_optimizer, {"sampler": lambda state: restored.setdefault("sampler", state)})
    assert step == 4 and restored == {"sampler": {"seen": 7}}
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True))
    assert len(fresh_optimizer.state) == len(optimizer.state) > 0


def test_resume_without_a_checkpoint_is_none(tmp_path):
    model, optimizer = _model_and_optimizer()
    assert _run(tmp_path).resume(model, optimizer, {}) is None


def test_a_part_state_that_does_not_load_names_the_file(tmp_path):
    run = _run(tmp_path)
    model, optimizer = _model_and_optimizer()
    run.checkpoint(1, model, optimizer, {"rlpr": {"ema": "high"}})

    def refuse(state: dict) -> None:
        raise TypeError(f"ema must be a number, got {state['ema']!r}\nmore detail")

    with pytest.raises(
        ValueError, match=r"step-000001/trainer_state.json: the rlpr state: ema must be a number, got 'high'$"
    ):
        run.resume(model, optimizer, {"rlpr": refuse})


def test_only_the_last_checkpoints_are_kept(tmp_path):
    run = _run(tmp_path, keep_checkpoints=2)
    model, optimizer = _model_and_optimizer()
    for step in (1, 2, 3):
        run.checkpoint(step, model, optimizer, {})
    assert sorted(p.name for p in (run.path / "checkpoints").glob("step-*")) == ["step-000002", "step-000003"]


def test_the_export_loads_by_path_and_leaves_the_model_as_it_was(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    run = _run(tmp_path)
    run.export(model, torch.optim.AdamW(model.parameters()), tokenizer)
    loaded = AutoModelForCausalLM.from_pretrained(str(run.path / "final"))
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in before.items())
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    assert len(AutoTokenizer.from_pretrained(str(run.path / "final"))) == len(tokenizer)


def test_episodes_are_one_file_per_step_without_snapshots(tmp_path):
    run = _run(tmp_path)
    task = Task(id="t", prompt="p")
    snapshot = Snapshot(
        env="say", task=task, state={}, turn=0, format_streak=0, ended=False, messages=[], rng={}
    )  # fmt: skip
    trajs = [
        Trajectory(task=task, seed=s, messages=[], transitions=[], failure=Failure.NONE, snapshots=[snapshot] * s)
        for s in (0, 1)
    ]
    run.write_episodes("evals", 3, trajs)
    run.write_episodes("evals", 3, trajs[:1])  # the step redone (a resumed run): its file replaced
    [file] = (run.path / "evals").iterdir()
    assert file.name == "step-000003.jsonl"
    lines = file.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["seed"] == 0
    run.write_episodes("trajectories", 1, trajs)
    assert all(
        not json.loads(line).get("snapshots") for line in (run.path / "trajectories" / "step-000001.jsonl").open()
    )
