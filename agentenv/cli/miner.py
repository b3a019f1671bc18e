"""``agentenv miner show RUN_DIR``: the failure miner's pools, failures and hardest tasks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agentenv.cli.common import (
    fail,
    stdout,
)


def miner_show_command(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A training run directory (output_dir).")],
    top: Annotated[int, typer.Option(help="Rows in the family and task tables.")] = 10,
) -> None:
    """Pools, informative groups, failures by kind and the top failing families of a run."""
    from agentenv.miner.report import MinerReport

    try:
        report = MinerReport.from_run(run_dir)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    if report.skipped_lines:
        Console(stderr=True, highlight=False).print(
            f"skipped: metrics.jsonl: {report.skipped_lines} unreadable line(s) (cut short?)", soft_wrap=True
        )
    out = stdout()
    out.print(f"[bold]failure miner[/] · {escape(str(run_dir))} · checkpoint step {report.step}")
    out.print(_two_columns("pools", ("pool", "tasks"), [(k, str(v)) for k, v in report.pools()]))
    m = report.metrics
    if m:
        informative = m.get("miner/informative_frac", 0)
        shown = f"{informative:.0%}" if isinstance(informative, int | float) else escape(str(informative))
        rows = [("informative groups (last step)", shown)]
        rows += [
            (k.removeprefix("miner/"), str(v))
            for k, v in m.items()
            if k.startswith("miner/new/") or k == "miner/requeued"
        ]
        out.print(_two_columns(f"step {m.get('step')}", ("measure", "value"), rows))
    out.print(
        _two_columns("failures by kind", ("kind", "episodes"), [(k, str(v)) for k, v in report.failures_by_kind()])
    )
    families = Table(title="top failing families", title_justify="left")
    for column in ("family", "attempts", "failures", "failure rate"):
        families.add_column(column, justify="left" if column == "family" else "right")
    for family, attempts, failed, rate in report.families(top):
        families.add_row(escape(family), str(attempts), str(failed), f"{rate:.0%}")
    out.print(families)
    hardest = Table(title="hardest tasks", title_justify="left")
    for column in ("task", "status", "attempts", "success", "ema", "break turns"):
        hardest.add_column(column, justify="left" if column in ("task", "status") else "right")
    for task_id, r in report.hardest(top):
        turns = ", ".join(f"{t}:{n}" for t, n in sorted(r.break_turns.items()))
        hardest.add_row(
            escape(task_id),
            r.status,
            str(r.attempts),
            f"{r.success_rate:.0%}",
            "-" if r.ema is None else f"{r.ema:.2f}",
            turns,
        )
    out.print(hardest)


def _two_columns(title: str, headers: tuple[str, str], rows: Sequence[tuple[str, str]]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(headers[0])
    table.add_column(headers[1], justify="right")
    for key, value in rows:
        table.add_row(escape(key), value)
    return table
