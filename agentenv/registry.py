"""The env registry: `register`, `make`, `spec`, `envs_list`.

Ids look like ``name-v0``. Every registered id is also registered with gymnasium
as ``agentenv/<id>``, so ``gymnasium.make("agentenv/arithmetic-v0")`` works once
agentenv is imported. Third-party packages register through the entry-point group
``agentenv.envs``: the entry point's name is the env id and its value the factory
(``"mypkg.envs:MyEnv"``); they are read lazily, the first time an id is looked up.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium

from agentenv.errors import UnknownEnvError
from agentenv.task import did_you_mean

__all__ = ["EnvSpec", "envs_list", "make", "register", "spec"]

ENTRY_POINT_GROUP = "agentenv.envs"
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*-v\d+$")


@dataclass(frozen=True, slots=True)
class EnvSpec:
    id: str
    entry_point: str | Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    oracle: str | Callable[..., Any] | None = None
    """A factory of a `ScriptedPolicy` that solves the env's tasks, if it has one."""

    def make(self, **kwargs: Any) -> Any:
        from agentenv.env import Env

        factory = _load(self.entry_point)
        env = factory(**{**self.kwargs, **kwargs})
        if not isinstance(env, Env):
            raise TypeError(f"entry point of {self.id!r} returned {type(env).__name__}, expected an agentenv.Env")
        return env

    def make_oracle(self) -> Any:
        if self.oracle is None:
            raise ValueError(f"env {self.id!r} has no scripted oracle; use another policy")
        return _load(self.oracle)()


_registry: dict[str, EnvSpec] = {}
_plugins_loaded = False


def register(
    id: str,
    entry_point: str | Callable[..., Any],
    *,
    description: str = "",
    oracle: str | Callable[..., Any] | None = None,
    override: bool = False,
    **kwargs: Any,
) -> EnvSpec:
    """Register an env factory under ``id`` (``name-vN``); ``kwargs`` are its defaults."""
    if not _ID_RE.match(id):
        raise ValueError(f"env id must look like 'name-v0', got {id!r}")
    if isinstance(entry_point, str) and ":" not in entry_point:
        raise ValueError(f"entry_point must be 'module:attribute' or a callable, got {entry_point!r}")
    if id in _registry and not override:
        raise ValueError(f"env {id!r} is already registered; pass override=True to replace it")
    env_spec = EnvSpec(id, entry_point, dict(kwargs), description, oracle)
    _registry[id] = env_spec
    gym_id = f"agentenv/{id}"
    if gym_id in gymnasium.registry:
        del gymnasium.registry[gym_id]
    gymnasium.register(id=gym_id, entry_point=entry_point, kwargs=dict(kwargs))
    return env_spec


def spec(id: str) -> EnvSpec:
    """The spec of a registered env; `UnknownEnvError` with a did-you-mean otherwise."""
    _load_plugins()
    try:
        return _registry[id]
    except KeyError:
        hint = did_you_mean(id, _registry) or f" Registered: {', '.join(sorted(_registry)) or 'none'}."
        raise UnknownEnvError(f"no env registered as {id!r}.{hint}") from None


def make(id: str, **kwargs: Any) -> Any:
    """A new env of the registered ``id``; ``kwargs`` override the registered defaults."""
    return spec(id).make(**kwargs)


def envs_list() -> list[EnvSpec]:
    """Every registered env, sorted by id."""
    _load_plugins()
    return [_registry[k] for k in sorted(_registry)]


def _load(target: str | Callable[..., Any]) -> Callable[..., Any]:
    if callable(target):
        return target
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _registry:
            register(ep.name, ep.value, description=f"from {ep.dist.name if ep.dist else 'a plugin'}")


def _register_builtins() -> None:
    register(
        "arithmetic-v0",
        "agentenv.envs.arithmetic:ArithmeticEnv",
        description="Evaluate an integer expression one operation at a time with a calculator tool.",
        oracle="agentenv.envs.arithmetic:oracle",
    )
    register(
        "guess-number-v0",
        "agentenv.envs.guess_number:GuessNumberEnv",
        description="Find a secret number from higher/lower feedback.",
        oracle="agentenv.envs.guess_number:oracle",
    )
    register(
        "retail-v0",
        "agentenv.envs.tools.env:ToolsEnv",
        description="Customer service for a shop through a real HTTP API over SQLite: cancel, change, return.",
        oracle="agentenv.envs.tools.env:oracle",
        domain="agentenv.envs.tools.domains.retail:DOMAIN",
    )
    register(
        "calendar-v0",
        "agentenv.envs.tools.env:ToolsEnv",
        description="Book, move and cancel meeting rooms through a real HTTP API over SQLite.",
        oracle="agentenv.envs.tools.env:oracle",
        domain="agentenv.envs.tools.domains.calendar:DOMAIN",
    )
    register(
        "code-v0",
        "agentenv.envs.code:CodeEnv",
        description="Write, run and fix Python in a sandbox; hidden tests, run in a fresh sandbox, decide.",
        oracle="agentenv.envs.code:oracle",
    )


_register_builtins()
