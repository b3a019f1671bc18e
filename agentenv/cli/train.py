"""``agentenv train CONFIG``: multi-turn GRPO from a config file (torch is imported when it runs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

import agentenv
from agentenv.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_TRAINING_STOPPED,
    fail,
    number,
    stdout,
)


def train_command(
    config_path: Annotated[Path, typer.Argument(metavar="CONFIG", help="A GRPOConfig as YAML or TOML.")],
    steps: Annotated[int | None, typer.Option(help="Override the number of steps.")] = None,
    output_dir: Annotated[Path | None, typer.Option("--output-dir", help="Override the run directory.")] = None,
    model: Annotated[str | None, typer.Option(help="Override the model: a path, a hub id, or 'tiny'.")] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Threads torch computes with on the CPU (torch_threads). Default: the config's, "
            "else the CPUs this process may use (affinity and CPU quota), shared among a torchrun job's ranks.",
        ),
    ] = None,
) -> None:
    """Train a model with multi-turn GRPO (needs the train extra: torch + transformers)."""
    try:
        from agentenv.trainers import GRPOConfig, GRPOTrainer
    except ImportError as e:
        fail(f"training needs torch and transformers ({e}); install with: pip install -e '.[train]'")
    from agentenv.trainers.threads import default_threads

    try:
        config = GRPOConfig.from_file(config_path)
        if threads is None and config.torch_threads is None:
            threads = default_threads()  # torch's own default counts the machine's cores, not ours
        overrides = {
            k: v
            for k, v in (
                ("steps", steps),
                ("output_dir", str(output_dir) if output_dir else None),
                ("model", model),
                ("torch_threads", threads),
            )
            if v is not None
        }
        if overrides:
            config = GRPOConfig.from_dict({**config.to_dict(), **overrides}, source=str(config_path))
        trainer = GRPOTrainer(config.model, envs=config.envs, config=config)
    except (ValueError, FileNotFoundError, agentenv.UnknownEnvError, RuntimeError, ConnectionError, ImportError) as e:
        fail(str(e))  # ConnectionError, ImportError: the ray option's cluster or package is missing
    from agentenv.trainers.distributed import RankFailure
    from agentenv.trainers.trackers import TrackerError

    try:
        history = trainer.train()
    except RankFailure as e:  # under torchrun: another rank died; torchrun names it
        fail(str(e), code=1)
    except (FileExistsError, TrackerError) as e:  # another run in output_dir; a tracker that cannot start
        fail(str(e))  # both before anything is trained
    except ValueError as e:  # what the run met and cannot go on with (a factory env and sft_steps, NaN weights)
        fail(f"training stopped: {e}", code=EXIT_TRAINING_STOPPED)
    except KeyboardInterrupt:
        stdout().print(
            f"interrupted; resume from the last checkpoint in {config.output_dir} by running the same command"
        )
        raise typer.Exit(code=EXIT_INTERRUPTED) from None
    if trainer.dist.is_writer:  # under torchrun, rank 0 speaks for the run
        _print_curve(history, config.output_dir)


def _print_curve(history: Sequence[dict[str, Any]], run_dir: str) -> None:
    table = Table(title="learning curve", title_justify="left")
    for column in ("step", "train success", "task reward", "held-out success"):
        table.add_column(column, justify="right")
    for row in history:  # a resumed run's earlier rows are read back from metrics.jsonl: any value
        if type(row.get("step")) is not int:  # not a step's row (the warm start's have sft_step)
            continue
        held_out = _figure(row.get("eval/success_rate"))
        if held_out is None and row is not history[-1] and row["step"] % 5:
            continue
        success, reward = _figure(row.get("success_rate", 0)), _figure(row.get("reward/task", 0))
        table.add_row(
            str(row["step"]),
            "" if success is None else f"{success:.0%}",
            "" if reward is None else number(reward, ".3f"),
            "" if held_out is None else f"{held_out:.0%}",
        )
    stdout().print(table)
    stdout().print(f"run directory: {run_dir} (metrics.jsonl, trajectories/, checkpoints/, final/)")


def _figure(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
