"""A model on disk as a policy (`agentenv.trainers.local_policy`): every folder a training
run writes loads back as the model it trained, and what cannot be loaded is one
`LocalPolicyError` line saying what was found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trainers.local_policy import LocalPolicyError, Sampling, load, local_policy, resolve
from agentenv.trainers.model import build_tiny, merged_weights


def _train(root: Path, **kw: object) -> GRPOTrainer:
    config = GRPOConfig(
        output_dir=str(root),
        steps=1,
        group_size=2,
        batch_size=2,
        max_new_tokens=8,
        max_seq_len=1024,
        eval_episodes=0,
        save_every=1,
        resume=False,
        learning_rate=1e-2,
        **kw,  # type: ignore[arg-type]
    )
    trainer = GRPOTrainer("tiny", config=config)
    trainer.train()
    return trainer


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, torch.Tensor]]]:
    """A run that trains the whole model and one that trains LoRA adapters: each run's
    folder and the weights it ended with (a LoRA model's merged, as a checkpoint is named)."""
    pytest.importorskip("peft", reason="LoRA needs the lora extra (peft)")
    root = tmp_path_factory.mktemp("runs")
    found = {}
    for name, kw in (("full", {}), ("lora", {"lora_r": 2})):
        trainer = _train(root / name, **kw)
        found[name] = (root / name, {k: v.detach().clone() for k, v in merged_weights(trainer.model)})
    return found


@pytest.mark.slow  # two training runs
@pytest.mark.parametrize("run", ["full", "lora"])
@pytest.mark.parametrize("folder", ["", "final", "checkpoints", "checkpoints/step-000001"])
def test_every_folder_of_a_run_loads_as_the_model_it_trained(runs, run: str, folder: str) -> None:
    path, trained = runs[run]
    model, tokenizer = load(resolve(str(path / folder)))
    weights = model.state_dict()
    assert not any("lora_" in name for name in weights)  # merged: a plain model
    for name, tensor in trained.items():
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=1e-6)
    assert tokenizer.eos_token == "<|im_end|>"


@pytest.mark.slow  # a training run
def test_the_run_directory_is_its_final_model_and_checkpoints_the_latest(runs) -> None:
    path, _ = runs["lora"]
    assert resolve(str(path)).where == str(path / "final")
    assert resolve(str(path / "checkpoints")).where == str(path / "checkpoints" / "step-000001")
    assert resolve(str(path / "checkpoints")).kind == "checkpoint"


@pytest.mark.slow  # a training run
def test_a_model_from_a_run_samples_and_meets_its_env_as_the_run_did(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _train(run, tool_prompt="compact", stop=["</tool_call>"], top_k=5, max_turns=3, temperature=0.7)
    for folder in (run, run / "final", run / "checkpoints" / "step-000001"):
        policy = local_policy(str(folder), device="cpu")
        assert policy.run is not None and f"(as its run {run} sampled)" in policy.description
        sampler = policy.sampler
        assert (sampler.temperature, sampler.top_k, sampler.stop) == (0.7, 5, ("</tool_call>",))
        assert (sampler.max_new_tokens, sampler.max_context_tokens) == (8, 1024)
        # The tool prompt is how the model reads tools, for any env; turns and env settings are its envs' own.
        assert policy.env_kwargs("arithmetic-v0") == {"tool_prompt": "compact", "max_turns": 3}
        assert policy.env_kwargs("guess-number-v0") == {"tool_prompt": "compact"}

    told = local_policy(str(run), device="cpu", sampling={"max_new_tokens": 20, "temperature": 0.0})
    assert (told.sampler.max_new_tokens, told.sampler.temperature, told.sampler.stop) == (20, 0.0, ("</tool_call>",))
    with pytest.raises(LocalPolicyError, match=r"sampling: top_k: .* got -1"):
        local_policy(str(run), device="cpu", sampling={"top_k": -1})


@pytest.mark.slow  # builds and loads a model, three times
def test_a_model_folder_samples_with_the_trainers_defaults(tmp_path: Path) -> None:
    model, tokenizer = build_tiny(["arithmetic-v0"])
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    policy = local_policy(str(tmp_path), device="cpu")
    defaults = GRPOConfig()
    assert policy.sampler.temperature == defaults.temperature
    assert policy.sampler.max_new_tokens == defaults.max_new_tokens
    assert policy.sampler.max_context_tokens == defaults.max_seq_len
    assert policy.run is None and policy.env_kwargs("arithmetic-v0") == {}
    assert f"model folder {tmp_path} on cpu in float32" in policy.description
    with pytest.raises(LocalPolicyError, match="beyond the model's 4096 positions; give at most 4096"):
        local_policy(str(tmp_path), device="cpu", sampling=Sampling(max_context_tokens=5000))
    with pytest.raises(LocalPolicyError, match=r"max_new_tokens \(64\) must be below max_context_tokens \(64\)"):
        local_policy(str(tmp_path), device="cpu", sampling=Sampling(max_new_tokens=64, max_context_tokens=64))
    (tmp_path / "model.safetensors").write_bytes(b"cut short")
    with pytest.raises(LocalPolicyError, match=f"cannot load the model folder {tmp_path}: SafetensorError: "):
        local_policy(str(tmp_path), device="cpu")


def test_what_is_not_a_model_is_one_line_saying_what_was_found(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    cases = {
        tmp_path / "missing": "the path does not exist",
        tmp_path / "notes.txt": "is a file; give the model's folder",
        tmp_path: "is not a model folder: expected config.json with a model_type .*; found notes.txt",
    }
    for path, message in cases.items():
        with pytest.raises(LocalPolicyError, match=message) as caught:
            resolve(str(path))
        assert "\n" not in str(caught.value)


def test_a_checkpoint_outside_its_run_says_what_it_needs(tmp_path: Path) -> None:
    step = tmp_path / "copied" / "step-000003"
    step.mkdir(parents=True)
    (step / "model.pt").write_bytes(b"")
    (step / "trainer_state.json").write_text(json.dumps({"step": 3}))
    with pytest.raises(LocalPolicyError, match=r"is a training checkpoint, but .*config\.json .* is missing"):
        resolve(str(step))


def test_a_run_without_a_model_yet_says_so(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(LocalPolicyError, match="a training run with no final/ and no checkpoint yet"):
        resolve(str(tmp_path))
