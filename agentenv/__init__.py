"""agentenv: gym-style multi-turn environments for training LLM agents with RL.

    import agentenv
    env = agentenv.make("arithmetic-v0")
    obs, info = env.reset(seed=0)

Importing agentenv loads none of torch, transformers, playwright or docker.
"""

from agentenv.checker import CheckReport, check_env
from agentenv.env import CallOutcome, Env, Snapshot, Transition
from agentenv.errors import (
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
from agentenv.openai_policy import OpenAIPolicy
from agentenv.parsers import (
    ActionParser,
    AutoParser,
    HermesParser,
    JSONParser,
    OpenAIParser,
    tool_call_text,
)
from agentenv.policies import Conversation, Generation, HumanPolicy, Policy, PolicyFailure, ScriptedPolicy
from agentenv.registry import EnvSpec, envs_list, make, register, register_namespace, spec
from agentenv.rollout import rollout
from agentenv.spaces import ActionSpace, MessagesSpace, UnicodeText
from agentenv.state import State, json_diff
from agentenv.task import Task, TaskMeta, TaskSet
from agentenv.tools import ToolSpec, tool
from agentenv.trajectory import Trajectory
from agentenv.types import Action, Failure, Message, ToolCall

list = envs_list

__version__ = "0.1.0"

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
