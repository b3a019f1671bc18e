"""docs/adapters.md, section "Hugging Face datasets": its examples run and print what their comments say.

The examples that load a data set from the hub by name are not run (no network here);
the in-memory ones do the same through the same code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("datasets")

DOC = (Path(__file__).resolve().parents[3] / "docs" / "adapters.md").read_text(encoding="utf-8")
SECTION = DOC.split("## Hugging Face datasets", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"^```python\n(.*?)^```", SECTION, re.DOTALL | re.MULTILINE)
PRINT_COMMENT = re.compile(r"^print\(.*\)\s+# (.+)$")
OFFLINE = [code for code in BLOCKS if not re.search(r"load_dataset\(\"(?!json)", code)]


def test_the_section_has_runnable_examples_and_the_hub_lines_users_write():
    assert len(OFFLINE) >= 3
    assert 'load_dataset("gsm8k", "main")["train"]' in SECTION


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(
            c,
            marks=[pytest.mark.slow] if any(w in c for w in ("code-v0", "import datasets", "audit_tasks")) else [],
            id=f"example-{i}",
        )
        for i, c in enumerate(OFFLINE)
    ],
)
def test_an_example_runs_and_prints_what_it_says(code, tmp_path):
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    expected = [m.group(1).strip() for line in code.splitlines() if (m := PRINT_COMMENT.match(line.strip()))]
    printed = [line.strip() for line in proc.stdout.splitlines()]
    assert printed == expected
