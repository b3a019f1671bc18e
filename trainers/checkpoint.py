"""Checkpoints of a run: model, optimiser, RNG states, step and sampler state.

A checkpoint is written into a temporary folder and renamed into place, and the
``latest`` pointer is replaced atomically, so a run killed at any moment (even by
SIGKILL) leaves the previous checkpoint intact and resumable.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["latest_checkpoint", "load_checkpoint", "save_checkpoint"]


def _rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: torch.nn.Module | dict[str, Any],
    optimizer: torch.optim.Optimizer | dict[str, Any],
    trainer_state: dict[str, Any],
    *,
    keep: int = 2,
) -> Path:
    """Write step ``step``'s checkpoint; ``model`` and ``optimizer`` may be given as their
    state dicts (a sharded model's, gathered by the caller)."""
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    torch.save(model if isinstance(model, dict) else model.state_dict(), tmp / "model.pt")
    torch.save(optimizer if isinstance(optimizer, dict) else optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(_rng_state(), tmp / "rng.pt")
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **trainer_state}, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    pointer = root / ".latest.tmp"
    pointer.write_text(final.name)
    os.replace(pointer, root / "latest")
    for old in sorted(p for p in root.glob("step-*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = run_dir / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = run_dir / "checkpoints" / pointer.read_text().strip()
    return path if (path / "trainer_state.json").exists() else None


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    apply: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Restore everything saved at ``path``; returns the trainer state (step, sampler...).
    ``apply(weights, optimizer_state)`` loads the two state dicts instead of
    ``load_state_dict`` (a sharded model's loader)."""
    device = next(model.parameters()).device if apply is None else torch.device("cpu")
    weights = torch.load(path / "model.pt", map_location=device, weights_only=True)
    optimizer_state = torch.load(path / "optimizer.pt", map_location=device, weights_only=True)
    if apply is not None:
        apply(weights, optimizer_state)
    else:
        model.load_state_dict(weights)
        optimizer.load_state_dict(optimizer_state)
    _set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    return json.loads((path / "trainer_state.json").read_text())
