"""Multi-turn GRPO on agentenv envs (torch + transformers; install the ``train`` extra).

    import agentenv
    from agentenv.trainers import GRPOConfig, GRPOTrainer

    GRPOTrainer("tiny", envs=["guess-number-v0"], config=GRPOConfig(steps=20)).train()

Importing this package imports torch; `import agentenv` alone does not.
"""

from agentenv.trainers.config import GRPOConfig
from agentenv.trainers.policy import TransformersPolicy
from agentenv.trainers.trainer import GRPOTrainer

__all__ = ["GRPOConfig", "GRPOTrainer", "TransformersPolicy"]
