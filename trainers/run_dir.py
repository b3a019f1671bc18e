"""A training run's directory (``output_dir``): claiming it, resuming from it, and what
the run writes into it besides metrics.jsonl (`metrics.MetricsLogger`).

The layout (`checkpoint.RUN_FILES`; `agentenv/report/rundir.py` reads it):
config.json and tokenizer/ when a run starts; trajectories/step-NNNNNN.jsonl (the
episodes of each step) and evals/step-NNNNNN.jsonl (the held-out episodes of each
evaluation); checkpoints/ (`checkpoint.save_checkpoint`, and the warm start's:
`checkpoint.save_warm_start`); final/ (the model, or with
LoRA its adapter, and the tokenizer, loadable by path) when the run ends.

A run from step 0 claims the directory first: one holding another run is refused
(FileExistsError saying the fix) and one holding this config's run is cleared
(`checkpoint.other_run`, `checkpoint.clear_run`). In a data-parallel job rank 0 decides
and writes for every rank; a checkpoint and the export are gathered from every rank's
shard, and no rank goes on before they are whole.

Left out: what a checkpoint holds and how it is read back (`checkpoint`, the one home of
checkpoints); the metrics and the report.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from agentenv.core.trajectory import Trajectory
from agentenv.report.rundir import CLAIM_FILE, RunClaim
from agentenv.trainers.checkpoint import (
    WarmStartCheckpoint,
    clear_run,
    latest_checkpoint,
    latest_warm_start,
    load_checkpoint,
    load_warm_start,
    other_run,
    save_checkpoint,
    save_warm_start,
    warm_start_weights,
)
from agentenv.trainers.config import GRPOConfig
from agentenv.trainers.distributed import DataParallel, checkpoint_reachable
from agentenv.trainers.model import Saveable
from agentenv.trainers.progress_bars import quiet_progress_bars

__all__ = ["RunDir"]

Restore = Callable[[dict[str, Any]], None]
"""Loads a part's saved state (a sampler's or RLPR's ``load_state_dict``)."""


class RunDir:
    """The directory of a run of ``config``, as this rank of ``dist`` sees it."""

    def __init__(self, config: GRPOConfig, dist: DataParallel) -> None:
        self.path = Path(config.output_dir)
        self.config = config
        self.dist = dist

    def start(self, tokenizer: Any, *, resumed: bool) -> None:
        """Make the directory ready for the run: a run from step 0 claims it (`claim`) and
        writes config.json and the tokenizer; a resumed run finds them there."""
        if not resumed:
            self.claim()
        self.path.mkdir(parents=True, exist_ok=True)
        if self.dist.is_writer:  # `agentenv report` shows the run as in progress while this process lives
            (self.path / CLAIM_FILE).write_text(RunClaim.of_this_process().model_dump_json())
        if not resumed and self.dist.is_writer:
            (self.path / "config.json").write_text(json.dumps(self.config.to_dict(), indent=1))
            if hasattr(tokenizer, "save_pretrained"):
                tokenizer.save_pretrained(str(self.path / "tokenizer"))

    def release(self) -> None:
        """Remove this process's claim (`start`): the run ended, finished or not."""
        if self.dist.is_writer:
            (self.path / CLAIM_FILE).unlink(missing_ok=True)

    def claim(self) -> None:
        """Before a run from step 0 writes anything: refuse an output_dir holding another
        run (FileExistsError saying the fix), and clear one holding this config's run.
        Rank 0 decides for every rank, so they all stop or go on together."""
        problem = other_run(self.path, self.config.to_dict(), resume=self.config.resume)
        problem = self.dist.agree(problem if self.dist.is_writer else None, what="checking the run directory")
        if problem is not None:
            raise FileExistsError(problem)
        if self.dist.is_writer:
            clear_run(self.path)

    def resume(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, restore: Mapping[str, Restore]
    ) -> int | None:
        """Load the latest checkpoint every rank can read into ``model`` and ``optimizer``,
        and each part's saved state through ``restore`` (by name: "sampler", "rlpr");
        returns its step, or None when there is none. A part's state that does not load
        is one ValueError naming the file, not a traceback from inside the part."""
        path = checkpoint_reachable(latest_checkpoint(self.path), self.dist)
        if path is None:
            return None
        apply = functools.partial(self.dist.load_full_state, model, optimizer) if self.dist.lockstep else None
        state = load_checkpoint(path, model, optimizer, apply=apply)
        for name, load in restore.items():
            try:
                load(state.get(name, {}))
            except (AttributeError, KeyError, IndexError, TypeError, ValueError) as e:
                why = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise ValueError(f"{path / 'trainer_state.json'}: the {name} state: {why}") from None
        step = int(state["step"])
        if self.dist.is_writer:
            print(f"resumed from {path} at step {step}")
        return step

    def checkpoint(
        self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        """Write step ``step``'s checkpoint with the parts' ``state`` (a sharded model's
        gathered first: every rank takes part), keeping the last ``keep_checkpoints``."""
        full = self.dist.full_state(model, optimizer)
        if self.dist.is_writer:
            save_checkpoint(
                self.path,
                step,
                model if full is None else full[0],
                optimizer if full is None else full[1],
                state,
                keep=self.config.keep_checkpoints,
            )
        # No rank starts the next step before the checkpoint is whole: a rank that
        # dies then can resume from it.
        self.dist.barrier(what="writing a checkpoint")

    def checkpoint_warm_start(
        self,
        model: torch.nn.Module,
        *,
        sft_step: int,
        time_s: float,
        state: dict[str, Any] | None = None,
        episodes: Sequence[Trajectory] = (),
    ) -> None:
        """Write the warm start's checkpoint after ``sft_step`` supervised steps
        (`checkpoint.save_warm_start`: with the loop's ``state`` and the oracle's
        ``episodes`` while it runs, the weights alone at its end). Every rank ran the same
        warm start: rank 0 writes it, and no rank goes on before it is whole."""
        if self.dist.is_writer:
            save_warm_start(self.path, model, sft_step=sft_step, time_s=time_s, state=state, episodes=episodes)
        self.dist.barrier(what="writing the warm start's checkpoint")

    def resume_warm_start(self, model: torch.nn.Module) -> WarmStartCheckpoint | None:
        """For a run with no step's checkpoint yet: load the newest warm-start checkpoint
        rank 0 finds into ``model`` (on every rank) and return it; None when there is none."""
        path = checkpoint_reachable(latest_warm_start(self.path), self.dist, marker="warm_start.json")
        if path is None:
            return None
        saved = load_warm_start(path, model)
        if self.dist.is_writer:
            how = "done" if saved.done else f"going on from supervised step {saved.sft_step}"
            print(f"resumed from {path}: the warm start, {how}")
        return saved

    def warm_started_weights(self) -> dict[str, Any] | None:
        """The weights the warm start ended with (the policy RL started from), or None when
        the run kept none (a run from before warm starts were checkpointed)."""
        found = latest_warm_start(self.path, done=True)
        path = checkpoint_reachable(found, self.dist, marker="warm_start.json")
        return None if path is None else warm_start_weights(path)

    def export(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, tokenizer: Any) -> None:
        """Write final/: the model (or, with LoRA, its adapter: peft's format) and the
        tokenizer, loadable by path; a sharded model's weights are gathered from every rank
        first. The training model is left as it is."""
        full = self.dist.full_state(model, optimizer)
        if self.dist.is_writer:
            final = self.path / "final"
            with quiet_progress_bars():
                if isinstance(model, Saveable):
                    extra = {} if full is None else {"state_dict": full[0]}
                    model.save_pretrained(str(final), **extra)
                if isinstance(tokenizer, Saveable):
                    tokenizer.save_pretrained(str(final))
        self.dist.barrier(what="finishing the run")

    def write_episodes(self, folder: str, step: int, trajs: Sequence[Trajectory]) -> None:
        """``trajs`` as ``folder``/step-NNNNNN.jsonl (rank 0 only), one episode a line."""
        if not self.dist.is_writer:
            return
        # One file per step, written whole: a step redone after a resume replaces its file.
        where = self.path / folder
        where.mkdir(parents=True, exist_ok=True)  # train_step() may run without train()
        tmp = where / f".step-{step:06d}.jsonl.tmp"
        # Snapshots (kept for the miner) would multiply the file's size: left out.
        lines = (t.model_copy(update={"snapshots": []}).to_json() if t.snapshots else t.to_json() for t in trajs)
        tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        tmp.replace(where / f"step-{step:06d}.jsonl")
