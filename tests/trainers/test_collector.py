"""Collecting a step's batch on its own (`agentenv.trainers.collector`): groups of a
task and a seed, dynamic sampling's rounds, what the sampler learns from, and the
figures of a batch; a tiny model plays, nothing trains."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch

from agentenv.core.task_sampler import Draw, TaskSampler
from agentenv.core.trajectory import Trajectory
from agentenv.trainers import GRPOConfig
from agentenv.trainers.collector import Batches, Collector, batch_metrics, group_weights
from agentenv.trainers.distributed import DataParallel
from agentenv.trainers.policy import TransformersPolicy
from agentenv.trainers.task_sampler import EnvSource
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer


class SayLength(SayEnv):
    """Rewards the length of what was said: a random model's episodes differ ('const-*'
    tasks still score 0.5 each)."""

    def verify(self, task):
        return 0.5 if task.id.startswith("const") else len("".join(self.state.said)) / 100


class Scripted(TaskSampler):
    """Round 0 draws the 'const-*' tasks (every episode scores 0.5: no signal) and 't0';
    later rounds draw 't1', 't2', ...; remembers what it was updated with."""

    def __init__(self, source: EnvSource) -> None:
        self.tasks = {t.id: t for t in source.train}
        self.updates: list[list[str]] = []

    def sample(self, step: int, round_: int, n_groups: int) -> list[Draw]:
        ids = ["const-0", "const-1", "t0"] if round_ == 0 else [f"t{round_ + i}" for i in range(n_groups)]
        return [Draw(0, self.tasks[i], seed=100 * step + k) for k, i in enumerate(ids[:n_groups])]

    def update(self, step: int, trajectories: Sequence[Trajectory]) -> None:
        self.updates.append([t.task.id for t in trajectories])

    def metrics(self) -> dict[str, Any]:
        return {"scripted/updates": len(self.updates)}

    def state_dict(self) -> dict[str, Any]:
        return {"updates": len(self.updates)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _collector(tokenizer, **kw) -> tuple[Collector, TransformersPolicy]:
    cfg = GRPOConfig(group_size=4, batch_size=12, max_new_tokens=6, max_seq_len=128, seed=5, **kw)
    tasks = SayLength().tasks
    source = EnvSource("say", SayLength, 1.0, tasks, tasks.filter(lambda _t: False), {})
    collector = Collector(cfg, [source], Scripted(source), DataParallel(), torch.device("cpu"), "thread")
    policy = TransformersPolicy(tiny_model(tokenizer), tokenizer, max_new_tokens=6, max_context_tokens=128)
    return collector, policy


def test_each_group_is_group_size_episodes_of_its_draws_task_and_seed(tokenizer):
    collector, policy = _collector(tokenizer)
    batch = collector.collect(2, policy)
    assert len(batch.groups) == len(batch.draws) == 3 == batch.groups_seen
    for draw, group in zip(batch.draws, batch.groups, strict=True):
        assert [(t.task.id, t.seed) for t in group] == [(draw.task.id, draw.seed)] * 4
    assert batch.zero_variance == 2  # the const tasks: every episode scored alike
    assert batch.generated_tokens == sum(len(g.token_ids) for g_ in batch.groups for t in g_ for g in t.generations)
    assert batch.timer["generate_s"] > 0 and "env_s" in batch.timer


def test_dynamic_sampling_drops_groups_without_signal_and_the_sampler_sees_them_all(tokenizer):
    collector, policy = _collector(tokenizer, dynamic_sampling=True, max_sampling_rounds=3)
    batch = collector.collect(0, policy)
    kept = [d.task.id for d in batch.draws]
    assert kept[0] == "t0" and not any(i.startswith("const") for i in kept) and len(kept) == 3
    assert batch.groups_seen == 5 and batch.zero_variance == 2  # 3 in round 0, 2 in round 1
    assert isinstance(collector.sampler, Scripted)
    [seen] = collector.sampler.updates
    assert seen.count("const-0") == 4 and len(seen) == 5 * 4  # dropped groups' episodes too
    assert batch.sampler_metrics == {"scripted/updates": 1}


def test_a_step_collected_again_draws_the_same_tokens(tokenizer):
    collector, policy = _collector(tokenizer)

    def tokens(batch):
        return [g.token_ids for group in batch.groups for t in group for g in t.generations if g is not None]

    assert tokens(collector.collect(1, policy)) == tokens(collector.collect(1, policy))
    assert tokens(collector.collect(1, policy)) != tokens(collector.collect(2, policy))


def test_the_batch_figures_and_the_group_weights(tokenizer):
    collector, policy = _collector(tokenizer)
    batch = collector.collect(0, policy)
    metrics = batch_metrics(batch)
    assert metrics["groups"] == 3 and metrics["tasks"] == ["const-0", "const-1", "t0"]
    assert metrics["zero_variance_frac"] == pytest.approx(2 / 3) and metrics["episodes"] == 12
    assert metrics["scripted/updates"] == 1
    draws = [Draw(0, batch.draws[0].task, 0, weight=w) for w in (1.0, 3.0)]
    assert group_weights(draws) == [0.5, 1.5] and group_weights([]) is None


def test_without_async_rollouts_a_batch_is_collected_when_asked(tokenizer):
    collector, policy = _collector(tokenizer)
    batches = Batches(collector, policy, policy.model, collector.config)
    batch, extra = batches.next(4)
    assert extra == {} and batch.index == 4 and not batches.running
    assert batches.sampler_state() == {"updates": 1}
