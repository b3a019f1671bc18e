"""The rollout engine: many episodes at once, one batched policy call per turn.

Each round the engine (`_Run`) starts episodes in the free slots, asks the policy
for the actions of every live episode in one call, steps the envs concurrently in
a thread pool (env steps are I/O: containers, HTTP services, browsers), and
finishes the episodes that ended; an `_Episode` knows how to start, advance and
record itself. An exception inside one env ends that episode as ``infra`` and
never stops the others; a policy that raises (a timeout, a dead server, a bug) or
answers with the wrong number of actions ends the episodes it was asked about as
``infra`` and the rollout goes on with the rest. Only `KeyboardInterrupt` (or
another `BaseException`) stops it, and `EOFError` from the policy: it has no more
actions to give (a person at the terminal typed Ctrl-D), which no later turn can
change. Finished trajectories are appended to a JSONL file and flushed one by one,
so a crash loses nothing that had finished; a trajectory holding something no
encoder takes, or that a reader would refuse (an integer past the digit limit,
nesting past the readers' depth), is written with those values spelled out rather
than lost, so every line reads back.

With ``keep_snapshots`` an env snapshot is kept before every turn. A snapshot the
env refuses to take because of what the episode made (a `ValueError`, such as the
sandbox's `SandboxError` for a workspace past the archive cap or holding a path
too long to restore) is left out: that turn has none (each snapshot carries its
turn), and the episode goes on to its own outcome; counting it as ``infra`` would
let an action dodge its episode's penalty. Any other failure of ``snapshot()``
(an `InfraError` such as a dead sandbox, an `OSError` of the host) ends the
episode as ``infra``, as a failing step does.

With ``executor="ray"`` the same rounds run with the envs in Ray actors
(`agentenv.rollout.ray`), on one machine or across a cluster.

Left out on purpose: retries of infra failures (the failure miner re-queues
them).
"""

from __future__ import annotations

import json
import math
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from agentenv.core import _admit, _safejson
from agentenv.core.env import Env, Snapshot
from agentenv.core.errors import InfraError, message_of
from agentenv.core.policy import Conversation, Generation, Policy, PolicyFailure, PolicyOutput
from agentenv.core.task import Task, did_you_mean
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure

if TYPE_CHECKING:
    from agentenv.rollout.ray import RayExecutor

__all__ = ["rollout"]

EnvFactory = Callable[[], Env]


@dataclass(slots=True)
class _Episode:
    """One episode: what it was asked to run, its env while live, and what it recorded."""

    index: int
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
    shown: tuple[Task | None, list[dict[str, Any]]] | None = None
    """The policy's own copies of the episode's task and tool schemas, made at its first turn."""

    def start(self, factory: EnvFactory, keep_snapshots: bool) -> None:
        """Reset its env (made now unless one was handed over); a failure ends it as infra."""
        try:
            self.env = self.env or factory()
            self.shown = None
            self.start_time = time.perf_counter()
            options: dict[str, Any] = {"task": self.task} if self.task is not None else {}
            if self.resume is not None:
                options["snapshot"] = self.resume
            self.env.reset(seed=self.seed, options=options or None)
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
            self.shown = (self.env.task.model_copy(deep=True), _copied(self.env.tool_schemas()))
        task, tools = self.shown
        return Conversation(self.index, _copied(self.env.messages), tools, task)

    def trajectory(self, env_id: str | None) -> Trajectory:
        env, info = self.env, self.last_info
        failure = Failure.INFRA if self.error is not None else Failure(info.get("failure") or "infra")
        task = env.task if env is not None and env._task is not None else self.placeholder_task()
        return Trajectory(
            env_id=env_id,
            task=task,
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

    def placeholder_task(self) -> Task:
        # The env failed before it chose a task: record what was asked for.
        if isinstance(self.task, Task):
            return self.task
        return Task(id=self.task or "<unknown>", prompt="")


def rollout(
    env: str | EnvFactory,
    policy: Policy,
    *,
    n: int | None = None,
    tasks: Sequence[Task | str | None] | None = None,
    seeds: Sequence[int | None] | None = None,
    seed: int = 0,
    concurrency: int | None = None,
    max_workers: int | None = None,
    out: str | Path | None = None,
    keep_snapshots: bool = False,
    resume_from: Sequence[Snapshot | None] | None = None,
    on_episode: Callable[[Trajectory], None] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    executor: str | RayExecutor = "thread",
) -> list[Trajectory]:
    """Run episodes and return their trajectories, in the order asked for.

    Args:
        env: A registered env id (or any name `agentenv.registry.resolve` takes, such
            as ``module:Class``) or a factory returning a fresh `Env`.
        policy: Called once per turn with all live episodes.
        n: Number of episodes (defaults to the length of ``tasks`` or ``seeds``).
        tasks: The task (or task id) of each episode; None lets the env draw one.
        seeds: The reset seed of each episode; defaults to ``seed + i``.
        seed: Base seed used when ``seeds`` is not given.
        concurrency: Episodes live at once (default: all of them).
        max_workers: Threads stepping envs (default: ``concurrency``).
        out: A JSONL file; each trajectory is appended and flushed as it finishes.
        keep_snapshots: Keep an env snapshot before every turn (for the failure miner).
        resume_from: Per episode, a snapshot to start from instead of the task's first
            turn (the failure miner's resume tasks); its task entry, if any, relabels it.
        on_episode: Called with each trajectory as it finishes (progress bars).
        env_kwargs: Keyword arguments for `agentenv.make` when ``env`` is an id.
        executor: Where the envs run: ``"thread"`` (this process, stepped by a thread
            pool), ``"ray"`` (Ray actors made for this call, see `agentenv.rollout.ray`),
            or a `agentenv.rollout.ray.RayExecutor` whose actors outlive the call. With
            Ray, ``max_workers`` is the threads of each actor.
    """
    env_id, factory = _factory(env, env_kwargs or {})
    episodes = _episodes(n, tasks, seeds, seed, resume_from)
    concurrency = max(1, min(concurrency or len(episodes), len(episodes))) if episodes else 1
    if max_workers is not None and max_workers < 1:
        raise ValueError(f"max_workers must be >= 1, got {max_workers}")
    if not (isinstance(executor, str) and executor == "thread"):
        from agentenv.rollout.ray import ray_rollout

        return ray_rollout(
            executor,
            (env, env_kwargs or {}, env_id),
            policy,
            episodes,
            concurrency=concurrency,
            threads=max_workers,
            out=out,
            keep_snapshots=keep_snapshots,
            on_episode=on_episode,
        )
    run = _Run(env_id, factory, policy, episodes, concurrency, keep_snapshots, on_episode)
    return run.run(out, workers=max_workers or concurrency)


class _Run:
    """One call of `rollout`: the episodes waiting, live and finished, and the envs to reuse.

    Each round `start_episodes` fills the free slots (resets run concurrently),
    `ask_policy` gets one action per live episode in a single call, and `step`
    applies them (concurrently); `finish` records each episode that ended and hands
    its env to the next one (an env that raised is closed instead: it may be broken).
    """

    def __init__(
        self,
        env_id: str | None,
        factory: EnvFactory,
        policy: Policy,
        episodes: list[_Episode],
        concurrency: int,
        keep_snapshots: bool,
        on_episode: Callable[[Trajectory], None] | None,
    ) -> None:
        self.env_id, self.factory, self.policy = env_id, factory, policy
        self.concurrency, self.keep_snapshots, self.on_episode = concurrency, keep_snapshots, on_episode
        self.pending = deque(episodes)
        self.live: list[_Episode] = []
        self.idle_envs: list[Env] = []
        self.results: list[Trajectory | None] = [None] * len(episodes)
        self.sink: IO[str] | None = None

    def run(self, out: str | Path | None, workers: int) -> list[Trajectory]:
        try:
            self.check_task_ids()
            self.sink = Path(out).open("a", encoding="utf-8") if out is not None else None
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agentenv-step") as pool:
                while self.pending or self.live:
                    self.start_episodes(pool)
                    if self.live:
                        self.step(pool, self.ask_policy())
        finally:
            self.close()
        return [t for t in self.results if t is not None]

    def check_task_ids(self) -> None:
        """A mistyped task id is the caller's error, not an infra failure of the episode:
        `KeyError` with a did-you-mean, before anything runs. The env made to check is
        kept for the first episode."""
        task_ids = {ep.task for ep in self.pending if isinstance(ep.task, str)}
        if not task_ids:
            return
        probe = self.factory()
        missing = sorted(task_ids - set(probe.tasks.ids))
        if missing:
            probe.close()
            hint = did_you_mean(missing[0], probe.tasks.ids)
            raise KeyError(f"{type(probe).__name__} has no task {missing[0]!r}.{hint}")
        self.idle_envs.append(probe)

    def start_episodes(self, pool: ThreadPoolExecutor) -> None:
        starting: list[_Episode] = []
        while self.pending and len(self.live) + len(starting) < self.concurrency:
            ep = self.pending.popleft()
            ep.env = self.idle_envs.pop() if self.idle_envs else None
            starting.append(ep)
        _each(pool, lambda ep: ep.start(self.factory, self.keep_snapshots), starting)
        for ep in starting:
            if ep.done:
                self.finish(ep)
            else:
                self.live.append(ep)

    def ask_policy(self) -> list[PolicyOutput]:
        return ask_policy(self.policy, [ep.conversation() for ep in self.live])

    def step(self, pool: ThreadPoolExecutor, outputs: list[PolicyOutput]) -> None:
        pairs = list(zip(self.live, outputs, strict=True))
        _each(pool, lambda pair: pair[0].advance(pair[1], self.keep_snapshots), pairs)
        still: list[_Episode] = []
        for ep in self.live:
            if ep.done:
                self.finish(ep)
            else:
                still.append(ep)
        self.live = still

    def finish(self, ep: _Episode) -> None:
        traj = ep.trajectory(self.env_id)
        self.results[ep.index] = traj
        if self.sink is not None:
            self.sink.write(_jsonl_line(traj))
            self.sink.flush()
        if ep.env is not None:
            if ep.error is None:
                self.idle_envs.append(ep.env)
            else:  # an env that raised may be broken: never reuse it
                _close_quietly(ep.env)
            ep.env = None
        if self.on_episode is not None:
            self.on_episode(traj)

    def close(self) -> None:
        for ep in self.live:
            if ep.env is not None:
                _close_quietly(ep.env)
        for env in self.idle_envs:
            _close_quietly(env)
        if self.sink is not None:
            self.sink.close()


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


def _checked(output: PolicyOutput) -> PolicyOutput:
    if isinstance(output, PolicyFailure):
        error = getattr(output, "error", None)
        text = _safejson.clean_text(error) if type(error) is str else _admit.safe_repr(error)
        return output if text is error else PolicyFailure(error=text)
    if not isinstance(output, Generation):
        return output
    return Generation.model_validate({name: getattr(output, name) for name in Generation.model_fields})


def _copied(value: Any) -> Any:
    """``value`` with its dicts and lists copied (JSON data: the rest is immutable)."""
    if type(value) is dict:
        return {k: _copied(v) for k, v in value.items()}
    if type(value) is list:
        return [_copied(v) for v in value]
    return value


def _jsonl_line(traj: Trajectory) -> str:
    """``traj`` as one JSONL line that reads back. Envs keep their records plain JSON
    data, but a custom env or policy may not: rather than lose the episode (and abort
    the rollout, or break every later reader of the file), what the encoder refuses
    or a reader would refuse is spelled out (see `_plain`)."""
    try:
        line = traj.model_dump_json()
        _safejson.loads(line, max_depth=READ_DEPTH)  # what json writes, it may not read back (10**5000)
        return line + "\n"
    except (ValueError, TypeError, RecursionError):  # pydantic's serialisation errors and UnsafeJSON are ValueErrors
        pass
    try:
        data = _plain(traj.model_dump(mode="python"), depth=0)
    except (ValueError, TypeError, RecursionError):  # not even a Python dump: keep what identifies it
        data = {
            "env_id": traj.env_id,
            "task": _plain(traj.task.model_dump(mode="python"), depth=0),
            "seed": traj.seed,
            "messages": [],
            "transitions": [],
            "failure": traj.failure.value,
            "error": "the episode's record could not be written",
        }
    return json.dumps(data, ensure_ascii=False, allow_nan=False) + "\n"


READ_DEPTH = 200
"""Lines nested deeper go through `_plain`: pydantic's JSON reader (`Trajectory.from_json`) refuses ~250."""
_PLAIN_DEPTH = 64


def _plain(value: Any, depth: int) -> Any:
    """``value`` as JSON data: lone surrogates spelled out, non-finite floats as None,
    integers past `_safejson.MAX_INT_BITS` as text, odd types and nesting past 64
    levels as their repr."""
    if isinstance(value, str):
        return _safejson.clean_text(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= _safejson.MAX_INT_BITS else _long_int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth > _PLAIN_DEPTH:
        return "<nested too deeply>"
    if isinstance(value, dict):
        return {_safejson.clean_text(str(k)): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, Enum):
        return _plain(value.value, depth + 1)
    return _admit.safe_repr(value)


def _long_int(value: int) -> str:
    try:
        return str(value)[:50]
    except ValueError:  # past the digit limit of str() itself
        return f"<int of {value.bit_length()} bits>"


def _describe(e: BaseException) -> str:
    frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f" (at {Path(frame.filename).name}:{frame.lineno})" if frame else ""
    return f"{type(e).__name__}: {message_of(e)}{where}"


def _close_quietly(env: Env) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001, S110 - the env is already being discarded as broken
        pass


def _episodes(
    n: int | None,
    tasks: Sequence[Task | str | None] | None,
    seeds: Sequence[int | None] | None,
    seed: int,
    resume_from: Sequence[Snapshot | None] | None,
) -> list[_Episode]:
    """The episodes asked for, each with its task, seed and snapshot to resume from."""
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
    return [_Episode(i, task_list[i], seed_list[i], resume_list[i]) for i in range(n)]


def _factory(env: str | EnvFactory, kwargs: dict[str, Any]) -> tuple[str | None, EnvFactory]:
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


def _each(pool: ThreadPoolExecutor, fn: Callable[[Any], None], items: list[Any]) -> None:
    """``fn`` on every item, concurrently in ``pool``."""
    if len(items) == 1:
        fn(items[0])  # no thread hop for a single episode
    elif items:
        list(pool.map(fn, items))
