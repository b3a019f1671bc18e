"""agentenv: gym-style multi-turn environments for training LLM agents with RL.

    import agentenv
    env = agentenv.make("arithmetic-v0")
    obs, info = env.reset(seed=0)

Importing agentenv loads none of torch, transformers, playwright, docker or httpx
(`OpenAIPolicy` is imported on first use). The package is laid out in layers; see
docs/architecture.md:

    agentenv.core       the contract: Env, State, tools, Task/TaskSet, Policy, Trajectory
    agentenv.rollout    the episode engine and its executors (threads, Ray)
    agentenv.policies   scripted, human, OpenAI-compatible
    agentenv.eval, .miner, .report, .cli      services built on the core
    agentenv.envs, .sandboxes, .trainers      env families, execution backends, GRPO
"""

from typing import TYPE_CHECKING, Any

from agentenv import _moved
from agentenv.core.checker import CheckReport, check_env
from agentenv.core.env import CallOutcome, Env, Snapshot, Transition
from agentenv.core.errors import (
    AgentEnvError,
    EnvArgumentError,
    EnvCheckError,
    EnvStateError,
    InfraError,
    ParseError,
    TaskFileError,
    ToolError,
    UnknownEnvError,
)
from agentenv.core.parsers import (
    ActionParser,
    AutoParser,
    HermesParser,
    JSONParser,
    OpenAIParser,
    tool_call_text,
)
from agentenv.core.policy import Conversation, Generation, Policy, PolicyFailure
from agentenv.core.spaces import ActionSpace, MessagesSpace, UnicodeText
from agentenv.core.state import State, json_diff
from agentenv.core.task import Task, TaskMeta, TaskSet
from agentenv.core.tools import ToolSpec, tool
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Action, Failure, Message, ToolCall
from agentenv.policies import HumanPolicy, ScriptedPolicy
from agentenv.registry import EnvSpec, envs_list, make, register, register_namespace, spec
from agentenv.rollout import rollout

if TYPE_CHECKING:
    from agentenv.policies.openai import OpenAIPolicy

list = envs_list

__version__ = "0.1.0"

_moved.install()


def __getattr__(name: str) -> Any:
    if name == "OpenAIPolicy":  # httpx takes a third of the import time: load it when asked
        from agentenv.policies.openai import OpenAIPolicy

        return OpenAIPolicy
    raise AttributeError(f"module 'agentenv' has no attribute {name!r}")


__all__ = [
    "Action",
    "ActionParser",
    "ActionSpace",
    "AgentEnvError",
    "AutoParser",
    "CallOutcome",
    "CheckReport",
    "Conversation",
    "Env",
    "EnvArgumentError",
    "EnvCheckError",
    "EnvSpec",
    "EnvStateError",
    "Failure",
    "Generation",
    "HermesParser",
    "HumanPolicy",
    "InfraError",
    "JSONParser",
    "Message",
    "MessagesSpace",
    "OpenAIParser",
    "OpenAIPolicy",
    "ParseError",
    "Policy",
    "PolicyFailure",
    "ScriptedPolicy",
    "Snapshot",
    "State",
    "Task",
    "TaskFileError",
    "TaskMeta",
    "TaskSet",
    "ToolCall",
    "ToolError",
    "ToolSpec",
    "Trajectory",
    "Transition",
    "UnicodeText",
    "UnknownEnvError",
    "check_env",
    "envs_list",
    "json_diff",
    "make",
    "register",
    "register_namespace",
    "rollout",
    "spec",
    "tool",
    "tool_call_text",
]
