import gc
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from agentenv import Task, TaskSet
from agentenv.core.trajectory import Trajectory
from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trainers.updater import Updater
from tests.trainers.toy import SayEnv, same_gradient, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.slow  # training runs


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _config(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path / "run"),
        steps=1,
        group_size=4,
        batch_size=8,
        max_new_tokens=12,
        max_seq_len=256,
        eval_episodes=0,
        save_every=1,
        report_to=[],
        micro_batch_size=3,
        learning_rate=1e-3,
        logprob_chunk_tokens=7,
        resume=False,
    )
    return GRPOConfig(**{**base, **kw})


@pytest.mark.parametrize("loss", ["grpo", "dapo", "dr_grpo", "gspo", "cispo"])
def test_every_loss_changes_the_parameters_with_a_finite_loss(tmp_path, tokenizer, loss):
    model = tiny_model(tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    cfg = _config(tmp_path, loss=loss, ppo_epochs=2, kl_coef=0.05)
    history = GRPOTrainer(model, tokenizer, envs=[SayEnv], config=cfg).train()
    assert math.isfinite(history[-1]["loss"]) and history[-1]["adv/std"] > 0
    changed = sum(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters(), strict=True))
    assert changed == len(before)


def test_lora_trains_only_the_adapters(tmp_path, tokenizer):
    pytest.importorskip("peft", reason="LoRA needs the lora extra (peft)")
    model = tiny_model(tokenizer)
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    trainer = GRPOTrainer(model, tokenizer, envs=[SayEnv], config=_config(tmp_path, lora_r=4, steps=2))
    trainer.train()
    params = dict(trainer.model.named_parameters())
    lora = [n for n in params if "lora_" in n]
    assert lora and all(params[n].requires_grad for n in lora)
    assert all(not p.requires_grad for n, p in params.items() if "lora_" not in n)
    assert any(not torch.equal(params[n].detach(), torch.zeros_like(params[n])) for n in lora if "lora_B" in n)
    unwrapped = trainer.model.get_base_model().state_dict()
    assert all(torch.equal(unwrapped[k], v) for k, v in base.items() if k in unwrapped)


def test_gradient_checkpointing_trains(tmp_path, tokenizer):
    model = tiny_model(tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    history = GRPOTrainer(
        model,
        tokenizer,
        envs=[SayEnv],
        config=_config(
            tmp_path, gradient_checkpointing=True, overlong_cache_len=4, truncation_penalty=0.2, stop=["<|im_end|>"]
        ),
    ).train()
    assert getattr(model, "is_activation_checkpointing", None) or model.is_gradient_checkpointing
    assert math.isfinite(history[-1]["loss"])
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize("step_advantage", ["gigpo", "per_turn"])
def test_infra_episodes_are_masked_out_and_never_stop_training(tmp_path, tokenizer, step_advantage):
    class Crashy(SayEnv):
        """'crash-*' fails in its tool; 'down-*' in its reset (no step at all)."""

        def default_tasks(self):
            return TaskSet(
                [Task(id=f"t{i}", prompt="x") for i in range(6)]
                + [Task(id=f"{kind}-{i}", prompt="y") for kind in ("crash", "down") for i in range(3)]
            )

        def initial_state(self, task):
            if task.id.startswith("down"):
                raise ConnectionError("the service is down")
            return super().initial_state(task)

    cfg = _config(tmp_path, steps=3, batch_size=24, step_advantage=step_advantage, seed=1)
    history = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[Crashy], config=cfg).train()
    tasks = [t for h in history for t in h["tasks"]]
    assert any(t.startswith("down") for t in tasks) and any(t.startswith("crash") for t in tasks)
    assert any(h["failure/infra"] > 0 for h in history)
    assert all(math.isfinite(h["loss"]) for h in history)


def test_dynamic_sampling_drops_groups_whose_rewards_are_all_equal(tmp_path, tokenizer):
    cfg = _config(tmp_path, steps=3, dynamic_sampling=True, max_sampling_rounds=6, batch_size=16)
    history = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg).train()
    kept = [task for h in history for task in h["tasks"]]
    assert kept and not any(t.startswith("const") for t in kept)
    plain = GRPOTrainer(
        tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=_config(tmp_path / "plain", steps=6, batch_size=16)
    ).train()
    assert any(t.startswith("const") for h in plain for t in h["tasks"])


def test_metrics_are_written_each_step(tmp_path, tokenizer, capfd):
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    cfg = _config(tmp_path, steps=2)
    GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg).train()
    out, err = capfd.readouterr()
    assert "step    2/2 | reward" in out
    assert "shards" not in out + err  # saving the final model prints no progress bar...
    assert hf_logging.is_progress_bar_enabled() == bars  # ...and leaves the setting as it was
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for key in (
        "reward/task",
        "reward/length",
        "reward/format",
        "success_rate",
        "adv/mean",
        "adv/std",
        "clipfrac",
        "approx_kl",
        "entropy",
        "zero_variance_frac",
        "gen_tokens_per_s",
        "train_tokens_per_s",
        "time/generate_s",
        "time/env_s",
        "time/train_s",
        "turn/0/step_reward",
        "gen/truncated_frac",
    ):
        assert key in rows[-1], key
    assert (tmp_path / "run" / "final" / "config.json").exists()


def test_a_model_that_never_ends_its_turn_is_cut_by_length(tmp_path, tokenizer):
    model = tiny_model(tokenizer)
    cfg = _config(tmp_path, steps=1, max_new_tokens=6)
    trainer = GRPOTrainer(model, tokenizer, envs=[SayEnv], config=cfg)
    eot = trainer.policy.delta.end_of_turn_id  # forbid it: the model can never end its turn
    model.get_output_embeddings().register_forward_hook(lambda m, i, out: out.index_fill(-1, torch.tensor([eot]), -1e9))
    history = trainer.train()
    assert history[-1]["gen/truncated_frac"] == 1.0


def test_bad_configs_fail_at_construction_with_the_fix():
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        GRPOConfig(group_size=1)
    with pytest.raises(ValueError, match="try batch_size=8"):
        GRPOConfig(group_size=4, batch_size=10)
    with pytest.raises(ValueError, match="Did you mean 'cispo'"):
        GRPOConfig(loss="cipso")
    with pytest.raises(ValueError, match=r"neither 'tiny', a known model .*, an existing path"):
        GRPOConfig(model="no-such-model")


TOML = """
model = "tiny"
envs = ["guess-number-v0"]
output_dir = "{out}"
steps = 8
group_size = 2
batch_size = 4
max_turns = 2
tool_prompt = "compact"
max_new_tokens = 12
max_seq_len = 256
save_every = 2
eval_episodes = 0
report_to = []
learning_rate = 1e-3
"""


def _train(config, *args):
    return subprocess.Popen(
        [sys.executable, "-m", "agentenv.cli", "train", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _steps(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "tasks" in r}


@pytest.mark.slow
def test_sigkill_then_resume_continues_with_the_same_data_order(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    for run in (straight, killed):
        (tmp_path / f"{run.name}.toml").write_text(TOML.format(out=run))
    assert _train(tmp_path / "straight.toml").wait(timeout=300) == 0

    proc = _train(tmp_path / "killed.toml")
    latest = killed / "checkpoints" / "latest"
    deadline = time.time() + 240
    while not (latest.exists() and latest.read_text() >= "step-000004"):
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed_at = int(latest.read_text().split("-")[1])
    assert resumed_at < 8, "the run finished before it could be killed"

    resume = _train(tmp_path / "killed.toml")
    out, _ = resume.communicate(timeout=300)
    assert resume.returncode == 0, out
    assert f"resumed from {latest.parent / latest.read_text().strip()}" in out or "resumed from" in out

    a, b = _steps(straight), _steps(killed)
    assert sorted(b) == list(range(1, 9))
    assert [a[s]["tasks"] for s in a] == [b[s]["tasks"] for s in b]
    for s in range(resumed_at + 1, 9):  # same weights, optimiser and seeds: the same episodes
        assert b[s]["reward/task"] == pytest.approx(a[s]["reward/task"])
        assert b[s]["loss"] == pytest.approx(a[s]["loss"], rel=1e-4, abs=1e-6)
    # Every step's episodes are on disk once, whole, steps redone after the kill included.
    files = sorted(p.name for p in (killed / "trajectories").iterdir())
    assert files == [f"step-{s:06d}.jsonl" for s in range(1, 9)]
    for s in range(1, 9):
        trajs = list(Trajectory.read_jsonl(killed / "trajectories" / f"step-{s:06d}.jsonl"))
        assert [t.task.id for t in trajs[::2]] == b[s]["tasks"]


def test_a_batch_without_signal_leaves_the_model_alone(tmp_path, tokenizer):
    class Flat(SayEnv):
        def default_tasks(self):
            return TaskSet([Task(id=f"const-{i}", prompt=f"Task c{i}.") for i in range(10)])

        def step_rewards(self, outcomes):
            return {}

    model = tiny_model(tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    history = GRPOTrainer(model, tokenizer, envs=[Flat], config=_config(tmp_path, steps=2)).train()
    assert [h["skipped_update"] for h in history] == [1.0, 1.0]
    assert all(torch.equal(b, p.detach()) for b, p in zip(before, model.parameters(), strict=True))


def test_the_kl_reference_is_the_policy_rl_starts_from(tmp_path, tokenizer):
    model = tiny_model(tokenizer)
    trainer = GRPOTrainer(model, tokenizer, envs=[SayEnv], config=_config(tmp_path, kl_coef=0.1, steps=1))
    trainer.train()
    first = trainer.history[-1]
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-6)  # measured before the first update


def test_with_several_ppo_epochs_the_logged_ratio_diagnostics_include_the_later_epochs(tmp_path, tokenizer):
    # At the first epoch the ratio is 1 by construction: clipping and approx-KL only
    # show from the second on, so they must not be read from the first alone.
    cfg = _config(tmp_path, ppo_epochs=3, learning_rate=3e-2)
    [step] = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg).train()
    assert step["approx_kl"] > 0 and step["ratio_mean"] != 1.0


def test_on_step_gets_each_steps_number_and_metrics_with_its_time_split(tmp_path, tokenizer):
    seen = []
    cfg = _config(tmp_path, steps=2)
    GRPOTrainer(
        tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg, on_step=lambda n, m: seen.append((n, m))
    ).train()
    assert [n for n, _ in seen] == [1, 2]
    assert all(m["time/generate_s"] > 0 and "loss" in m and "adv/token_mean" in m for _, m in seen)
    assert all(m["update_kl"] > 0 for _, m in seen)  # each update moved the policy, by this many nats a token


def test_a_finished_or_resumed_run_reports_its_whole_curve(tmp_path, tokenizer):
    cfg = _config(tmp_path, steps=2, resume=True)
    GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg).train()
    again = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg).train()  # resumes at the end
    assert [h["step"] for h in again] == [1, 2]
    longer = _config(tmp_path, steps=3, resume=True)
    resumed = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=longer).train()
    assert [h["step"] for h in resumed] == [1, 2, 3]


def _one_update(trainer: GRPOTrainer, monkeypatch) -> tuple[list[int], list[torch.Tensor]]:
    """One training step: the tokens fed to each gradient-enabled decoder pass, and the
    gradients the optimiser stepped with."""
    passes: list[int] = []
    trainer.model.get_decoder().register_forward_pre_hook(
        lambda _m, _a, kw: passes.append(kw["input_ids"].shape[1]) if torch.is_grad_enabled() else None,
        with_kwargs=True,
    )
    grads: list[torch.Tensor] = []
    step = trainer.optimizer.step

    def recorded_step() -> None:
        grads.extend(p.grad.clone() for p in trainer.model.parameters())
        step()

    monkeypatch.setattr(trainer.optimizer, "step", recorded_step)
    assert not trainer.train_step().get("skipped_update")
    return passes, grads


def test_an_optimiser_step_runs_the_shared_opening_once_with_the_same_gradients(tmp_path, tokenizer, monkeypatch):
    """Micro-batches whose prompts open with one system prompt: the update runs it once
    for all of them (`logprobs.opening_pass`), not once each, and the gradient is the
    same up to float rounding."""

    class LongSay(SayEnv):
        instructions = "Say something. " * 12

    def trainer(name: str) -> GRPOTrainer:
        return GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[LongSay], config=_config(tmp_path / name))

    once_passes, once_grads = _one_update(trainer("once"), monkeypatch)
    monkeypatch.setattr(Updater, "_opening", lambda self, batches: None)
    each_passes, each_grads = _one_update(trainer("each"), monkeypatch)
    opening = once_passes[0]
    assert opening >= 10 and once_passes.count(opening) == 1
    # 8 rows in three micro-batches of up to 3: each ran the opening's tokens, alone or in
    # a prompt; now one pass does, and the rest of what each feeds is unchanged.
    assert sum(each_passes) - sum(once_passes) == 2 * opening
    for a, b in zip(once_grads, each_grads, strict=True):
        assert same_gradient(a, b)


def test_training_steps_hold_no_more_tensors_than_the_first(tmp_path, tokenizer):
    """Memory levels off: nothing a step computes outlives it but the weights, their
    gradients and the optimiser's state. A long system prompt makes every batch share
    an opening, whose pass only fills a cache (its last layer never sees a backward)."""

    class LongSay(SayEnv):
        instructions = "Say something. " * 12

    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[LongSay], config=_config(tmp_path, steps=4))
    live = []
    for step in range(3):
        trainer.step = step
        metrics = trainer.train_step()
        assert not metrics.get("skipped_update")  # the update ran, so its graph was built
        gc.collect()
        # By type(): isinstance reads __class__, which some module objects warn on.
        live.append(sum(issubclass(type(o), torch.Tensor) for o in gc.get_objects()))
    assert live[1] == live[2], live


def _changed_share(tmp_path, tokenizer, dtype: torch.dtype) -> tuple[float, GRPOTrainer]:
    """The share of weights one step at lr 1e-6 changes, from a checkpoint saved in ``dtype``."""
    folder = tmp_path / str(dtype).removeprefix("torch.")
    tiny_model(tokenizer, hidden=64, layers=2, heads=2).to(dtype).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    trainer = GRPOTrainer(str(folder), envs=[SayEnv], config=_config(tmp_path / "run", learning_rate=1e-6))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = trainer.train_step()
    assert not metrics.get("skipped_update")
    changed = sum(int((b != p.detach()).sum()) for b, p in zip(before, trainer.model.parameters(), strict=True))
    return changed / sum(b.numel() for b in before), trainer


def test_a_bf16_checkpoint_trains_float32_master_weights_and_loses_no_small_update(tmp_path, tokenizer):
    # In bf16, an AdamW step of 1e-6 rounds away on all but the smallest weights (about 2%
    # changed); the trainer keeps float32 masters whatever the checkpoint's dtype.
    fp32, _ = _changed_share(tmp_path / "a", tokenizer, torch.float32)
    bf16, trainer = _changed_share(tmp_path / "b", tokenizer, torch.bfloat16)
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    state = [s for s in trainer.optimizer.state.values() if "exp_avg" in s]
    assert state and all(s["exp_avg"].dtype == torch.float32 for s in state)
    assert fp32 > 0.9 and bf16 >= 0.99 * fp32, (fp32, bf16)


def test_a_shuffled_reward_control_trains_on_the_same_tokens_with_the_rewards_permuted(
    tmp_path, tokenizer, monkeypatch
):
    from agentenv.trainers import updater as updater_module

    seen: dict[str, list[list[float]]] = {}
    captured: dict[str, list[Trajectory]] = {}
    shuffle = updater_module.shuffled_rewards

    def shuffled(trajs, seed, step):
        return captured.setdefault("out", shuffle(trajs, seed, step))

    monkeypatch.setattr(updater_module, "shuffled_rewards", shuffled)
    for name, flag in (("rl", False), ("control", True)):
        trainer = GRPOTrainer(
            tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=_config(tmp_path / name, shuffle_rewards=flag)
        )
        update = trainer.updater.update

        def record(groups, *args, name=name, update=update, **kwargs):
            seen[name] = [[t.task_reward for t in g] for g in groups]
            return update(groups, *args, **kwargs)

        trainer.updater.update = record  # type: ignore[method-assign]
        trainer.train_step()
    rewards = [t.task_reward for t in captured.get("out", [])]
    flat = [r for g in seen["control"] for r in g]
    assert seen["rl"] == seen["control"]  # the same episodes: the control's differ only inside the update
    assert sorted(rewards) == sorted(flat) and rewards != flat


@pytest.mark.parametrize("first", [True, False])
def test_eval_first_decides_whether_the_start_is_evaluated(tmp_path, tokenizer, first):
    config = _config(tmp_path, eval_episodes=4, eval_every=0, eval_first=first)
    history = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=config).train()
    evaluated = [h["step"] for h in history if "eval/success_rate" in h]
    assert evaluated == ([0, 1] if first else [1])
