"""The warm start inside a run: its rows in metrics.jsonl, its progress, its checkpoints,
and what a run stopped during or after it does when it resumes (the same weights as a
run never stopped, the KL reference the warm-started policy)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gymnasium
import pytest
import torch

import agentenv
from agentenv import ScriptedPolicy
from agentenv.trainers import GRPOConfig, GRPOTrainer
from tests.trainers.toy import tiny_model, tiny_tokenizer

pytestmark = pytest.mark.slow  # training runs

ENV = "say-oracle-v0"


@pytest.fixture(scope="module", autouse=True)
def _say_env_with_an_oracle():
    """`SayEnv` registered with an oracle that always says "aaaa" (reward 1): the warm
    start has data, and a random model's rewards still vary, so GRPO steps change it."""
    registry = agentenv.registry
    agentenv.register(ENV, "tests.trainers.toy:SayEnv", oracle=lambda: ScriptedPolicy(lambda conv: "aaaa"))
    yield
    del registry._registry[ENV]
    registry._gym_ids.discard(registry._gym_id(ENV))
    gymnasium.registry.pop(registry._gym_id(ENV), None)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _config(run: Path, **kw) -> GRPOConfig:
    base = dict(
        output_dir=str(run),
        envs=[ENV],
        steps=2,
        group_size=4,
        batch_size=8,
        max_new_tokens=6,
        max_seq_len=128,
        micro_batch_size=8,
        learning_rate=1e-3,
        sft_steps=4,
        sft_checkpoint_every=2,
        kl_coef=0.1,
        eval_episodes=4,  # at step 0 and at the end
        save_every=1,
        report_to=[],
        torch_threads=1,  # tiny tensors: more threads only hand off work
    )
    return GRPOConfig(**{**base, **kw})


def _trainer(tokenizer, config: GRPOConfig, **kw) -> GRPOTrainer:
    return GRPOTrainer(tiny_model(tokenizer), tokenizer, config=config, **kw)


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class _Stop(Exception):
    """Stands for a run killed at that point."""


@pytest.fixture(scope="module")
def unstopped(tmp_path_factory, tokenizer):
    """A run never stopped: its weights at the end, its directory and its history."""
    run = tmp_path_factory.mktemp("unstopped") / "run"
    trainer = _trainer(tokenizer, _config(run))
    history = trainer.train()
    return _weights(trainer.model), run, history


def test_the_warm_starts_rows_go_to_metrics_jsonl_without_a_step(unstopped) -> None:
    _, run, history = unstopped
    rows = _rows(run)
    sft, steps = rows[:4], rows[4:]
    assert [set(r) for r in sft] == [{"sft_step", "sft/loss", "sft/lr", "time/sft_s"}] * 4
    assert [r["sft_step"] for r in sft] == [1, 2, 3, 4]
    assert all(isinstance(r["sft/loss"], float) and r["sft/lr"] > 0 for r in sft)
    times = [r["time/sft_s"] for r in sft]
    assert times == sorted(times) and times[0] > 0
    assert [r["step"] for r in steps] == [0, 1, 2]
    assert [h["step"] for h in history] == [0, 1, 2]  # the history is the steps' alone
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "latest",
        "step-000001",
        "step-000002",
        "warm-start-000004",  # the last, with the weights alone: the intermediate ones are gone
    ]
    assert sorted(p.name for p in (run / "checkpoints" / "warm-start-000004").iterdir()) == [
        "model.pt",
        "rng.pt",
        "warm_start.json",
    ]


def test_a_run_stopped_in_the_warm_start_goes_on_from_its_checkpoint_to_the_same_weights(
    tmp_path, tokenizer, unstopped, capsys
) -> None:
    final, reference_run, _ = unstopped
    run = tmp_path / "run"

    def stop(sft_step, row):
        if sft_step == 3:  # the checkpoint of step 2 is on disk, and step 3's row
            raise _Stop

    with pytest.raises(_Stop):
        _trainer(tokenizer, _config(run), on_sft_step=stop).train()
    assert [r["sft_step"] for r in _rows(run)] == [1, 2, 3]
    capsys.readouterr()

    trainer = _trainer(tokenizer, _config(run))
    trainer.progress.min_gap_s = 0
    trainer.train()
    out = capsys.readouterr().out
    assert "the warm start, going on from supervised step 2" in out
    assert "the oracle plays" not in out  # its episodes come from the checkpoint
    assert "warm start 3/4 steps (75%)" in out
    rows, unstopped_rows = _rows(run), _rows(reference_run)
    assert [r.get("sft_step", r.get("step")) for r in rows] == [1, 2, 3, 4, 0, 1, 2]  # step 3's row once
    # The same losses as the run never stopped, and the same weights at the end, bit for bit.
    assert [r["sft/loss"] for r in rows[:4]] == [r["sft/loss"] for r in unstopped_rows[:4]]
    assert [r["sft/lr"] for r in rows[:4]] == [r["sft/lr"] for r in unstopped_rows[:4]]
    assert rows[1]["time/sft_s"] <= rows[2]["time/sft_s"]  # time/sft_s goes on across the stop
    assert _equal(_weights(trainer.model), final)


def test_a_run_stopped_after_the_warm_start_does_not_run_it_again(tmp_path, tokenizer, unstopped, capsys) -> None:
    final, _, _ = unstopped
    run = tmp_path / "run"

    def stop(step, metrics):
        raise _Stop  # in step 1, before its checkpoint: only the warm start's is on disk

    with pytest.raises(_Stop):
        _trainer(tokenizer, _config(run), on_step=stop).train()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["warm-start-000004"]
    calls = []
    capsys.readouterr()

    trainer = _trainer(tokenizer, _config(run), on_sft_step=lambda sft_step, row: calls.append(sft_step))
    history = trainer.train()
    assert calls == [] and "the warm start, done" in capsys.readouterr().out
    # Nor the evaluation of step 0, which the stopped run logged.
    assert [r.get("sft_step", r.get("step")) for r in _rows(run)] == [1, 2, 3, 4, 0, 1, 2]
    assert [h["step"] for h in history] == [0, 1, 2]
    assert sorted(p.name for p in (run / "evals").iterdir()) == ["step-000000.jsonl", "step-000002.jsonl"]
    assert _equal(_weights(trainer.model), final)


def test_a_resumed_run_keeps_the_warm_started_policy_as_its_kl_reference(tmp_path, tokenizer) -> None:
    run = tmp_path / "run"

    def stop(step, metrics):
        if step == 2:  # step 1's checkpoint is on disk
            raise _Stop

    first = _trainer(tokenizer, _config(run, steps=3), on_step=stop)
    with pytest.raises(_Stop):
        first.train()
    assert first.ref_model is not None
    warm_started = _weights(first.ref_model)
    step_1 = torch.load(run / "checkpoints" / "step-000001" / "model.pt", weights_only=True)
    assert not _equal(step_1, warm_started)  # GRPO moved the policy away from it

    resumed = _trainer(tokenizer, _config(run, steps=3))
    resumed.train()
    assert resumed.ref_model is not None
    assert _equal(_weights(resumed.ref_model), warm_started)


def test_without_a_warm_start_the_reference_is_the_model_as_loaded(tmp_path, tokenizer) -> None:
    run = tmp_path / "run"
    loaded = _weights(tiny_model(tokenizer))

    def stop(step, metrics):
        if step == 2:
            raise _Stop

    with pytest.raises(_Stop):
        _trainer(tokenizer, _config(run, sft_steps=0, steps=3), on_step=stop).train()
    resumed = _trainer(tokenizer, _config(run, sft_steps=0, steps=3))
    resumed.train()
    assert resumed.ref_model is not None and _equal(_weights(resumed.ref_model), loaded)


def test_progress_lines_for_the_warm_start_the_steps_and_each_evaluation(tmp_path, tokenizer, capsys) -> None:
    """Plain mode (stdout is not a terminal here): a line at every tenth of each phase with
    its rate and time left, and a closing line with the time it took."""
    config = _config(tmp_path / "run", sft_steps=5, steps=2, eval_episodes=4, eval_every=1, kl_coef=0.0)
    trainer = _trainer(tokenizer, config)
    trainer.progress.min_gap_s = 0  # a tiny run's phases last under a second: a line at each tenth all the same
    trainer.train()
    out = capsys.readouterr().out
    rate = r"\d+s \| (\d+\.\d+ \w+s/s|\d+\.\d s/\w+) \| \d+(m\d\ds)?s? left"
    for label, total, unit in (("warm start", 5, "step"), ("GRPO", 2, "step"), ("held-out eval", 4, "episode")):
        for done in range(1, total):
            share = f"{done / total:.0%}"
            assert re.search(rf"^{label} {done}/{total} {unit}s \({share}\) \| {rate}", out, re.M), (label, done)
        assert re.search(rf"^{label} {total}/{total} {unit}s in \d+s", out, re.M), label
    warm = re.findall(r"^warm start \d/5 steps \(\d+%\) .* \| loss \d+\.\d{3}$", out, re.M)
    assert len(warm) == 4  # each with the step's loss
    assert out.count("held-out eval 4/4 episodes in") == 3  # at the start, after step 1 (eval_every) and at the end


def test_torch_threads_is_set_when_the_trainer_is_made(tmp_path, tokenizer) -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        _trainer(tokenizer, _config(tmp_path / "run", torch_threads=2))
        assert torch.get_num_threads() == 2
        _trainer(tokenizer, _config(tmp_path / "run", torch_threads=None))  # None: left as it is
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_training_run_is_claimed_while_it_runs_and_released_when_it_ends(tmp_path, tokenizer) -> None:
    from agentenv.report.rundir import CLAIM_FILE, RunClaim

    run = tmp_path / "run"
    seen: list[bool | None] = []

    def look(step, metrics):  # `agentenv report` reads this file to say "in progress"
        seen.append(RunClaim.model_validate_json((run / CLAIM_FILE).read_text()).live())

    _trainer(tokenizer, _config(run, steps=1), on_step=look).train()
    assert seen == [True] and not (run / CLAIM_FILE).exists()

    def stop(step, metrics):
        raise _Stop

    other = tmp_path / "other"
    with pytest.raises(_Stop):  # a run that stops with an error releases it too
        _trainer(tokenizer, _config(other, steps=2), on_step=stop).train()
    assert not (other / CLAIM_FILE).exists()
