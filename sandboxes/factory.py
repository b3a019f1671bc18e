"""Pick a sandbox backend: Docker when an engine answers, else the local process backend.

Only the choosing lives here; what each backend protects against is in its own
module docstring. The choice is logged on the ``agentenv.sandboxes`` logger at INFO,
with the reason, because the two differ a lot in isolation; the record carries the
backend as its ``sandbox_backend`` attribute, which the ``agentenv`` command line
picks out and prints.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from agentenv.sandboxes.base import Limits, Sandbox, SandboxError

__all__ = ["auto_backend", "docker_available", "make_sandbox"]

logger = logging.getLogger("agentenv.sandboxes")

Kind = Literal["auto", "docker", "process"]


def make_sandbox(kind: Kind = "auto", limits: Limits | None = None, **kwargs: Any) -> Sandbox:
    """A new sandbox of ``kind``; extra keyword arguments go to the backend's constructor."""
    if kind == "auto":
        kind = auto_backend()
    if kind == "docker":
        from agentenv.sandboxes.docker import DockerSandbox  # the docker SDK is optional

        return DockerSandbox(limits=limits if limits is not None else Limits(), **kwargs)
    if kind == "process":
        from agentenv.sandboxes.process import ProcessSandbox

        return ProcessSandbox(limits, **kwargs)
    raise SandboxError(f"expected kind 'auto', 'docker' or 'process', got {kind!r}")


def auto_backend() -> Literal["docker", "process"]:
    """The backend "auto" stands for now: Docker when an engine answers, else the
    process backend. Logged at INFO with the reason (see the module docstring)."""
    reason = docker_available()
    kind: Literal["docker", "process"] = "docker" if reason is None else "process"
    why = "a Docker engine answered" if reason is None else f"no Docker engine ({reason})"
    logger.info("sandbox backend: %s, because %s", kind, why, extra={"sandbox_backend": kind})
    return kind


def docker_available(timeout_s: float = 2.0) -> str | None:
    """None when a Docker engine answers a ping; otherwise why not, in words."""
    try:
        import docker
    except ImportError:
        return "the docker package is not installed (pip install 'agentenv[sandbox]')"
    try:
        client = docker.from_env(timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - the SDK raises DockerException or plain OSError subclasses
        return f"cannot reach the engine: {exc}"
    try:
        client.ping()
    except Exception as exc:  # noqa: BLE001 - as above, and requests' and urllib3's own
        return f"the engine did not answer a ping: {exc}"
    finally:
        client.close()
    return None
