"""Collecting a step's batch: the groups of episodes the update trains on.

Each round draws groups (a task and a seed each) from the task sampler and rolls out
``group_size`` episodes of each with the rollout policy, all the live episodes of an
env batched per turn. With ``dynamic_sampling`` a group whose rewards give no signal
(every valid episode scored alike) is dropped and more are drawn, round after round,
until the batch is full or ``max_sampling_rounds`` is spent. The sampler learns from
every group rolled out, dropped ones too. Seeds come from (seed, step, round), so a
resumed run and every rank of a data-parallel job draw the same batch; each rank plays
its share of the groups and gets them all back.

`Batches` hands the trainer each step's batch: collected when asked, or with
``async_rollouts`` gathered ahead by a rollout thread (`async_rollout.AsyncRollouts`,
which calls `Collector.collect` there).

Left out: what is done with the batch (RLPR's rewards, the update) and writing its
episodes (`run_dir.RunDir.write_episodes`).
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agentenv.core.task_sampler import Draw, TaskSampler
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.rollout import rollout
from agentenv.rollout.ray import RayExecutor
from agentenv.trainers import advantages as adv
from agentenv.trainers.async_rollout import AsyncRollouts, RolloutBatch
from agentenv.trainers.config import GRPOConfig
from agentenv.trainers.distributed import DataParallel
from agentenv.trainers.metrics import rollout_metrics
from agentenv.trainers.policy import TokenPolicy, TransformersPolicy
from agentenv.trainers.sources import labelled
from agentenv.trainers.task_sampler import EnvSource

__all__ = ["Batches", "Collector", "batch_metrics", "group_weights"]


class Collector:
    """Gathers the batch of a step from ``sources`` as ``sampler`` draws it.

    Args:
        config: The run's config (``batch_size``, ``group_size``, dynamic sampling, ``seed``).
        sources: The envs the sampler's draws point into.
        sampler: The task sampler; `collect` updates it with every group rolled out.
        dist: This rank of a data-parallel job.
        device: Where the policy's sampling generator lives.
        executor: Where the episodes run ("thread" or a Ray executor).
    """

    def __init__(
        self,
        config: GRPOConfig,
        sources: Sequence[EnvSource],
        sampler: TaskSampler,
        dist: DataParallel,
        device: torch.device,
        executor: str | RayExecutor,
    ) -> None:
        self.config = config
        self.sources = sources
        self.sampler = sampler
        self.dist = dist
        self.device = device
        self.executor = executor

    def collect(self, step: int, policy: TokenPolicy) -> RolloutBatch:
        """The groups of step ``step``, rolled out with ``policy`` (with dynamic sampling,
        round after round until the batch is full), and the sampler updated with them."""
        cfg = self.config
        n_groups = cfg.batch_size // cfg.group_size
        timer: dict[str, float] = defaultdict(float)
        gathered = _Gathered(keep_flat=not cfg.dynamic_sampling)
        for round_ in range(cfg.max_sampling_rounds if cfg.dynamic_sampling else 1):
            draws = self.sampler.sample(step, round_, n_groups - len(gathered.kept))
            # Each rank rolls out its share of the groups; every rank gets them all back.
            play = functools.partial(self.rollout_groups, timer=timer, round_=round_, step=step, policy=policy)
            with self.dist.generating():
                groups = self.dist.spread(draws, play, what="gathering the rollouts")
            for draw, group in zip(draws, groups, strict=True):
                gathered.add(draw, group)
            if len(gathered.kept) >= n_groups:
                break
        self.sampler.update(step, gathered.rolled)
        timer.setdefault("generate_s", 0.0)
        # Every group rolled out costs compute, the ones dynamic sampling dropped too.
        generated = sum(len(g.token_ids) for t in gathered.rolled for g in t.generations if g is not None)
        return RolloutBatch(
            step,
            gathered.kept,
            gathered.draws,
            gathered.groups_seen,
            gathered.zero_variance,
            dict(timer),
            self.sampler.metrics(),
            generated_tokens=generated,
        )

    def rollout_groups(
        self, draws: Sequence[Draw], timer: dict[str, float], round_: int, step: int, policy: TokenPolicy
    ) -> list[list[Trajectory]]:
        """``group_size`` episodes of each draw, played with ``policy`` (the episodes of one
        env batched together), in the order of ``draws``; adds the seconds spent generating
        and in the envs to ``timer`` (``generate_s``, ``env_s``)."""
        cfg = self.config
        timed = _TimedPolicy(policy)
        seed = int(np.random.default_rng([cfg.seed, step, round_, 7, *self.dist.seed_salt]).integers(2**62))
        policy.generator = torch.Generator(device=self.device).manual_seed(seed)
        by_source: dict[int, list[int]] = defaultdict(list)
        for i, d in enumerate(draws):
            by_source[d.source].append(i)
        groups: list[list[Trajectory]] = [[] for _ in draws]
        start = time.perf_counter()
        for src, idx in by_source.items():
            tasks = [draws[i].task for i in idx for _ in range(cfg.group_size)]
            seeds = [draws[i].seed for i in idx for _ in range(cfg.group_size)]
            resume = [draws[i].snapshot for i in idx for _ in range(cfg.group_size)]
            policy.reset()
            trajs = rollout(
                self.sources[src].factory,
                timed,
                tasks=tasks,
                seeds=seeds,
                resume_from=resume if any(r is not None for r in resume) else None,
                keep_snapshots=self.sampler.keep_snapshots,
                executor=self.executor,
            )
            policy.reset()  # every episode has ended: free the kept KV cache before the update
            trajs = labelled(trajs, self.sources[src].env_id)
            for j, i in enumerate(idx):
                groups[i] = trajs[j * cfg.group_size : (j + 1) * cfg.group_size]
        timer["generate_s"] += timed.seconds
        timer["env_s"] += time.perf_counter() - start - timed.seconds
        return groups


class Batches:
    """Each step's batch for the trainer: collected by ``collector`` with ``policy`` when
    asked, or with ``async_rollouts`` taken from the rollout thread, which the first ask
    starts (sampling from a copy of ``model``) and `close` stops (a later ask starts it
    again)."""

    def __init__(self, collector: Collector, policy: TokenPolicy, model: torch.nn.Module, config: GRPOConfig) -> None:
        self.collector = collector
        self.policy = policy
        self.model = model
        self.config = config
        self._async: AsyncRollouts | None = None

    @property
    def running(self) -> bool:
        """Whether the rollout thread of ``async_rollouts`` runs."""
        return self._async is not None

    def next(self, step: int) -> tuple[RolloutBatch, dict[str, Any]]:
        """Step ``step``'s batch, and the rollout thread's ``async/*`` metrics (none without it)."""
        cfg = self.config
        if not cfg.async_rollouts:
            return self.collector.collect(step, self.policy), {}
        if self._async is None:
            assert isinstance(self.policy, TransformersPolicy)  # the config refuses async with vLLM
            self._async = AsyncRollouts(
                self.collector.collect,
                self.policy,
                self.model,
                start=step,
                max_staleness=cfg.max_staleness,
                staleness_policy=cfg.staleness_policy,
                sampler_state=self.collector.sampler.state_dict,
            )
        return self._async.next_batch(step)

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """Hand the rollout thread, if any, ``model``'s weights after ``version`` updates."""
        if self._async is not None:
            self._async.publish(model, version)

    def sampler_state(self) -> dict[str, Any] | None:
        """What a checkpoint saves of the sampler: with the rollout thread, its state after
        the last batch handed out (the thread has updated it with later ones since)."""
        return self._async.sampler_state if self._async is not None else self.collector.sampler.state_dict()

    def close(self) -> None:
        """Stop the rollout thread, if any."""
        if self._async is not None:
            self._async.close()
            self._async = None


@dataclass
class _Gathered:
    """What the rounds of one step's collection have gathered so far."""

    keep_flat: bool
    """Keep the groups that give no signal too (no dynamic sampling)."""
    kept: list[list[Trajectory]] = field(default_factory=list)
    draws: list[Draw] = field(default_factory=list)
    """The draws of the groups kept."""
    rolled: list[Trajectory] = field(default_factory=list)
    """Every episode rolled out, dropped groups' too: the sampler learns from all of them."""
    groups_seen: int = 0
    zero_variance: int = 0

    def add(self, draw: Draw, group: list[Trajectory]) -> None:
        self.groups_seen += 1
        self.rolled += group
        rewards = [t.task_reward or 0.0 for t in group]
        valid = [t.failure is not Failure.INFRA for t in group]
        informative = any(adv.informative_mask(rewards, [0] * len(group), valid=valid))
        self.zero_variance += not informative
        if informative or self.keep_flat:
            self.kept.append(group)
            self.draws.append(draw)


class _TimedPolicy:
    """Counts the seconds spent inside the policy (generation) during a rollout."""

    def __init__(self, inner: TokenPolicy) -> None:
        self.inner = inner
        self.seconds = 0.0

    def act(self, conversations: Sequence[Any]) -> list[Any]:
        start = time.perf_counter()
        try:
            return self.inner.act(conversations)
        finally:
            self.seconds += time.perf_counter() - start


def batch_metrics(batch: RolloutBatch) -> dict[str, Any]:
    """What a step logs of its batch: the rollout figures of its groups (`rollout_metrics`),
    the share of groups rolled out that gave no signal (``zero_variance_frac``), the
    groups and tasks trained on, and the sampler's own figures."""
    metrics = rollout_metrics([t for g in batch.groups for t in g])
    metrics["zero_variance_frac"] = batch.zero_variance / max(batch.groups_seen, 1)
    metrics["groups"] = len(batch.groups)
    metrics["tasks"] = [d.task.id for d in batch.draws]
    metrics.update(batch.sampler_metrics)
    return metrics


def group_weights(draws: Sequence[Draw]) -> list[float] | None:
    """The sampler's importance weight of each drawn group, normalised to mean 1 (None
    for no draws)."""
    if not draws:
        return None
    w = np.array([d.weight for d in draws], dtype=float)
    return (w / w.mean()).tolist()
