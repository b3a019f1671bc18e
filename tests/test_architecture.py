"""The import rules of docs/architecture.md, checked on every module's imports.

Read from the source (every `import` and `from ... import`, at any depth), not from
what happens to be loaded, so a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {
    "core": REPO / "agentenv",
    "envs": REPO / "envs",
    "sandboxes": REPO / "sandboxes",
    "trainers": REPO / "trainers",
}
FORBIDDEN = {
    "core": ("agentenv.envs", "agentenv.sandboxes", "agentenv.trainers"),
    "sandboxes": ("agentenv.envs", "agentenv.trainers"),
    "envs": ("agentenv.trainers",),
    "trainers": ("agentenv.envs", "agentenv.sandboxes"),
}
EXCEPTIONS = {REPO / "agentenv" / "cli.py"}  # the application: it wires the packages together


def _modules(package: str) -> list[Path]:
    root = PACKAGES[package]
    files = [p for p in root.rglob("*.py") if p not in EXCEPTIONS]
    if package == "core":  # agentenv/envs, /sandboxes, /trainers are links to the other packages
        files = [p for p in files if p.relative_to(root).parts[0] not in ("envs", "sandboxes", "trainers")]
    return sorted(files)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


@pytest.mark.parametrize("package", list(PACKAGES))
def test_imports_go_one_way(package: str) -> None:
    files = _modules(package)
    assert files, package
    broken = [
        f"{path.relative_to(REPO)}:{line} imports {name}"
        for path in files
        for line, name in _imports(path)
        if any(name == banned or name.startswith(banned + ".") for banned in FORBIDDEN[package])
    ]
    assert broken == []


def test_nothing_cites_a_document_that_is_not_in_the_repository() -> None:
    skip = {".venv", ".git", "runs", "build"}
    tracked = [p for p in REPO.rglob("*") if p.suffix in (".py", ".md", ".sh", ".toml") and not skip & set(p.parts)]
    for path in tracked:
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for name in ("DESIGN.md", "STYLE.md", "MACHINES.md"):
            assert name not in text or (REPO / name).exists(), f"{path.relative_to(REPO)} cites {name}"
