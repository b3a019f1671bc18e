"""One episode, and what every executor does with it: the machinery the thread and Ray
executors share, so an episode behaves the same wherever its env runs.

An `Episode` knows how to start (reset its env), advance (step it with the policy's
output), keep snapshots, show itself to the policy and record its `Trajectory`.
`ask_policy` and `checked_output` are the policy's side of the same boundary.
`plan_episodes` and `env_factory` turn `rollout`'s arguments into episodes and a
factory, and `check_task_ids` refuses a mistyped task id before anything runs.

What fails is data, not a crash. An exception inside one env ends that episode as
``infra`` and never stops the others; a policy that raises (a timeout, a dead
server, a bug) or answers with the wrong number of actions ends the episodes it was
asked about as ``infra`` and the rollout goes on with the rest. Only
`KeyboardInterrupt` (or another `BaseException`) stops a rollout, and `EOFError`
from the policy: it has no more actions to give (a person at the terminal typed
Ctrl-D), which no later turn can change.

With ``keep_snapshots`` an env snapshot is kept before every turn. A snapshot the
env refuses to take because of what the episode made (a `ValueError`, such as the
sandbox's `SandboxError` for a workspace past the archive cap or holding a path
too long to restore) is left out: that turn has none (each snapshot carries its
turn), and the episode goes on to its own outcome; counting it as ``infra`` would
let an action dodge its episode's penalty. Any other failure of ``snapshot()``
(an `InfraError` such as a dead sandbox, an `OSError` of the host) ends the
episode as ``infra``, as a failing step does.

Left out: where the envs run and how many at once (`agentenv.rollout.stepper` and
the executors), writing trajectories out (`agentenv.rollout.recorder`), and
retries of infra failures (the failure miner re-queues them).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenv.core import _admit, _safejson
from agentenv.core.env import Env, Snapshot
from agentenv.core.errors import EnvStateError, InfraError, message_of
from agentenv.core.policy import Conversation, Generation, Policy, PolicyFailure, PolicyOutput
from agentenv.core.task import Task, did_you_mean
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure

__all__ = [
    "EnvFactory",
    "Episode",
    "ask_policy",
    "asked_task_ids",
    "check_task_ids",
    "checked_output",
    "close_quietly",
    "env_factory",
    "plan_episodes",
]

EnvFactory = Callable[[], Env]


@dataclass(slots=True)
class Episode:
    """One episode: what it was asked to run, its env while live, and what it recorded."""

    index: int
    """Its place among the episodes of the rollout (and its `Conversation.id`)."""
    task: Task | str | None
    seed: int | None
    resume: Snapshot | None = None
    env: Env | None = None
    generations: list[Generation | None] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    start_time: float = 0.0
    last_info: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    error: str | None = None
    started: bool = False
    """Its env's reset went through: the env's messages and transitions are this episode's.
    Until then they may be those of the episode the env ran before."""
    task_before: Task | None = None
    """The env's task before the reset: a reset that failed after choosing a task left a new one."""
    shown: tuple[Task | None, list[dict[str, Any]]] | None = None
    """The policy's own copies of the episode's task and tool schemas, made at its first turn."""

    def start(self, factory: EnvFactory, keep_snapshots: bool) -> None:
        """Reset its env (made now unless one was handed over); a failure ends it as infra."""
        try:
            self.env = self.env or factory()
            self.shown = None
            self.task_before = _task_of(self.env)
            self.start_time = time.perf_counter()
            options: dict[str, Any] = {"task": self.task} if self.task is not None else {}
            if self.resume is not None:
                options["snapshot"] = self.resume
            self.env.reset(seed=self.seed, options=options or None)
            self.started = True
            if keep_snapshots:
                self.keep_snapshot()
        except Exception as e:  # noqa: BLE001 - a broken env is data, see module doc
            self.done, self.error = True, _describe(e)

    def advance(self, output: PolicyOutput, keep_snapshots: bool) -> None:
        """Step its env with the policy's output; an env that raises ends it as infra."""
        assert self.env is not None  # live episodes have an env
        output = checked_output(output)
        if isinstance(output, PolicyFailure):
            self.done, self.error = True, f"policy: {output.error}"
            return
        generation = output if isinstance(output, Generation) else None
        action: Any = output.action if isinstance(output, Generation) else output  # `Refused` too: `admit` reads it
        try:
            _, reward, terminated, truncated, info = self.env.step(action)
            self.generations.append(generation)
            self.rewards.append(reward)
            self.last_info = info
            self.done = terminated or truncated
            if keep_snapshots and not self.done:
                self.keep_snapshot()
        except Exception as e:  # noqa: BLE001 - see module doc
            self.done, self.error = True, _describe(e)

    def keep_snapshot(self) -> None:
        """Keep the env's snapshot; none for this turn when the env refuses to save what
        the episode made (a ValueError: see the module doc). Anything else propagates."""
        assert self.env is not None  # live episodes have an env
        try:
            self.snapshots.append(self.env.snapshot())
        except InfraError:
            raise  # first: an infra error that is also a ValueError is still infra
        except ValueError:
            pass

    def conversation(self) -> Conversation:
        """The episode as the policy sees it: copies, so a policy that writes into what it
        is shown changes neither the task ``verify`` reads nor the recorded conversation."""
        assert self.env is not None  # live episodes have an env
        if self.shown is None:
            self.shown = (_task_copy(self.env), _copied(self.env.tool_schemas()))
        task, tools = self.shown
        return Conversation(self.index, _copied(self.env.messages), tools, task)

    def trajectory(self, env_id: str | None) -> Trajectory:
        """What the episode recorded, for an episode that ended (or was ended as infra)."""
        env, info = (self.env if self.started else None), self.last_info
        failure = Failure.INFRA if self.error is not None else Failure(info.get("failure") or "infra")
        return Trajectory(
            env_id=env_id,
            task=self.recorded_task(),
            seed=self.seed,
            messages=list(env.messages) if env is not None else [],
            transitions=list(env.transitions) if env is not None else [],
            generations=self.generations,
            snapshots=self.snapshots,
            rewards=self.rewards,
            task_reward=info.get("task_reward") if self.error is None else None,
            success=bool(info.get("success")) if self.error is None else False,
            failure=failure,
            duration_s=time.perf_counter() - self.start_time if self.start_time else 0.0,
            error=self.error or (info.get("error") if failure is Failure.INFRA else None),
        )

    def recorded_task(self) -> Task:
        """The env's task; for a reset that failed, the one it chose before failing, else
        what was asked for (a reused env still holds its last episode's task)."""
        task = _task_of(self.env) if self.env is not None else None
        if task is not None and (self.started or task is not self.task_before):
            return task
        if isinstance(self.task, Task):
            return self.task
        if self.env is not None and self.task is not None and self.task in self.env.tasks:
            return self.env.tasks.get(self.task)
        return Task(id=self.task or "<unknown>", prompt="")


def plan_episodes(
    n: int | None,
    tasks: Sequence[Task | str | None] | None,
    seeds: Sequence[int | None] | None,
    seed: int,
    resume_from: Sequence[Snapshot | None] | None,
) -> list[Episode]:
    """The episodes `rollout` was asked for, each with its task, seed and snapshot to resume from."""
    if n is None:
        if tasks is None and seeds is None:
            raise ValueError("give n, tasks or seeds")
        n = len(tasks) if tasks is not None else len(seeds or ())
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    task_list = list(tasks) if tasks is not None else [None] * n
    seed_list = list(seeds) if seeds is not None else [seed + i for i in range(n)]
    if len(task_list) != n or len(seed_list) != n:
        raise ValueError(f"tasks ({len(task_list)}) and seeds ({len(seed_list)}) must both have n={n} entries")
    resume_list = list(resume_from) if resume_from is not None else [None] * n
    if len(resume_list) != n:
        raise ValueError(f"resume_from has {len(resume_list)} entries, expected n={n}")
    return [Episode(i, task_list[i], seed_list[i], resume_list[i]) for i in range(n)]


def env_factory(env: str | EnvFactory, kwargs: dict[str, Any]) -> tuple[str | None, EnvFactory]:
    """The env id (None for a factory) and a factory of fresh envs, from `rollout`'s
    ``env`` and ``env_kwargs``. An unknown id or keyword fails here, with a did-you-mean."""
    if isinstance(env, str):
        from agentenv.registry import resolve, spec

        # Fail now, with a did-you-mean, rather than as infra inside a worker.
        env_spec = spec(resolve(env))
        env_spec.check_kwargs(kwargs)
        return env_spec.id, lambda: env_spec.make(**kwargs)
    if not callable(env):
        raise TypeError(f"env must be a registered id or a factory returning an Env, got {type(env).__name__}")
    if kwargs:
        raise ValueError("env_kwargs only applies when env is a registered id")
    return None, env


def asked_task_ids(episodes: Iterable[Episode]) -> set[str]:
    """The task ids the episodes name (a `Task` or a seeded draw names none)."""
    return {ep.task for ep in episodes if isinstance(ep.task, str)}


def check_task_ids(asked: set[str], known: Sequence[str], env_name: str) -> None:
    """A mistyped task id is the caller's error, not an infra failure of the episode:
    `KeyError` with a did-you-mean, before anything runs."""
    missing = sorted(asked - set(known))
    if missing:
        raise KeyError(f"{env_name} has no task {missing[0]!r}.{did_you_mean(missing[0], known)}")


def ask_policy(policy: Policy, conversations: list[Conversation]) -> list[PolicyOutput]:
    """One action per conversation; a policy that raises or miscounts fails them all, as data."""
    try:
        outputs = list(policy.act(conversations))
    except EOFError:
        raise  # the policy is out of input for good: the caller ends the run (see the module doc)
    except Exception as e:  # noqa: BLE001 - the policy's backend failed: infra for these episodes, see module doc
        return [PolicyFailure(error=_describe(e)) for _ in conversations]
    if len(outputs) != len(conversations):
        error = f"the policy returned {len(outputs)} actions for {len(conversations)} conversations"
        return [PolicyFailure(error=error) for _ in conversations]
    return outputs


def checked_output(output: PolicyOutput) -> PolicyOutput:
    """``output`` as the episode takes it. A `Generation` is validated again, whole (one
    made with ``model_construct``, or a subclass, skips its checks): one that cannot be
    read, or holds a token id that is no vocabulary index or a log-prob that is not a
    finite number, is the policy's failure (``infra``, as a policy that raises), never
    data a trajectory file would refuse. A bare action goes to the env, which refuses
    whatever is no action as a format error. An output that raises when it is looked at
    (its ``__class__``, or a failure's ``error``) is the policy's failure too."""
    try:
        return _checked(output)
    except Exception as e:  # noqa: BLE001 - any failure to read it is the policy's
        return PolicyFailure(error=f"the policy's output is malformed: {_safejson.clean_text(_describe(e))[:500]}")


def close_quietly(env: Env) -> None:
    """Close an env being discarded (it raised, or the rollout ended); its own failure to close is ignored."""
    try:
        env.close()
    except Exception:  # noqa: BLE001, S110 - the env is already being discarded
        pass


def _checked(output: PolicyOutput) -> PolicyOutput:
    if isinstance(output, PolicyFailure):
        error = getattr(output, "error", None)
        text = _safejson.clean_text(error) if type(error) is str else _admit.safe_repr(error)
        return output if text is error else PolicyFailure(error=text)
    if not isinstance(output, Generation):
        return output
    return Generation.model_validate({name: getattr(output, name) for name in Generation.model_fields})


def _task_of(env: Env) -> Task | None:
    try:
        return env.task
    except EnvStateError:  # never reset
        return None


def _task_copy(env: Env) -> Task:
    """A deep copy of ``env``'s task, or a TypeError naming the task whose payload holds
    what cannot be copied (a lock, a socket, a generator): the env's mistake, said once."""
    try:
        return env.task.model_copy(deep=True)
    except Exception as e:  # noqa: BLE001 - deepcopy raises whatever the payload's objects raise
        raise TypeError(
            f"{type(env).__name__}'s task {env.task.id!r} cannot be copied to show the policy "
            f"({type(e).__name__}: {message_of(e)}): a task's payload must be data that copy.deepcopy "
            "copies; keep live objects (locks, connections, generators) on the env"
        ) from None


def _copied(value: Any) -> Any:
    """``value`` with its dicts and lists copied (JSON data: the rest is immutable)."""
    if type(value) is dict:
        return {k: _copied(v) for k, v in value.items()}
    if type(value) is list:
        return [_copied(v) for v in value]
    return value


def _describe(e: BaseException) -> str:
    frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f" (at {Path(frame.filename).name}:{frame.lineno})" if frame else ""
    return f"{type(e).__name__}: {message_of(e)}{where}"
