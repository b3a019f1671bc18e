"""Held-out evaluation: which tasks of each env are held out of training, and how the
policy does on them.

`HeldOutSplit` splits each env's tasks by content (``split_by``), so no held-out task
has a twin in training, and says so in one printed line per env; an env of too few
distinct contents for both sides is split by id, and the line (and the metric
``eval/content_twins``) counts the held-out tasks that then share content with
training. `Evaluator` plays the held-out tasks with the held-out policy, the same
tasks and seeds at every evaluation, and turns the episodes into the ``eval/*``
metrics; `success_rate` is the figure `GRPOTrainer.evaluate` returns.

Left out: writing the episodes (the run directory, `run_dir.RunDir.write_episodes`),
starting a stopped rollout engine first (the trainer), and evaluations with other
settings or on other tasks (`agentenv.eval`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agentenv.core.task import Task, TaskSet
from agentenv.core.trajectory import Trajectory
from agentenv.eval.evaluation import outcomes, success_interval
from agentenv.rollout import rollout
from agentenv.rollout.ray import RayExecutor
from agentenv.trainers.config import GRPOConfig
from agentenv.trainers.distributed import DataParallel
from agentenv.trainers.policy import TokenPolicy
from agentenv.trainers.progress import Phase, ProgressBoard
from agentenv.trainers.sources import labelled
from agentenv.trainers.task_sampler import EnvSource

__all__ = ["Evaluator", "HeldOutSplit", "success_rate"]


class HeldOutSplit:
    """Splits each env's tasks into (train, held-out) as ``config`` says, printing one line
    per env (when ``announce``: rank 0 of a data-parallel job) and keeping, per env, the
    count of held-out tasks that share content with training (``twins``)."""

    def __init__(self, config: GRPOConfig, *, announce: bool = True) -> None:
        self.config = config
        self.announce = announce
        self.twins: dict[str, int] = {}

    def __call__(self, name: str, tasks: TaskSet) -> tuple[TaskSet, TaskSet]:
        cfg = self.config
        if cfg.eval_episodes == 0:  # nothing is evaluated: nothing held out
            return tasks, tasks.filter(lambda _task: False)
        seed = cfg.seed if cfg.split_seed is None else cfg.split_seed
        train, test = tasks.split(cfg.test_fraction, seed=seed, by=cfg.split_by)
        how = f"by {cfg.split_by}"
        if cfg.split_by == "content" and (not train or not test):
            train, test = tasks.split(cfg.test_fraction, seed=seed, by="id")
            how = f"by id (its {tasks.contents()} distinct contents cannot fill both sides)"
        twins = test.shared_content(train)
        if self.announce:
            print(
                f"{name}: {len(test)} of {len(tasks)} tasks held out, split {how}: "
                f"{test.contents()} held-out contents, {twins} held-out tasks share content with training",
                flush=True,
            )
        self.twins[name] = twins
        return train, test


class Evaluator:
    """Plays the held-out tasks of ``sources`` with ``policy`` and measures them.

    Args:
        config: The run's config (``eval_episodes``, ``seed``).
        sources: The envs, each with its held-out tasks (``test``).
        policy: The held-out policy; its generator, if any, is seeded alike at every
            evaluation, so the same weights give the same episodes.
        dist: This rank of a data-parallel job: each rank plays its share of the episodes.
        executor: Where the episodes run ("thread" or a Ray executor).
        twins: Per env, the held-out tasks that share content with training (`HeldOutSplit`).
        progress: Where each evaluation shows its episodes done (this rank's share) out of
            all (`progress.ProgressBoard`; None: nowhere).
    """

    def __init__(
        self,
        config: GRPOConfig,
        sources: Sequence[EnvSource],
        policy: TokenPolicy,
        dist: DataParallel,
        executor: str | RayExecutor,
        twins: Mapping[str, int],
        progress: ProgressBoard | None = None,
    ) -> None:
        self.config = config
        self.sources = sources
        self.policy = policy
        self.dist = dist
        self.executor = executor
        self.twins = twins
        self.progress = progress or ProgressBoard(enabled=False)

    def episodes(self, episodes: int | None = None) -> list[Trajectory]:
        """The held-out episodes: each env's test tasks in turn, seeds 0, 1, ..., its share
        of ``episodes`` (default ``eval_episodes``) by weight."""
        episodes = episodes or self.config.eval_episodes
        total = sum(s.weight for s in self.sources)
        plan: list[tuple[EnvSource, list[Task]]] = []
        for source in self.sources:
            n = max(1, round(episodes * source.weight / total))
            tasks = [source.test[i % len(source.test)] for i in range(n)] if source.test else []
            if tasks:
                plan.append((source, tasks))
        mine = sum(len(self.dist.mine(len(tasks))) if self.dist.active else len(tasks) for _, tasks in plan)
        trajs: list[Trajectory] = []
        with self.progress.phase("held-out eval", mine, unit="episode") as bar:
            for source, tasks in plan:
                with self.dist.generating():
                    done = self.dist.spread(  # each rank plays its share of the episodes
                        list(zip(tasks, range(len(tasks)), strict=True)),
                        functools.partial(self._play, source, bar),
                        what="gathering the held-out episodes",
                    )
                trajs += labelled(done, source.env_id)
        return trajs

    def _play(self, source: EnvSource, bar: Phase, episodes: list[tuple[Task, int]]) -> list[Trajectory]:
        if not episodes:
            return []
        self.policy.reset()
        if self.policy.generator is not None:
            # The same samples for the same weights (and, on several ranks, a stream per rank).
            seed = self.config.seed
            if self.dist.active:
                seed = int(np.random.default_rng([seed, *self.dist.seed_salt]).integers(2**62))
            self.policy.generator.manual_seed(seed)
        tasks, seeds = [t for t, _ in episodes], [s for _, s in episodes]
        return rollout(
            source.factory,
            self.policy,
            tasks=tasks,
            seeds=seeds,
            executor=self.executor,
            on_episode=lambda _episode: bar.advance(),
        )

    def metrics(self, trajs: Sequence[Trajectory]) -> dict[str, Any]:
        """``eval/success_rate`` with its 95% bootstrap interval over the held-out tasks
        (``eval/success_low``, ``eval/success_high``), ``eval/episodes`` (the valid ones the
        rate counts), ``eval/infra`` (those the env's infra failed, left out) and
        ``eval/content_twins`` (held-out tasks sharing content with training: 0 but for an
        env split by id, `HeldOutSplit`)."""
        rate = success_interval(trajs, seed=self.config.seed)
        valid = sum(t.n for t in outcomes(trajs))
        return {
            "eval/success_rate": float("nan") if rate.value is None else rate.value,
            "eval/success_low": rate.low,
            "eval/success_high": rate.high,
            "eval/episodes": valid,
            "eval/infra": len(trajs) - valid,
            "eval/content_twins": sum(self.twins.values()),
        }


def success_rate(trajs: Sequence[Trajectory]) -> float:
    """The share of ``trajs`` solved, counted as `Evaluator.metrics` counts it: the env's
    infra failures left out, an episode the policy failed to answer a failed one
    (`agentenv.eval.evaluation`); NaN when none is valid."""
    tasks = outcomes(trajs)
    valid = sum(t.n for t in tasks)
    return sum(t.successes for t in tasks) / valid if valid else float("nan")
