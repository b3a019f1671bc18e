"""Every loss and advantage mode a `GRPOConfig` can name, declared once, in one table each.

The config checks its ``loss``, ``advantage`` and ``step_advantage`` against these
tables, and the trainer reads from them how a loss averages and its default clip
ranges. Torch-free, so a config is validated without importing torch.

Adding a mode: a row here and its code, plus its test. A loss row needs a function
``<name>_loss`` in `agentenv.trainers.losses` (its `LOSSES` maps each row's name to
it); a task-advantage row a branch in `agentenv.trainers.advantages.group_advantages`;
a step-advantage row a branch in `agentenv.trainers.batch.turn_advantages`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from agentenv.core.task import did_you_mean

__all__ = ["LOSS_MODES", "STEP_ADVANTAGES", "TASK_ADVANTAGES", "LossMode", "check_mode"]


@dataclass(frozen=True)
class LossMode:
    """One policy loss: what it is, how it averages, and its clip defaults."""

    summary: str
    averaging: Literal["token", "sequence"]
    """The unit the loss averages over: every policy token of the batch weighs the
    same ("token"), or every sequence with a policy token does ("sequence"). The
    trainer weighs each micro-batch by its count of that unit."""
    clip: Mapping[str, float | None]
    """The loss function's clip keyword arguments and their defaults (the paper's).
    ``eps`` clips both ways with one range; ``eps_low`` None means no lower bound.
    A config's ``eps_low`` sets ``eps`` or ``eps_low``, its ``eps_high`` sets ``eps_high``."""
    needs_max_len: bool = False
    """The loss divides by a fixed length, passed as ``max_len``: the trainer's generation
    budget (the most policy tokens a sequence can hold, `GRPOTrainer.generation_budget`)."""


LOSS_MODES: dict[str, LossMode] = {
    "grpo": LossMode(
        "PPO-clip, mean over sequences of each one's token-mean (Shao et al. 2024, DeepSeekMath)",
        averaging="sequence",
        clip={"eps": 0.2},
    ),
    "dapo": LossMode(
        "clip-higher and token-mean (Yu et al. 2025)",
        averaging="token",
        clip={"eps_low": 0.2, "eps_high": 0.28},
    ),
    "dr_grpo": LossMode(
        "PPO-clip summed over tokens / (sequences x generation budget): no length bias (Liu et al. 2025)",
        averaging="sequence",
        clip={"eps": 0.2},
        needs_max_len=True,
    ),
    "gspo": LossMode(
        "one clipped, length-normalised ratio per sequence (Zheng et al. 2025)",
        averaging="sequence",
        clip={"eps_low": 3e-4, "eps_high": 4e-4},
    ),
    "cispo": LossMode(
        "clipped, detached importance weight times log-prob, token-mean (MiniMax-M1 2025)",
        averaging="token",
        clip={"eps_low": None, "eps_high": 0.28},
    ),
}
"""Policy losses by the name a config uses (``loss``)."""

TASK_ADVANTAGES: dict[str, str] = {
    "std": "(r - group mean) / (group std + eps) (GRPO)",
    "none": "r - group mean: no std division (Dr. GRPO)",
    "batch_std": "(r - group mean) / (std of the whole batch + eps)",
}
"""Task-level advantage modes (``advantage``) and what each computes."""

STEP_ADVANTAGES: dict[str, str] = {
    "gigpo": "return minus the mean of the group's steps from the same state (GiGPO anchor states)",
    "per_turn": "return minus the mean of the group's steps at the same turn index",
    "none": "no step-level term",
}
"""Step-level advantage modes (``step_advantage``) and what each computes: in reward
units, or divided by each step group's std as well with ``step_advantage_std``."""


def check_mode(what: str, name: object, table: Mapping[str, object]) -> str:
    """``name`` if ``table`` has it; otherwise a ValueError listing the choices, with a did-you-mean."""
    if isinstance(name, str) and name in table:
        return name
    choices = ", ".join(map(repr, table))
    raise ValueError(f"{what} must be one of {choices}, got {name!r}.{did_you_mean(str(name), table)}")
