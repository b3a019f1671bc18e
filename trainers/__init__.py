"""Multi-turn GRPO on agentenv envs (torch + transformers; install the ``train`` extra).

    import agentenv
    from agentenv.trainers import GRPOConfig, GRPOTrainer

    GRPOTrainer("tiny", envs=["guess-number-v0"], config=GRPOConfig(steps=20)).train()

Importing this package, `GRPOConfig` and the torch-free modules (`advantages`,
`modes`, `config`) does not import torch: `GRPOTrainer` and `TransformersPolicy`
are loaded, with torch, on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentenv.trainers.config import GRPOConfig

if TYPE_CHECKING:
    from agentenv.trainers.policy import TransformersPolicy
    from agentenv.trainers.trainer import GRPOTrainer

__all__ = ["GRPOConfig", "GRPOTrainer", "TransformersPolicy"]

_LAZY = {"GRPOTrainer": "agentenv.trainers.trainer", "TransformersPolicy": "agentenv.trainers.policy"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
