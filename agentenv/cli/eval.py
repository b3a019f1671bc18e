"""What ``agentenv eval`` and ``agentenv compare`` need beyond their options: running the
evaluation behind a progress bar while watching whether the policy answers at all,
and the tables of an `EvalResult` and a `Comparison` (rich; imported by the command
line only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agentenv.core.policy import Conversation, Policy, PolicyFailure, PolicyOutput
from agentenv.core.trajectory import Trajectory
from agentenv.eval.evaluation import POLICY_ERROR_PREFIX, Comparison, Estimate, EvalResult, evaluate

__all__ = ["EvalRun", "PolicyUnreachable", "comparison_table", "figure_tables", "format_figure"]


class PolicyUnreachable(Exception):
    """Raised out of the rollout to stop an evaluation whose policy never answered."""


class EvalRun:
    """One evaluation behind a progress bar. It wraps the policy and counts the actions
    it gave: when the first episodes all fail in the policy with not one action given (a
    closed port, a wrong URL), `run` stops with `PolicyUnreachable` instead of running
    every episode into the same wall. ``finished`` holds the episodes that ended, also
    after an interrupt."""

    def __init__(self, policy: Policy, console: Console) -> None:
        self.inner = policy
        self.console = console
        self.actions = 0
        self.finished: list[Trajectory] = []

    def act(self, conversations: Sequence[Conversation]) -> list[PolicyOutput]:
        outputs = self.inner.act(conversations)
        self.actions += sum(not isinstance(o, PolicyFailure) for o in outputs)
        return outputs

    def run(self, env_id: str, *, n: int, k: int, **options: Any) -> EvalResult:
        """`agentenv.eval.evaluation.evaluate` of this policy, with ``options`` passed on."""
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[solved]} solved"),
            console=self.console,
            transient=True,
        )
        with progress:
            bar = progress.add_task(env_id, total=n * k, solved=0)

            def on_episode(trajectory: Trajectory) -> None:
                self.finished.append(trajectory)
                progress.update(bar, advance=1, solved=sum(t.success for t in self.finished))
                if self.actions == 0 and (trajectory.error or "").startswith(POLICY_ERROR_PREFIX):
                    raise PolicyUnreachable(trajectory.error)

            return evaluate(env_id, self, n=n, k=k, on_episode=on_episode, **options)


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
    Differences of success figures are in percentage points. Each row says over how many
    tasks it was computed: a figure counts only the shared tasks where both sides define
    it (pass@j: j valid samples on each side), and its A and B are over those tasks too."""
    level = f"{c.confidence:.0%}"
    table = Table(title=f"B - A on {c.matched} shared tasks", title_justify="left", caption_justify="left")
    fewer = [name for name, d in c.differences.items() if d.tasks < c.matched]
    table.caption = (
        f"A: {escape(c.a)}\nB: {escape(c.b)}\n"
        f"{c.only_a} tasks only in A, {c.only_b} only in B; differences in points (mean@k: in reward); "
        f"paired bootstrap over tasks, {level} intervals"
    )
    if fewer:
        table.caption += (
            f"\n{', '.join(fewer)}: over fewer than the {c.matched} shared tasks (tasks column), those where "
            "A and B both have enough valid samples (infra left out) and a finite reward; A and B there are "
            "over the same tasks"
        )
    for column in ("figure", "tasks", "A", "B", "B - A", f"{level} interval", "verdict"):
        table.add_column(column, justify="left" if column in ("figure", "verdict") else "right")
    fewest = _min_tasks_for_verdict(c.confidence)
    caption = table.caption
    for name, d in c.differences.items():
        verdict = ""
        if d.low is not None and d.high is not None and name != "disagreement":
            verdict = "B > A" if d.low > 0 else "A > B" if d.high < 0 else "unclear"
            if verdict != "unclear" and d.tasks < fewest:
                verdict = "too few"
                table.caption = caption + (
                    f"\ntoo few: under {fewest} tasks, where even a unanimous difference could be luck (sign test)"
                )
        table.add_row(
            name,
            str(d.tasks),
            format_figure(name, c.a_values.get(name)),
            format_figure(name, c.b_values.get(name)),
            _signed(name, d.value),
            "-" if d.low is None or d.high is None else f"[{_signed(name, d.low)}, {_signed(name, d.high)}]",
            verdict,
        )
    return table


def _min_tasks_for_verdict(confidence: float) -> int:
    """The fewest tasks on which a difference can be called: a bootstrap over tasks that
    all moved one way has no spread (one task, one sample each: [+100, +100]), so a
    verdict needs as many tasks as a sign test needs for a unanimous result to be
    significant at ``confidence`` (two-sided; 6 at 95%)."""
    tasks = 1
    while 2 * 0.5**tasks >= 1 - confidence:
        tasks += 1
    return tasks


def _signed(name: str, value: float | None) -> str:
    """A difference: reward units for mean@k, percentage points otherwise (no unit: the caption says)."""
    if value is None:
        return "-"
    if name.startswith("mean@"):
        return f"{round(value, 3) + 0.0:+.3f}"
    return f"{round(100 * value, 1) + 0.0:+.1f}"
