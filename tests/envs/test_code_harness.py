"""The test harness program (`agentenv.envs.code.verify.PROGRAM`) is pasted together
from parts, each a file a reader and the type checker can open on its own: this
checks that the parts fit, so a name moved between them cannot break the sandboxed
program while every file still type-checks."""

from __future__ import annotations

import ast
from pathlib import Path

from agentenv.envs.code import verify

# Where the parts live, as their modules are imported (by the host and the type checker).
PACKAGES = {"sandboxes": "agentenv.sandboxes", "code": "agentenv.envs.code"}


def _module(path: Path) -> str:
    return f"{PACKAGES[path.parent.name]}.{path.stem}"


def _top_level(tree: ast.Module) -> tuple[set[str], list[ast.ImportFrom]]:
    """Names a part defines (functions, classes, constants) and its TYPE_CHECKING imports."""
    defined: set[str] = set()
    typing_only: list[ast.ImportFrom] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            typing_only += [n for n in node.body if isinstance(n, ast.ImportFrom)]
    defined.discard("TYPE_CHECKING")
    return defined, typing_only


def test_each_part_takes_only_names_an_earlier_part_defines_and_none_is_defined_twice() -> None:
    earlier: dict[str, set[str]] = {}  # module -> names it defines
    owner: dict[str, str] = {}
    for path in verify.PARTS:
        defined, typing_only = _top_level(ast.parse(path.read_text()))
        for name in defined:
            assert name not in owner, f"{name} is defined in both {owner[name]} and {path.name}"
            owner[name] = path.name
        for imp in typing_only:
            assert imp.module in earlier, f"{path.name} takes names from {imp.module}, not pasted before it"
            missing = {a.name for a in imp.names} - earlier[imp.module]
            assert not missing, f"{path.name} takes {missing} from {imp.module}, which does not define them"
        earlier[_module(path)] = defined


def test_the_program_is_the_parts_in_order_and_compiles() -> None:
    assert verify.PROGRAM == "\n".join(p.read_text() for p in verify.PARTS)
    assert [p.name for p in verify.PARTS] == ["_pipes.py", "_codec.py", "_worker.py", "_batch.py", "_harness.py"]
    tree = ast.parse(verify.PROGRAM)  # it compiles as one program
    # A future import would also change how the solution compiles (compile() inherits it).
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
