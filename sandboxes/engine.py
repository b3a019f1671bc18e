"""The Docker engine: a client that answered a ping, or an error that says the fix.

Shared by the image build (`agentenv.sandboxes.build`), the sandbox itself
(`agentenv.sandboxes.docker`), the pool and ``agentenv sandbox doctor``. The docker SDK
is imported only when a client is asked for. Left out: TLS settings and contexts
beyond what ``docker.from_env()`` reads (``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``, ...).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from agentenv.sandboxes.base import SandboxInfraError

if TYPE_CHECKING:
    import docker

__all__ = ["ENGINE_FIX", "docker_client", "engine_unreachable", "error_line"]

ENGINE_FIX = (
    "start the engine (scripts/dockerd.sh, or `sudo dockerd`, or `systemctl start docker`) "
    "or point DOCKER_HOST at one that runs"
)


def docker_client(base_url: str | None = None) -> docker.DockerClient:
    """A client of the engine (``DOCKER_HOST`` or the default socket) that answered a ping."""
    try:
        import docker
    except ImportError as e:
        raise SandboxInfraError("the Docker sandbox needs the docker SDK: pip install 'agentenv[sandbox]'") from e
    try:
        client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        client.ping()
    except Exception as e:
        raise engine_unreachable(e, base_url) from e
    return client


def engine_unreachable(error: BaseException, where: str | None = None) -> SandboxInfraError:
    """The error for an engine that did not answer at ``where`` (default: where the SDK looks)."""
    where = where or os.environ.get("DOCKER_HOST") or "the default socket (unix:///var/run/docker.sock)"
    return SandboxInfraError(f"the Docker engine at {where} does not answer ({error_line(error)}); fix: {ENGINE_FIX}")


def error_line(error: BaseException) -> str:
    """The error's type and the first line of its text, at most 300 characters."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]
