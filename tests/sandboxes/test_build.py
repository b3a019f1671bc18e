"""Building the sandbox image: the apt mirror debootstrap uses, the cache key, and
the ``agentenv sandbox`` commands (doctor needs Docker: skipped or failed as conftest says)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentenv.cli import app
from agentenv.sandboxes import Limits
from agentenv.sandboxes.build import _CONTEXT, DEFAULT_MIRROR, apt_mirror, image_inputs_hash
from agentenv.sandboxes.cli import _resource_checks
from tests.sandboxes.conftest import _require


def test_mirror_from_deb822_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
    )
    assert apt_mirror(tmp_path) == "http://mirror.example/debian"


def test_mirror_from_one_line_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main\n"
    )
    assert apt_mirror(tmp_path) == "http://mirror.example/debian"


def test_mirror_falls_back_to_debian(tmp_path: Path) -> None:
    assert apt_mirror(tmp_path) == DEFAULT_MIRROR


def test_image_inputs_hash_is_stable() -> None:
    assert image_inputs_hash() == image_inputs_hash() and len(image_inputs_hash()) == 16


def test_every_file_the_image_gets_is_in_the_hashed_context() -> None:
    # A file COPY'd by the Dockerfile but left out of the hash would leave a stale image "current".
    copied = set()
    for line in _CONTEXT["Dockerfile"].read_text().splitlines():
        if line.startswith("COPY "):
            copied.update(line.split()[1:-1])
    assert copied and copied <= set(_CONTEXT), copied - set(_CONTEXT)
    assert "runner.py" in copied and "_pipes.py" in copied  # the runner imports _pipes


def test_image_inputs_hash_covers_every_context_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    before = image_inputs_hash()
    for name, path in _CONTEXT.items():
        changed = tmp_path / name
        changed.write_bytes(path.read_bytes() + b"\n")
        monkeypatch.setitem(_CONTEXT, name, changed)
        assert image_inputs_hash() != before, name
        monkeypatch.setitem(_CONTEXT, name, path)


def test_doctor_fails_a_missing_cpu_quota_and_a_tmpfs_of_the_wrong_size() -> None:
    limits = Limits(memory_mb=256, pids=32, cpus=0.5, workspace_mb=48, tmp_mb=32)
    mib = 1024 * 1024
    seen = {
        "memory": str(256 * mib),
        "swap": str(256 * mib),
        "pids": "32",
        "cpu": "-1 100000",  # cgroup v1 without a quota
        "/workspace": {"type": "tmpfs", "bytes": 48 * mib},
        "/tmp": {"type": "overlay", "bytes": 32 * mib},  # the root filesystem, not a tmpfs
    }
    checks = {c.name: c for c in _resource_checks(seen, {"NanoCpus": 0}, limits)}
    assert (checks["memory"].ok, checks["pids"].ok, checks["workspace"].ok) == (True, True, True)
    assert not checks["cpu"].ok and "no limit" in checks["cpu"].detail
    assert not checks["tmp"].ok and "overlay" in checks["tmp"].detail
    seen |= {"cpu": "50000 100000", "/tmp": {"type": "tmpfs", "bytes": 64 * mib}}
    checks = {c.name: c for c in _resource_checks(seen, {"NanoCpus": 500_000_000}, limits)}
    assert checks["cpu"].ok and not checks["tmp"].ok  # 64 MiB, not the 32 asked for


def test_doctor_reports_an_unreachable_engine_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    result = CliRunner().invoke(app, ["sandbox", "doctor"])
    assert result.exit_code == 1
    assert "FAIL engine" in result.output and "fix:" in result.output and "dockerd" in result.output


@pytest.mark.docker
def test_doctor_passes_every_check_on_a_working_setup() -> None:
    _require("docker")
    result = CliRunner().invoke(app, ["sandbox", "doctor"])
    assert result.exit_code == 0, result.output
    for check in (
        "engine",
        "image",
        "network",
        "user",
        "capabilities",
        "no-new-privileges",
        "read-only root",
        "memory",
        "pids",
        "cpu",
        "workspace",
        "tmp",
    ):
        assert f"ok   {check}:" in result.output
    assert "FAIL" not in result.output


@pytest.mark.docker
def test_build_is_skipped_when_the_image_is_current() -> None:
    _require("docker")
    first = CliRunner().invoke(app, ["sandbox", "build"])  # builds only if this checkout changed the image
    assert first.exit_code == 0, first.output
    result = CliRunner().invoke(app, ["sandbox", "build"])
    assert result.exit_code == 0 and "up to date" in result.output
