"""docs/adapters.md's MCP section is real: its Python example runs and prints what its comments say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
DOC = (REPO / "docs" / "adapters.md").read_text(encoding="utf-8")
SECTION = DOC.split("\n## MCP\n", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"^```python\n(.*?)^```", SECTION, re.DOTALL | re.MULTILINE)
PRINT_COMMENT = re.compile(r"^print\(.*\)\s+# (.+)$")


def test_the_example_runs_and_prints_what_it_says(tmp_path: Path) -> None:
    [code] = BLOCKS
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    expected = [m.group(1).strip() for line in code.splitlines() if (m := PRINT_COMMENT.match(line.strip()))]
    assert expected and [line.strip() for line in proc.stdout.splitlines()] == expected
