"""The rollout engine: many episodes at once, one policy call per turn for all of them.

`rollout()` (`agentenv.rollout.engine`) runs episodes through an `Executor`
(`agentenv.rollout.executor`): threads in this process (`ThreadExecutor`,
``executor="thread"``), env workers on a Ray cluster (`agentenv.rollout.ray`, an
optional extra imported on first use, ``executor="ray"``), or one of your own. What
both built-in executors share is public, for writing another: an `Episode`, the
`EnvStepper` that runs envs next to them, and the `Recorder` of what finished.
"""

from agentenv.rollout.engine import rollout
from agentenv.rollout.episode import EnvFactory, Episode, ask_policy, checked_output
from agentenv.rollout.executor import Executor, RolloutJob
from agentenv.rollout.recorder import Recorder
from agentenv.rollout.stepper import EnvStepper
from agentenv.rollout.threads import ThreadExecutor

__all__ = [
    "EnvFactory",
    "EnvStepper",
    "Episode",
    "Executor",
    "Recorder",
    "RolloutJob",
    "ThreadExecutor",
    "ask_policy",
    "checked_output",
    "rollout",
]
