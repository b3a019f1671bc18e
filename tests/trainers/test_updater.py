"""The update on its own (`agentenv.trainers.updater`): the learning-rate schedule, the
control arm's shuffled rewards, and one optimiser step of a tiny model on groups of
episodes it played, with no trainer around it."""

from __future__ import annotations

import pytest
import torch

import agentenv
from agentenv import Task, Trajectory
from agentenv.core.types import Failure
from agentenv.trainers import GRPOConfig
from agentenv.trainers.distributed import DataParallel
from agentenv.trainers.policy import TransformersPolicy
from agentenv.trainers.updater import (
    Updater,
    check_served_groups,
    generation_budget,
    learning_rate,
    shuffled_rewards,
)
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer


def test_learning_rate_warms_up_then_decays_linearly():
    cfg = GRPOConfig(steps=12, warmup_steps=2, lr_decay="linear", learning_rate=1.0)
    rates = [learning_rate(cfg, step) for step in range(12)]
    assert rates[:3] == pytest.approx([0.5, 1.0, 1.0])
    assert rates[-1] == pytest.approx(1.0 - 0.9 * 9 / 10) and rates == sorted(rates[:2]) + sorted(
        rates[2:], reverse=True
    )
    assert learning_rate(GRPOConfig(learning_rate=0.5, warmup_steps=0), 7) == 0.5  # constant by default
    with pytest.raises(ValueError, match="lr_decay"):
        GRPOConfig(lr_decay="cosine")


def test_the_generation_budget_is_the_longest_episodes_tokens_within_the_sequence():
    assert generation_budget(GRPOConfig(max_new_tokens=12, max_seq_len=256), max_turns=3) == 36
    assert generation_budget(GRPOConfig(max_new_tokens=12, max_seq_len=256, max_turns=2), max_turns=3) == 24
    assert generation_budget(GRPOConfig(max_new_tokens=12, max_seq_len=256), max_turns=100) == 256


def _episode(i: int, reward: float | None, failure: Failure = Failure.NONE) -> Trajectory:
    task = Task(id=f"t{i}", prompt="p")
    return Trajectory(task=task, seed=i, messages=[], transitions=[], failure=failure, task_reward=reward)


def test_the_control_arm_permutes_the_rewards_of_the_valid_episodes_only():
    trajs = [_episode(i, float(i)) for i in range(6)] + [_episode(6, None, Failure.INFRA)]
    shuffled = shuffled_rewards(trajs, seed=0, step=3)
    assert [t.task.id for t in shuffled] == [t.task.id for t in trajs]  # the same episodes, in order
    rewards = [t.task_reward for t in shuffled]
    assert sorted(rewards[:6]) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and rewards[:6] != [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert rewards[6] is None  # the infra episode keeps no reward
    assert [t.task_reward for t in trajs] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, None]  # the batch itself is untouched
    assert [t.task_reward for t in shuffled_rewards(trajs, seed=0, step=3)] == rewards  # seed and step decide
    assert [t.task_reward for t in shuffled_rewards(trajs, seed=0, step=4)] != rewards


def test_groups_from_elsewhere_that_cannot_be_trained_on_are_refused():
    with pytest.raises(ValueError, match="group 0 holds 1 episode"):
        check_served_groups([[_episode(0, 1.0)]])
    with pytest.raises(ValueError, match="episode 0 of group 0 has no generated token ids"):
        check_served_groups([[_episode(0, 1.0), _episode(1, 0.0)]])


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _updater(tokenizer, **kw) -> Updater:
    cfg = GRPOConfig(max_new_tokens=8, max_seq_len=128, micro_batch_size=2, learning_rate=1e-2, **kw)
    model = tiny_model(tokenizer)
    policy = TransformersPolicy(model, tokenizer, max_new_tokens=8, max_context_tokens=128, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate)
    return Updater(model, optimizer, policy, cfg, DataParallel(), torch.device("cpu"), bf16=False, budget=16)


def _groups(updater: Updater, task_ids: list[str]) -> list[list[Trajectory]]:
    tasks = {t.id: t for t in SayEnv().tasks}
    return [
        agentenv.rollout(SayEnv, updater.policy, tasks=[tasks[i]] * 4, seeds=[0] * 4, concurrency=1) for i in task_ids
    ]


def _weights(updater: Updater) -> list[torch.Tensor]:
    return [p.detach().clone() for p in updater.model.parameters()]


def test_an_update_on_rewards_that_differ_moves_every_weight(tokenizer):
    updater = _updater(tokenizer, warmup_steps=4)
    groups = _groups(updater, ["t0", "t1"])
    before = _weights(updater)
    metrics = updater.update(groups, [{}, {}], step=1)
    assert not metrics.get("skipped_update") and metrics["_train_tokens"] > 0
    assert metrics["lr"] == pytest.approx(learning_rate(updater.config, 1)) == 5e-3
    assert all(not torch.equal(b, p) for b, p in zip(before, updater.model.parameters(), strict=True))
    assert not any(k.startswith("sampler/") for k in metrics)  # the trainer's own sampler: nothing to correct


def test_an_update_with_no_signal_makes_no_optimiser_step(tokenizer):
    updater = _updater(tokenizer, step_advantage="none")
    groups = _groups(updater, ["const-0", "const-1"])  # every episode scores 0.5
    before = _weights(updater)
    metrics = updater.update(groups, [{}, {}], step=0)
    assert metrics["skipped_update"] == 1.0 and metrics["loss"] == 0.0
    assert all(torch.equal(b, p) for b, p in zip(before, updater.model.parameters(), strict=True))
    assert not updater.optimizer.state  # Adam's momentum never started


def test_tokens_sampled_elsewhere_are_corrected_and_group_weights_reported(tokenizer):
    updater = _updater(tokenizer)
    metrics = updater.update(_groups(updater, ["t0", "t1"]), [{}, {}], [0.5, 1.5], step=0, foreign=True)
    assert metrics["importance_weight/max"] == 1.5
    assert any(k.startswith("sampler/") for k in metrics)
