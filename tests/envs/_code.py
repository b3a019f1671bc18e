"""Shared pieces of the code-env tests: sandboxes per backend, a small task, an episode driver."""

from __future__ import annotations

from agentenv import Task, tool_call_text
from agentenv.envs.code import CallTest, CodeEnv, CodeSandboxes, CodeTask

ADD_TASK = Task(
    id="add",
    prompt="Write add(a, b) returning a + b.",
    payload=CodeTask(
        entry_point="add",
        visible_tests=[CallTest(args=[1, 2], expected=3), CallTest(args=[0, 0], expected=0)],
        hidden_tests=[CallTest(args=[a, b], expected=a + b) for a, b in [(5, 7), (-3, 10), (100, 1), (2, 2)]],
        solution="def add(a, b):\n    return a + b\n",
    ).model_dump(mode="json"),
)


def submit(env: CodeEnv, code: str, *, task: Task = ADD_TASK, before: list[str] = ()) -> dict:
    """Reset on ``task``, play ``before``, submit ``code``; the final info."""
    env.reset(seed=0, options={"task": task})
    for action in before:
        env.step(action)
    *_, terminated, _, info = env.step(tool_call_text("submit", code=code))
    assert terminated, info
    return info


def sandboxes(backend: str) -> CodeSandboxes:
    return CodeSandboxes(backend, workspaces=1, verifiers=2)


def require(backend: str) -> None:
    """Skip (or, with AGENTENV_REQUIRE_DOCKER=1, fail) when the Docker backend cannot run."""
    import os

    import pytest

    from tests.sandboxes.conftest import docker_unavailable

    if backend == "docker" and (reason := docker_unavailable()) is not None:
        if os.environ.get("AGENTENV_REQUIRE_DOCKER") == "1":
            pytest.fail(f"AGENTENV_REQUIRE_DOCKER=1 but Docker cannot run: {reason}")
        pytest.skip(f"Docker backend not testable here: {reason}")
