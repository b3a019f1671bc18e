"""Fixtures that run every sandbox test against every backend.

The Docker case is skipped, with the reason, when no engine answers or the image
is missing; with AGENTENV_REQUIRE_DOCKER=1 (CI) it fails instead, so a broken
engine cannot turn the Docker suite into a row of skips. Sandboxes are made per
test: each adversarial test may break its sandbox, and a shared one would let one
test's leftovers decide another's result.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator

import pytest

from agentenv.sandboxes import Limits, Sandbox
from agentenv.sandboxes.factory import docker_available

IMAGE = "agentenv-sandbox:latest"
LIMITS = Limits(timeout_s=3, memory_mb=256, pids=64, output_bytes=64 * 1024, workspace_mb=16, tmp_mb=16)
BACKENDS = ["process", "docker"]

NewSandbox = Callable[..., Sandbox]


@functools.cache
def docker_unavailable() -> str | None:
    """Why the Docker backend cannot be tested here, or None."""
    reason = docker_available()
    if reason is not None:
        return reason
    import docker

    client = docker.from_env(timeout=5)
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        return f"the image {IMAGE} is missing (build it from sandboxes/image/)"
    finally:
        client.close()
    try:
        import agentenv.sandboxes.docker  # noqa: F401
    except ImportError as exc:
        return f"agentenv.sandboxes.docker does not import: {exc}"
    return None


def _require(backend: str) -> None:
    if backend != "docker":
        return
    reason = docker_unavailable()
    if reason is None:
        return
    if os.environ.get("AGENTENV_REQUIRE_DOCKER") == "1":
        pytest.fail(f"AGENTENV_REQUIRE_DOCKER=1 but the Docker backend cannot run: {reason}")
    pytest.skip(f"Docker backend not testable here: {reason}")


def _construct(backend: str, limits: Limits) -> Sandbox:
    if backend == "process":
        from agentenv.sandboxes.process import ProcessSandbox

        return ProcessSandbox(limits)
    from agentenv.sandboxes.docker import DockerSandbox

    return DockerSandbox(limits=limits)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    _require(request.param)
    return request.param


@pytest.fixture
def new_sandbox(backend: str) -> Iterator[NewSandbox]:
    """Make sandboxes of the backend under test (default `LIMITS`); all closed at teardown."""
    made: list[Sandbox] = []

    def make(limits: Limits = LIMITS) -> Sandbox:
        sb = _construct(backend, limits)
        made.append(sb)
        return sb

    yield make
    for sb in made:
        sb.close()


@pytest.fixture
def sandbox(new_sandbox: NewSandbox) -> Sandbox:
    return new_sandbox()
