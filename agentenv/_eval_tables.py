"""The tables ``agentenv eval`` and ``agentenv compare`` print for an `EvalResult` and a
`Comparison` (rich; imported by the command line only)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from agentenv.evaluation import Comparison, Estimate, EvalResult

__all__ = ["comparison_table", "figure_tables", "format_figure"]

_GROUP_FIGURES = 3  # columns of the by-env/family/difficulty tables: pass@1, pass@k, pass^k


def format_figure(name: str, value: float | None) -> str:
    """A figure as printed: success figures in percent, mean@k as a reward. Rounded first,
    so a value that rounds to zero never prints as "-0.0"."""
    if value is None:
        return "-"
    if name.startswith("mean@"):
        return f"{round(value, 3) + 0.0:.3f}"
    return f"{round(100 * value, 1) + 0.0:.1f}%"


def _interval(name: str, e: Estimate) -> str:
    if e.low is None or e.high is None:
        return "-"
    return f"[{format_figure(name, e.low)}, {format_figure(name, e.high)}]"


def figure_tables(result: EvalResult) -> list[Table]:
    """The figures with their intervals, then one table per grouping (by env and by family
    only when there are several)."""
    level = f"{result.confidence:.0%}"
    main = Table(title=f"k = {result.k} per task", title_justify="left", caption_justify="left")
    main.caption = f"{level} bootstrap intervals over tasks"
    for column in ("figure", "estimate", f"{level} interval", "tasks"):
        main.add_column(column, justify="left" if column == "figure" else "right")
    for name, e in result.overall.items():
        main.add_row(name, format_figure(name, e.value), _interval(name, e), str(e.tasks))
    tables = [main]
    names = _group_figures(result)
    for title, groups in (("env", result.by_env), ("family", result.by_family), ("difficulty", result.by_difficulty)):
        if len(groups) < 2 and title != "difficulty":
            continue
        table = Table(title=f"by {title}", title_justify="left")
        table.add_column(title)
        table.add_column("tasks", justify="right")
        for name in names:
            table.add_column(name, justify="right")
        for group, figures in groups.items():
            first = next(iter(figures.values()))
            cells = [_with_interval(name, figures[name]) for name in names if name in figures]
            table.add_row(escape(group), str(first.tasks), *cells)
        tables.append(table)
    return tables


def _group_figures(result: EvalResult) -> list[str]:
    names = [n for n in result.overall if n.startswith("pass")]
    chosen = [names[0], *(n for n in names[1:] if n in (f"pass@{result.k}", f"pass^{result.k}"))]
    return chosen[:_GROUP_FIGURES]


def _with_interval(name: str, e: Estimate) -> str:
    """A compact cell: ``62.5% [40-85]``."""
    if e.value is None:
        return "-"
    if e.low is None or e.high is None:
        return format_figure(name, e.value)
    return f"{format_figure(name, e.value)} [{100 * e.low:.0f}-{100 * e.high:.0f}]"


def comparison_table(c: Comparison) -> Table:
    """A, B, B - A with its paired interval, and which is higher where the interval excludes 0.
    Differences of success figures are in percentage points."""
    level = f"{c.confidence:.0%}"
    table = Table(title=f"B - A on {c.matched} shared tasks", title_justify="left", caption_justify="left")
    table.caption = (
        f"A: {escape(c.a)}\nB: {escape(c.b)}\n"
        f"{c.only_a} tasks only in A, {c.only_b} only in B; differences in points (mean@k: in reward); "
        f"paired bootstrap over tasks, {level} intervals"
    )
    for column in ("figure", "A", "B", "B - A", f"{level} interval", "verdict"):
        table.add_column(column, justify="left" if column in ("figure", "verdict") else "right")
    for name, d in c.differences.items():
        verdict = ""
        if d.low is not None and d.high is not None and name != "disagreement":
            verdict = "B > A" if d.low > 0 else "A > B" if d.high < 0 else "unclear"
        table.add_row(
            name,
            format_figure(name, c.a_values.get(name)),
            format_figure(name, c.b_values.get(name)),
            _signed(name, d.value),
            "-" if d.low is None or d.high is None else f"[{_signed(name, d.low)}, {_signed(name, d.high)}]",
            verdict,
        )
    return table


def _signed(name: str, value: float | None) -> str:
    """A difference: reward units for mean@k, percentage points otherwise (no unit: the caption says)."""
    if value is None:
        return "-"
    if name.startswith("mean@"):
        return f"{round(value, 3) + 0.0:+.3f}"
    return f"{round(100 * value, 1) + 0.0:+.1f}"
