"""The GRPO trainer with the miner: draws, metrics, checkpointed state, exact resume, `miner show`."""

import json

import pytest

pytest.importorskip("torch")
import torch
from typer.testing import CliRunner

from agentenv.cli import app
from agentenv.miner import MinerSampler
from agentenv.trainers import GRPOConfig, GRPOTrainer
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _config(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path / "run"),
        steps=2,
        group_size=2,
        batch_size=8,
        max_new_tokens=8,
        max_seq_len=256,
        eval_episodes=0,
        save_every=1,
        report_to=[],
        learning_rate=1e-3,
        resume=False,
        miner={"solved_threshold": 0.5, "solved_window": 2},
        importance_weighting=True,
    )
    return GRPOConfig(**{**base, **kw})


def test_the_trainer_draws_from_the_miner_and_logs_its_metrics(tmp_path, tokenizer):
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=_config(tmp_path, steps=3))
    assert isinstance(trainer.sampler, MinerSampler)
    history = trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for key in (
        "miner/pool/active",
        "miner/pool/solved",
        "miner/informative_frac",
        "miner/failures/policy",
        "miner/top_failing_families",
        "importance_weight/max",
    ):
        assert key in rows[-1], key
    first = set(history[0]["tasks"])
    assert len(first) == 4  # unseen tasks first, no repeats within a batch
    state = json.loads((tmp_path / "run" / "checkpoints" / "step-000003" / "trainer_state.json").read_text())
    assert state["sampler"]["version"] == 1 and len(state["sampler"]["ledger"]) >= 12
    assert sum(r["attempts"] for r in state["sampler"]["ledger"].values()) == 3 * 8
    saved = (tmp_path / "run" / "trajectories" / "step-000001.jsonl").read_text()
    assert '"snapshots":[]' in saved  # kept for mining, not written to disk

    result = CliRunner().invoke(app, ["miner", "show", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    for text in ("pools", "active", "informative groups", "failures by kind", "top failing families", "default"):
        assert text in result.output, text


def test_a_resumed_run_samples_exactly_as_the_uninterrupted_one(tmp_path, tokenizer):
    straight = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=_config(tmp_path / "a", steps=4))
    a = straight.train()
    first = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=_config(tmp_path / "b", steps=2))
    first.train()
    resumed = GRPOTrainer(
        tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=_config(tmp_path / "b", steps=4, resume=True)
    )
    b = resumed.train()
    assert [h["step"] for h in b] == [1, 2, 3, 4]  # the whole curve, the steps before the resume read back
    assert [h["tasks"] for h in a] == [h["tasks"] for h in b]
    assert [h["miner/pool/active"] for h in a] == [h["miner/pool/active"] for h in b]
    assert straight.sampler.state_dict() == resumed.sampler.state_dict()


def test_resuming_from_an_edited_miner_state_stops_with_one_line_naming_the_file(tmp_path, tokenizer):
    GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=_config(tmp_path, steps=1)).train()
    file = tmp_path / "run" / "checkpoints" / "step-000001" / "trainer_state.json"
    state = json.loads(file.read_text())
    state["sampler"]["mined"] = [{"task": {"id": "m", "prompt": "p"}, "source": 3, "origin": "variant"}]
    state["sampler"]["requeue"] = ["m"]  # drawn first next step, for an env the run does not have
    file.write_text(json.dumps(state))
    resumed = GRPOTrainer(
        tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=_config(tmp_path, steps=2, resume=True)
    )
    with pytest.raises(
        ValueError, match=r"trainer_state\.json: the sampler state: field 'mined\.0\.source': 3"
    ) as caught:
        resumed.train()
    assert "\n" not in str(caught.value)


def test_miner_config_errors_name_the_field():
    with pytest.raises(ValueError, match=r"miner\.temperature"):
        GRPOConfig(miner={"temperature": -1})
    with pytest.raises(ValueError, match=r"miner\.tempreature"):
        GRPOConfig(miner={"tempreature": 1})
    for field, value in [("temperature", float("inf")), ("ema_alpha", float("nan"))]:
        with pytest.raises(ValueError, match=rf"miner\.{field}"):  # no knob means anything at either
            GRPOConfig(miner={field: value})
    with pytest.raises(ValueError, match=r"miner\.proposer\.timeout_s"):  # a call that may never end
        GRPOConfig(miner={"proposer": {"base_url": "http://x/v1", "model": "m", "timeout_s": float("inf")}})
    with pytest.raises(ValueError, match="importance_weighting corrects"):
        GRPOConfig(importance_weighting=True)


def test_miner_show_without_a_miner_run_fails_cleanly(tmp_path):
    result = CliRunner().invoke(app, ["miner", "show", str(tmp_path)])
    assert result.exit_code == 2 and "no checkpoint" in result.output
