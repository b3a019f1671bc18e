"""The layers of docs/architecture.md, checked on every module's imports.

Read from the source (every `import` and `from ... import`, at any depth, under
TYPE_CHECKING too), not from what happens to be loaded, so a lazy import counts.
Each module belongs to one layer; a layer may import only the layers its row names,
and no chain of imports between modules comes back to where it started.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"agentenv": REPO / "agentenv", "agentenv.envs": REPO / "envs", "agentenv.sandboxes": REPO / "sandboxes"}
ROOTS["agentenv.trainers"] = REPO / "trainers"
LINKS = ("envs", "sandboxes", "trainers")  # agentenv/<name> links to the top-level folder

_BASE = {"core", "registry"}
LAYERS: dict[str, set[str]] = {
    # layer: the layers it may import (itself included)
    "core": {"core"},
    "registry": {"core", "registry"},  # ids to env classes: names envs by strings, never imports them
    "rollout": _BASE | {"rollout"},
    "policies": _BASE | {"policies"},
    "root": _BASE | {"rollout", "policies", "root"},  # agentenv/__init__: the public names
    "eval": _BASE | {"rollout", "policies", "root", "eval"},
    "miner": _BASE | {"rollout", "policies", "root", "eval", "miner"},
    "report": _BASE | {"rollout", "policies", "root", "eval", "miner", "report"},
    "export": _BASE | {"rollout", "policies", "root", "eval", "miner", "report", "export"},  # runs as datasets
    "sandboxes": _BASE | {"root", "sandboxes"},
    "envs": _BASE | {"rollout", "policies", "root", "sandboxes", "envs"},
    "trainers": _BASE | {"rollout", "policies", "root", "eval", "miner", "report", "trainers"},
    "cli": set(),  # the application: it wires every layer together (filled in below)
}
LAYERS["cli"] = set(LAYERS)


def _module_name(path: Path) -> str:
    for prefix, root in sorted(ROOTS.items(), key=lambda kv: -len(kv[0])):
        if root in path.parents or path.parent == root:
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join([prefix, *parts])
    raise AssertionError(path)


def _modules() -> dict[str, Path]:
    found = {}
    for root in ROOTS.values():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).parts
            if root == ROOTS["agentenv"] and rel[0] in LINKS:
                continue
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "_moved":
        return "root"
    if parts[1] == "__main__":  # python -m agentenv: the command line
        return "cli"
    return parts[1]


def _imports(path: Path, name: str) -> list[tuple[int, str]]:
    """(line, module) for every agentenv module the file imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:  # `from pkg import module` imports the module
                child = f"{base}.{alias.name}"
                found.append((node.lineno, child if child in MODULES else base))
    return [(line, m) for line, m in found if m == "agentenv" or m.startswith("agentenv.")]


def _target(module: str) -> str:
    """The module an imported name lands in (a dotted name may go past a module)."""
    while module not in MODULES and "." in module:
        module = module.rpartition(".")[0]
    return module


def test_every_module_has_a_layer() -> None:
    unknown = sorted({layer_of(m) for m in MODULES} - set(LAYERS))
    assert unknown == [], f"modules outside the layer table: {unknown}"


@pytest.mark.parametrize("layer", sorted(set(LAYERS) - {"cli"}))
def test_a_layer_imports_only_the_layers_below_it(layer: str) -> None:
    broken = [
        f"{path.relative_to(REPO)}:{line} imports {target} ({layer_of(target)})"
        for name, path in MODULES.items()
        if layer_of(name) == layer
        for line, target in _imports(path, name)
        if layer_of(_target(target)) not in LAYERS[layer]
    ]
    assert broken == []


def test_no_module_imports_another_modules_private_names() -> None:
    broken = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentenv"):
                private = [
                    a.name for a in node.names if a.name.startswith("_") and f"{node.module}.{a.name}" not in MODULES
                ]
                if private and node.module != name:
                    broken.append(f"{path.relative_to(REPO)}:{node.lineno} takes {private} from {node.module}")
    assert broken == []


def test_there_is_no_import_cycle() -> None:
    graph = {name: {_target(t) for _, t in _imports(path, name)} - {name} for name, path in MODULES.items()}
    # A package's __init__ re-exports its modules: an edge from a module to its own
    # package's __init__ is a cycle only if the __init__ imports back, which the search sees.
    cycles, state = [], dict.fromkeys(graph, 0)  # 0 unseen, 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif state.get(nxt) == 0:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if state[node] == 0:
            visit(node, [])
    assert cycles == []


def test_nothing_cites_a_document_that_is_not_in_the_repository() -> None:
    skip = {".venv", ".git", "runs", "build"}
    tracked = [p for p in REPO.rglob("*") if p.suffix in (".py", ".md", ".sh", ".toml") and not skip & set(p.parts)]
    for path in tracked:
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for name in ("DESIGN.md", "STYLE.md", "MACHINES.md"):
            assert name not in text or (REPO / name).exists(), f"{path.relative_to(REPO)} cites {name}"
