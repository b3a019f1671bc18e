"""The rollout engine: many episodes at once, one batched policy call per turn.

Each turn the engine gathers every live episode, asks the policy for all of their
actions in one call, then steps the envs concurrently in a thread pool (env steps
are I/O: containers, HTTP services, browsers). An exception inside one env ends
that episode as ``infra`` and never stops the others; a policy that raises (a
timeout, a dead server, a bug) or answers with the wrong number of actions ends
the episodes it was asked about as ``infra`` and the rollout goes on with the
rest. Only `KeyboardInterrupt` (or another `BaseException`) stops it, and `EOFError`
from the policy: it has no more actions to give (a person at the terminal typed
Ctrl-D), which no later turn can change. Finished
trajectories are appended to a JSONL file and flushed one by one, so a crash
loses nothing that had finished; a trajectory holding something no encoder
takes is written with those values spelled out rather than lost.

Left out on purpose: retries of infra failures (the failure miner re-queues
them) and process-level parallelism (envs that need it run their work in
containers or services already).
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
from typing import IO, Any

from agentenv import _safejson
from agentenv.env import Env, Snapshot
from agentenv.policies import Conversation, Generation, Policy, PolicyFailure, PolicyOutput
from agentenv.task import Task, did_you_mean
from agentenv.trajectory import Trajectory
from agentenv.types import Failure

__all__ = ["rollout"]

EnvFactory = Callable[[], Env]


@dataclass(slots=True)
class _Episode:
    index: int
    task: Task | str | None
    seed: int | None
    resume: Snapshot | None = None
    env: Env | None = None
    generations: list[Generation | None] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    start: float = 0.0
    last_info: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    error: str | None = None


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
) -> list[Trajectory]:
    """Run episodes and return their trajectories, in the order asked for.

    Args:
        env: A registered env id or a factory returning a fresh `Env`.
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
    """
    env_id, factory = _factory(env, env_kwargs or {})
    n = _count(n, tasks, seeds)
    task_list = list(tasks) if tasks is not None else [None] * n
    seed_list = list(seeds) if seeds is not None else [seed + i for i in range(n)]
    if len(task_list) != n or len(seed_list) != n:
        raise ValueError(f"tasks ({len(task_list)}) and seeds ({len(seed_list)}) must both have n={n} entries")
    resume_list = list(resume_from) if resume_from is not None else [None] * n
    if len(resume_list) != n:
        raise ValueError(f"resume_from has {len(resume_list)} entries, expected n={n}")
    concurrency = max(1, min(concurrency or n, n)) if n else 1
    if max_workers is not None and max_workers < 1:
        raise ValueError(f"max_workers must be >= 1, got {max_workers}")

    pending = deque(_Episode(i, task_list[i], seed_list[i], resume_list[i]) for i in range(n))
    idle_envs: list[Env] = []
    task_ids = {t for t in task_list if isinstance(t, str)}
    if task_ids and n:
        # A mistyped task id is the caller's error, not an infra failure of the episode.
        probe = factory()
        idle_envs.append(probe)
        missing = sorted(task_ids - set(probe.tasks.ids))
        if missing:
            probe.close()
            hint = did_you_mean(missing[0], probe.tasks.ids)
            raise KeyError(f"{type(probe).__name__} has no task {missing[0]!r}.{hint}")
    live: list[_Episode] = []
    results: list[Trajectory | None] = [None] * n
    sink: IO[str] | None = Path(out).open("a", encoding="utf-8") if out is not None else None

    def finish(ep: _Episode) -> None:
        traj = _trajectory(ep, env_id)
        results[ep.index] = traj
        if sink is not None:
            sink.write(_jsonl_line(traj))
            sink.flush()
        if ep.env is not None:
            if ep.error is None:
                idle_envs.append(ep.env)
            else:  # an env that raised may be broken: never reuse it
                _close_quietly(ep.env)
            ep.env = None
        if on_episode is not None:
            on_episode(traj)

    def start(ep: _Episode) -> None:
        try:
            ep.env = ep.env or factory()
            ep.start = time.perf_counter()
            options: dict[str, Any] = {"task": ep.task} if ep.task is not None else {}
            if ep.resume is not None:
                options["snapshot"] = ep.resume
            ep.env.reset(seed=ep.seed, options=options or None)
            if keep_snapshots:
                ep.snapshots.append(ep.env.snapshot())
        except Exception as e:  # noqa: BLE001 - a broken env is data, see module doc
            ep.done, ep.error = True, _describe(e)

    def advance(item: tuple[_Episode, PolicyOutput]) -> None:
        ep, output = item
        assert ep.env is not None
        if isinstance(output, PolicyFailure):
            ep.done, ep.error = True, f"policy: {output.error}"
            return
        generation = output if isinstance(output, Generation) else None
        action = generation.action if generation is not None else output
        try:
            _, reward, terminated, truncated, info = ep.env.step(action)
            ep.generations.append(generation)
            ep.rewards.append(reward)
            ep.last_info = info
            ep.done = terminated or truncated
            if keep_snapshots and not ep.done:
                ep.snapshots.append(ep.env.snapshot())
        except Exception as e:  # noqa: BLE001
            ep.done, ep.error = True, _describe(e)

    workers = max_workers or concurrency
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agentenv-step") as pool:
            while pending or live:
                starting = []
                while pending and len(live) + len(starting) < concurrency:
                    ep = pending.popleft()
                    ep.env = idle_envs.pop() if idle_envs else None
                    starting.append(ep)
                _run(pool, start, starting)
                for ep in starting:
                    (finish if ep.done else live.append)(ep)
                if not live:
                    continue
                outputs = _ask(policy, live)
                _run(pool, advance, list(zip(live, outputs, strict=True)))
                still = []
                for ep in live:
                    (finish if ep.done else still.append)(ep)
                live = still
    finally:
        for ep in live:
            if ep.env is not None:
                _close_quietly(ep.env)
        for env_ in idle_envs:
            _close_quietly(env_)
        if sink is not None:
            sink.close()
    return [t for t in results if t is not None]


def _ask(policy: Policy, live: list[_Episode]) -> list[PolicyOutput]:
    """One action per live episode; a policy that raises or miscounts fails them all, as data."""
    conversations = [
        Conversation(ep.index, list(ep.env.messages), ep.env.tool_schemas(), ep.env.task)  # type: ignore[union-attr]
        for ep in live
    ]
    try:
        outputs = list(policy.act(conversations))
    except EOFError:
        raise  # the policy is out of input for good: the caller ends the run (see the module doc)
    except Exception as e:  # noqa: BLE001 - the policy's backend failed: infra for these episodes, see module doc
        return [PolicyFailure(error=_describe(e)) for _ in live]
    if len(outputs) != len(live):
        failure = PolicyFailure(error=f"the policy returned {len(outputs)} actions for {len(live)} conversations")
        return [failure for _ in live]
    return outputs


def _jsonl_line(traj: Trajectory) -> str:
    """``traj`` as one JSONL line. Envs keep their records plain JSON data, but a
    custom env or policy may not: rather than lose the episode (and abort the
    rollout), what the encoder refuses is spelled out (see `_plain`)."""
    try:
        return traj.model_dump_json() + "\n"
    except (ValueError, TypeError, RecursionError):  # pydantic's serialisation errors are ValueErrors
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


def _plain(value: Any, depth: int) -> Any:
    """``value`` as JSON data: lone surrogates spelled out, non-finite floats as None,
    odd types and nesting past 64 levels as their repr."""
    if isinstance(value, str):
        return _safejson.clean_text(value)
    if value is None or isinstance(value, bool | int):
        return value if not isinstance(value, int) or value.bit_length() <= _safejson.MAX_INT_BITS else str(value)[:50]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth > 64:
        return "<nested too deeply>"
    if isinstance(value, dict):
        return {_safejson.clean_text(str(k)): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, Enum):
        return _plain(value.value, depth + 1)
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__
        text = f"<{type(value).__name__}>"
    return _safejson.clean_text(text[:1000])


def _run(pool: ThreadPoolExecutor, fn: Callable[[Any], None], items: list[Any]) -> None:
    if len(items) == 1:
        fn(items[0])  # no thread hop for a single episode
    elif items:
        list(pool.map(fn, items))


def _trajectory(ep: _Episode, env_id: str | None) -> Trajectory:
    env = ep.env
    info = ep.last_info
    failure = Failure.INFRA if ep.error is not None else Failure(info.get("failure") or "infra")
    task = env.task if env is not None and env._task is not None else _placeholder_task(ep)
    return Trajectory(
        env_id=env_id,
        task=task,
        seed=ep.seed,
        messages=list(env.messages) if env is not None else [],
        transitions=list(env.transitions) if env is not None else [],
        generations=ep.generations,
        snapshots=ep.snapshots,
        rewards=ep.rewards,
        task_reward=info.get("task_reward") if ep.error is None else None,
        success=bool(info.get("success")) if ep.error is None else False,
        failure=failure,
        duration_s=time.perf_counter() - ep.start if ep.start else 0.0,
        error=ep.error or (info.get("error") if failure is Failure.INFRA else None),
    )


def _placeholder_task(ep: _Episode) -> Task:
    # The env failed before it chose a task: record what was asked for.
    if isinstance(ep.task, Task):
        return ep.task
    return Task(id=ep.task or "<unknown>", prompt="")


def _describe(e: BaseException) -> str:
    frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f" (at {Path(frame.filename).name}:{frame.lineno})" if frame else ""
    return f"{type(e).__name__}: {e}{where}"


def _close_quietly(env: Env) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001, S110 - the env is already being discarded as broken
        pass


def _count(n: int | None, tasks: Sequence[Any] | None, seeds: Sequence[Any] | None) -> int:
    if n is None:
        if tasks is None and seeds is None:
            raise ValueError("give n, tasks or seeds")
        n = len(tasks) if tasks is not None else len(seeds)  # type: ignore[arg-type]
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return n


def _factory(env: str | EnvFactory, kwargs: dict[str, Any]) -> tuple[str | None, EnvFactory]:
    if isinstance(env, str):
        from agentenv.registry import make, spec

        spec(env)  # fail now, with a did-you-mean, rather than inside a worker
        return env, lambda: make(env, **kwargs)
    if not callable(env):
        raise TypeError(f"env must be a registered id or a factory returning an Env, got {type(env).__name__}")
    if kwargs:
        raise ValueError("env_kwargs only applies when env is a registered id")
    return None, env
