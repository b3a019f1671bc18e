"""README.md: its Python examples run and print what their comments say, and its
commands are the ones the scripts and CI use."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
PYTHON_BLOCKS = re.findall(r"^```python\n(.*?)^```", README, re.DOTALL | re.MULTILINE)
# `print(...)  # what it prints`: the comment is the expected output line.
PRINT_COMMENT = re.compile(r"^print\(.*\)\s+# (.+)$")


def test_readme_has_examples() -> None:
    assert len(PYTHON_BLOCKS) >= 2


def _marks(code: str) -> list[pytest.MarkDecorator]:
    """Honest markers: training takes minutes on a CPU, and sandboxes want the engine."""
    marks = []
    if "GRPOTrainer" in code:
        marks.append(pytest.mark.slow)
    if "code-v0" in code or "make_sandbox" in code:
        marks.append(pytest.mark.docker)
    return marks


@pytest.mark.parametrize(
    "index", [pytest.param(i, marks=_marks(code), id=f"example-{i + 1}") for i, code in enumerate(PYTHON_BLOCKS)]
)
def test_readme_example_runs_and_prints_what_it_says(index: int, tmp_path: Path) -> None:
    code = PYTHON_BLOCKS[index]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, f"README example {index + 1} failed:\n{proc.stderr}"
    expected = [m.group(1).strip() for line in code.splitlines() if (m := PRINT_COMMENT.match(line.strip()))]
    printed = [line.strip() for line in proc.stdout.splitlines()]
    # In order; other lines (a trainer's progress) may come between them.
    remaining = iter(printed)
    assert all(any(line == want for line in remaining) for want in expected), (expected, printed)


def test_readme_commands_match_the_scripts() -> None:
    bash_blocks = re.findall(r"^```bash\n(.*?)^```", README, re.DOTALL | re.MULTILINE)
    assert "bash scripts/main.sh" in (b.strip() for b in bash_blocks)
    assert "bash scripts/test.sh" in (b.strip() for b in bash_blocks)
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[0].startswith("#!")
    assert "set -euo pipefail" in ci
    assert ci[-1] == "bash scripts/test.sh"
    for script in ("setup.sh", "test.sh", "main.sh"):
        assert (REPO / "scripts" / script).is_file()
