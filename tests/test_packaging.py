"""Packaging: what `import agentenv` loads, where the subpackages come from in an
editable and in a wheel install, and the extras users install."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

import agentenv

REPO = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("envs", "sandboxes", "trainers")  # top-level folders installed as agentenv.<name>
HEAVY = ("torch", "transformers", "playwright", "docker")


def run_python(code: str, *, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_import_loads_no_heavy_dependency(tmp_path: Path) -> None:
    out = run_python(
        """
        import json, sys
        import agentenv
        agentenv.make("arithmetic-v0").reset(seed=0)
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in
              {"torch", "transformers", "playwright", "docker", "typer", "httpx", "scipy"}
              or m.startswith(("agentenv.cli", "agentenv.policies.openai")))))
        """,
        cwd=tmp_path,
    )
    loaded = json.loads(out)
    assert loaded == [], f"`import agentenv` loaded {loaded}"


def test_the_openai_policy_loads_when_first_asked_for(tmp_path: Path) -> None:
    out = run_python(
        """
        import sys
        import agentenv
        before = "httpx" in sys.modules
        from agentenv import OpenAIPolicy
        from agentenv.policies import OpenAIPolicy as same
        print(before, "httpx" in sys.modules, OpenAIPolicy is same, "OpenAIPolicy" in agentenv.__all__)
        """,
        cwd=tmp_path,
    )
    assert out.split() == ["False", "True", "True", "True"]


def test_editable_install_maps_top_level_folders(tmp_path: Path) -> None:
    assert Path(agentenv.__file__).resolve().parent == REPO / "agentenv", (
        "the suite expects agentenv installed editable from this checkout (scripts/setup.sh does it)"
    )
    for name in SUBPACKAGES:  # the links the layout rests on
        assert (REPO / "agentenv" / name).is_symlink() and (REPO / "agentenv" / name).resolve() == REPO / name
    assert (REPO / "src" / "agentenv").resolve() == REPO / "agentenv"
    out = run_python(
        """
        import json
        import agentenv.envs, agentenv.sandboxes, agentenv.trainers
        print(json.dumps({m.__name__: m.__file__ for m in (agentenv.envs, agentenv.sandboxes, agentenv.trainers)}))
        """,
        cwd=tmp_path,
    )
    files = json.loads(out)
    for name in SUBPACKAGES:
        assert Path(files[f"agentenv.{name}"]).resolve() == REPO / name / "__init__.py"


@pytest.mark.slow
def test_wheel_installs_only_agentenv(tmp_path: Path) -> None:
    # Build from a copy: an in-tree build would leave build/ and egg-info in the checkout.
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")
    for folder in ("agentenv", "src", *SUBPACKAGES):  # the links copied as links
        shutil.copytree(REPO / folder, src / folder, ignore=ignore, symlinks=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = wheels.glob("agentenv-*.whl")

    names = zipfile.ZipFile(wheel).namelist()
    for expected in (
        "agentenv/envs/arithmetic.py",
        "agentenv/sandboxes/__init__.py",
        "agentenv/trainers/__init__.py",
        "agentenv/envs/world/worlds/bank.yaml",  # a world spec: package data
        "agentenv/report/viewer.js",  # inlined into every report
        "agentenv/report/report.css",
    ):
        assert expected in names
    top_level = {n.split("/")[0] for n in names}
    assert not top_level & set(SUBPACKAGES), f"wheel ships top-level packages {top_level & set(SUBPACKAGES)}"
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"agentenv"}

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = run_python(
        """
        import json
        import agentenv
        import agentenv.envs.arithmetic
        import agentenv.sandboxes, agentenv.trainers
        env = agentenv.make("arithmetic-v0")
        obs, _ = env.reset(seed=0)
        print(json.dumps([agentenv.__file__, agentenv.envs.arithmetic.__file__, type(env).__name__, len(obs)]))
        """,
        cwd=outside,
        env=env,
    )
    core, arithmetic, env_type, n_messages = json.loads(out)
    for path in (core, arithmetic):
        assert Path(path).resolve().is_relative_to(target.resolve()), path
    assert env_type == "ArithmeticEnv" and n_messages == 2


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_extras_exist() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    assert {"train", "browser", "sandbox", "all", "dev"} <= set(extras)


def test_torch_bound_admits_the_local_cpu_wheel() -> None:
    # Only torch 2.13.0 installs from local disk; an unbounded requirement could pull a CUDA build.
    reqs = [r for reqs in _pyproject()["project"]["optional-dependencies"].values() for r in reqs]
    torch_reqs = [r for r in reqs if re.match(r"^torch\s*($|[<>=!~;\[])", r)]
    assert torch_reqs, "no torch requirement in the extras"
    for text in torch_reqs:
        specifier = text.split(";")[0][len("torch") :].strip()
        assert specifier, f"{text!r} is unbounded: it may pull a multi-GB CUDA build"
        assert _admits(specifier, "2.13.0"), f"{text!r} excludes torch 2.13.0"


def _admits(specifier: str, version: str) -> bool:
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:  # plain comparisons cover the bounds this project writes
        ops = {
            ">=": tuple.__ge__,
            "<=": tuple.__le__,
            "==": tuple.__eq__,
            "!=": tuple.__ne__,
            ">": tuple.__gt__,
            "<": tuple.__lt__,
        }
        v = tuple(int(x) for x in version.split("."))
        for clause in specifier.split(","):
            op = next(o for o in ops if clause.strip().startswith(o))
            bound = tuple(int(x) for x in clause.strip()[len(op) :].strip().split("."))
            width = max(len(v), len(bound))
            if not ops[op](v + (0,) * (width - len(v)), bound + (0,) * (width - len(bound))):
                return False
        return True
    return SpecifierSet(specifier).contains(version)


def test_every_package_in_the_tree_is_shipped() -> None:
    # setuptools gets an explicit list, so a new subpackage missing from it would work
    # in an editable install and vanish from the wheel. (Path.rglob does not follow
    # the links, so each linked folder is walked as its own root.)
    tool = _pyproject()["tool"]["setuptools"]
    assert tool["package-dir"] == {"": "src"}
    roots = {REPO / "agentenv": "agentenv", **{REPO / name: f"agentenv.{name}" for name in SUBPACKAGES}}
    found = {"agentenv.sandboxes.image"}  # a folder of package data (the sandbox's Dockerfile)
    for root, name in roots.items():
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root).parts
            found.add(".".join((name, *rel)))
    assert found == set(tool["packages"])


@pytest.mark.slow  # a whole mypy run
def test_type_checkers_resolve_every_package_from_anywhere(tmp_path: Path) -> None:
    # The editable install is a plain path entry (src/), not an import hook: mypy and
    # editors find agentenv and its linked subpackages the way Python does.
    pytest.importorskip("mypy")
    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent("""
        from agentenv import Env
        from agentenv.envs.code import CodeEnv
        from agentenv.sandboxes import Limits
        from agentenv.trainers import GRPOConfig
        reveal_type(Env)
        reveal_type(CodeEnv)
        reveal_type(Limits)
        reveal_type(GRPOConfig)
    """)
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-incremental",
            "--follow-imports=silent",
            "--ignore-missing-imports",
            str(probe),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    revealed = [line for line in proc.stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == 4, proc.stdout + proc.stderr
    for name in (
        "agentenv.core.env.Env",
        "agentenv.envs.code.env.CodeEnv",
        "agentenv.sandboxes.base.Limits",
        "agentenv.trainers.config.GRPOConfig",
    ):
        assert any(name in line for line in revealed), (name, revealed)
