"""The sandbox contract: what every backend offers and returns.

A `Sandbox` runs untrusted code and gives back an `ExecResult` as data: a crash,
a timeout, an out-of-memory kill or a flood of output is a result, never an
exception. Exceptions are for the caller's mistakes (`SandboxError`: a path that
escapes the workspace, a closed sandbox) and for the infrastructure failing under
it (`SandboxInfraError`, an `InfraError`: the container died, the engine went away),
which envs report as ``failure == "infra"`` rather than as the agent's fault.

Paths given to `write_files` / `read_file` are relative to the workspace; absolute
paths, ``..`` and symlinks that lead outside it are refused with `SandboxError`.

This module has no backend; see `agentenv.sandboxes.docker` and
`agentenv.sandboxes.process`, and each one's docstring for what it protects against.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agentenv.core.errors import AgentEnvError, InfraError

__all__ = [
    "ExecResult",
    "Limits",
    "Sandbox",
    "SandboxError",
    "SandboxInfraError",
    "workspace_path",
]


class SandboxError(AgentEnvError, ValueError):
    """The caller asked for something the sandbox refuses (a path outside the
    workspace, an operation on a closed sandbox, a bad limit)."""


class SandboxInfraError(InfraError):
    """The sandbox's infrastructure failed: the engine is unreachable, the container
    died mid-run, the runner stopped answering. Not the agent's fault."""


class ExecResult(BaseModel):
    """What one run produced. Output is decoded as UTF-8 with replacement."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = Field(None, description="None when killed before it exited on its own")
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        """Exited 0 on its own."""
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed


class Limits(BaseModel):
    """Resource limits of a sandbox; every backend enforces them (see its docstring
    for how, and which it cannot)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(10.0, gt=0, description="wall clock per run; the whole process group is killed")
    memory_mb: int = Field(512, ge=16, description="memory of the sandbox (no swap)")
    cpus: float = Field(1.0, gt=0, description="CPU quota, in cores")
    pids: int = Field(64, ge=8, description="processes and threads at once")
    output_bytes: int = Field(64 * 1024, ge=1, description="cap on each of stdout and stderr per run")
    workspace_mb: int = Field(64, ge=1, description="size of the writable workspace")
    tmp_mb: int = Field(64, ge=1, description="size of the writable /tmp")


@runtime_checkable
class Sandbox(Protocol):
    """A place to run untrusted code. Use as a context manager or call `close`."""

    limits: Limits

    def run_python(self, code: str, *, timeout_s: float | None = None, stdin: str | None = None) -> ExecResult:
        """Run ``code`` as a fresh Python process in the workspace."""
        ...

    def run(
        self, command: str | Sequence[str], *, timeout_s: float | None = None, stdin: str | None = None
    ) -> ExecResult:
        """Run a command (a string goes to ``sh -c``) in the workspace."""
        ...

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Write files into the workspace (creating directories)."""
        ...

    def read_file(self, path: str) -> bytes:
        """Read a file from the workspace; `FileNotFoundError` when it is absent."""
        ...

    def snapshot(self) -> bytes:
        """The workspace as a tar archive."""
        ...

    def restore(self, archive: bytes) -> None:
        """Replace the workspace with a `snapshot`."""
        ...

    def reset(self) -> None:
        """Back to a clean workspace with no process left from earlier runs."""
        ...

    def close(self) -> None:
        """Release everything; idempotent."""
        ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc: object) -> None: ...


def workspace_path(path: str) -> str:
    """Normalise a workspace-relative path, refusing ones that leave the workspace.

    Symlinks are the backend's to refuse (they can only be seen where the files are).
    """
    if not isinstance(path, str) or not path or "\x00" in path:
        raise SandboxError(f"expected a non-empty relative path, got {path!r}")
    if path.startswith("/") or path.startswith("\\"):
        raise SandboxError(f"expected a path relative to the workspace, got absolute {path!r}")
    norm = posixpath.normpath(path.replace("\\", "/"))
    if norm == "." or norm == ".." or norm.startswith("../"):
        raise SandboxError(f"path {path!r} leaves the workspace")
    return norm
