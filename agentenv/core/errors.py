"""The exceptions agentenv raises, in one visible hierarchy.

Bad *actions* are never exceptions: they come back from `Env.step` as error
observations. These are for mistakes of the caller (step before reset, an unknown
env id, a keyword the env does not take, an invalid task file), for failures of
infrastructure, and for the few signals an env's own code raises on purpose
(`ToolError`, `InfraError`; `ParseError` from an action parser).

    AgentEnvError
    ├── EnvStateError          the env used out of order
    ├── UnknownEnvError        (also a KeyError) no env under that id
    ├── EnvArgumentError       (also a TypeError and a ValueError) a keyword the env does not take
    ├── TaskFileError          (also a ValueError) a malformed task file
    ├── EnvCheckError          (also an AssertionError) `check_env` found a broken contract
    ├── ParseError             (also a ValueError) an action is not readable as tool calls
    ├── ToolError              a tool's failure the agent should see
    └── InfraError             the infrastructure behind an env failed
"""

from __future__ import annotations

__all__ = [
    "AgentEnvError",
    "EnvArgumentError",
    "EnvCheckError",
    "EnvStateError",
    "InfraError",
    "ParseError",
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
    """No env is registered under the id asked for (or the ``module:attr`` named
    no env); the message has a did-you-mean."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class EnvArgumentError(AgentEnvError, TypeError, ValueError):
    """A keyword argument for an env (given to `agentenv.make`, registered as a
    default, or in a training config's ``env_kwargs``) that the env's constructor
    does not take; the message has a did-you-mean. A TypeError, as Python's own for
    a call, and a ValueError, as for any other bad value of a config."""


class TaskFileError(AgentEnvError, ValueError):
    """A task file is malformed; the message names the file, the line and the field."""


class EnvCheckError(AgentEnvError, AssertionError):
    """`check_env` found the env breaks the contract; the message lists each problem."""


class ParseError(AgentEnvError, ValueError):
    """An action could not be read as tool calls; the message is shown to the agent.

    Raised by action parsers (see `agentenv.core.parsers`); `Env.step` turns it into an
    error observation with the ``format`` penalty, never an exception of ``step``.
    """


class ToolError(AgentEnvError):
    """Raised by a tool to report a failure the agent should see and may fix.

    The message becomes the tool's error observation (``info["error_kind"] ==
    "tool"``, ``CallOutcome.ok`` False for `Env.step_rewards`); it costs no format
    penalty. Use it for "file not found", "order is not delivered", never for bugs:
    any other exception a tool raises is logged for the env's author as a bug.
    """


class InfraError(AgentEnvError):
    """The infrastructure behind an env failed (container died, service timed out).

    `Env.step` ends the episode as truncated with ``info["failure"] == "infra"``;
    it is never scored as a failure of the policy.
    """


def message_of(error: BaseException) -> str:
    """``str(error)``, or a stand-in when that raises: an exception holding an integer past
    the digit limit (``KeyError(10**5000)``) or with a hostile ``__str__`` must not turn the
    report of one failure into a failure of the whole batch."""
    try:
        return str(error)
    except Exception as failure:  # noqa: BLE001 - any failure to describe it is described instead
        return f"<its message could not be read: {type(failure).__name__}>"
