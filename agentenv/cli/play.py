"""``agentenv list`` (the registered envs) and ``agentenv play`` (one episode, typed by a
person or played by a local model while you watch)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import agentenv
from agentenv.cli.common import (
    ENV_HELP,
    EXIT_INTERRUPTED,
    LOCAL_MODEL_HELP,
    Device,
    Dtype,
    EnforceEager,
    LocalModel,
    MaxContextTokens,
    MaxNewTokens,
    Precision,
    Temperature,
    TopP,
    check_task,
    env_kwargs_of,
    env_spec_of,
    local_policy,
    number,
    run_env_kwargs,
    sandbox_choice_shown,
    stdout,
)
from agentenv.core._admit import Refused
from agentenv.core.policy import Conversation, Generation, Policy, PolicyFailure, PolicyOutput
from agentenv.core.task import did_you_mean
from agentenv.core.types import Failure


def list_command(
    namespace: Annotated[
        str | None, typer.Argument(help="List this adapter namespace's envs (e.g. reasoning-gym).")
    ] = None,
) -> None:
    """List the registered envs; an adapter namespace is one line unless named. An env is
    ready when ``agentenv.make(id)`` alone makes one that resets; otherwise the last
    column says what it needs."""
    declared = agentenv.registry.declared_namespaces()
    if namespace is not None and namespace not in declared:
        hint = did_you_mean(namespace, declared) or f" Namespaces: {', '.join(declared) or 'none'}."
        raise typer.BadParameter(f"no adapter namespace {namespace!r}.{hint}", param_hint="NAMESPACE")
    specs = agentenv.envs_list()
    table = Table(title="registered envs", title_justify="left")
    table.add_column("id", no_wrap=True, style="bold")
    table.add_column("description")
    table.add_column("oracle", no_wrap=True)
    table.add_column("ready")
    for env_spec in specs:
        own = env_spec.id.partition("/")[0] if "/" in env_spec.id else None
        if (own == namespace) if namespace is not None else (own not in declared):
            oracle = "yes" if env_spec.oracle is not None else "no"
            ready = "yes" if env_spec.needs is None else f"no: needs {env_spec.needs}"
            table.add_row(env_spec.id, env_spec.description, oracle, escape(ready))
    if namespace is None:
        for name, description in declared.items():
            own_specs = [s for s in specs if s.id.startswith(name + "/")]
            waiting = sum(s.needs is not None for s in own_specs)
            shown = f"{len(own_specs)} envs: agentenv list {name}" if own_specs else "not installed"
            ready = "" if not own_specs else "yes" if not waiting else f"{len(own_specs) - waiting} of {len(own_specs)}"
            table.add_row(f"{name}/*", f"{description} ({shown})", "", ready)
    stdout().print(table)


class PlayPolicy(str, Enum):
    human = "human"
    hf = "hf"
    vllm = "vllm"


def play_command(
    env_id: Annotated[str, typer.Argument(metavar="ENV", help=ENV_HELP)],
    seed: Annotated[int, typer.Option(min=0, help="Reset seed; picks the task unless --task is given.")] = 0,
    task: Annotated[str | None, typer.Option("--task", help="The id of the task to play.")] = None,
    max_turns: Annotated[int | None, typer.Option(help="Override the env's turn limit.")] = None,
    policy: Annotated[
        PlayPolicy,
        typer.Option(help="human: you type each action; hf, vllm: a local model plays (--model) and you watch."),
    ] = PlayPolicy.human,
    model: Annotated[str | None, typer.Option(help=f"hf, vllm: {LOCAL_MODEL_HELP}.")] = None,
    temperature: Temperature = None,
    top_p: TopP = None,
    max_new_tokens: MaxNewTokens = None,
    max_context_tokens: MaxContextTokens = None,
    device: Device = "auto",
    dtype: Precision = Dtype.auto,
    enforce_eager: EnforceEager = False,
) -> None:
    """Play one episode yourself, typing each action at the prompt, or watch a local model play it."""
    env_spec = env_spec_of(env_id)
    env_kwargs = env_kwargs_of(env_spec, max_turns)
    if task is not None:
        check_task(env_spec, task, env_kwargs)
    out = stdout()
    player: Policy
    if policy is PlayPolicy.human:
        player = agentenv.HumanPolicy()
        out.print(
            f"Playing [bold]{escape(env_spec.id)}[/]. Call a tool with "
            + escape('{"name": "TOOL", "arguments": {...}}')
            + " or a <tool_call> block; end a line with \\ to continue it; Ctrl-D quits.",
            soft_wrap=True,
        )
    else:
        local = LocalModel(model, temperature, top_p, max_new_tokens, max_context_tokens, device, dtype, enforce_eager)
        model_policy = local_policy("transformers" if policy is PlayPolicy.hf else "vllm", local, seed=seed)
        env_kwargs = run_env_kwargs(model_policy, env_spec, env_kwargs)
        player = _Shown(model_policy, out)
        out.print(f"[bold]{escape(model or '')}[/] plays [bold]{escape(env_spec.id)}[/].", soft_wrap=True)
    try:
        with sandbox_choice_shown():
            [trajectory] = agentenv.rollout(env_spec.id, player, n=1, tasks=[task], seed=seed, env_kwargs=env_kwargs)
    except EOFError:
        out.print("\nEnd of input: episode abandoned, nothing scored.")
        return
    except KeyboardInterrupt:
        out.print("\nInterrupted: episode abandoned, nothing scored.")
        raise typer.Exit(code=EXIT_INTERRUPTED) from None
    finally:
        if isinstance(player, _Shown):
            player.close()
    _print_outcome(out, trajectory)


class _Shown:
    """A model playing one episode, its conversation printed as it goes: each observation
    as `agentenv.HumanPolicy` shows it, then the model's reply."""

    def __init__(self, inner: Policy, out: Console) -> None:
        self.inner = inner
        self.out = out
        self.shown = 0

    def act(self, conversations: Sequence[Conversation]) -> list[PolicyOutput]:
        for conv in conversations:
            for message in conv.messages[self.shown :]:
                if message["role"] != "assistant":
                    self.out.print(f"\n\\[{message['role']}] {escape(str(message['content']))}", soft_wrap=True)
            self.shown = len(conv.messages) + 1  # +1: the reply printed below
        outputs = self.inner.act(conversations)
        for output in outputs:
            self.out.print(f"\n\\[assistant] {escape(_reply_text(output))}", soft_wrap=True)
        return outputs

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()


def _reply_text(output: PolicyOutput) -> str:
    if isinstance(output, Generation):
        return str(output.action)
    if isinstance(output, Refused):
        return f"(no reply: {output.error})"
    if isinstance(output, PolicyFailure):
        return f"(policy failed: {output.error})"
    return str(output)


def _print_outcome(out: Console, trajectory: agentenv.Trajectory) -> None:
    # The policy shows each observation before the next action; the last one is shown here.
    roles = [m["role"] for m in trajectory.messages]
    last_action = len(roles) - 1 - roles[::-1].index("assistant") if "assistant" in roles else len(roles)
    for message in trajectory.messages[last_action + 1 :]:
        out.print(f"\n\\[{message['role']}] {escape(str(message['content']))}", soft_wrap=True)
    task_reward = "-" if trajectory.task_reward is None else number(trajectory.task_reward, "g")
    verdict = "[green]solved[/]" if trajectory.success else "[red]not solved[/]"
    out.print(
        f"\n{verdict}  task {escape(trajectory.task.id)}  task reward {task_reward}  "
        f"total reward {number(trajectory.total_reward, '.3g')}  failure {trajectory.failure.value}  "
        f"turns {trajectory.turns}",
        soft_wrap=True,
    )
    if trajectory.error and trajectory.failure is Failure.INFRA:
        out.print(f"error: {escape(trajectory.error)}", soft_wrap=True)
