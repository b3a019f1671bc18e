"""The ``agentenv`` command line: list the envs, play one, evaluate a policy on one,
compare two evaluations, train, and report on a run.

    agentenv list
    agentenv play guess-number-v0 --seed 3
    agentenv eval arithmetic-v0 --policy scripted --episodes 100 --out runs/arith.jsonl
    agentenv eval arithmetic-v0 --policy openai --base-url http://127.0.0.1:8000/v1 --model NAME -n 50 -k 8 \\
        --json runs/a.json --report runs/a.html
    agentenv eval my_envs:MyEnv --policy openai ...      # an env that is code: module:Class
    agentenv compare runs/a.json runs/b.json             # B - A, paired bootstrap over tasks

ENV is a registered id or code, ``module:Class`` or ``module:register_fn`` (see
`agentenv.registry.resolve`). A mistake a user can make (an unknown env id, a bad
option value, an unwritable output file) ends with a one-line ``error:`` on stderr
and exit code 2, never a traceback; an interrupt ends with what was finished and
code 130. ``eval`` ends with code 1 when the policy failed: it stops at once when
the first episodes all failed in the policy before it gave a single action (a
closed port, a wrong URL), and after the run when any episode was lost to it (its
figures, printed, leave those out). When an env picks its sandbox backend
("auto"), the choice is printed. ``forecast`` ends with code 1 when the run cannot be
forecast yet (too few held-out evaluations): it says why and fits nothing. ``train``
ends with code 1 when the run stops on an error it cannot go on with (one line; the
last checkpoint stays). No command writes over a file it reads or another of its
outputs: two options naming one file are refused before anything runs.

    agentenv train examples/tiny.toml
    agentenv report runs/tiny                            # runs/tiny/report.html
    agentenv forecast runs/tiny                          # reward against compute: ScaleRL's sigmoid
    agentenv miner show runs/tiny

This module is not imported by ``agentenv/__init__.py``, so typer and rich stay out
of library imports; ``train`` imports torch only when it runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

import agentenv
from agentenv.cli.eval import EvalRun, PolicyUnreachable, comparison_table, figure_tables
from agentenv.cli.forecast import forecast_json, print_forecast
from agentenv.core.env import Env
from agentenv.core.task import did_you_mean
from agentenv.core.types import Failure
from agentenv.eval.evaluation import (
    POLICY_ERROR_PREFIX,
    EvalResult,
    compare,
    default_concurrency,
    load_trajectories,
    score,
)
from agentenv.eval.evaluation import load as load_result
from agentenv.eval.forecast import MAX_BOOTSTRAP as MAX_FORECAST_BOOTSTRAP
from agentenv.eval.forecast import ForecastError, forecast_rows
from agentenv.registry import EnvSpec
from agentenv.report import Report, build_eval_report, build_report
from agentenv.report.rundir import RunDir
from agentenv.sandboxes.cli import app as sandbox_app
from agentenv.sandboxes.factory import logger as sandbox_logger

__all__ = ["EvalSummary", "app", "main"]


class _Group(TyperGroup):
    """Help that shows no ``<bool>`` after a flag (a flag takes no value), for this
    group and every command under it, the sandbox group's included."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _without_flag_metavars(super().get_params(ctx))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _without_flag_metavars(command.get_params(ctx))
        return command


def _without_flag_metavars(params: list[Any]) -> list[Any]:
    for param in params:
        if getattr(param, "is_flag", False) and not getattr(param, "count", False):
            param.metavar = ""  # typer shows the metavar, when set, in place of the type
    return params


app = typer.Typer(
    name="agentenv",
    help="Gym-style multi-turn environments for training LLM agents with RL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_Group,
)
app.add_typer(sandbox_app, name="sandbox", cls=_Group)
miner_app = typer.Typer(help="Inspect the failure miner of a training run.", no_args_is_help=True, cls=_Group)
app.add_typer(miner_app, name="miner")

EXIT_POLICY_FAILED = 1
EXIT_NO_FORECAST = 1
EXIT_TRAINING_STOPPED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
_OPENAI = "--policy openai"
_ENV_HELP = "A registered env id (arithmetic-v0, team/name-v0) or code: module:Class, module:register_fn."


class ComputeAxis(str, Enum):
    tokens = "tokens"
    device_hours = "device_hours"


class PolicyKind(str, Enum):
    scripted = "scripted"
    openai = "openai"


def main() -> None:
    """Entry point of the ``agentenv`` console script."""
    app()


def _out() -> Console:
    # Built per call, not at import: rich then writes to whatever sys.stdout is now
    # (a test runner swaps it).
    return Console(highlight=False)


def _fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code=code)


def _version(value: bool) -> None:
    if value:
        _out().print(f"agentenv {agentenv.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Gym-style multi-turn environments for training LLM agents with RL."""


# -- list ------------------------------------------------------------------------


@app.command("list")
def list_envs(
    namespace: Annotated[
        str | None, typer.Argument(help="List this adapter namespace's envs (e.g. reasoning-gym).")
    ] = None,
) -> None:
    """List the registered envs; an adapter namespace is one line unless named."""
    declared = agentenv.registry.declared_namespaces()
    if namespace is not None and namespace not in declared:
        hint = did_you_mean(namespace, declared) or f" Namespaces: {', '.join(declared) or 'none'}."
        raise typer.BadParameter(f"no adapter namespace {namespace!r}.{hint}", param_hint="NAMESPACE")
    specs = agentenv.envs_list()
    table = Table(title="registered envs", title_justify="left")
    table.add_column("id", no_wrap=True, style="bold")
    table.add_column("description")
    table.add_column("oracle", no_wrap=True)
    for env_spec in specs:
        own = env_spec.id.partition("/")[0] if "/" in env_spec.id else None
        if (own == namespace) if namespace is not None else (own not in declared):
            table.add_row(env_spec.id, env_spec.description, "yes" if env_spec.oracle is not None else "no")
    if namespace is None:
        for name, description in declared.items():
            count = sum(s.id.startswith(name + "/") for s in specs)
            shown = f"{count} envs: agentenv list {name}" if count else "not installed"
            table.add_row(f"{name}/*", f"{description} ({shown})", "")
    _out().print(table)


# -- play ------------------------------------------------------------------------


@app.command()
def play(
    env_id: Annotated[str, typer.Argument(metavar="ENV", help=_ENV_HELP)],
    seed: Annotated[int, typer.Option(min=0, help="Reset seed; picks the task unless --task is given.")] = 0,
    task: Annotated[str | None, typer.Option("--task", help="The id of the task to play.")] = None,
    max_turns: Annotated[int | None, typer.Option(help="Override the env's turn limit.")] = None,
) -> None:
    """Play one episode yourself: type each action at the prompt."""
    env_spec = _spec(env_id)
    env_kwargs = _env_kwargs(env_spec, max_turns)
    if task is not None:
        _check_task(env_spec, task, env_kwargs)
    out = _out()
    out.print(
        f"Playing [bold]{escape(env_spec.id)}[/]. Call a tool with "
        + escape('{"name": "TOOL", "arguments": {...}}')
        + " or a <tool_call> block; end a line with \\ to continue it; Ctrl-D quits.",
        soft_wrap=True,
    )
    try:
        with _sandbox_choice_shown():
            [trajectory] = agentenv.rollout(
                env_spec.id, agentenv.HumanPolicy(), n=1, tasks=[task], seed=seed, env_kwargs=env_kwargs
            )
    except EOFError:
        out.print("\nEnd of input: episode abandoned, nothing scored.")
        return
    except KeyboardInterrupt:
        out.print("\nInterrupted: episode abandoned, nothing scored.")
        raise typer.Exit(code=EXIT_INTERRUPTED) from None
    _print_outcome(out, trajectory)


def _print_outcome(out: Console, trajectory: agentenv.Trajectory) -> None:
    # The policy shows each observation before the next action; the last one is shown here.
    roles = [m["role"] for m in trajectory.messages]
    last_action = len(roles) - 1 - roles[::-1].index("assistant") if "assistant" in roles else len(roles)
    for message in trajectory.messages[last_action + 1 :]:
        out.print(f"\n\\[{message['role']}] {escape(str(message['content']))}", soft_wrap=True)
    task_reward = "-" if trajectory.task_reward is None else _number(trajectory.task_reward, "g")
    verdict = "[green]solved[/]" if trajectory.success else "[red]not solved[/]"
    out.print(
        f"\n{verdict}  task {escape(trajectory.task.id)}  task reward {task_reward}  "
        f"total reward {_number(trajectory.total_reward, '.3g')}  failure {trajectory.failure.value}  "
        f"turns {trajectory.turns}",
        soft_wrap=True,
    )
    if trajectory.error and trajectory.failure is Failure.INFRA:
        out.print(f"error: {escape(trajectory.error)}", soft_wrap=True)


# -- eval ------------------------------------------------------------------------


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
            success_rate=_mean(t.success for t in trajectories),
            mean_reward=_mean(t.total_reward for t in trajectories),
            mean_turns=_mean(t.turns for t in trajectories),
            failures={kind: failures.get(kind, 0) for kind in Failure},
            by_difficulty={d: (len(s), _mean(s)) for d, s in sorted(groups.items())},
            errors=list(dict.fromkeys(t.error for t in trajectories if t.error)),
        )

    def tables(self) -> list[Table]:
        main = Table()
        main.add_column("measure")
        main.add_column("value", justify="right")
        main.add_row("episodes", str(self.episodes))
        main.add_row("success rate", f"{self.success_rate:.1%}")
        main.add_row("mean reward", _number(self.mean_reward, ".3f"))
        main.add_row("mean turns", f"{self.mean_turns:.2f}")
        for kind, count in self.failures.items():
            main.add_row(f"failure: {kind.value}", str(count))
        by_difficulty = Table(title="by difficulty", title_justify="left")
        for column in ("difficulty", "episodes", "success rate"):
            by_difficulty.add_column(column, justify="right")
        for difficulty, (count, rate) in self.by_difficulty.items():
            by_difficulty.add_row(str(difficulty), str(count), f"{rate:.1%}")
        return [main, by_difficulty]


@app.command("eval")
def eval_(
    env_id: Annotated[str, typer.Argument(metavar="ENV", help=_ENV_HELP)],
    policy: Annotated[PolicyKind, typer.Option(help="scripted: the env's oracle; openai: a chat endpoint.")] = (
        PolicyKind.scripted
    ),
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
        str | None, typer.Option(help="Endpoint, e.g. http://127.0.0.1:8000/v1.", rich_help_panel=_OPENAI)
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name the endpoint serves.", rich_help_panel=_OPENAI)] = None,
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the API key.", rich_help_panel=_OPENAI)
    ] = "OPENAI_API_KEY",
) -> None:
    """Run a policy on an env, k samples per task: pass@k, pass^k, mean@k with intervals, failures."""
    env_spec = _spec(env_id)
    env_id = env_spec.id
    for name, value in (("--episodes", episodes), ("--k", k), ("--concurrency", concurrency)):
        if value is not None and value < 1:
            _fail(f"{name} must be >= 1, got {value}")
    if not 0 < confidence < 1:
        _fail(f"--confidence must be between 0 and 1, got {confidence}")
    env_kwargs = _env_kwargs(env_spec, max_turns)
    json_path = Path(json_out) if json_out not in (None, "-") else None
    _refuse_same_file([("--compare-to", compare_to)], [("--out", out), ("--json", json_path), ("--report", report)])
    baseline = _load_result(compare_to, "--compare-to") if compare_to is not None else None
    if out is not None:
        _prepare_out(out, append=append, option="--out")
    for option, path in (("--json", json_path), ("--report", report)):
        if path is not None:
            _prepare_out(path, append=False, option=option)
    chosen = _make_policy(env_spec, policy, base_url=base_url, model=model, api_key_env=api_key_env)
    label = f"{env_id} · {policy.value} policy" + (f" {model}" if policy is PolicyKind.openai and model else "")

    # With --json -, stdout is the JSON alone: the progress bar and the tables go to stderr.
    console = Console(highlight=False, stderr=json_out == "-")
    watched = EvalRun(chosen, console)
    try:
        with _sandbox_choice_shown():
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
        _fail(f"the policy could not be reached, so nothing was evaluated: {e}", code=EXIT_POLICY_FAILED)
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
        _fail(
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
        _print_report(console, build_eval_report(finished, result, report, source=source))


def _load_result(path: Path, option: str) -> EvalResult:
    try:
        return load_result(path)
    except ValueError as e:
        _fail(f"{option}: {e}")


@app.command("compare")
def compare_(
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
        _fail(f"--k must be >= 1, got {k}")
    if not 0 < confidence < 1:
        _fail(f"--confidence must be between 0 and 1, got {confidence}")
    _refuse_same_file([("A", a), ("B", b)], [("--json", json_out)])
    first, second = _load_result(a, "A"), _load_result(b, "B")
    if k is not None and k > min(first.k, second.k):
        _fail(f"--k {k} is more than the samples per task of A ({first.k}) or B ({second.k})")
    if json_out is not None:
        _prepare_out(json_out, append=False, option="--json")
    comparison = compare(first, second, k=k, confidence=confidence)
    if comparison.matched == 0:
        _fail(f"A and B share no task (A has {comparison.only_a}, B {comparison.only_b}): nothing to compare")
    _out().print(comparison_table(comparison))
    if json_out is not None:
        json_out.write_text(comparison.model_dump_json(indent=1) + "\n", encoding="utf-8")


def _make_policy(
    env_spec: EnvSpec, kind: PolicyKind, *, base_url: str | None, model: str | None, api_key_env: str
) -> agentenv.Policy:
    if kind is PolicyKind.scripted:
        if env_spec.oracle is None:
            _fail(f"env {env_spec.id!r} has no scripted oracle; use --policy openai")
        return env_spec.make_oracle()
    if not base_url or not model:
        _fail("--policy openai needs --base-url and --model")
    from agentenv.policies.openai import OpenAIPolicy

    # Only the command line reads the key from the environment; the library never does.
    # An unset variable means no key, which local servers (vLLM, Ollama) accept.
    api_key = os.environ.get(api_key_env) or None
    try:
        return OpenAIPolicy(base_url=base_url, model=model, api_key=api_key)
    except (TypeError, ValueError) as e:
        _fail(f"cannot build the openai policy: {e}")


# -- shared ----------------------------------------------------------------------


def _spec(env_id: str) -> EnvSpec:
    """The spec ENV names: a registered id, or code that `agentenv.registry.resolve` registers."""
    try:
        return agentenv.spec(env_id)
    except agentenv.UnknownEnvError as e:
        _fail(str(e))


def _env_kwargs(env_spec: EnvSpec, max_turns: int | None) -> dict[str, Any]:
    if max_turns is None:
        return {}
    if max_turns < 1:
        _fail(f"--max-turns must be >= 1, got {max_turns}")
    try:
        env_spec.check_kwargs({"max_turns": max_turns})
    except agentenv.EnvArgumentError as e:
        _fail(f"--max-turns: {e}")
    return {"max_turns": max_turns}


def _check_task(env_spec: EnvSpec, task_id: str, env_kwargs: dict[str, Any]) -> None:
    env: Env = env_spec.make(**env_kwargs)
    try:
        env.tasks.get(task_id)
    except KeyError as e:
        _fail(f"env {env_spec.id!r}: {e.args[0]}")
    finally:
        env.close()


class _SandboxChoice(logging.Handler):
    """Prints each sandbox backend chosen for "auto" (a record with a ``sandbox_backend``
    attribute, see `agentenv.sandboxes.factory`) on stderr, once."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.shown: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if getattr(record, "sandbox_backend", None) is not None and message not in self.shown:
            self.shown.add(message)
            Console(stderr=True, highlight=False).print(escape(message), soft_wrap=True)


@contextlib.contextmanager
def _sandbox_choice_shown() -> Iterator[None]:
    """Show the sandbox backend an env picks, and why: the library logs it at INFO,
    which nothing shows by default, and the backends differ a lot in isolation."""
    handler, level = _SandboxChoice(), sandbox_logger.level
    sandbox_logger.addHandler(handler)
    if not sandbox_logger.isEnabledFor(logging.INFO):
        sandbox_logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        sandbox_logger.removeHandler(handler)
        sandbox_logger.setLevel(level)


def _refuse_same_file(inputs: Sequence[tuple[str, Path | None]], outputs: Sequence[tuple[str, Path | None]]) -> None:
    """Fail, before anything is written, when an output names the file of an input or of
    an earlier output (through a relative path, a symlink or a hard link too): writing it
    would replace what is read, or what the other option wrote, with nothing to say so."""
    seen = [(name, path) for name, path in inputs if path is not None]
    for name, path in outputs:
        if path is None:
            continue
        for other, earlier in seen:
            if _same_file(path, earlier):
                _fail(f"{name} and {other} name the same file ({str(path)!r}): give {name} another path")
        seen.append((name, path))


def _same_file(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): realpath told already
        return False


def _prepare_out(path: Path, *, append: bool, option: str) -> None:
    # Open it now: a bad path fails before any episode runs, and a rerun starts a fresh file.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if append else "w", encoding="utf-8"):
            pass
    except OSError as e:
        _fail(f"cannot write {option} {str(path)!r}: {e.strerror or e}")


def _mean(values: Any) -> float:
    items = list(values)
    return float(sum(items)) / len(items) if items else 0.0


def _number(value: float, spec: str) -> str:
    """``value`` formatted by ``spec``, never as a negative zero ("-0.000" reads as a penalty)."""
    text = format(value, spec)
    return text[1:] if text.startswith("-") and not any(c in "123456789" for c in text) else text


# -- train -----------------------------------------------------------------------


@app.command()
def train(
    config_path: Annotated[Path, typer.Argument(metavar="CONFIG", help="A GRPOConfig as YAML or TOML.")],
    steps: Annotated[int | None, typer.Option(help="Override the number of steps.")] = None,
    output_dir: Annotated[Path | None, typer.Option("--output-dir", help="Override the run directory.")] = None,
    model: Annotated[str | None, typer.Option(help="Override the model: a path, a hub id, or 'tiny'.")] = None,
) -> None:
    """Train a model with multi-turn GRPO (needs the train extra: torch + transformers)."""
    try:
        from agentenv.trainers import GRPOConfig, GRPOTrainer
    except ImportError as e:
        _fail(f"training needs torch and transformers ({e}); install with: pip install -e '.[train]'")
    try:
        config = GRPOConfig.from_file(config_path)
        overrides = {
            k: v
            for k, v in (("steps", steps), ("output_dir", str(output_dir) if output_dir else None), ("model", model))
            if v is not None
        }
        if overrides:
            config = GRPOConfig.from_dict({**config.to_dict(), **overrides}, source=str(config_path))
        trainer = GRPOTrainer(config.model, envs=config.envs, config=config)
    except (ValueError, FileNotFoundError, agentenv.UnknownEnvError, RuntimeError, ConnectionError, ImportError) as e:
        _fail(str(e))  # ConnectionError, ImportError: the ray option's cluster or package is missing
    from agentenv.trainers.distributed import RankFailure

    try:
        history = trainer.train()
    except RankFailure as e:  # under torchrun: another rank died; torchrun names it
        _fail(str(e), code=1)
    except FileExistsError as e:  # output_dir holds another run: refused before anything is written
        _fail(str(e))
    except ValueError as e:  # what the run met and cannot go on with (a factory env and sft_steps, NaN weights)
        _fail(f"training stopped: {e}", code=EXIT_TRAINING_STOPPED)
    except KeyboardInterrupt:
        _out().print(f"interrupted; resume from the last checkpoint in {config.output_dir} by running the same command")
        raise typer.Exit(code=EXIT_INTERRUPTED) from None
    if trainer.dist.is_writer:  # under torchrun, rank 0 speaks for the run
        _print_curve(history, config.output_dir)


def _print_curve(history: Sequence[dict[str, Any]], run_dir: str) -> None:
    table = Table(title="learning curve", title_justify="left")
    for column in ("step", "train success", "task reward", "held-out success"):
        table.add_column(column, justify="right")
    for row in history:  # a resumed run's earlier rows are read back from metrics.jsonl: any value
        held_out = _figure(row.get("eval/success_rate"))
        if held_out is None and row is not history[-1] and row["step"] % 5:
            continue
        success, reward = _figure(row.get("success_rate", 0)), _figure(row.get("reward/task", 0))
        table.add_row(
            str(row["step"]),
            "" if success is None else f"{success:.0%}",
            "" if reward is None else _number(reward, ".3f"),
            "" if held_out is None else f"{held_out:.0%}",
        )
    _out().print(table)
    _out().print(f"run directory: {run_dir} (metrics.jsonl, trajectories/, checkpoints/, final/)")


def _figure(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# -- report ----------------------------------------------------------------------


@app.command("report")
def report_(
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
        _fail(f"--embed must be >= 0, got {embed}")
    if not run_dir.exists():
        _fail(f"no such directory: {run_dir}")
    if run_dir.is_dir():
        _refuse_run_file(run_dir, out)
    else:
        _refuse_same_file([("RUN_DIR", run_dir)], [("--out", out or run_dir.with_suffix(".html"))])
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
        _fail(str(e))
    except OSError as e:
        _fail(f"cannot write the report: {e.strerror or e}")
    console = _out()
    for note in built.skipped:
        Console(stderr=True, highlight=False).print(f"skipped: {escape(note)}", soft_wrap=True)
    _print_report(console, built)


def _refuse_run_file(run_dir: Path, out: Path | None) -> None:
    """The report may replace an earlier report in the run, never a file the run wrote."""
    if out is None or not out.is_file() or out.suffix.lower() in (".html", ".htm"):
        return
    if Path(os.path.realpath(run_dir)) in Path(os.path.realpath(out)).parents:
        _fail(f"--out {str(out)!r} is a file of the run in {run_dir}: write the report to an .html file instead")


def _print_report(console: Console, built: Report) -> None:
    where = f"{built.size_bytes / 1e6:.1f} MB, {built.episodes:,} episodes"
    if built.pages:
        where += (
            f"; {built.embedded:,} embedded, the rest in {built.pages} pages in {built.sidecar_dir} "
            f"({built.sidecar_bytes / 1e6:.1f} MB): keep that folder next to the report"
        )
    console.print(f"wrote {escape(str(built.path))} ({escape(where)})", soft_wrap=True)


# -- forecast --------------------------------------------------------------------


@app.command("forecast")
def forecast_(
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
        _fail(f"--bootstrap must be between 1 and {MAX_FORECAST_BOOTSTRAP:,}, got {bootstrap}")
    if not 0 < confidence < 1:
        _fail(f"--confidence must be between 0 and 1, got {confidence}")
    if not run_dir.is_dir():
        _fail(f"no such directory: {run_dir}" if not run_dir.exists() else f"not a directory: {run_dir}")
    data = RunDir(run_dir)
    if not data.rows:
        _fail(f"{run_dir} has no metrics (metrics.jsonl): nothing to forecast", code=EXIT_NO_FORECAST)
    skipped = data.skipped.all()
    for note in skipped:
        Console(stderr=True, highlight=False).print(f"skipped: {escape(note)}", soft_wrap=True)
    try:
        result = forecast_rows(
            data.numbers(), compute=compute.value, n_bootstrap=bootstrap, confidence=confidence, seed=seed
        )
    except ForecastError as e:
        _fail(f"{run_dir}: {e}; nothing was fitted", code=EXIT_NO_FORECAST)
    if json_out:
        print(json.dumps(forecast_json(run_dir, result, skipped), indent=1, allow_nan=False))
    else:
        print_forecast(_out(), run_dir, result)


# -- miner -----------------------------------------------------------------------


@miner_app.command("show")
def miner_show(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A training run directory (output_dir).")],
    top: Annotated[int, typer.Option(help="Rows in the family and task tables.")] = 10,
) -> None:
    """Pools, informative groups, failures by kind and the top failing families of a run."""
    from agentenv.miner.report import MinerReport

    try:
        report = MinerReport.from_run(run_dir)
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))
    if report.skipped_lines:
        Console(stderr=True, highlight=False).print(
            f"skipped: metrics.jsonl: {report.skipped_lines} unreadable line(s) (cut short?)", soft_wrap=True
        )
    out = _out()
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


if __name__ == "__main__":
    main()
