"""How many threads torch computes with on the CPU: the CPUs this process may use, shared
among the ranks of a torchrun job on the machine.

torch's default is one intra-op thread per core of the machine. In a container held to
a CPU quota, on a machine whose cores are pinned to other jobs, or beside other ranks,
that is more threads than the run has cores, and a thread waiting for a core holds up
every op it takes part in: each step gets slower, not faster. `available_cpus` counts
what the process may really use; `default_threads` is what ``agentenv train --threads``
defaults to. Torch-free: the command line reads it before torch is imported.

Left out: inter-op threads (the trainer runs one op at a time) and GPUs.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["available_cpus", "default_threads"]

_CGROUP = Path("/sys/fs/cgroup")


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), within its cgroup's CPU quota
    (cgroup v2's cpu.max, v1's cpu.cfs_quota_us), rounded up; at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    quota = _cpu_quota()
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)


def default_threads() -> int:
    """`available_cpus` shared among the ranks torchrun started on this machine
    (``LOCAL_WORLD_SIZE``), at least 1 each."""
    try:
        ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        ranks = 1
    return max(1, available_cpus() // ranks)


def _cpu_quota() -> float | None:
    """CPUs' worth of time the cgroup may use per period, or None when unlimited or unknown."""
    try:
        quota, period = (_CGROUP / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((_CGROUP / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((_CGROUP / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None
