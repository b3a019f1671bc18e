"""How many threads a run computes with: the CPUs the process may use (its affinity and
its cgroup's CPU quota), shared among a torchrun job's ranks on the machine."""

from __future__ import annotations

import os

import pytest

from agentenv.trainers import threads
from agentenv.trainers.threads import available_cpus, default_threads


@pytest.fixture
def cgroup(tmp_path, monkeypatch):
    monkeypatch.setattr(threads, "_CGROUP", tmp_path)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    return tmp_path


def test_the_cpus_are_the_affinity_within_the_cgroups_quota(cgroup) -> None:
    assert available_cpus() == 8  # no quota file: the affinity mask alone
    (cgroup / "cpu.max").write_text("max 100000\n")
    assert available_cpus() == 8
    (cgroup / "cpu.max").write_text("250000 100000\n")  # docker --cpus 2.5
    assert available_cpus() == 3
    (cgroup / "cpu.max").unlink()
    (cgroup / "cpu").mkdir()
    (cgroup / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")  # cgroup v1, one CPU
    (cgroup / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert available_cpus() == 1
    (cgroup / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # v1's "no quota"
    assert available_cpus() == 8


def test_the_ranks_on_a_machine_share_its_cpus(cgroup, monkeypatch) -> None:
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert default_threads() == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert default_threads() == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
    assert default_threads() == 1
