"""The rollout engine: many episodes at once, one policy call per turn for all of them.

`rollout()` runs episodes through an executor: threads in this process
(`agentenv.rollout.engine`) or env workers on a Ray cluster (`agentenv.rollout.ray`,
an optional extra imported on first use).
"""

from agentenv.rollout.engine import EnvFactory, ask_policy, checked_output, rollout

__all__ = ["EnvFactory", "ask_policy", "checked_output", "rollout"]
