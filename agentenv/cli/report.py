"""``agentenv report RUN_DIR``: one offline HTML page of a run or of an evaluation's trajectories.

A folder that is no run is refused in one line naming the runs below it; a run that
trains now is said to be in progress (and in its warm start, with how far it is)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from agentenv.cli.common import (
    fail,
    refuse_same_file,
    stdout,
)
from agentenv.eval.evaluation import (
    load_trajectories,
    score,
)
from agentenv.report import Report, build_eval_report, build_report
from agentenv.report.rundir import not_a_run


def report_command(
    run_dir: Annotated[
        Path, typer.Argument(metavar="RUN_DIR", help="A training run directory, or a JSONL file of trajectories.")
    ],
    out: Annotated[Path | None, typer.Option(help="The HTML file (default: RUN_DIR/report.html).")] = None,
    embed: Annotated[
        int,
        typer.Option(
            help="Episodes embedded in the page at most; the rest go to sidecar pages in report_files/ next to it."
        ),
    ] = 1000,
    pages: Annotated[
        bool, typer.Option("--pages/--no-pages", help="Write the episodes not embedded to sidecar pages.")
    ] = True,
    k: Annotated[int | None, typer.Option("--k", "-k", help="For a JSONL file: samples per task.")] = None,
) -> None:
    """Write one HTML file with a run's curves, failures, miner and trajectory viewer (opens offline)."""
    if embed < 0:
        fail(f"--embed must be >= 0, got {embed}")
    if not run_dir.exists():
        fail(f"no such directory: {run_dir}")
    if run_dir.is_dir():
        if (why := not_a_run(run_dir)) is not None:
            fail(why)
        _refuse_run_file(run_dir, out)
    else:
        refuse_same_file([("RUN_DIR", run_dir)], [("--out", out or run_dir.with_suffix(".html"))])
    try:
        if run_dir.is_dir():
            built = build_report(run_dir, out, max_embedded=embed, pages=pages)
        else:  # the trajectories of an evaluation (eval --out): scored as one
            trajectories = load_trajectories(run_dir)
            result = score(trajectories, k, label=run_dir.name)
            built = build_eval_report(
                trajectories,
                result,
                out or run_dir.with_suffix(".html"),
                source=run_dir.name,
                max_embedded=embed,
                pages=pages,
            )
    except ValueError as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot write the report: {e.strerror or e}")
    console = stdout()
    for note in built.skipped:
        Console(stderr=True, highlight=False).print(f"skipped: {escape(note)}", soft_wrap=True)
    print_report(console, built)


def _refuse_run_file(run_dir: Path, out: Path | None) -> None:
    """The report may replace an earlier report in the run, never a file the run wrote."""
    if out is None or not out.is_file() or out.suffix.lower() in (".html", ".htm"):
        return
    if Path(os.path.realpath(run_dir)) in Path(os.path.realpath(out)).parents:
        fail(f"--out {str(out)!r} is a file of the run in {run_dir}: write the report to an .html file instead")


def print_report(console: Console, built: Report) -> None:
    where = f"{built.size_bytes / 1e6:.1f} MB, {built.episodes:,} episodes"
    if built.pages:
        where += (
            f"; {built.embedded:,} embedded, the rest in {built.pages} pages in {built.sidecar_dir} "
            f"({built.sidecar_bytes / 1e6:.1f} MB): keep that folder next to the report"
        )
    console.print(f"wrote {escape(str(built.path))} ({escape(where)})", soft_wrap=True)
    if built.status:
        console.print(f"the run: {escape(built.status)}", soft_wrap=True)
