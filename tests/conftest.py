from __future__ import annotations

import pytest

from tests.toy_envs import CounterEnv

# Modules whose every test needs a Docker engine (and the sandbox image).
DOCKER_MODULES = {"test_docker.py", "test_docker_channel.py", "test_framework_image.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``docker`` what needs the engine: whole modules, and the Docker case of tests
    run on every backend (a ``docker`` parameter). Tests that ask for Docker inside
    their body carry ``@pytest.mark.docker`` themselves."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.path.name in DOCKER_MODULES or "docker" in params.values():
            item.add_marker(pytest.mark.docker)


@pytest.fixture
def counter() -> CounterEnv:
    env = CounterEnv()
    yield env
    env.close()
