"""``agentenv eval`` and ``agentenv play`` with a local model as the policy (``--policy hf``
and ``--policy vllm``): a model folder or a training run evaluates in one command with
pass@k, compares with another result, and a bad ``--model`` is one ``error:`` line.

The vLLM test needs the vllm extra; skipped without it unless AGENTENV_REQUIRE_VLLM=1
(scripts/test.sh sets it), which makes a missing vLLM a failure."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentenv.cli import app
from tests.cli.test_cli import agentenv_script

runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's tiny Qwen2 (random weights) and its tokenizer, as save_pretrained writes them."""
    from agentenv.trainers.model import build_tiny

    folder = tmp_path_factory.mktemp("tiny-model")
    model, tokenizer = build_tiny(["arithmetic-v0"])
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory of a one-step LoRA GRPO run: final/ (the adapter) and checkpoints/;
    its envs list their tools in the compact prompt."""
    pytest.importorskip("peft", reason="LoRA needs the lora extra (peft)")
    from agentenv.trainers import GRPOConfig, GRPOTrainer

    run = tmp_path_factory.mktemp("runs") / "lora"
    config = GRPOConfig(
        output_dir=str(run),
        steps=1,
        group_size=2,
        batch_size=2,
        max_new_tokens=8,
        max_seq_len=1024,
        eval_episodes=0,
        save_every=1,
        resume=False,
        lora_r=2,
        tool_prompt="compact",
    )
    GRPOTrainer("tiny", config=config).train()
    return run


def _one_error_line(result: Any) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_the_command_line_loads_no_torch_until_a_local_model_is_asked_for(tmp_path: Path) -> None:
    heavy = "{'torch', 'transformers', 'peft'}"
    code = f"import sys, agentenv.cli.app; print(sorted({{m.split('.')[0] for m in sys.modules}} & {heavy}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.slow  # loads a model and samples with it
def test_eval_of_a_model_folder_gives_pass_at_k_over_its_episodes(model_dir: Path, tmp_path: Path) -> None:
    out, result_file = tmp_path / "episodes.jsonl", tmp_path / "result.json"
    args = ["-n", "3", "-k", "2", "--max-new-tokens", "8", "--out", str(out), "--json", str(result_file)]
    result = invoke("eval", "arithmetic-v0", "--policy", "hf", "--model", str(model_dir), *args)
    assert result.exit_code == 0, result.output + result.stderr
    # What was loaded and how it samples: the trainer's defaults unless given.
    assert f"model folder {model_dir} on cpu in float32" in result.stderr
    assert "max_new_tokens 8, max_context_tokens 2048, temperature 1.0, top_p 1.0" in result.stderr
    figures = json.loads(result_file.read_text())
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    assert figures["k"] == 2 and figures["episodes"] == len(episodes) == 6
    tasks = {e["task"]["id"] for e in episodes}
    assert {name: figures["overall"][name]["tasks"] for name in ("pass@1", "pass@2", "pass^2")} == dict.fromkeys(
        ("pass@1", "pass@2", "pass^2"), len(tasks)
    )
    assert figures["label"] == f"arithmetic-v0 · hf policy {model_dir}"
    # Token in, token out: each turn's ids and log-probs are in the trajectory.
    assert all(g["token_ids"] and len(g["logprobs"]) == len(g["token_ids"]) for e in episodes for g in e["generations"])
    assert "pass@2" in result.output


@pytest.mark.slow  # a training run, then two evaluations of it
def test_a_trained_run_evaluates_in_one_command_and_compares(lora_run: Path, tmp_path: Path) -> None:
    baseline, final, step = tmp_path / "scripted.json", tmp_path / "final.json", tmp_path / "step.json"
    draws = ["-n", "3", "-k", "2", "--max-new-tokens", "8"]
    assert invoke("eval", "arithmetic-v0", *draws, "--json", str(baseline)).exit_code == 0
    result = invoke(
        "eval", "arithmetic-v0", "--policy", "hf", "--model", str(lora_run), *draws,
        "--compare-to", str(baseline), "--json", str(final),
    )  # fmt: skip
    assert result.exit_code == 0, result.output + result.stderr
    assert f"LoRA adapter {lora_run / 'final'} merged into its base" in result.stderr
    assert f"(as its run {lora_run} sampled)" in result.stderr  # the run's settings, but the tokens given
    assert "max_new_tokens 8, max_context_tokens 1024" in result.stderr
    assert "env settings of the model's training run: tool_prompt='compact'" in result.stderr
    comparison = json.loads(final.read_text())["comparison"]
    assert comparison["a"] == "arithmetic-v0 · scripted policy" and comparison["matched"] == 3
    assert comparison["differences"]["pass@1"]["value"] < 0  # the oracle solves them all; one step of RL does not
    assert "B - A on 3 shared tasks" in result.output

    checkpoint = lora_run / "checkpoints" / "step-000001"
    result = invoke(
        "eval", "arithmetic-v0", "--policy", "hf", "--model", str(checkpoint), *draws,
        "--compare-to", str(final), "--json", str(step),
    )  # fmt: skip
    assert result.exit_code == 0, result.output + result.stderr
    assert f"training checkpoint {checkpoint}" in result.stderr
    assert json.loads(step.read_text())["comparison"]["matched"] == 3


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("{tmp}/no-such-run/final", "no model folder '.*no-such-run/final': the path does not exist"),
        ("{tmp}/notes.txt", "notes.txt is a file; give the model's folder"),
        ("{tmp}", "is not a model folder: expected config.json with a model_type .*; found notes.txt"),
        ("agentenv-no-such-org/no-such-model", "no folder 'agentenv-no-such-org/no-such-model', and no hub model"),
    ],
)
def test_a_bad_model_is_one_error_line(model: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a model")
    result = invoke("eval", "arithmetic-v0", "--policy", "hf", "--model", model.format(tmp=tmp_path), "-n", "1")
    assert message.split(".*")[-1] in _one_error_line(result)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "hf"], "--policy hf needs --model: a model folder, a training run"),
        (["--policy", "vllm", "--model", "m", "--temperature", "-1"], "--temperature -1.0: Input should be greater"),
        (["--policy", "hf", "--model", "m", "--top-p", "0"], "--top-p 0.0: Input should be greater than 0"),
    ],
)
def test_missing_model_and_bad_sampling_options_are_one_error_line(args: list[str], message: str) -> None:
    assert message in _one_error_line(invoke("eval", "arithmetic-v0", *args))


@pytest.mark.slow  # loads a model and samples with it
def test_play_shows_a_local_model_playing_one_episode(model_dir: Path) -> None:
    args = ["--policy", "hf", "--model", str(model_dir), "--max-turns", "2", "--max-new-tokens", "8", "--seed", "3"]
    result = invoke("play", "arithmetic-v0", *args)
    assert result.exit_code == 0, result.output + result.stderr
    assert "[system]" in result.output  # the observations, as a person playing sees them
    turns = result.output.count("[assistant]")
    assert turns >= 1 and f"turns {turns}" in result.output


def _vllm_available() -> None:
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("AGENTENV_REQUIRE_VLLM") == "1":
            pytest.fail("AGENTENV_REQUIRE_VLLM=1 but vLLM is not installed (pip install -e '.[vllm]')")
        pytest.skip("needs vLLM (the vllm extra)")


@pytest.mark.slow  # starts a vLLM engine (about half a minute on a CPU)
def test_eval_with_vllm_gives_pass_at_k_and_keeps_stdout_for_the_json(model_dir: Path) -> None:
    _vllm_available()
    args = ["--policy", "vllm", "--model", str(model_dir), "--enforce-eager", "--max-context-tokens", "512"]
    args += ["--max-new-tokens", "8", "-n", "2", "-k", "2", "--json", "-"]
    # Its own process: an in-process engine sets up a torch.distributed group of one.
    proc = subprocess.run(
        [agentenv_script(), "eval", "arithmetic-v0", *args],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "vllm sampler" in proc.stderr and " INFO " not in proc.stderr  # vLLM's log: on stderr, warnings only
    figures = json.loads(proc.stdout)  # nothing but the result
    assert figures["episodes"] == 4 and figures["k"] == 2 and figures["overall"]["pass@2"]["tasks"] >= 1
