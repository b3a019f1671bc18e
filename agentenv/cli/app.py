"""The ``agentenv`` command line: list the envs, play one, evaluate a policy on one,
compare two evaluations, train, report on a run, and export its episodes as a dataset.

    agentenv list
    agentenv play guess-number-v0 --seed 3
    agentenv eval arithmetic-v0 --policy scripted --episodes 100 --out runs/arith.jsonl
    agentenv eval arithmetic-v0 --policy openai --base-url http://127.0.0.1:8000/v1 --model NAME -n 50 -k 8 \\
        --json runs/a.json --report runs/a.html
    agentenv eval my_envs:MyEnv --policy openai ...      # an env that is code: module:Class
    agentenv compare runs/a.json runs/b.json             # B - A, paired bootstrap over tasks

ENV is a registered id or code, ``module:Class`` or ``module:register_fn`` (see
`agentenv.registry.resolve`; a module in the current directory is found without
PYTHONPATH, after the installed ones: `_find_code_in_cwd`). A mistake a user can make (an unknown env id, a bad
option value, an unwritable output file) ends with a one-line ``error:`` on stderr
and exit code 2, never a traceback; an interrupt ends with what was finished and
code 130. ``eval`` ends with code 1 when the policy failed: it stops at once when
the first episodes all failed in the policy before it gave a single action (a
closed port, a wrong URL), and after the run when any episode was lost to it (its
figures, printed, leave those out). When an env picks its sandbox backend
("auto"), the choice is printed. ``forecast`` ends with code 1 when the run cannot be
forecast yet (too few held-out evaluations): it says why and fits nothing. ``export``
ends with code 1 when its source gives no row (none solved, no group whose rewards
differ): it says what the source held and writes nothing. ``train``
ends with code 1 when the run stops on an error it cannot go on with (one line; the
last checkpoint stays). No command writes over a file it reads or another of its
outputs: two options naming one file are refused before anything runs.

    agentenv train examples/tiny.toml
    agentenv report runs/tiny                            # runs/tiny/report.html
    agentenv forecast runs/tiny                          # reward against compute: ScaleRL's sigmoid
    agentenv export runs/tiny --format sft --out runs/tiny-sft   # the episodes as a datasets.Dataset
    agentenv miner show runs/tiny

This package is not imported by ``agentenv/__init__.py``, so typer and rich stay out
of library imports; ``train`` imports torch only when it runs. This module builds the
app from the commands, one module per command group (play, eval, train, report,
forecast, export, miner) over `agentenv.cli.common`.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

import agentenv
from agentenv.cli.common import stdout
from agentenv.cli.eval import compare_command, eval_command
from agentenv.cli.export import export_command
from agentenv.cli.forecast import forecast_command
from agentenv.cli.miner import miner_show_command
from agentenv.cli.play import list_command, play_command
from agentenv.cli.report import report_command
from agentenv.cli.train import train_command
from agentenv.sandboxes.cli import app as sandbox_app

__all__ = ["app", "main"]


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
app.command("list")(list_command)
app.command("play")(play_command)
app.command("eval")(eval_command)
app.command("compare")(compare_command)
app.command("train")(train_command)
app.command("report")(report_command)
app.command("forecast")(forecast_command)
app.command("export")(export_command)
app.add_typer(sandbox_app, name="sandbox", cls=_Group)
miner_app = typer.Typer(help="Inspect the failure miner of a training run.", no_args_is_help=True, cls=_Group)
miner_app.command("show")(miner_show_command)
app.add_typer(miner_app, name="miner")


def main() -> None:
    """Entry point of the ``agentenv`` console script."""
    _find_code_in_cwd()
    app()


def _find_code_in_cwd() -> None:
    """Let ENV name code in the current directory (``agentenv eval my_envs:register``)
    without PYTHONPATH, as ``python -m agentenv`` finds it: a console script's
    sys.path starts with its bin folder, not the current directory. Appended, not put
    first as ``python -m`` does: an installed module of the same name wins, so a stray
    json.py or torch.py in the directory shadows nothing. ``python -P`` (PYTHONSAFEPATH)
    keeps it off, as it keeps Python's own off."""
    if sys.flags.safe_path:
        return
    try:
        cwd = os.getcwd()
    except OSError:  # the directory was deleted under us: nothing to find there
        return
    if not any(os.path.abspath(entry or os.curdir) == cwd for entry in sys.path):
        sys.path.append(cwd)


def _version(value: bool) -> None:
    if value:
        stdout().print(f"agentenv {agentenv.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Gym-style multi-turn environments for training LLM agents with RL."""
