"""The exceptions agentenv raises, in one visible hierarchy.

Bad *actions* are never exceptions: they come back from `Env.step` as error
observations. These are for mistakes of the caller (step before reset, an unknown
env id, an invalid task file) and for failures of infrastructure.
"""

from __future__ import annotations

__all__ = [
    "AgentEnvError",
    "EnvCheckError",
    "EnvStateError",
    "InfraError",
    "TaskFileError",
    "ToolError",
    "UnknownEnvError",
]


class AgentEnvError(Exception):
    """Base class of every error agentenv raises on purpose."""


class EnvStateError(AgentEnvError):
    """The env was used out of order: step before reset, step after the episode
    ended, or any call after close."""


class UnknownEnvError(AgentEnvError, KeyError):
    """No env is registered under the id asked for."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class TaskFileError(AgentEnvError, ValueError):
    """A task file is malformed; the message names the file, the line and the field."""


class EnvCheckError(AgentEnvError, AssertionError):
    """`check_env` found the env breaks the contract; the message lists each problem."""


class ToolError(AgentEnvError):
    """Raised by a tool to report a failure the agent should see and may fix.

    The message becomes the tool's error observation; the step gets the
    ``tool_error`` penalty. Use it for "file not found", "order is not delivered",
    never for bugs.
    """


class InfraError(AgentEnvError):
    """The infrastructure behind an env failed (container died, service timed out).

    `Env.step` ends the episode as truncated with ``info["failure"] == "infra"``;
    it is never scored as a failure of the policy.
    """
