"""How long `import agentenv` takes in a fresh interpreter, and what it spends it on.

    .venv/bin/python bench/import_time.py [--runs 9] [--src PATH]

Each run is a new interpreter with ``-X importtime``; the figure is the median over runs
of agentenv's cumulative import time (interpreter start-up is not in it), with the
heaviest packages it pulls in. ``--src`` imports agentenv from another checkout's
``src/`` (e.g. a `git worktree` of an older commit) for a before/after in one session.
Left out: importing env families, the trainer or the sandboxes (each loads on first use).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

TARGET_MS = 1000.0
HEAVY = ("gymnasium", "numpy", "pydantic", "httpx", "torch", "transformers", "docker", "playwright", "jsonschema")


def one_run(src: str | None) -> dict[str, int]:
    """Cumulative import time in microseconds per top-level module of one fresh run."""
    env = dict(os.environ, PYTHONPATH=src) if src else None
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import agentenv"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd="/",  # not the repository: `-c` puts the working directory first on sys.path
    ).stderr
    cumulative: dict[str, int] = {}
    for line in out.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cum, name = (part.strip() for part in line.split("|"))
        if cum.isdigit() and "." not in name:  # top-level packages only
            cumulative[name] = max(cumulative.get(name, 0), int(cum))
    return cumulative


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--src", help="import agentenv from this src/ folder instead")
    args = parser.parse_args()
    print(header("import agentenv, fresh interpreter, -X importtime"))
    runs = [one_run(args.src) for _ in range(args.runs)]
    total = statistics.median(r.get("agentenv", 0) for r in runs) / 1000
    rows = [(name, f"{statistics.median(r.get(name, 0) for r in runs) / 1000:.1f}") for name in HEAVY]
    print(table(["loaded by it", "ms (median)"], [r for r in rows if r[1] != "0.0"]))
    verdict = "met" if total <= TARGET_MS else "NOT met"
    print(f"import agentenv: {total:.0f} ms median over {args.runs} runs (target {TARGET_MS:.0f} ms): {verdict}")


if __name__ == "__main__":
    main()
