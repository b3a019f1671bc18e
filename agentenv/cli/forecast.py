"""``agentenv forecast RUN_DIR``: ScaleRL's sigmoid of held-out reward against compute,
printed as the fitted parameters with their intervals, the predictions and the notes,
or as one strict JSON object."""

from __future__ import annotations

import json
import math
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agentenv.cli.common import EXIT_NO_FORECAST, fail, stdout
from agentenv.eval.forecast import COMPUTE_KEYS, REWARD_KEY, Forecast, ForecastError, Interval, forecast_rows
from agentenv.eval.forecast import MAX_BOOTSTRAP as MAX_FORECAST_BOOTSTRAP
from agentenv.report.rundir import RunDir

__all__ = ["ComputeAxis", "forecast_command", "forecast_json", "print_forecast"]


class ComputeAxis(str, Enum):
    tokens = "tokens"
    device_hours = "device_hours"


UNITS = {"tokens": "tokens", "device_hours": "device-hours"}


def compute_text(value: float, axis: str) -> str:
    """Compute with its unit, to three significant figures."""
    return f"{value:.3g} {UNITS.get(axis, axis)}"


def _interval(i: Interval, fmt: str) -> str:
    return f"[{i.low:{fmt}}, {i.high:{fmt}}]"


def print_forecast(console: Console, run_dir: Path, f: Forecast) -> None:
    level = f"{f.confidence:.0%}"
    console.print(
        f"[bold]forecast[/] · {escape(str(run_dir))} · held-out reward ({REWARD_KEY}) against "
        f"{COMPUTE_KEYS.get(f.axis, f.axis)}",
        soft_wrap=True,
    )
    console.print(
        f"R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B), R0 = {f.r0:.3f} fixed at the first evaluation "
        f"({compute_text(f.r0_point[0], f.axis)}); fitted to {len(f.points)} evaluations after training began, "
        f"RMSE {f.rmse:.3f}; {level} intervals from {f.n_bootstrap:,} bootstrap refits",
        soft_wrap=True,
    )
    table = Table(title="parameters", title_justify="left")
    for column in ("parameter", "estimate", f"{level} interval"):
        table.add_column(column, justify="left" if column == "parameter" else "right")
    table.add_row("A (asymptote)", f"{f.a.value:.3f}", _interval(f.a, ".3f"))
    table.add_row("B (efficiency)", f"{f.b.value:.3g}", _interval(f.b, ".3g"))
    table.add_row(f"C_mid ({UNITS.get(f.axis, f.axis)})", f"{f.c_mid.value:.3g}", _interval(f.c_mid, ".3g"))
    console.print(table)
    predictions = Table(title=f"predictions (run: {compute_text(f.run_compute, f.axis)})", title_justify="left")
    for column in ("at", "compute", "reward", f"{level} interval"):
        predictions.add_column(column, justify="right")
    for p in f.predictions:
        predictions.add_row(
            f"{p.multiple:g}x", compute_text(p.compute, f.axis), f"{p.reward.value:.3f}", _interval(p.reward, ".3f")
        )
    console.print(predictions)
    for note in f.notes:
        console.print(f"note: {escape(note)}", soft_wrap=True)


def forecast_json(run_dir: Path, f: Forecast, skipped: list[str]) -> dict[str, Any]:
    """The forecast as strict JSON values: a number that is not finite (the compute at 10x
    a run near a float's maximum) is None, since JSON has no Infinity or NaN."""
    return _strict(
        {
            "run_dir": str(run_dir),
            "reward_key": REWARD_KEY,
            "compute_key": COMPUTE_KEYS.get(f.axis, f.axis),
            **f.to_dict(),
            "skipped": skipped,
        }
    )


def _strict(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def forecast_command(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A training run directory (output_dir).")],
    compute: Annotated[
        ComputeAxis,
        typer.Option(help="tokens: generated plus trained (hardware-independent); device_hours: wall time x devices."),
    ] = ComputeAxis.tokens,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print the forecast as one strict JSON object (a non-finite number is null)."),
    ] = False,
    bootstrap: Annotated[
        int, typer.Option(help=f"Bootstrap refits for the intervals (1 to {MAX_FORECAST_BOOTSTRAP:,}).")
    ] = 1000,
    confidence: Annotated[float, typer.Option(help="Of the bootstrap intervals.")] = 0.95,
    seed: Annotated[int, typer.Option(min=0, help="Of the bootstrap.")] = 0,
) -> None:
    """Fit ScaleRL's sigmoid of held-out reward against compute: the asymptote A, the
    efficiency B, the midpoint C_mid, and the reward at 2x and 10x the run's compute.
    Exit code 1 when the run cannot be forecast yet (too few evaluations): nothing is fitted."""
    if not 1 <= bootstrap <= MAX_FORECAST_BOOTSTRAP:
        fail(f"--bootstrap must be between 1 and {MAX_FORECAST_BOOTSTRAP:,}, got {bootstrap}")
    if not 0 < confidence < 1:
        fail(f"--confidence must be between 0 and 1, got {confidence}")
    if not run_dir.is_dir():
        fail(f"no such directory: {run_dir}" if not run_dir.exists() else f"not a directory: {run_dir}")
    data = RunDir(run_dir)
    if (warm := data.warm_start_progress()) is not None:
        fail(f"{run_dir} is in its warm start ({warm}): nothing to forecast yet", code=EXIT_NO_FORECAST)
    if not data.rows:
        fail(f"{run_dir} has no metrics (metrics.jsonl): nothing to forecast", code=EXIT_NO_FORECAST)
    skipped = data.skipped.all()
    for note in skipped:
        Console(stderr=True, highlight=False).print(f"skipped: {escape(note)}", soft_wrap=True)
    try:
        result = forecast_rows(
            data.numbers(), compute=compute.value, n_bootstrap=bootstrap, confidence=confidence, seed=seed
        )
    except ForecastError as e:
        fail(f"{run_dir}: {e}; nothing was fitted", code=EXIT_NO_FORECAST)
    if json_out:
        print(json.dumps(forecast_json(run_dir, result, skipped), indent=1, allow_nan=False))
    else:
        print_forecast(stdout(), run_dir, result)
