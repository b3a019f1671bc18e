"""``agentenv export RUN``: a run's or an evaluation's episodes as a Hugging Face dataset on
disk (`agentenv.export`), for SFT, DPO or per-turn rewards."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from agentenv.cli.common import EXIT_NOTHING_TO_EXPORT, fail, stdout
from agentenv.export import NothingToExport, export

__all__ = ["ExportFormat", "ExportSplit", "export_command"]


class ExportFormat(str, Enum):
    sft = "sft"
    dpo = "dpo"
    turns = "turns"


class ExportSplit(str, Enum):
    train = "train"
    held_out = "held-out"
    all = "all"


def export_command(
    run: Annotated[
        Path,
        typer.Argument(
            metavar="RUN", help="A training run directory, or a JSONL file of trajectories (agentenv eval --out)."
        ),
    ],
    out: Annotated[Path, typer.Option(help="The folder to save the dataset to (datasets.load_from_disk reads it).")],
    format_: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="sft: the solved episodes as chat messages; dpo: the best against the worst episode of each "
            "group (same task and seed); turns: one row per assistant turn with its rewards.",
        ),
    ] = ExportFormat.sft,
    min_reward: Annotated[
        float | None,
        typer.Option(help="sft: keep episodes with a task reward at least this (default: those the env solved)."),
    ] = None,
    split: Annotated[
        ExportSplit, typer.Option(help="For a run: its training episodes, its held-out evaluations', or both.")
    ] = ExportSplit.train,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a dataset saved in --out before.")] = False,
) -> None:
    """Save a run's episodes as a Hugging Face dataset in the shape TRL's trainers take.

    Example: agentenv export runs/tiny --format sft --out runs/tiny-sft
    """
    if not run.exists():
        fail(f"no such file or directory: {run}")
    try:
        dataset = export(run, format_.value, out, overwrite=overwrite, min_reward=min_reward, split=split.value)
    except NothingToExport as e:
        fail(str(e), EXIT_NOTHING_TO_EXPORT)
    except (ValueError, FileExistsError, ImportError) as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot write {out}: {e.strerror or e}")
    stdout().print(f"wrote {len(dataset):,} {format_.value} rows to {escape(str(out))}", soft_wrap=True)
