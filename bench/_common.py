"""Shared bits of the benchmark scripts: a header that says where a figure came
from, and a plain-text table. Benchmarks print figures; they never assert on them."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Sequence

__all__ = ["header", "table"]


def header(title: str) -> str:
    """The title plus what the figures depend on: interpreter, machine, library versions."""
    import gymnasium
    import pydantic

    cpus = os.cpu_count() or 0
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = cpus
    try:
        load = f"\nload average (1 min) {os.getloadavg()[0]:.2f}: the figures mean something on an idle machine only"
    except (AttributeError, OSError):  # not on this platform
        load = ""
    return (
        f"{title}\n"
        f"python {platform.python_version()} ({sys.implementation.name}), {platform.machine()}, "
        f"{usable}/{cpus} CPUs usable, pydantic {pydantic.VERSION}, gymnasium {gymnasium.__version__}{load}"
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A left-aligned first column and right-aligned others, separated by two spaces."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])
