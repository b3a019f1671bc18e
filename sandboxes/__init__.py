"""Sandboxes for untrusted code: a hardened Docker backend and a local process backend.

    from agentenv.sandboxes import make_sandbox
    with make_sandbox("auto") as sb:
        print(sb.run_python("print(1)").stdout)

The backends load lazily, so importing this package does not import the docker SDK.
"""

from __future__ import annotations

import importlib
from typing import Any

from agentenv.sandboxes.base import ExecResult, Limits, Sandbox, SandboxError, SandboxInfraError, workspace_path

__all__ = [
    "DockerSandbox",
    "ExecResult",
    "Limits",
    "ProcessSandbox",
    "Sandbox",
    "SandboxError",
    "SandboxInfraError",
    "SandboxPool",
    "make_sandbox",
    "workspace_path",
]

_LAZY = {
    "DockerSandbox": "agentenv.sandboxes.docker",
    "ProcessSandbox": "agentenv.sandboxes.process",
    "SandboxPool": "agentenv.sandboxes.pool",
    "make_sandbox": "agentenv.sandboxes.factory",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentenv.sandboxes' has no attribute {name!r}")
