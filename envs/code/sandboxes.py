"""`CodeSandboxes`: the two sandbox pools a code env draws from, started on first use.

Agents work in sandboxes from the *workspace* pool; hidden tests run only in
sandboxes from the separate *verifier* pool, which no agent ever gets, each
handed out freshly reset (processes killed, workspace and /tmp wiped). Share one
`CodeSandboxes` between many envs (a rollout, a benchmark) to bound the number of
containers; an env that made its own closes it in ``close()``.

Backend "auto" is `make_sandbox("auto")`'s rule: Docker when an engine answers,
else the local process backend (weaker isolation; see its module docstring).
Left out: sizing pools to the load, per-task limits.
"""

from __future__ import annotations

import logging
import threading
from typing import Literal

from agentenv.sandboxes import Limits, SandboxError, SandboxPool
from agentenv.sandboxes.factory import auto_backend
from agentenv.sandboxes.pool import PooledSandbox

__all__ = ["Backend", "CodeSandboxes"]

logger = logging.getLogger("agentenv.envs.code")

Backend = Literal["auto", "docker", "process"]
WORKSPACE_LIMITS = Limits(timeout_s=10.0)
# Verdict lines of many tests must fit; the solution's own output never reaches stdout.
VERIFIER_LIMITS = Limits(timeout_s=60.0, output_bytes=1 << 20)


class CodeSandboxes:
    """A workspace pool and a verifier pool of one backend, each started when first needed."""

    def __init__(
        self,
        backend: Backend = "auto",
        *,
        workspaces: int = 2,
        verifiers: int = 2,
        limits: Limits = WORKSPACE_LIMITS,
        verifier_limits: Limits = VERIFIER_LIMITS,
    ) -> None:
        if backend not in ("auto", "docker", "process"):
            raise SandboxError(f"expected backend 'auto', 'docker' or 'process', got {backend!r}")
        self.backend = backend
        self._sizes = {"workspace": workspaces, "verifier": verifiers}
        self._limits = {"workspace": limits, "verifier": verifier_limits}
        self._pools: dict[str, SandboxPool] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def kind(self) -> Literal["docker", "process"]:
        """The backend in use ("auto" resolved on first call)."""
        if self.backend == "auto":
            self.backend = auto_backend()  # logged with its reason, which the CLI prints
        return self.backend

    def workspace(self, timeout_s: float | None = 120.0) -> PooledSandbox:
        """A clean sandbox for an agent's episode; ``close()`` it to give it back."""
        return self._pool("workspace").acquire(timeout_s)

    def verifier(self, timeout_s: float | None = 120.0) -> PooledSandbox:
        """A clean sandbox no agent has used, for one verification."""
        return self._pool("verifier").acquire(timeout_s)

    def start(self) -> None:
        """Start both pools in the background (sandboxes warm up while the caller goes on)."""
        for role in self._sizes:
            self._pool(role)

    def warm(self, timeout_s: float = 120.0) -> None:
        """Start both pools now and wait until every sandbox is ready."""
        for role in self._sizes:
            self._pool(role).wait_ready(timeout_s)

    def _pool(self, role: str) -> SandboxPool:
        with self._lock:
            if self._closed:
                raise SandboxError("these sandboxes are closed")
            pool = self._pools.get(role)
            if pool is None:
                pool = self._pools[role] = SandboxPool(self.kind, self._sizes[role], limits=self._limits[role])
            return pool

    def close(self) -> None:
        """Close both pools; idempotent."""
        with self._lock:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    def __enter__(self) -> CodeSandboxes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
