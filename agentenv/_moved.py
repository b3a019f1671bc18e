"""Old module paths, kept importable for one release after the move to layers.

``import agentenv.env`` (and every module in `MOVED`) still works: it imports the module
at its new path, registers it under the old name too (one module object, so a
monkeypatch through either name reaches both), and warns with a DeprecationWarning that
says the new path. Nothing else is aliased: private modules moved without one.

Left out: names inside modules (they are unchanged); removal (the release after next).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED", "install"]

MOVED = {
    "agentenv.env": "agentenv.core.env",
    "agentenv.state": "agentenv.core.state",
    "agentenv.tools": "agentenv.core.tools",
    "agentenv.task": "agentenv.core.task",
    "agentenv.spaces": "agentenv.core.spaces",
    "agentenv.types": "agentenv.core.types",
    "agentenv.errors": "agentenv.core.errors",
    "agentenv.parsers": "agentenv.core.parsers",
    "agentenv.checker": "agentenv.core.checker",
    "agentenv.trajectory": "agentenv.core.trajectory",
    "agentenv.sampling": "agentenv.core.task_sampler",
    "agentenv.openai_policy": "agentenv.policies.openai",
    "agentenv.ray_workers": "agentenv.rollout.ray",
    "agentenv.evaluation": "agentenv.eval.evaluation",
    "agentenv.forecast": "agentenv.eval.forecast",
    "agentenv.trainers.sampling": "agentenv.trainers.task_sampler",
    "agentenv.miner.sampler": "agentenv.miner.task_sampler",
    "agentenv.envs.reasoning_gym": "agentenv.envs.adapters.reasoning_gym",
    "agentenv.envs.textarena_games": "agentenv.envs.adapters.textarena_games",
    "agentenv.envs.textarena_catalog": "agentenv.envs.adapters.textarena_catalog",
    "agentenv.envs.qa": "agentenv.envs.adapters.qa",
    "agentenv.envs.mcp_env": "agentenv.envs.adapters.mcp",
    "agentenv.envs.mcp_env.client": "agentenv.envs.adapters.mcp.client",
    "agentenv.envs.mcp_env.config": "agentenv.envs.adapters.mcp.config",
    "agentenv.envs.mcp_env.env": "agentenv.envs.adapters.mcp.env",
    "agentenv.envs.mcp_env.notes": "agentenv.envs.adapters.mcp.notes",
    "agentenv.envs.mcp_env.schema": "agentenv.envs.adapters.mcp.schema",
}
"""Old path -> new path, for modules a user may have imported by name."""


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import it from there", DeprecationWarning, stacklevel=3)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system overwrites __spec__ next
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module was run at its new path already: only its own __spec__ is put back
        (the old one names the old path, and would make a package no longer one)."""
        if module.__spec__ is not None:
            module.__spec__ = module.__spec__.loader_state


def install() -> None:
    """Put the alias finder on `sys.meta_path` once (importing agentenv calls this)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        # First, not last: under an aliased package (agentenv.envs.mcp_env) the path finder
        # would find a submodule's file through the new package's __path__ and load a
        # second copy of it under the old name, with no warning.
        sys.meta_path.insert(0, _Alias())
