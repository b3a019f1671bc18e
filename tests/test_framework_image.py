"""agentenv's own image (the top-level Dockerfile), built as this project's machines
build it (scripts/build_image.sh: no registry, Python packages fetched on the host)
and run: the CLI lists the envs, a scripted eval runs, the extras and chromium are in.

Slow (a first build takes minutes, a rerun with nothing changed seconds) and
marked docker by tests/conftest.py. The image is left tagged `TAG`, so the next
build finds its layers cached.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agentenv.sandboxes.factory import docker_available

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TAG = "agentenv:test"


@pytest.fixture(scope="module")
def image() -> str:
    reason = docker_available()
    if reason is not None:
        if os.environ.get("AGENTENV_REQUIRE_DOCKER") == "1":
            pytest.fail(f"AGENTENV_REQUIRE_DOCKER=1 but no Docker engine answers: {reason}")
        pytest.skip(f"no Docker engine: {reason}")
    build = subprocess.run(
        ["bash", "scripts/build_image.sh", "--tag", TAG], cwd=REPO, capture_output=True, text=True, timeout=3600
    )
    assert build.returncode == 0, (build.stdout + build.stderr)[-4000:]
    return TAG


def run(image: str, *args: str, entrypoint: str | None = None) -> subprocess.CompletedProcess[str]:
    """``docker run`` of the image with no network: nothing the commands do may need one."""
    cmd = ["docker", "run", "--rm", "--network", "none"]
    if entrypoint is not None:
        cmd += ["--entrypoint", entrypoint]
    return subprocess.run([*cmd, image, *args], capture_output=True, text=True, timeout=600)


def test_the_image_lists_the_built_in_envs(image: str) -> None:
    out = run(image, "list")
    assert out.returncode == 0, out.stderr
    for env_id in ("arithmetic-v0", "guess-number-v0", "code-v0", "retail-v0", "calendar-v0"):
        assert env_id in out.stdout


def test_a_scripted_eval_runs_inside_the_image(image: str) -> None:
    out = run(image, "eval", "arithmetic-v0", "--policy", "scripted", "--episodes", "5")
    assert out.returncode == 0, out.stderr
    assert "success rate" in out.stdout and "100.0%" in out.stdout


def test_the_image_has_its_extras_and_chromium_and_runs_as_a_user(image: str) -> None:
    probe = (
        "import os, shutil, docker, fastapi, uvicorn, playwright; "
        "print(os.getuid(), shutil.which('chromium'), shutil.which('agentenv'))"
    )
    out = run(image, "-c", probe, entrypoint="python")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1000", "/usr/bin/chromium", "/opt/agentenv/bin/agentenv"]
