"""Whose run an output_dir holds: a run from step 0 never mixes with an earlier run there.
A run of another config is refused before anything is written, with the fix; a run of
the same config is replaced whole (nothing of it left among the new run's files)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trainers.checkpoint import (
    RUN_FILES,
    clear_run,
    latest_warm_start,
    load_checkpoint,
    load_warm_start,
    other_run,
    save_checkpoint,
    save_warm_start,
)
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer


def _config(run: Path, **kw: object) -> GRPOConfig:
    base = dict(
        output_dir=str(run),
        steps=2,
        group_size=4,
        batch_size=4,
        max_new_tokens=6,
        max_seq_len=128,
        eval_episodes=0,
        save_every=1,
        keep_checkpoints=5,
        report_to=[],
        resume=False,
    )
    return GRPOConfig(**{**base, **kw})


def _fake_run(run: Path, config: GRPOConfig) -> None:
    (run / "checkpoints" / "step-000002").mkdir(parents=True)
    (run / "checkpoints" / "latest").write_text("step-000002")
    (run / "checkpoints" / "step-000002" / "trainer_state.json").write_text('{"step": 2}')
    (run / "config.json").write_text(json.dumps(config.to_dict()))
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')


# -- the decision, on hand-made directories ---------------------------------------------------


def test_a_new_or_empty_directory_or_one_without_run_files_is_free(tmp_path: Path) -> None:
    config = _config(tmp_path / "run").to_dict()
    assert other_run(tmp_path / "run", config, resume=False) is None
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    assert other_run(tmp_path / "run", config, resume=False) is None


def test_a_run_of_another_config_is_refused_naming_what_differs_and_the_fixes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _fake_run(run, _config(run, seed=1))
    message = other_run(run, _config(run, seed=2, steps=1).to_dict(), resume=False)
    assert message is not None and "\n" not in message
    assert message.startswith(f"output_dir {run} holds a run of another config (seed: 1 -> 2; steps: 2 -> 1)")
    assert "resume=False starts a new run there" in message
    assert "choose another output_dir, or set resume=True to continue that run" in message
    assert f"delete {run} first" in message
    # With resume=True and no checkpoint there is nothing to continue: not offered.
    (run / "checkpoints" / "latest").unlink()
    message = other_run(run, _config(run, seed=2).to_dict(), resume=True)
    assert message is not None and "no checkpoint to resume it from" in message and "set resume=True" not in message


def test_run_files_without_a_readable_config_are_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    message = other_run(run, _config(run).to_dict(), resume=False)
    assert message is not None and "run files (metrics.jsonl, trajectories) without a readable config.json" in message
    (run / "config.json").write_text("{cut sho")
    assert other_run(run, _config(run).to_dict(), resume=False) is not None


def test_an_output_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run"
    path.write_text("")
    assert other_run(path, _config(path).to_dict(), resume=False) == (
        f"output_dir {path} is a file, not a directory; choose another output_dir"
    )


def test_the_same_config_is_the_same_run_however_it_is_started_and_clearing_keeps_other_files(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _fake_run(run, _config(run))
    for name in ("tokenizer", "trajectories", "evals", "final", "tensorboard", "report_files"):
        (run / name).mkdir()
    (run / "report.html").write_text("<html>")
    (run / "notes.txt").write_text("mine")
    same = _config(tmp_path / "elsewhere" / ".." / "run", resume=True)  # how and where it starts: not which run
    assert other_run(run, same.to_dict(), resume=False) is None
    clear_run(run)
    assert [p.name for p in run.iterdir()] == ["notes.txt"]
    assert not any((run / name).exists() for name in RUN_FILES)


# -- the trainer -------------------------------------------------------------------------------


@pytest.mark.slow  # two tiny training runs of two steps
def test_a_fresh_run_in_another_runs_directory_is_refused_and_a_rerun_replaces_its_own(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    run = tmp_path / "run"

    def train(config: GRPOConfig) -> None:
        GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=config).train()

    def steps() -> list[int]:
        return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]

    train(_config(run, seed=1))
    a = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    # Run B, another config: refused before anything is written, run A whole.
    with pytest.raises(FileExistsError, match=r"holds a run of another config \(seed: 1 -> 2; steps: 2 -> 1\)"):
        train(_config(run, seed=2, steps=1))
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == a
    # Run A again from scratch (resume=False, the same config): it replaces the first,
    # and nothing of the first stays among its files.
    (run / "trajectories" / "step-000009.jsonl").write_text("{}\n")
    train(_config(run, seed=1))
    assert steps() == [1, 2]
    assert sorted(p.name for p in (run / "trajectories").iterdir()) == ["step-000001.jsonl", "step-000002.jsonl"]
    assert json.loads((run / "config.json").read_text())["seed"] == 1


@pytest.mark.parametrize("pointer", ["", "../../elsewhere/step-000002", "step-000009"])
def test_a_resume_whose_latest_pointer_names_no_checkpoint_stops_and_deletes_nothing(
    tmp_path: Path, pointer: str
) -> None:
    """Read as "no checkpoint yet", a pointer edited or emptied made the resumed run start
    over in its own directory, and clearing it deleted every checkpoint the run had."""
    tokenizer = tiny_tokenizer()
    run = tmp_path / "run"
    run.mkdir()
    config = _config(run, resume=True)
    _fake_run(run, config)
    (run / "checkpoints" / "latest").write_text(pointer)
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=config)
    with pytest.raises(ValueError, match=r"checkpoints/latest.*write the name of a whole checkpoint folder there"):
        trainer.train()
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


# -- reading a checkpoint back ------------------------------------------------------------------


def _checkpoint(tmp_path: Path) -> tuple[Path, torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    return save_checkpoint(tmp_path, 1, model, optimizer, {}), model, optimizer


class _Runs:
    """A pickle that makes a directory when it is loaded: any code a checkpoint file could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return os.mkdir, (str(self.marker),)


def test_resuming_restores_the_rng_states_and_runs_no_code_from_the_rng_file(tmp_path: Path) -> None:
    path, model, optimizer = _checkpoint(tmp_path)
    expected = np.random.random(), random.random(), torch.rand(1).item()
    np.random.seed(1), random.seed(1), torch.manual_seed(1)
    load_checkpoint(path, model, optimizer)
    assert (np.random.random(), random.random(), torch.rand(1).item()) == expected

    marker = tmp_path / "ran"
    torch.save({"python": _Runs(marker)}, path / "rng.pt")
    with pytest.raises(ValueError, match=r"rng\.pt: not a checkpoint file torch can read \(Weights only load failed"):
        load_checkpoint(path, model, optimizer)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("model.pt", b"PK\x03\x04cut", r"model\.pt: not a checkpoint file torch can read"),
        ("optimizer.pt", b"", r"optimizer\.pt: not a checkpoint file torch can read"),
        ("rng.pt", None, r"rng\.pt: not the RNG states a checkpoint saves"),
        (
            "trainer_state.json",
            b'{"step": 1e300}',
            r"trainer_state\.json: field 'step': Input should be a valid integer",
        ),
        ("trainer_state.json", b'{"step": 1, "sampler": []}', r"trainer_state\.json: field 'sampler'"),
        ("trainer_state.json", b"[" * 100_000, r"trainer_state\.json: Invalid JSON"),
    ],
)
def test_a_checkpoint_file_cut_short_or_edited_is_one_error_naming_it_and_changes_nothing(
    tmp_path: Path, file: str, content: bytes | None, message: str
) -> None:
    path, _, _ = _checkpoint(tmp_path)
    if content is None:
        torch.save({"python": 5, "numpy": "x", "torch": torch.zeros(3)}, path / file)
    else:
        (path / file).write_bytes(content)
    fresh = torch.nn.Linear(2, 2)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(ValueError, match=message) as caught:
        load_checkpoint(path, fresh, torch.optim.AdamW(fresh.parameters()))
    assert "\n" not in str(caught.value)
    if file != "rng.pt":  # the weights are loaded before the RNG states
        assert all(torch.equal(v, before[k]) for k, v in fresh.state_dict().items())


# -- the warm start's checkpoints ---------------------------------------------------------------


def _episode() -> Any:
    from agentenv import ScriptedPolicy, rollout

    return rollout(SayEnv, ScriptedPolicy(lambda conv: "aaaa"), n=1)[0]


def test_the_newest_whole_warm_start_checkpoint_is_the_one_read_back(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    state = {"done": 2, "optimizer": optimizer.state_dict(), "generator": torch.Generator().manual_seed(3).get_state()}
    save_warm_start(tmp_path, model, sft_step=2, time_s=1.5, state=state, episodes=[_episode()])
    (tmp_path / "checkpoints" / ".tmp-warm-start-000003").mkdir()  # a run killed while writing the next
    fresh = torch.nn.Linear(2, 2)
    saved = load_warm_start(latest_warm_start(tmp_path), fresh)
    assert (saved.sft_step, saved.done, saved.time_s) == (2, False, 1.5)
    assert torch.equal(fresh.weight, model.weight) and saved.state is not None
    assert torch.equal(saved.state["generator"], state["generator"])
    assert saved.episodes is not None and saved.episodes[0].messages == _episode().messages
    assert latest_warm_start(tmp_path, done=True) is None  # not the weights RL starts from yet

    with torch.no_grad():
        model.weight.add_(1.0)
    save_warm_start(tmp_path, model, sft_step=4, time_s=3.0)  # the end: the weights alone
    folders = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if not p.name.startswith("."))
    assert folders == ["warm-start-000004"]
    assert latest_warm_start(tmp_path, done=True) == tmp_path / "checkpoints" / "warm-start-000004"
    done = load_warm_start(latest_warm_start(tmp_path), fresh)
    assert done.done and done.state is None and done.episodes is None
    assert torch.equal(fresh.weight, model.weight)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b'{"sft_step": 2, "done": fal', "Invalid JSON"), (b'{"sft_step": -1, "done": true}', "field 'sft_step'")],
)
def test_an_edited_warm_start_checkpoint_is_one_error_naming_it_and_changes_nothing(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = save_warm_start(tmp_path, torch.nn.Linear(2, 2), sft_step=2, time_s=1.0)
    (path / "warm_start.json").write_bytes(content)
    fresh = torch.nn.Linear(2, 2)
    before = fresh.weight.detach().clone()
    with pytest.raises(ValueError, match=rf"warm_start\.json: .*{message}"):
        load_warm_start(path, fresh)
    assert torch.equal(fresh.weight, before)


def test_the_thread_count_is_how_a_run_is_started_not_which_run_it_is(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _fake_run(run, _config(run, torch_threads=2))
    assert other_run(run, _config(run, torch_threads=16).to_dict(), resume=False) is None
