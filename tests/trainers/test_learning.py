"""Proof that GRPO learns, on the CPU: the README's main job, run as a test."""

from pathlib import Path

import pytest

from agentenv.trainers import GRPOConfig, GRPOTrainer

MAIN_JOB = Path(__file__).parents[2] / "examples" / "tiny.toml"


@pytest.mark.slow
def test_grpo_raises_held_out_success_after_a_supervised_warm_start(tmp_path):
    config = GRPOConfig.from_file(MAIN_JOB)
    config = GRPOConfig.from_dict({**config.to_dict(), "output_dir": str(tmp_path), "tensorboard": False})
    history = GRPOTrainer(config.model, envs=config.envs, config=config).train()
    held_out = [(h["step"], h["eval/success_rate"]) for h in history if "eval/success_rate" in h]
    (first_step, before), (last_step, after) = held_out[0], held_out[-1]
    assert (first_step, last_step) == (0, config.steps)
    # Held-out tasks, the same seeds every evaluation: the gain is the policy's.
    assert after - before >= 0.15, f"held-out success {before:.0%} -> {after:.0%}: {held_out}"
