"""The sampler contract (`agentenv.core.task_sampler`): what a sampler must write, what it may
leave to the defaults, and that the trainer asks only that of it."""

from __future__ import annotations

from typing import Any

import pytest

from agentenv import Task, TaskSet
from agentenv.core.task_sampler import Draw, TaskSampler
from agentenv.miner import MinerSampler
from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trainers.task_sampler import EnvSource, UniformSampler
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer

TASKS = TaskSet([Task(id=f"t{i}", prompt=f"Task {i}.") for i in range(5)])


def _source(name: str = "say", weight: float = 1.0) -> EnvSource:
    return EnvSource(name, SayEnv, weight, TASKS, TaskSet(), {})


def test_a_sampler_must_write_sample_and_its_state_and_may_leave_the_rest() -> None:
    class OnlySample(TaskSampler):
        def sample(self, step: int, round_: int, n_groups: int) -> list[Draw]:
            return []

    with pytest.raises(TypeError, match="state_dict"):
        OnlySample()  # type: ignore[abstract]

    class Minimal(OnlySample):
        def state_dict(self) -> dict[str, Any]:
            return {}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            pass

    sampler = Minimal()
    sampler.update(0, [])
    assert sampler.metrics() == {} and sampler.keep_snapshots is False


def test_the_shipped_samplers_follow_the_contract() -> None:
    assert isinstance(UniformSampler([_source()], seed=0), TaskSampler)
    miner = MinerSampler([_source()], seed=0)
    assert isinstance(miner, TaskSampler) and miner.keep_snapshots is True


def test_uniform_draws_are_a_function_of_seed_step_and_round() -> None:
    sources = [_source("a", 3.0), _source("b", 1.0)]
    a, b = UniformSampler(sources, seed=1), UniformSampler(sources, seed=1)
    assert a.sample(4, 1, 8) == b.sample(4, 1, 8)
    assert a.sample(4, 0, 8) != a.sample(4, 1, 8)
    assert {d.source for d in a.sample(0, 0, 64)} == {0, 1}


def test_the_trainer_asks_its_sampler_for_draws_metrics_and_snapshots(tmp_path) -> None:
    class Fixed(TaskSampler):
        """Always the first task, seed 7; counts its updates."""

        def __init__(self) -> None:
            self.updates = 0

        def sample(self, step: int, round_: int, n_groups: int) -> list[Draw]:
            return [Draw(0, TASKS[0], 7)] * n_groups

        def update(self, step: int, trajectories) -> None:
            self.updates += 1

        def metrics(self) -> dict[str, Any]:
            return {"fixed/updates": self.updates}

        def state_dict(self) -> dict[str, Any]:
            return {"updates": self.updates}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.updates = state.get("updates", 0)

    tokenizer = tiny_tokenizer()
    config = GRPOConfig(
        output_dir=str(tmp_path),
        steps=2,
        group_size=2,
        batch_size=4,
        max_new_tokens=6,
        max_seq_len=128,
        eval_episodes=0,
        report_to=[],
        resume=False,
    )
    sampler = Fixed()
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=config, sampler=sampler)
    history = trainer.train()
    assert [h["fixed/updates"] for h in history] == [1, 2]
    assert all(h["tasks"] == ["t0", "t0"] for h in history)


def test_weights_that_sum_to_infinity_still_give_probabilities() -> None:
    sampler = UniformSampler([_source("a", 1e308), _source("b", 1e308)], seed=0)
    assert list(sampler.p) == [0.5, 0.5]
    assert len(sampler.sample(0, 0, 4)) == 4
