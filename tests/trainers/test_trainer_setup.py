"""What a `GRPOTrainer` checks and derives when it is built (no training step runs)."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from agentenv.trainers import GRPOConfig, GRPOTrainer
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _trainer(tmp_path, tokenizer, model=None, **kw):
    cfg = GRPOConfig(
        **{"output_dir": str(tmp_path / "run"), "max_new_tokens": 12, "max_seq_len": 256, "report_to": [], **kw}
    )
    return GRPOTrainer(model or tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg)


def test_max_seq_len_beyond_the_models_positions_is_refused_with_the_limit(tmp_path, tokenizer):
    model = tiny_model(tokenizer)
    model.config.max_position_embeddings = 128
    with pytest.raises(ValueError, match=r"max_seq_len \(256\) is beyond the model's 128 positions"):
        _trainer(tmp_path, tokenizer, model)


def test_without_evaluation_no_task_is_held_out(tmp_path, tokenizer):
    everything = len(SayEnv().tasks)
    assert len(_trainer(tmp_path, tokenizer, eval_episodes=0).sources[0].train) == everything
    held = _trainer(tmp_path, tokenizer, eval_episodes=8).sources[0]
    assert len(held.train) < everything and len(held.train) + len(held.test) == everything


def test_held_out_tasks_share_no_content_with_training_and_the_run_says_so(tmp_path, tokenizer, capsys):
    from agentenv import Task, TaskSet

    class Copies(SayEnv):  # 12 problems, each under 5 ids
        def default_tasks(self):
            return TaskSet(Task(id=f"t{i}-{k}", prompt=f"Task {i}.") for i in range(12) for k in range(5))

    cfg = GRPOConfig(output_dir=str(tmp_path / "a"), max_new_tokens=12, max_seq_len=256, report_to=[])
    source = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[Copies], config=cfg).sources[0]
    assert source.test and source.test.shared_content(source.train) == 0
    assert f"{len(source.test)} of 60 tasks held out, split by content" in capsys.readouterr().out

    class OnePrompt(SayEnv):  # one content under every id: it cannot fill both sides
        def default_tasks(self):
            return TaskSet(Task(id=f"same-{k}", prompt="Task.") for k in range(20))

    cfg = cfg.model_copy(update={"output_dir": str(tmp_path / "b")})
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[OnePrompt], config=cfg)
    out = capsys.readouterr().out
    twins = len(trainer.sources[0].test)
    assert twins > 0 and "split by id (its 1 distinct contents cannot fill both sides)" in out
    assert f"{twins} held-out tasks share content with training" in out
    assert trainer._held_out_metrics()["eval/content_twins"] == twins

    # Asked for by id, the split keeps the twins it makes, and says how many.
    cfg = cfg.model_copy(update={"output_dir": str(tmp_path / "c"), "split_by": "id"})
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[Copies], config=cfg)
    out = capsys.readouterr().out
    twins = trainer.sources[0].test.shared_content(trainer.sources[0].train)
    assert twins > 0 and "split by id:" in out and f"{twins} held-out tasks share content with training" in out


def test_held_out_figures_count_a_policy_that_failed_to_answer_and_report_infra(tmp_path, tokenizer, monkeypatch):
    # Left out, the episodes the policy cannot answer would raise its held-out success rate.
    from agentenv import Task, Trajectory
    from agentenv.core.types import Failure

    def episode(task_id, failure, error=None):
        task = Task(id=task_id, prompt="p")
        success = failure is Failure.NONE
        return Trajectory(task=task, seed=0, messages=[], transitions=[], success=success, failure=failure, error=error)

    trajs = [
        episode("solved", Failure.NONE),
        episode("unanswered", Failure.INFRA, "policy: the server answered 500"),
        episode("broken", Failure.INFRA, "the sandbox died"),
    ]
    trainer = _trainer(tmp_path, tokenizer, save_trajectories=False)
    monkeypatch.setattr(trainer.evaluator, "episodes", lambda episodes=None: trajs)
    metrics = trainer._held_out_metrics()
    assert trainer.evaluate() == metrics["eval/success_rate"] == 0.5
    assert (metrics["eval/episodes"], metrics["eval/infra"]) == (2, 1)


def test_dr_grpo_divides_by_the_generation_budget_not_the_sequence_length(tmp_path, tokenizer):
    trainer = _trainer(tmp_path, tokenizer, loss="dr_grpo")
    assert trainer.generation_budget == 12 * SayEnv.max_turns  # max_new_tokens per turn, for the longest episode
    assert _trainer(tmp_path, tokenizer, max_turns=100).generation_budget == 256  # within max_seq_len


def test_training_on_the_cpu_keeps_freed_memory_for_the_next_step_unless_told_not_to(tmp_path, tokenizer, monkeypatch):
    import agentenv.trainers.trainer as trainer_module

    calls: list[bool] = []
    monkeypatch.setattr(trainer_module, "keep_freed_cpu_memory", lambda: calls.append(True) or True)
    _trainer(tmp_path, tokenizer, device="cpu")
    assert calls == [True]
    _trainer(tmp_path, tokenizer, device="cpu", cpu_keep_freed_memory=False)
    assert calls == [True]


_FREED_RSS = """
import sys, torch
from agentenv.trainers.model import keep_freed_cpu_memory
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
if sys.argv[1] == "keep":
    assert keep_freed_cpu_memory()
x = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB, over malloc's 32 MiB ceiling for its own heap
before = rss()
del x
print(before - rss())
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists() or platform.libc_ver()[0] != "glibc", reason="glibc on Linux")
def test_keep_freed_cpu_memory_keeps_a_freed_large_tensor_in_the_process():
    def returned_mib(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _FREED_RSS, mode], capture_output=True, text=True, check=True)
        return int(out.stdout.strip())

    assert returned_mib("default") >= 60  # glibc hands a freed 64 MiB block straight back to the kernel
    assert returned_mib("keep") < 4  # kept for the next allocation


def test_the_held_out_policy_samples_with_the_configured_nucleus_and_top_k(tmp_path, tokenizer):
    trainer = _trainer(tmp_path, tokenizer, top_p=0.5, top_k=3, temperature=0.9, eval_temperature=0.7)
    for policy, temperature in ((trainer.policy, 0.9), (trainer.eval_policy, 0.7)):
        assert (policy.top_p, policy.top_k, policy.temperature) == (0.5, 3, temperature)
