"""Per-step overhead of each adapter over calling the underlying library directly.

    .venv/bin/python bench/adapters.py [--steps 200] [--only rgym,arena,mcp,qa,rlpr]

Each adapter's figures come from its own module, ``bench/_adapter_<part>.py``, whose
``measure(steps)`` times the same actions twice in one process: once through the
library (reasoning-gym's ``score_answer``, a TextArena env's ``step``, an MCP
``ClientSession.call_tool``, iterating a ``datasets`` split, the trainer's log-prob
pass for RLPR) and once through the agentenv env (``reset``/``step``, with action
parsing, validation, state tracking and the step's info). Figures are medians in
microseconds per step; ``overhead`` is the difference, ``ratio`` the quotient. A
part whose library is not installed is reported as skipped, with the reason.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, import_agentenv, table

PARTS = ("rgym", "arena", "mcp", "qa", "rlpr")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="timed steps per case (default 200)")
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts (default {','.join(PARTS)})")
    args = parser.parse_args()
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    import_agentenv()
    print(header("adapters: per-step cost through agentenv vs the library called directly"), flush=True)
    rows, skipped = [], []
    for part in parts:
        print(f"measuring {part} ...", file=sys.stderr, flush=True)
        try:
            module = importlib.import_module(f"_adapter_{part}")
        except ModuleNotFoundError as e:
            skipped.append(f"{part}: {e.name} is not installed")
            continue
        for r in module.measure(args.steps):
            direct, through = r["direct_us"], r["adapter_us"]
            rows.append(
                [
                    r["adapter"],
                    r["case"],
                    f"{direct:,.0f}",
                    f"{through:,.0f}",
                    f"{through - direct:+,.0f}",
                    f"{through / direct:.2f}x" if direct > 0 else "-",
                ]
            )
    print(table(["adapter", "case", "direct us", "agentenv us", "overhead us", "ratio"], rows))
    for line in skipped:
        print(f"skipped {line}")


if __name__ == "__main__":
    main()
