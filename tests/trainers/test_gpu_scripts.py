"""The GPU benchmarks' CPU twins: the prepared command bench/gpu_check.sh at smoke sizes
on the CPU, which runs bench/train_gpu.py and bench/gpu_e2e.py as subprocesses and
writes the figures a GPU run reports; and the same e2e on CUDA wherever torch sees a GPU.

The twin runs as on the GPU machine: from the repository with no install (``python
-S``, with site-packages on the path but not the editable install's link). These tests
check that the scripts run and report; they never assert on times or speeds.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.slow  # each runs training scripts

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Smoke:
    out: Path  # the command's $OUT
    returncode: int
    output: str

    def step(self, name: str) -> str:
        """What step ``name`` printed, once it is known to have passed."""
        assert f"== {name}: exit 0" in self.output, self.output[-4000:]
        return (self.out / f"{name}.txt").read_text()

    def figures(self, name: str) -> dict[str, Any]:
        return json.loads((self.out / f"{name}.json").read_text())


def not_installed(tmp: Path) -> tuple[str, dict[str, str]]:
    """A python command and environment that find torch and the other packages, but not
    agentenv's install: a copy of the repository on the GPU machine."""
    python = tmp / "python-no-install"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    return str(python), {**os.environ, "PYTHONPATH": os.pathsep.join(site.getsitepackages())}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Smoke:
    """``bash bench/gpu_check.sh --smoke``, once for the module's tests."""
    out = tmp_path_factory.mktemp("gpu_out")
    python, env = not_installed(tmp_path_factory.mktemp("bin"))
    result = subprocess.run(
        ["bash", "bench/gpu_check.sh", "--smoke"],
        cwd=ROOT,
        env={**env, "PYTHON": python, "OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return Smoke(out, result.returncode, result.stdout + result.stderr)


def check_e2e(figures: dict[str, Any], device: str) -> None:
    on_gpu = device == "cuda"
    assert figures["device"].startswith(device)
    assert figures["dtype"] == "float32"  # master weights, whatever the checkpoint's dtype
    assert figures["compute_dtype"] == ("bfloat16" if on_gpu else "float32")
    assert figures["peak_tflops"] > 0
    for phase in ("warm_start", "grpo"):
        row = figures[phase]
        assert row["steps"] >= 1
        for key in ("train_tokens_per_s", "tflops"):
            assert row[key] > 0, (phase, key, row[key])
        for key in ("mfu_pct", "peak_gib"):  # a CPU has no stated peak and no GPU memory
            assert (row[key] > 0) if on_gpu else (row[key] is None), (phase, key, row[key])
    assert figures["grpo"]["gen_tokens_per_s"] > 0
    assert figures["grpo"]["updated_steps"] >= 1
    success = figures["success"]
    assert success["episodes"] >= 2
    for key in ("random_init", "after_warm_start", "after_grpo"):
        assert 0.0 <= success[key] <= 1.0, (key, success[key])


def test_gpu_check_smoke_passes_every_step_and_writes_its_outputs(smoke):
    assert smoke.returncode == 0, smoke.output[-4000:]
    assert "gpu_check: all steps passed" in smoke.output
    written = {p.name for p in smoke.out.iterdir()}
    assert written == {"gpu.txt", "train_gpu.txt", "train_gpu.json", "gpu_e2e.txt", "gpu_e2e.json", "pytest.txt"}


def test_train_gpu_smoke_reports_generation_and_an_update(smoke):
    printed = smoke.step("train_gpu")
    medians = smoke.figures("train_gpu")["medians"]
    for key in ("gen_tps", "train_tps", "train_tok", "policy_tok", "tflops"):
        assert medians[key] > 0, (key, medians[key])  # the varied format penalty: every step updates
    assert medians["mfu"] is None and medians["peak_gib"] is None  # a CPU
    assert "MFU = FLOPs / train_s / 989 TFLOP/s" in printed
    speeds = smoke.figures("train_gpu")["sampling"]
    assert speeds["static_tokens"] > 0 and speeds["forward_tokens"] > 0 and speeds["ratio"] > 0
    assert "static decoder" in printed and "forward loop" in printed


def test_e2e_smoke_reports_every_phase_and_held_out_success(smoke):
    printed = smoke.step("gpu_e2e")
    check_e2e(smoke.figures("gpu_e2e"), "cpu")
    for line in ("generation tokens/s", "training tokens/s", "MFU (% of 989)", "peak GPU memory", "held-out success"):
        assert line in printed


def test_e2e_names_a_package_it_cannot_import(tmp_path):
    blocked = tmp_path / "gymnasium"  # found first on the path, and fails to import as a missing package would
    blocked.mkdir()
    (blocked / "__init__.py").write_text("raise ModuleNotFoundError('No module named gymnasium', name='gymnasium')\n")
    python, env = not_installed(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    result = subprocess.run(
        [python, "bench/gpu_e2e.py", "--smoke", "--device", "cpu"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "agentenv needs the Python package 'gymnasium'" in result.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_e2e_on_cuda_runs_in_bf16_and_reports_mfu_and_peak_memory(tmp_path):
    out = tmp_path / "e2e.json"
    cmd = [sys.executable, "bench/gpu_e2e.py", "--smoke", "--device", "cuda", "--out", str(out)]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    check_e2e(json.loads(out.read_text()), "cuda")
