"""Shared bits of the benchmark scripts: a header that says where a figure came
from, a plain-text table, and importing agentenv from the repository when it is not
installed (the GPU machine gets a copy of the repository and no install). Benchmarks
print figures; they never assert on them."""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["header", "import_agentenv", "table"]

ROOT = Path(__file__).resolve().parent.parent


def _cpu_times() -> tuple[int, int] | None:
    """(steal, total) CPU time in ticks since boot, from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 8:
        return None
    return fields[7], sum(fields[:8])  # user nice system idle iowait irq softirq steal


_STARTED = _cpu_times()  # when the bench imported this module: before it measured anything


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
        f"{_steal()}"
    )


def _steal() -> str:
    """The share of CPU time the host gave other guests since the bench started (a
    virtual machine's steal time): figures taken while it is high move with it."""
    now = _cpu_times()
    if _STARTED is None or now is None or now[1] <= _STARTED[1]:
        return ""
    share = (now[0] - _STARTED[0]) / (now[1] - _STARTED[1])
    return f"\nsteal time {share:.1%} of all CPU time since the bench started (a shared host's other guests)"


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


def import_agentenv() -> None:
    """Make ``import agentenv.trainers`` work. Installed, nothing to do; otherwise put the
    repository on the path and map envs/, sandboxes/ and trainers/ onto agentenv's
    subpackages (the install does that through links, which a copy may lose).

    A package agentenv needs and this Python lacks (pydantic, say) ends the script with
    a message that names it, rather than a traceback from deep inside the import."""
    try:
        try:
            import agentenv.trainers

            return
        except ModuleNotFoundError as e:
            if e.name not in ("agentenv", "agentenv.trainers"):
                raise  # a missing dependency, not a missing install
        sys.path.insert(0, str(ROOT))
        import agentenv

        for sub in ("envs", "sandboxes", "trainers"):  # trainers last: it imports the others
            spec = importlib.util.spec_from_file_location(
                f"agentenv.{sub}", ROOT / sub / "__init__.py", submodule_search_locations=[str(ROOT / sub)]
            )
            assert spec is not None and spec.loader is not None  # a path to an existing file
            module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
            setattr(agentenv, sub, module)
            spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        raise SystemExit(
            f"{Path(sys.argv[0]).name}: agentenv needs the Python package {e.name!r}, which {sys.executable} "
            f"lacks. Install it (pip install {e.name}); on a machine without network, bring it as a wheel "
            "(bash bench/gpu_check.sh --fetch-wheels does that for the GPU machine)."
        ) from None
