"""``agentenv eval`` and ``agentenv compare``: running an evaluation behind a progress bar
while watching whether the policy answers at all, the tables of an `EvalResult` and a
`Comparison`, and the two commands (rich; imported by the command line only)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import agentenv
from agentenv.cli.common import (
    ENV_HELP,
    EXIT_INTERRUPTED,
    EXIT_POLICY_FAILED,
    LOCAL_MODEL_HELP,
    OPENAI_PANEL,
    Device,
    Dtype,
    EnforceEager,
    LocalModel,
    MaxContextTokens,
    MaxNewTokens,
    Precision,
    Temperature,
    TopP,
    env_kwargs_of,
    env_spec_of,
    fail,
    local_policy,
    mean_of,
    number,
    prepare_out,
    refuse_same_file,
    run_env_kwargs,
    sandbox_choice_shown,
    stdout,
)
from agentenv.cli.report import print_report
from agentenv.core.policy import Conversation, Policy, PolicyFailure, PolicyOutput
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.eval.evaluation import (
    POLICY_ERROR_PREFIX,
    Comparison,
    Estimate,
    EvalResult,
    compare,
    default_concurrency,
    evaluate,
)
from agentenv.eval.evaluation import load as load_result
from agentenv.registry import EnvSpec
from agentenv.report import build_eval_report

__all__ = [
    "EvalRun",
    "EvalSummary",
    "PolicyKind",
    "PolicyUnreachable",
    "compare_command",
    "comparison_table",
    "eval_command",
    "figure_tables",
    "format_figure",
]


class PolicyKind(str, Enum):
    scripted = "scripted"
    openai = "openai"
    hf = "hf"
    vllm = "vllm"


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


@dataclass(frozen=True, slots=True)
class EvalSummary:
    """What an evaluation printed, computed from its trajectories."""

    episodes: int
    success_rate: float
    mean_reward: float
    """Mean over episodes of the summed step rewards (task reward included)."""
    mean_turns: float
    failures: dict[Failure, int]
    """Episodes by how they ended; every kind is present, zeros included."""
    by_difficulty: dict[int, tuple[int, float]]
    """Task difficulty -> (episodes, success rate)."""
    errors: list[str]
    """Distinct infra errors, first seen first."""

    @classmethod
    def of(cls, trajectories: Sequence[agentenv.Trajectory]) -> EvalSummary:
        n = len(trajectories)
        failures = Counter(t.failure for t in trajectories)
        groups: dict[int, list[bool]] = {}
        for t in trajectories:
            groups.setdefault(t.task.metadata.difficulty, []).append(t.success)
        return cls(
            episodes=n,
            success_rate=mean_of(t.success for t in trajectories),
            mean_reward=mean_of(t.total_reward for t in trajectories),
            mean_turns=mean_of(t.turns for t in trajectories),
            failures={kind: failures.get(kind, 0) for kind in Failure},
            by_difficulty={d: (len(s), mean_of(s)) for d, s in sorted(groups.items())},
            errors=list(dict.fromkeys(t.error for t in trajectories if t.error)),
        )

    def tables(self) -> list[Table]:
        main = Table()
        main.add_column("measure")
        main.add_column("value", justify="right")
        main.add_row("episodes", str(self.episodes))
        main.add_row("success rate", f"{self.success_rate:.1%}")
        main.add_row("mean reward", number(self.mean_reward, ".3f"))
        main.add_row("mean turns", f"{self.mean_turns:.2f}")
        for kind, count in self.failures.items():
            main.add_row(f"failure: {kind.value}", str(count))
        by_difficulty = Table(title="by difficulty", title_justify="left")
        for column in ("difficulty", "episodes", "success rate"):
            by_difficulty.add_column(column, justify="right")
        for difficulty, (count, rate) in self.by_difficulty.items():
            by_difficulty.add_row(str(difficulty), str(count), f"{rate:.1%}")
        return [main, by_difficulty]


def eval_command(
    env_id: Annotated[str, typer.Argument(metavar="ENV", help=ENV_HELP)],
    policy: Annotated[
        PolicyKind,
        typer.Option(
            help="scripted: the env's oracle; openai: a chat endpoint; hf: a local model, sampled as the trainer "
            "samples (transformers); vllm: the same on a vLLM engine."
        ),
    ] = PolicyKind.scripted,
    episodes: Annotated[
        int, typer.Option("--episodes", "-n", help="Task draws: draw i resets with seed + i, which picks its task.")
    ] = 10,
    k: Annotated[int, typer.Option("--k", "-k", help="Samples per draw: same task and seed, k episodes.")] = 1,
    out: Annotated[Path | None, typer.Option(help="Write the trajectories here as JSONL.")] = None,
    append: Annotated[bool, typer.Option(help="Append to --out instead of overwriting it.")] = False,
    json_out: Annotated[
        str | None, typer.Option("--json", metavar="<path>", help="Write the results as JSON here ('-': stdout only).")
    ] = None,
    report: Annotated[Path | None, typer.Option(help="Write an HTML report with a trajectory viewer here.")] = None,
    compare_to: Annotated[
        Path | None, typer.Option(help="A baseline (an --json result or an --out JSONL) to compare with, paired.")
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="Draw i resets with seed + i.")] = 0,
    concurrency: Annotated[
        int | None, typer.Option(help=f"Episodes live at once (default: 2 per CPU, here {default_concurrency()}).")
    ] = None,
    confidence: Annotated[float, typer.Option(help="Of the bootstrap intervals over tasks.")] = 0.95,
    max_turns: Annotated[int | None, typer.Option(help="Override the env's turn limit.")] = None,
    base_url: Annotated[
        str | None, typer.Option(help="Endpoint, e.g. http://127.0.0.1:8000/v1.", rich_help_panel=OPENAI_PANEL)
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help=f"openai: the model name the endpoint serves; hf, vllm: {LOCAL_MODEL_HELP}."),
    ] = None,
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the API key.", rich_help_panel=OPENAI_PANEL)
    ] = "OPENAI_API_KEY",
    temperature: Temperature = None,
    top_p: TopP = None,
    max_new_tokens: MaxNewTokens = None,
    max_context_tokens: MaxContextTokens = None,
    device: Device = "auto",
    dtype: Precision = Dtype.auto,
    enforce_eager: EnforceEager = False,
) -> None:
    """Run a policy on an env, k samples per task: pass@k, pass^k, mean@k with intervals, failures."""
    env_spec = env_spec_of(env_id)
    env_id = env_spec.id
    for name, value in (("--episodes", episodes), ("--k", k), ("--concurrency", concurrency)):
        if value is not None and value < 1:
            fail(f"{name} must be >= 1, got {value}")
    if not 0 < confidence < 1:
        fail(f"--confidence must be between 0 and 1, got {confidence}")
    env_kwargs = env_kwargs_of(env_spec, max_turns)
    json_path = Path(json_out) if json_out not in (None, "-") else None
    refuse_same_file([("--compare-to", compare_to)], [("--out", out), ("--json", json_path), ("--report", report)])
    baseline = _load_result(compare_to, "--compare-to") if compare_to is not None else None
    if out is not None:
        prepare_out(out, append=append, option="--out")
    for option, path in (("--json", json_path), ("--report", report)):
        if path is not None:
            prepare_out(path, append=False, option=option)
    local = LocalModel(model, temperature, top_p, max_new_tokens, max_context_tokens, device, dtype, enforce_eager)
    chosen = _make_policy(env_spec, policy, base_url=base_url, local=local, api_key_env=api_key_env, seed=seed)
    env_kwargs = run_env_kwargs(chosen, env_spec, env_kwargs)
    label = f"{env_id} · {policy.value} policy" + (f" {model}" if policy is not PolicyKind.scripted and model else "")

    # With --json -, stdout is the JSON alone: the progress bar and the tables go to stderr.
    console = Console(highlight=False, stderr=json_out == "-")
    watched = EvalRun(chosen, console)
    try:
        with sandbox_choice_shown():
            result = watched.run(
                env_id,
                n=episodes,
                k=k,
                seed=seed,
                concurrency=concurrency,
                out=out,
                env_kwargs=env_kwargs,
                label=label,
                confidence=confidence,
            )
    except PolicyUnreachable as e:
        fail(f"the policy could not be reached, so nothing was evaluated: {e}", code=EXIT_POLICY_FAILED)
    except KeyboardInterrupt:
        where = f" (written to {out})" if out is not None else ""
        Console(stderr=True).print(f"interrupted: {len(watched.finished)} of {episodes * k} episodes finished{where}")
        raise typer.Exit(code=EXIT_INTERRUPTED) from None
    finally:
        close = getattr(chosen, "close", None)
        if callable(close):
            close()
    finished = watched.finished

    if baseline is not None:
        result.comparison = compare(baseline, result, confidence=confidence)
    _print_eval(console, result, finished, out)
    cited = out if out is not None and not append else None  # appended: its lines are not this run's numbers
    _write_eval_outputs(console, result, finished, json_out=json_out, report=report, out=cited)
    if result.policy_failures:
        first = next(t.error for t in finished if (t.error or "").startswith(POLICY_ERROR_PREFIX))
        fail(
            f"the policy failed in {result.policy_failures} of {result.episodes} episodes (first: {first}); "
            "they count as failed samples in the figures above",
            code=EXIT_POLICY_FAILED,
        )


def _print_eval(console: Console, result: EvalResult, finished: list[agentenv.Trajectory], out: Path | None) -> None:
    summary = EvalSummary.of(finished)
    console.print(f"[bold]{escape(result.label)}[/]")
    for table in [summary.tables()[0], *figure_tables(result)]:
        console.print(table)
    for error in summary.errors[:3]:
        console.print(f"infra error: {escape(error)}", soft_wrap=True)
    if result.comparison is not None:
        console.print(comparison_table(result.comparison))
    if out is not None:
        console.print(f"wrote {len(finished)} trajectories to {escape(str(out))}", soft_wrap=True)


def _write_eval_outputs(
    console: Console,
    result: EvalResult,
    finished: list[agentenv.Trajectory],
    *,
    json_out: str | None,
    report: Path | None,
    out: Path | None,
) -> None:
    if json_out == "-":
        print(result.model_dump_json(indent=1))
    elif json_out is not None:
        Path(json_out).write_text(result.model_dump_json(indent=1) + "\n", encoding="utf-8")
        console.print(f"wrote the results to {escape(json_out)}", soft_wrap=True)
    if report is not None:
        source = out.name if out is not None else "the evaluation"
        print_report(console, build_eval_report(finished, result, report, source=source))


def _load_result(path: Path, option: str) -> EvalResult:
    try:
        return load_result(path)
    except ValueError as e:
        fail(f"{option}: {e}")


def compare_command(
    a: Annotated[Path, typer.Argument(metavar="A", help="An eval --json result, or an eval --out JSONL.")],
    b: Annotated[Path, typer.Argument(metavar="B", help="The same, for the other model or checkpoint.")],
    k: Annotated[int | None, typer.Option("--k", "-k", help="Samples per task (default: the smaller k).")] = None,
    confidence: Annotated[float, typer.Option(help="Of the paired bootstrap intervals.")] = 0.95,
    json_out: Annotated[
        Path | None, typer.Option("--json", metavar="<path>", help="Write the comparison here.")
    ] = None,
) -> None:
    """Compare two evaluations on the tasks both ran: B - A, paired bootstrap over tasks."""
    if k is not None and k < 1:
        fail(f"--k must be >= 1, got {k}")
    if not 0 < confidence < 1:
        fail(f"--confidence must be between 0 and 1, got {confidence}")
    refuse_same_file([("A", a), ("B", b)], [("--json", json_out)])
    first, second = _load_result(a, "A"), _load_result(b, "B")
    if k is not None and k > min(first.k, second.k):
        fail(f"--k {k} is more than the samples per task of A ({first.k}) or B ({second.k})")
    if json_out is not None:
        prepare_out(json_out, append=False, option="--json")
    comparison = compare(first, second, k=k, confidence=confidence)
    if comparison.matched == 0:
        fail(f"A and B share no task (A has {comparison.only_a}, B {comparison.only_b}): nothing to compare")
    stdout().print(comparison_table(comparison))
    if json_out is not None:
        json_out.write_text(comparison.model_dump_json(indent=1) + "\n", encoding="utf-8")


def _make_policy(
    env_spec: EnvSpec, kind: PolicyKind, *, base_url: str | None, local: LocalModel, api_key_env: str, seed: int
) -> agentenv.Policy:
    if kind is PolicyKind.scripted:
        if env_spec.oracle is None:
            fail(f"env {env_spec.id!r} has no scripted oracle; use --policy openai, hf or vllm")
        return env_spec.make_oracle()
    if kind in (PolicyKind.hf, PolicyKind.vllm):
        return local_policy("transformers" if kind is PolicyKind.hf else "vllm", local, seed=seed)
    model = local.model
    if not base_url or not model:
        fail("--policy openai needs --base-url and --model")
    from agentenv.policies.openai import OpenAIPolicy

    # Only the command line reads the key from the environment; the library never does.
    # An unset variable means no key, which local servers (vLLM, Ollama) accept.
    api_key = os.environ.get(api_key_env) or None
    try:
        return OpenAIPolicy(base_url=base_url, model=model, api_key=api_key)
    except (TypeError, ValueError) as e:
        fail(f"cannot build the openai policy: {e}")
