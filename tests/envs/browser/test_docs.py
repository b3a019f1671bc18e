"""docs/browser.md is real: each Python example runs and prints what its comments say, and
the site it builds takes under 60 lines."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each example starts a browser

REPO = Path(__file__).resolve().parents[3]
DOC = (REPO / "docs" / "browser.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC, re.DOTALL | re.MULTILINE)
PRINT_COMMENT = re.compile(r"^print\(.*\)\s+# (.+)$")


def test_the_site_example_is_under_60_lines():
    [site] = [b for b in BLOCKS if "Site(" in b]
    assert len(site.splitlines()) < 60


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_the_example_runs_and_prints_what_it_says(index, tmp_path):
    code = BLOCKS[index]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    expected = [m.group(1).strip() for line in code.splitlines() if (m := PRINT_COMMENT.match(line.strip()))]
    assert expected and [line.strip() for line in proc.stdout.splitlines()] == expected
