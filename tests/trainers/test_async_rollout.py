"""Asynchronous rollouts: the producer thread, policy versions, the staleness bound,
and the trainer with them (`agentenv.trainers.async_rollout`)."""

from __future__ import annotations

import copy
import json
import math
import threading

import pytest
import torch

from agentenv import Failure, Generation, Task, Trajectory
from agentenv.core.task_sampler import Draw
from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trainers.async_rollout import AsyncRollouts, PublishedWeights, RolloutBatch, VersionedPolicy
from agentenv.trainers.batch import build_examples, collate
from agentenv.trainers.policy import TransformersPolicy
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _config(tmp_path, name, **kw):
    base = dict(
        output_dir=str(tmp_path / name),
        steps=3,
        group_size=4,
        batch_size=8,
        max_new_tokens=8,
        max_seq_len=256,
        eval_episodes=0,
        save_every=100,
        report_to=[],
        micro_batch_size=4,
        learning_rate=1e-2,
        resume=False,
    )
    return GRPOConfig(**{**base, **kw})


def _train(tmp_path, tokenizer, name, **kw):
    model = tiny_model(tokenizer)
    history = GRPOTrainer(model, tokenizer, envs=[SayEnv], config=_config(tmp_path, name, **kw)).train()
    return model, history


def _trained_on(tmp_path, name, steps):
    """Per step (0-based), the trajectories it trained on, as written to trajectories/."""
    folder = tmp_path / name / "trajectories"
    return [list(Trajectory.read_jsonl(folder / f"step-{s + 1:06d}.jsonl")) for s in range(steps)]


# --- the trainer --------------------------------------------------------------------


def test_staleness_zero_equals_the_synchronous_trainer(tmp_path, tokenizer):
    sync, _ = _train(tmp_path, tokenizer, "sync")
    asynchronous, history = _train(tmp_path, tokenizer, "async", async_rollouts=True, max_staleness=0)
    for (name, a), b in zip(sync.named_parameters(), asynchronous.parameters(), strict=True):
        assert torch.equal(a, b), name  # bit for bit: the same batches from the same weights
    assert all(h["async/lag_max"] == 0 and h["off_policy/weight_mean"] == 1.0 for h in history)
    same = zip(_trained_on(tmp_path, "sync", 3), _trained_on(tmp_path, "async", 3), strict=True)
    for sync_step, async_step in same:
        assert [g.token_ids for t in sync_step for g in t.generations] == [
            g.token_ids for t in async_step for g in t.generations
        ]


@pytest.mark.parametrize(("policy", "k"), [("wait", 1), ("wait", 2), ("drop", 1)])
def test_no_token_older_than_max_staleness_is_trained_on(tmp_path, tokenizer, policy, k):
    steps = 4
    _, history = _train(
        tmp_path, tokenizer, "run", steps=steps, async_rollouts=True, max_staleness=k, staleness_policy=policy
    )
    for step, trajs in enumerate(_trained_on(tmp_path, "run", steps)):
        versions = [g.policy_version for t in trajs for g in t.generations if g is not None]
        assert versions and all(v is not None and step - k <= v <= step for v in versions), (step, versions)
    assert all(h["async/lag_max"] <= k for h in history)
    if policy == "wait":
        assert all(h["async/dropped_groups"] == 0 for h in history)


@pytest.mark.parametrize("loss", ["grpo", "gspo", "cispo"])
def test_every_loss_trains_on_stale_tokens_with_finite_weights(tmp_path, tokenizer, loss):
    model, history = _train(
        tmp_path, tokenizer, "run", loss=loss, ppo_epochs=2, async_rollouts=True, max_staleness=1, importance_cap=1.5
    )
    for h in history:
        assert math.isfinite(h["loss"]) and h["async/lag_max"] <= 1
        assert 0 < h["off_policy/weight_mean"] <= 1.5 and math.isfinite(h["off_policy/log_ratio_abs"])
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_an_async_run_checkpoints_the_sampler_as_of_its_last_step_and_resumes(tmp_path, tokenizer):
    # The producer has updated the failure miner with batches beyond the last trained
    # one; the checkpoint keeps its state after the last trained batch.
    kw = dict(async_rollouts=True, max_staleness=2, save_every=1, miner={})
    states = []

    def on_step(step, metrics):
        states.append(copy.deepcopy(trainer.batches.sampler_state()))

    config = _config(tmp_path, "run", steps=2, **kw)
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=config, on_step=on_step)
    trainer.train()
    saved = json.loads((tmp_path / "run" / "checkpoints" / "step-000002" / "trainer_state.json").read_text())
    assert saved["sampler"] == states[-1] and states[0] != states[-1]
    config = _config(tmp_path, "run", steps=3, resume=True, **kw)
    resumed = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=config)
    history = resumed.train()
    assert resumed.step == 3 and history[-1]["step"] == 3 and history[-1]["async/lag_max"] <= 2


def test_a_failure_in_the_producer_stops_training_with_its_error_and_the_thread(tmp_path, tokenizer):
    trainer = GRPOTrainer(
        tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=_config(tmp_path, "run", async_rollouts=True)
    )

    def sample(step, round_, n_groups):
        raise ValueError("no tasks today")

    trainer.sampler.sample = sample  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="no tasks today"):
        trainer.train()
    assert not trainer.batches.running
    assert not any(t.name == "agentenv-rollouts" for t in threading.enumerate())


# --- the producer on its own ----------------------------------------------------------------


def _traj(version: int) -> Trajectory:
    gen = Generation(action="x", token_ids=[1], logprobs=[-1.0], policy_version=version)
    return Trajectory(
        task=Task(id="t", prompt="p"), messages=[], transitions=[], generations=[gen], failure=Failure.POLICY
    )


def _rollouts(tokenizer, collect, *, k=1, policy="drop"):
    model = tiny_model(tokenizer)
    return AsyncRollouts(
        collect,
        TransformersPolicy(model, tokenizer),
        model,
        start=0,
        max_staleness=k,
        staleness_policy=policy,
        sampler_state=dict,
    )


def test_groups_older_than_max_staleness_are_dropped_and_the_next_batch_taken(tokenizer):
    # Batch 0 holds one group sampled 3 versions before the learner's 3 and one 1 before;
    # batch 1 only groups 2 behind: with k=1 the step trains on the fresh group alone.
    versions = {0: [0, 2], 1: [1, 1], 2: [3, 3]}

    def collect(index, policy):
        groups = [[_traj(v), _traj(v)] for v in versions.get(index, [index])]
        draws = [Draw(0, Task(id=f"b{index}g{i}", prompt="p"), 0) for i in range(len(groups))]
        return RolloutBatch(index, groups, draws, len(groups), 0, {"generate_s": 0.5}, generated_tokens=4)

    rollouts = _rollouts(tokenizer, collect)
    try:
        batch, metrics = rollouts.next_batch(version=3)
        assert [d.task.id for d in batch.draws] == ["b0g1"]
        assert metrics["async/dropped_groups"] == 1 and metrics["async/lag_max"] == 1
        assert (batch.groups_seen, batch.generated_tokens) == (2, 4)  # a group dropped in part still cost
        batch, metrics = rollouts.next_batch(version=4)  # batch 1 is all too old: batch 2 instead
        assert batch.index == 2 and metrics["async/dropped_groups"] == 2 and metrics["async/lag_max"] == 1
        # What batch 1 cost counts too: compute/tokens is every group rolled out.
        assert (batch.groups_seen, batch.generated_tokens, batch.timer["generate_s"]) == (4, 8, 1.0)
    finally:
        rollouts.close()


def test_wait_holds_the_producer_until_the_learner_is_within_max_staleness(tokenizer):
    started = []

    def collect(index, policy):
        started.append(index)
        return RolloutBatch(index, [], [], 0, 0, {"generate_s": 0.0})

    rollouts = _rollouts(tokenizer, collect, k=1, policy="wait")
    try:
        rollouts.next_batch(0)
        rollouts.next_batch(0)  # batch 1 needs version 0: there
        got = []
        waiter = threading.Thread(target=lambda: got.append(rollouts.next_batch(1)[0].index))
        waiter.start()
        waiter.join(0.5)
        assert started == [0, 1] and not got  # batch 2 needs version 1, not published yet
        rollouts.publish(tiny_model(tokenizer), 1)
        waiter.join(10)
        assert got == [2]
    finally:
        rollouts.close()


def test_an_error_in_the_producer_is_raised_to_the_learner(tokenizer):
    def collect(index, policy):
        raise KeyError("broken sampler")

    rollouts = _rollouts(tokenizer, collect)
    with pytest.raises(KeyError, match="broken sampler"):
        rollouts.next_batch(0)
    rollouts.close()


def test_the_generator_loads_published_weights_between_turns_and_stamps_their_version(tokenizer):
    learner = tiny_model(tokenizer)
    weights = PublishedWeights(learner, version=0)
    generator = tiny_model(tokenizer, seed=1)
    policy = VersionedPolicy(generator, tokenizer, weights, threading.Event(), max_new_tokens=3)
    assert policy.version == 0 and all(
        torch.equal(a, b) for a, b in zip(learner.parameters(), generator.parameters(), strict=True)
    )
    from agentenv.policies import Conversation

    conv = Conversation(0, [{"role": "user", "content": "Say something."}], [], None)
    assert policy.act([conv])[0].policy_version == 0
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(0.5)
    assert policy.act([conv])[0].policy_version == 0  # nothing published yet
    weights.publish(learner, version=1)
    [out] = policy.act([conv])
    assert out.policy_version == 1
    assert all(torch.equal(a, b) for a, b in zip(learner.parameters(), generator.parameters(), strict=True))


# --- lags in the training batch ---------------------------------------------------------------


def test_each_token_carries_its_turns_lag_behind_the_learner():
    gens = [
        Generation(action="a", prompt_ids=[5, 6], token_ids=[7, 8], logprobs=[-1.0, -1.0], policy_version=3),
        Generation(action="b", prompt_ids=[9], token_ids=[10], logprobs=[-1.0], policy_version=5),
    ]
    traj = Trajectory(
        task=Task(id="t", prompt="p"), messages=[], transitions=[], generations=gens, failure=Failure.POLICY
    )
    [e] = build_examples([traj], [[1.0, 1.0]], max_seq_len=100, version=5)
    assert e.lags == [0, 0, 2, 2, 0, 0]
    batch = collate([e], pad_id=0)
    assert batch.lag.tolist() == [[0, 2, 2, 0, 0, 0]]  # aligned with the targets
    [unversioned] = build_examples([traj], [[1.0, 1.0]], max_seq_len=100)
    assert unversioned.lags == [0] * 6
    with pytest.raises(ValueError, match="newer than the learner"):
        build_examples([traj], [[1.0, 1.0]], max_seq_len=100, version=4)


# --- config -------------------------------------------------------------------------------


def test_async_settings_are_checked():
    with pytest.raises(ValueError, match="max_staleness=0 would drop every batch"):
        GRPOConfig(async_rollouts=True, max_staleness=0, staleness_policy="drop")
    with pytest.raises(ValueError, match="max_staleness=3 only apply with async_rollouts=true"):
        GRPOConfig(max_staleness=3)
    with pytest.raises(ValueError, match="importance_cap must be >= 1"):
        GRPOConfig(async_rollouts=True, importance_cap=0.5)
    config = GRPOConfig(async_rollouts=True, max_staleness=4, staleness_policy="drop")
    assert GRPOConfig.from_dict(config.to_dict()) == config
    assert GRPOConfig.from_dict(GRPOConfig().to_dict()) == GRPOConfig()
