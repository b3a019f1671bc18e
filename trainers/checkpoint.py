"""Checkpoints of a run: model, optimiser, RNG states, step and sampler state; the warm
start's (checkpoints/warm-start-NNNNNN: `save_warm_start`); and whose run a run
directory holds.

A checkpoint is written into a temporary folder and renamed into place, and the
``latest`` pointer is replaced atomically, so a run killed at any moment (even by
SIGKILL) leaves the previous checkpoint intact and resumable.

A run that starts from step 0 (not resumed) never writes into another run's
directory: `other_run` says when output_dir holds a run of another config (or files
of a run without its config), and the trainer refuses it; a directory holding a run of
the same config is that run started over, and `clear_run` deletes its files first,
so no file of the earlier run (a checkpoint of a later step, a step's episodes) stays
mixed in with the new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentenv.core.checkpoints import latest_checkpoint
from agentenv.core.trajectory import Trajectory

__all__ = [
    "RUN_FILES",
    "WarmStartCheckpoint",
    "clear_run",
    "latest_checkpoint",
    "latest_warm_start",
    "load_checkpoint",
    "load_warm_start",
    "other_run",
    "save_checkpoint",
    "save_warm_start",
    "warm_start_weights",
]

RUN_FILES = (
    "config.json",
    "metrics.jsonl",
    "checkpoints",
    "trajectories",
    "evals",
    "final",
    "tokenizer",
    "tensorboard",
    "run.lock",
    "trackers.json",
    "wandb",
)
"""What a training run writes at the top of its output_dir."""
_REPORT_FILES = ("report.html", "report_files")  # `agentenv report`'s page of the run, by default
_SAME_RUN_IGNORES = (
    "resume",
    "output_dir",
    "torch_threads",
    "report_to",
    "tensorboard",
)  # how a run is started, where, or logged: not which run it is


def _rng_state() -> dict[str, Any]:
    # Tensors and plain data only, so `_load_rng` reads it back with ``weights_only=True``.
    name, key, *rest = np.random.get_state(legacy=True)
    return {
        "python": random.getstate(),
        "numpy": (name, np.asarray(key).tolist(), *rest),
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
    with _written_in_place(root / f"step-{step:06d}") as tmp:
        torch.save(model if isinstance(model, dict) else model.state_dict(), tmp / "model.pt")
        torch.save(optimizer if isinstance(optimizer, dict) else optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(_rng_state(), tmp / "rng.pt")
        (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **trainer_state}, indent=1))
    final = root / f"step-{step:06d}"
    pointer = root / ".latest.tmp"
    pointer.write_text(final.name)
    os.replace(pointer, root / "latest")
    for old in sorted(p for p in root.glob("step-*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


@contextlib.contextmanager
def _written_in_place(final: Path) -> Iterator[Path]:
    """A temporary folder beside ``final`` to write into; renamed to ``final`` (replacing
    it) once the block ends without an error, so ``final`` is always whole or absent."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".tmp-{final.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    yield tmp
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)


class _TrainerState(BaseModel):
    """trainer_state.json, checked before a run resumes from it: the step, and what the
    sampler and RLPR saved (their ``load_state_dict`` checks what is inside)."""

    model_config = ConfigDict(extra="allow")

    step: int = Field(ge=0, strict=True)
    sampler: dict[str, Any] | None = None
    rlpr: dict[str, Any] | None = None


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    apply: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Restore everything saved at ``path``; returns the trainer state (step, sampler...).
    ``apply(weights, optimizer_state)`` loads the two state dicts instead of
    ``load_state_dict`` (a sharded model's loader).

    A file of the checkpoint that is missing, cut short, edited or not this model's is
    one ValueError naming it; the trainer state is read first, so a checkpoint refused
    for it has changed nothing."""
    state = _trainer_state(path / "trainer_state.json")
    device = next(model.parameters()).device if apply is None else torch.device("cpu")
    weights = _load(path / "model.pt", lambda f: torch.load(f, map_location=device, weights_only=True))
    optimizer_state = _load(path / "optimizer.pt", lambda f: torch.load(f, map_location=device, weights_only=True))
    try:
        if apply is not None:
            apply(weights, optimizer_state)
        else:
            model.load_state_dict(weights)
            optimizer.load_state_dict(optimizer_state)
    except (RuntimeError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: model.pt and optimizer.pt do not fit this model ({_first_line(e)})") from None
    _restore_rng(path)
    return state


def _restore_rng(path: Path) -> None:
    """Set the RNG states the checkpoint at ``path`` saved (rng.pt), or a ValueError naming it."""
    rng = _load(path / "rng.pt", _load_rng)
    try:
        _set_rng_state(rng)
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:
        raise ValueError(f"{path / 'rng.pt'}: not the RNG states a checkpoint saves ({_first_line(e)})") from None


def _trainer_state(file: Path) -> dict[str, Any]:
    try:
        return _TrainerState.model_validate_json(file.read_bytes()).model_dump(exclude_unset=True)
    except OSError as e:
        raise ValueError(f"{file}: unreadable ({e.strerror or e})") from None
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{file}: {f'field {where!r}: ' if where else ''}{err['msg']}") from None


def _load(file: Path, load: Callable[[Path], Any]) -> Any:
    try:
        return load(file)
    except OSError as e:
        raise ValueError(f"{file}: unreadable ({e.strerror or e})") from None
    except Exception as e:  # noqa: BLE001 - edited or cut-short bytes raise whatever the unpickler meets
        raise ValueError(f"{file}: not a checkpoint file torch can read ({_first_line(e)})") from None


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return (lines[0][:200] if lines else "") or type(e).__name__


def _load_rng(file: Path) -> dict[str, Any]:
    """rng.pt, read without running code: a pickle can call anything as it loads, so a
    checkpoint file edited or swapped would run it when a run resumes from it."""
    try:
        return torch.load(file, weights_only=True)
    except pickle.UnpicklingError:
        # Written before numpy's key was saved as a list: allow that array's globals, no more.
        core = np._core if hasattr(np, "_core") else np.core
        array = [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]
        with torch.serialization.safe_globals(array):
            return torch.load(file, weights_only=True)


# -- the warm start's checkpoints --------------------------------------------------------

_WARM_START = re.compile(r"warm-start-(\d{6,})")


class _WarmStartInfo(BaseModel):
    """warm_start.json: how far the warm start got, checked before a run goes on from it."""

    model_config = ConfigDict(extra="forbid")

    sft_step: int = Field(ge=0, strict=True)
    """Supervised steps taken."""
    done: bool = Field(strict=True)
    """The warm start ended here: the weights are those RL starts from (and the KL reference)."""
    time_s: float = Field(0.0, ge=0.0)
    """Seconds of warm start up to here (``time/sft_s`` goes on from it)."""


@dataclass(frozen=True)
class WarmStartCheckpoint:
    """A warm start read back: how far it got, the supervised loop's state (`sft.Imitation`)
    and the oracle's episodes it trains on (both None once it is done)."""

    path: Path
    sft_step: int
    done: bool
    time_s: float
    state: dict[str, Any] | None
    episodes: list[Trajectory] | None


def save_warm_start(
    run_dir: Path,
    model: torch.nn.Module,
    *,
    sft_step: int,
    time_s: float,
    state: dict[str, Any] | None = None,
    episodes: Sequence[Trajectory] = (),
) -> Path:
    """Write checkpoints/warm-start-NNNNNN (NNNNNN: supervised steps taken): the weights, the
    RNG states and warm_start.json; with ``state`` (the loop's, while the warm start runs)
    also state.pt and the oracle's ``episodes`` (episodes.jsonl), so it goes on from there
    on the same data. Without ``state`` it marks the warm start done and keeps the weights
    alone: the policy RL starts from, which a resumed run's KL reference is. Written into
    a temporary folder and renamed into place, then older warm-start checkpoints are
    deleted, so a run killed at any moment keeps one whole."""
    root = run_dir / "checkpoints"
    final = root / f"warm-start-{sft_step:06d}"
    with _written_in_place(final) as tmp:
        torch.save(model.state_dict(), tmp / "model.pt")
        torch.save(_rng_state(), tmp / "rng.pt")
        if state is not None:
            torch.save(state, tmp / "state.pt")
            (tmp / "episodes.jsonl").write_text("".join(t.to_json() + "\n" for t in episodes), encoding="utf-8")
        info = _WarmStartInfo(sft_step=sft_step, done=state is None, time_s=time_s)
        (tmp / "warm_start.json").write_text(info.model_dump_json(indent=1))
    for old in _warm_starts(root):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_warm_start(run_dir: Path, *, done: bool = False) -> Path | None:
    """The newest warm-start checkpoint of ``run_dir`` (with ``done``: only if the warm start
    ended there), or None (every one in place is whole: each is renamed there once written)."""
    found = _warm_starts(run_dir / "checkpoints")
    if not found or (done and not _warm_start_info(found[-1] / "warm_start.json").done):
        return None
    return found[-1]


def _warm_starts(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    named = [(int(m.group(1)), p) for p in root.iterdir() if (m := _WARM_START.fullmatch(p.name)) and p.is_dir()]
    return [p for _, p in sorted(named)]


def load_warm_start(path: Path, model: torch.nn.Module) -> WarmStartCheckpoint:
    """Load the weights and RNG states saved at ``path`` (`save_warm_start`) and return the
    rest. A file that is missing, cut short, edited or not this model's is one ValueError
    naming it; warm_start.json is read first, so a checkpoint refused for it has changed
    nothing."""
    info = _warm_start_info(path / "warm_start.json")
    device = next(model.parameters()).device
    state = None if info.done else _load(path / "state.pt", lambda f: torch.load(f, weights_only=True))
    episodes = None if info.done else _episodes(path / "episodes.jsonl")
    try:
        model.load_state_dict(warm_start_weights(path, device))
    except (RuntimeError, KeyError, TypeError) as e:
        raise ValueError(f"{path / 'model.pt'}: does not fit this model ({_first_line(e)})") from None
    _restore_rng(path)
    return WarmStartCheckpoint(path, info.sft_step, info.done, info.time_s, state, episodes)


def warm_start_weights(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The model's weights saved at ``path`` (a warm-start checkpoint)."""
    return _load(path / "model.pt", lambda f: torch.load(f, map_location=device, weights_only=True))


def _warm_start_info(file: Path) -> _WarmStartInfo:
    try:
        return _WarmStartInfo.model_validate_json(file.read_bytes())
    except OSError as e:
        raise ValueError(f"{file}: unreadable ({e.strerror or e})") from None
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{file}: {f'field {where!r}: ' if where else ''}{err['msg']}") from None


def _episodes(file: Path) -> list[Trajectory]:
    try:
        return [Trajectory.from_json(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError as e:
        raise ValueError(f"{file}: unreadable ({e.strerror or e})") from None
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        raise ValueError(f"{file}: not the oracle's episodes a warm start saves ({_first_line(e)})") from None


# -- whose run a directory holds -------------------------------------------------------


def other_run(run_dir: Path, config: dict[str, Any], *, resume: bool) -> str | None:
    """Why a run of ``config`` (its ``to_dict()``) that starts from step 0 must not write
    into ``run_dir``, or None when it may: the directory is new, empty of run files, or
    holds a run of the same config (which the new run replaces: `clear_run`)."""
    if run_dir.exists() and not run_dir.is_dir():
        return f"output_dir {run_dir} is a file, not a directory; choose another output_dir"
    found = [name for name in RUN_FILES if (run_dir / name).exists()]
    if not found:
        return None
    saved = _saved_config(run_dir / "config.json")
    differences = None if saved is None else _differences(saved, config)
    if differences == []:
        return None
    if differences is None:
        what = f"run files ({', '.join(found)}) without a readable config.json"
    else:
        what = f"a run of another config ({'; '.join(differences[:3])})"
    how = "resume=False starts a new run there" if not resume else "there is no checkpoint to resume it from"
    keep = "choose another output_dir"
    if not resume and _has_checkpoint(run_dir):
        keep += ", or set resume=True to continue that run with this config"
    return (
        f"output_dir {run_dir} holds {what}, and {how}: the two runs would mix and the earlier one would be "
        f"lost. To keep it, {keep}; to replace it, delete {run_dir} first"
    )


def _has_checkpoint(run_dir: Path) -> bool:
    if latest_warm_start(run_dir) is not None:
        return True
    try:
        return latest_checkpoint(run_dir) is not None
    except ValueError:
        return False


def clear_run(run_dir: Path) -> None:
    """Delete the run files of ``run_dir`` (and the report made of them); others stay."""
    for name in (*RUN_FILES, *_REPORT_FILES):
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _saved_config(path: Path) -> dict[str, Any] | None:
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return saved if isinstance(saved, dict) else None


def _differences(saved: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """``field: saved -> new`` for each field whose value differs (how a run is started aside)."""
    names = [n for n in dict.fromkeys([*saved, *config]) if n not in _SAME_RUN_IGNORES]
    return [
        f"{name}: {_short(saved.get(name, '(unset)'))} -> {_short(config.get(name, '(unset)'))}"
        for name in names
        if saved.get(name, _MISSING) != config.get(name, _MISSING)
    ]


_MISSING = object()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
