"""What every command of the ``agentenv`` command line shares: the exit codes, the one-line
``error:`` a mistake ends with, the env an ENV argument names, output files that never
overwrite an input, showing the sandbox backend an env picks, and a local model as the
policy (``--policy hf`` / ``vllm``: its options, and loading it, which imports torch).

Left out: the commands (one module per command group beside this one).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

import agentenv
from agentenv.core.env import Env
from agentenv.registry import EnvSpec
from agentenv.sandboxes.factory import logger as sandbox_logger

EXIT_POLICY_FAILED = 1
EXIT_NO_FORECAST = 1
EXIT_NOTHING_TO_EXPORT = 1
EXIT_TRAINING_STOPPED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
OPENAI_PANEL = "--policy openai"
ENV_HELP = "A registered env id (arithmetic-v0, team/name-v0) or code: module:Class, module:register_fn."


def stdout() -> Console:
    # Built per call, not at import: rich then writes to whatever sys.stdout is now
    # (a test runner swaps it).
    return Console(highlight=False)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code=code)


def env_spec_of(env_id: str) -> EnvSpec:
    """The spec ENV names: a registered id, or code that `agentenv.registry.resolve` registers."""
    try:
        return agentenv.spec(env_id)
    except agentenv.UnknownEnvError as e:
        fail(str(e))


def env_kwargs_of(env_spec: EnvSpec, max_turns: int | None) -> dict[str, Any]:
    if max_turns is None:
        return {}
    if max_turns < 1:
        fail(f"--max-turns must be >= 1, got {max_turns}")
    try:
        env_spec.check_kwargs({"max_turns": max_turns})
    except agentenv.EnvArgumentError as e:
        fail(f"--max-turns: {e}")
    return {"max_turns": max_turns}


def check_task(env_spec: EnvSpec, task_id: str, env_kwargs: dict[str, Any]) -> None:
    env: Env = env_spec.make(**env_kwargs)
    try:
        env.tasks.get(task_id)
    except KeyError as e:
        fail(f"env {env_spec.id!r}: {e.args[0]}")
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
def sandbox_choice_shown() -> Iterator[None]:
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


def refuse_same_file(inputs: Sequence[tuple[str, Path | None]], outputs: Sequence[tuple[str, Path | None]]) -> None:
    """Fail, before anything is written, when an output names the file of an input or of
    an earlier output (through a relative path, a symlink or a hard link too): writing it
    would replace what is read, or what the other option wrote, with nothing to say so."""
    seen = [(name, path) for name, path in inputs if path is not None]
    for name, path in outputs:
        if path is None:
            continue
        for other, earlier in seen:
            if _same_file(path, earlier):
                fail(f"{name} and {other} name the same file ({str(path)!r}): give {name} another path")
        seen.append((name, path))


def _same_file(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): realpath told already
        return False


def prepare_out(path: Path, *, append: bool, option: str) -> None:
    # Open it now: a bad path fails before any episode runs, and a rerun starts a fresh file.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if append else "w", encoding="utf-8"):
            pass
    except OSError as e:
        fail(f"cannot write {option} {str(path)!r}: {e.strerror or e}")


def mean_of(values: Any) -> float:
    items = list(values)
    return float(sum(items)) / len(items) if items else 0.0


def number(value: float, spec: str) -> str:
    """``value`` formatted by ``spec``, never as a negative zero ("-0.000" reads as a penalty)."""
    text = format(value, spec)
    return text[1:] if text.startswith("-") and not any(c in "123456789" for c in text) else text


# -- a local model as the policy (--policy hf / vllm) ------------------------------------

LOCAL_PANEL = "--policy hf / vllm"


class Dtype(str, Enum):
    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"


Temperature = Annotated[
    float | None,
    typer.Option(help="Sampling temperature, 0 for greedy (default: the trainer's).", rich_help_panel=LOCAL_PANEL),
]
TopP = Annotated[
    float | None,
    typer.Option("--top-p", help="Nucleus sampling (default: the trainer's).", rich_help_panel=LOCAL_PANEL),
]
MaxNewTokens = Annotated[
    int | None,
    typer.Option(help="Tokens of one reply at most (default: the trainer's).", rich_help_panel=LOCAL_PANEL),
]
MaxContextTokens = Annotated[
    int | None,
    typer.Option(
        help="Tokens of one episode at most (default: the trainer's max_seq_len, or the model's positions if fewer).",
        rich_help_panel=LOCAL_PANEL,
    ),
]
Device = Annotated[
    str, typer.Option(help="auto (cuda where torch sees one), cpu, cuda or cuda:N.", rich_help_panel=LOCAL_PANEL)
]
Precision = Annotated[
    Dtype,
    typer.Option(help="Weights and compute: auto is bfloat16 on a GPU, float32 on a CPU.", rich_help_panel=LOCAL_PANEL),
]
EnforceEager = Annotated[
    bool,
    typer.Option(
        help="vllm: skip compiling the model (starts in seconds, samples slower).", rich_help_panel=LOCAL_PANEL
    ),
]
LOCAL_MODEL_HELP = "a model folder, a training run (its final/ or checkpoints/step-N/), a known name or a hub id"


@dataclass(frozen=True)
class LocalModel:
    """The options of ``--policy hf`` and ``--policy vllm``; None is the trainer's default."""

    model: str | None
    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    max_context_tokens: int | None = None
    device: str = "auto"
    dtype: Dtype = Dtype.auto
    enforce_eager: bool = False


def local_policy(engine: Literal["transformers", "vllm"], options: LocalModel, *, seed: int) -> agentenv.Policy:
    """The policy of ``options.model`` on ``engine`` (`agentenv.trainers.local_policy`), or
    one ``error:`` line; says on stderr what was loaded and how it samples."""
    flag = "--policy " + ("hf" if engine == "transformers" else "vllm")
    if not options.model:
        fail(f"{flag} needs --model: {LOCAL_MODEL_HELP}")
    try:
        from agentenv.trainers.local_policy import LocalPolicyError, Sampling
        from agentenv.trainers.local_policy import local_policy as load_policy
    except ImportError as e:
        fail(f"{flag} needs torch and transformers ({e}); install with: pip install -e '.[train]'")
    names = ("temperature", "top_p", "max_new_tokens", "max_context_tokens")
    given = {n: getattr(options, n) for n in names if getattr(options, n) is not None}
    try:
        Sampling(**given)  # each option checked alone here; the rest come from the model's run, if any
    except ValidationError as e:
        error = e.errors()[0]
        fail(f"--{str(error['loc'][0]).replace('_', '-')} {error['input']}: {error['msg']}")
    try:
        with _vllm_log_on_stderr(engine):
            policy = load_policy(
                options.model,
                engine=engine,
                device=options.device,
                dtype=options.dtype.value,
                sampling=given,
                seed=seed,
                enforce_eager=options.enforce_eager,
            )
    except (LocalPolicyError, ImportError) as e:  # ImportError: vLLM or peft missing, with the fix
        fail(str(e))
    Console(stderr=True, highlight=False).print(escape(policy.description), soft_wrap=True)
    return policy


def run_env_kwargs(policy: agentenv.Policy, env_spec: EnvSpec, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` over the env settings the training run of a local model used
    (`LocalPolicy.env_kwargs`: its tool prompt, and for its own envs their settings), so
    the model is evaluated on the prompts it learned to read; says on stderr which. One
    the env does not take is left out, and said."""
    of_run = getattr(policy, "env_kwargs", None)
    settings = {k: v for k, v in of_run(env_spec.id).items() if k not in given} if callable(of_run) else {}
    kept: dict[str, Any] = {}
    for name, value in settings.items():
        try:
            env_spec.check_kwargs({**kept, name: value})
        except agentenv.EnvArgumentError:
            Console(stderr=True, highlight=False).print(
                escape(f"not applied: the training run's {name}={value!r}, which env {env_spec.id!r} does not take")
            )
            continue
        kept[name] = value
    if kept:
        shown = ", ".join(f"{k}={v!r}" for k, v in kept.items())
        Console(stderr=True, highlight=False).print(escape(f"env settings of the model's training run: {shown}"))
    return {**kept, **given}


@contextlib.contextmanager
def _vllm_log_on_stderr(engine: str) -> Iterator[None]:
    """vLLM logs to stdout, which carries a command's results (``--json -``), and at INFO,
    which buries them. While its engine is made, stdout is stderr (the stream its log
    handler keeps) and INFO is off; then its logger shows warnings and worse.
    VLLM_LOGGING_LEVEL, where set, decides the level instead."""
    if engine != "vllm":
        yield
        return
    quiet = "VLLM_LOGGING_LEVEL" not in os.environ
    before = logging.root.manager.disable
    if quiet:
        logging.disable(logging.INFO)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        logging.disable(before)
        if quiet:
            logging.getLogger("vllm").setLevel(logging.WARNING)
