"""Building the sandbox image: the apt mirror debootstrap uses, the cache key, and
the ``agentenv sandbox`` commands (doctor needs Docker: skipped or failed as conftest says)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentenv.cli import app
from agentenv.sandboxes.build import DEFAULT_MIRROR, apt_mirror, image_inputs_hash
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


def test_doctor_reports_an_unreachable_engine_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    result = CliRunner().invoke(app, ["sandbox", "doctor"])
    assert result.exit_code == 1
    assert "FAIL engine" in result.output and "fix:" in result.output and "dockerd" in result.output


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
    ):
        assert f"ok   {check}:" in result.output
    assert "FAIL" not in result.output


def test_build_is_skipped_when_the_image_is_current() -> None:
    _require("docker")
    first = CliRunner().invoke(app, ["sandbox", "build"])  # builds only if this checkout changed the image
    assert first.exit_code == 0, first.output
    result = CliRunner().invoke(app, ["sandbox", "build"])
    assert result.exit_code == 0 and "up to date" in result.output
