"""The envs a run trains on, as the task sampler's sources: each registered id or env
factory with its weight, its train and held-out tasks and its reward weights.

Left out: how the tasks are split (`evaluator.HeldOutSplit`, passed in), how they are
drawn (`task_sampler`, the failure miner) and how episodes are played.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence

import agentenv
from agentenv.core.env import Env
from agentenv.core.task import TaskSet
from agentenv.core.trajectory import Trajectory
from agentenv.trainers.config import GRPOConfig
from agentenv.trainers.task_sampler import EnvSource

__all__ = ["EnvLike", "Envs", "Split", "build_source", "env_weights", "labelled"]

EnvLike = str | Callable[[], Env]
Envs = Sequence[EnvLike] | Mapping[str, float] | Mapping[EnvLike, float]
"""What `GRPOTrainer` takes as ``envs``: ids or factories, as a list or a mapping to weights."""
Split = Callable[[str, TaskSet], tuple[TaskSet, TaskSet]]
"""An env's name and tasks to its (train, held-out) tasks."""


def env_weights(envs: Envs | EnvLike) -> dict[EnvLike, float]:
    """Each env with its sampling weight (1 each for a list); refuses an empty list and a
    weight that is not a positive finite number."""
    if isinstance(envs, str) or callable(envs):
        envs = [envs]
    weights: dict[EnvLike, float] = (
        {env: w for env, w in envs.items()} if isinstance(envs, Mapping) else dict.fromkeys(envs, 1.0)
    )
    if not weights:
        raise ValueError("give at least one env (a registered id or a factory)")
    for env, w in weights.items():
        if not (isinstance(w, (int, float)) and w > 0 and math.isfinite(w)):
            raise ValueError(f"weight of env {env!r} must be a positive number, got {w!r}")
    return weights


def build_source(env: EnvLike, weight: float, config: GRPOConfig, split: Split) -> tuple[EnvSource, int]:
    """The source of ``env`` (its tasks split by ``split``) and its episodes' most turns,
    read from one instance made and closed here. An unknown id fails with a did-you-mean."""
    base: Callable[[], Env]
    if isinstance(env, str):
        agentenv.spec(env)  # unknown ids fail here, with a did-you-mean
        kwargs = {"tool_prompt": config.tool_prompt} if config.tool_prompt != "json" else {}
        kwargs.update(config.env_kwargs.get(env, {}))
        name, base = env, functools.partial(agentenv.make, env, **kwargs)
    else:
        name, base = getattr(env, "__name__", type(env).__name__), env

    def factory() -> Env:
        made = base()
        if config.max_turns is not None:
            made.max_turns = config.max_turns
        return made

    probe = factory()
    try:
        train, test = split(name, probe.tasks)
        if not train:
            raise ValueError(f"env {name!r} has no training tasks after the split; give it more tasks")
        source = EnvSource(
            name,
            factory,
            weight,
            train,
            test,
            dict(probe.reward_weights),
            env_id=env if isinstance(env, str) else None,
        )
        return source, probe.max_turns
    finally:
        probe.close()


def labelled(trajs: list[Trajectory], env_id: str | None) -> list[Trajectory]:
    """The rollout ran an env factory, so its trajectories name no env: name the registered
    one (reports and evaluations group by it)."""
    if env_id is not None:
        for t in trajs:
            t.env_id = env_id
    return trajs
