"""Env workers on Ray: `RayExecutor`, the executor of `rollout(..., executor="ray")`.

Each actor (`_EnvWorker`) is a process on some node of a Ray cluster that builds its
envs itself, from the env id and keyword arguments (or a picklable factory) sent to
it, so every actor has its own sandbox pools, browsers and services, next to the
envs that use them. An episode lives on one actor from reset to its last step, in
the actor's `EnvStepper`: the env side the thread executor runs too.

The policy stays with the caller, where the trainer and its model are (or it is
an OpenAI-compatible server the caller talks to). Two designs were possible: each
actor asks the caller for actions, or the caller drives the steps on the actors.
This module does the second, because it batches as well as one process does: each
round the caller

1. sends the episodes that may start to the actors (the least loaded first),
2. asks the policy once for every live episode of every actor, in episode order,
3. sends each actor the actions of its episodes; the actor steps them concurrently
   in its own thread pool and answers with the conversations that go on and the
   trajectories that finished, which the caller writes out (``out``, ``on_episode``)
   as they arrive.

So a generation batch spans all actors (one call per turn, as with threads), a
model never leaves the trainer's device, and the rounds are those of the thread
executor: a seeded policy gives the same trajectories with either. The cost is
one round trip per actor per turn (about a millisecond on one machine), and each
turn's conversation travels back whole.

An actor that dies (killed, out of memory, its node lost) fails the call the
caller made to it: its episodes end as ``infra`` with the reason, a fresh actor
takes its place, and the rollout goes on with the rest. So does an actor that does
not answer a round within ``step_timeout_s`` (a process stopped with SIGSTOP, a
deadlock, a node that no longer answers): the caller waits for the actors together,
never past that deadline, and the late actor is killed. An episode whose news the
actor cannot send (an env that put an object no pickle can hold in its task, its
snapshots or its trajectory) ends as ``infra`` saying so, alone: each episode's news
is pickled on its own, on the actor, and read on its own by the caller. A cluster
that cannot be reached, or that has no room for the actors, is one
`RayClusterError` saying so.

Ray is an optional extra (``pip install 'agentenv[ray]'``), imported only when an
executor starts. Left out on purpose: scheduling policies beyond "least live
episodes", retries of lost episodes (they are data, like any infra failure), and
placing the policy itself in the cluster (serve it with vLLM or SGLang and use
`agentenv.OpenAIPolicy`).
"""

from __future__ import annotations

import os
import pickle
import re
import socket
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentenv.core import _admit, _safejson
from agentenv.core.errors import AgentEnvError
from agentenv.core.policy import Conversation, Generation, Policy, PolicyFailure, PolicyOutput
from agentenv.core.task import Task
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.rollout.episode import (
    EnvFactory,
    Episode,
    ask_policy,
    asked_task_ids,
    check_task_ids,
    checked_output,
    close_quietly,
    env_factory,
)
from agentenv.rollout.executor import RolloutJob
from agentenv.rollout.recorder import Recorder
from agentenv.rollout.stepper import EnvStepper

__all__ = ["RayClusterError", "RayConfig", "RayExecutor"]

INSTALL_HINT = "pip install 'agentenv[ray]' (or: pip install 'ray>=2.40,<3')"

_ADDRESS = re.compile(r"(ray://)?[\w.\-]+:\d{1,5}")


class RayClusterError(AgentEnvError, ConnectionError):
    """The Ray cluster cannot be reached, has no room for the env actors, or an actor
    cannot load the env; the message says which and what to do."""


class RayConfig(BaseModel):
    """Where and how many env actors run (the trainer's ``ray`` field)."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True, allow_inf_nan=False)

    actors: int = Field(2, ge=1)
    """Env actors, each a process on some node with its own envs, sandboxes and services."""
    address: str | None = None
    """The cluster: None joins the one named by RAY_ADDRESS or `ray start` on this machine,
    else starts a local one with this machine's CPUs; "auto" joins the cluster `ray start`
    runs on this machine; "local" always starts a new one; "HOST:PORT" a head node (its
    GCS port, 6379 by default); "ray://HOST:10001" a head node through Ray Client. A Ray
    this process has joined already (`ray.init`) is used whatever the address, once a
    given HOST:PORT is seen to answer."""
    actor_cpus: float = Field(1.0, ge=0.0)
    """CPUs Ray reserves for each actor. Envs that wait on I/O need little: 0.25 puts four
    actors on a core."""
    threads: int | None = Field(None, ge=1)
    """Threads each actor steps its envs with (default: ``max_workers`` of the rollout, else
    its concurrency)."""
    start_timeout_s: float = Field(60.0, gt=0.0)
    """How long actors may take to start before the cluster is said to lack room for them."""
    step_timeout_s: float = Field(600.0, gt=0.0)
    """How long an actor may take over one round: starting its episodes (their resets) or
    stepping them, all at once in its threads. Past it, its episodes end as ``infra`` and a
    fresh actor takes its place: an actor that hangs (stopped, deadlocked, its node gone
    silent) never holds the batch longer. Raise it for envs whose one step may take longer
    (a world model's ``call_timeout_s`` times its attempts, a sandbox's run), or for actors
    with fewer threads than episodes."""

    @field_validator("address")
    @classmethod
    def _check_address(cls, address: str | None) -> str | None:
        if address is None or address in ("auto", "local") or _ADDRESS.fullmatch(address):
            return address
        raise ValueError(
            f"address must be None, 'auto', 'local', 'HOST:PORT' or 'ray://HOST:PORT', got {address!r}; "
            "e.g. '10.0.0.5:6379'"
        )


@dataclass(frozen=True, slots=True)
class _EnvSource:
    """What an actor builds its envs from: a registered id with its kwargs, or a factory."""

    env: str | EnvFactory
    kwargs: dict[str, Any]


@dataclass(slots=True)
class _Update:
    """An actor's news of one episode: its conversation goes on, or its trajectory is done."""

    index: int
    conversation: Conversation | None = None
    trajectory: Trajectory | None = None


_Packed = tuple[int, bytes]
"""An episode's index and its `_Update`, pickled by the actor (see `_EnvWorker.packed`)."""


class _EnvWorker:
    """The actor: the `EnvStepper` of the episodes placed on it, so an episode behaves the
    same as with threads; it answers each call with its episodes' news."""

    def __init__(self) -> None:
        self.stepper: EnvStepper | None = None

    def ready(self) -> str:
        return f"{socket.gethostname()}:{os.getpid()}"

    def begin(self, source: _EnvSource, keep_snapshots: bool, threads: int) -> None:
        """Get ready for one rollout; the env is resolved here, on the actor's node."""
        self.end()
        env_id, factory = env_factory(source.env, source.kwargs)
        self.stepper = EnvStepper(env_id, factory, keep_snapshots=keep_snapshots, threads=threads)

    def task_ids(self) -> tuple[str, list[str]]:
        assert self.stepper is not None  # `begin` came first
        return self.stepper.task_ids()  # the env made to tell is kept for the first episode

    def start(self, episodes: list[Episode]) -> list[_Packed]:
        assert self.stepper is not None  # `begin` came first
        self.stepper.start(episodes)
        return [self.packed(ep) for ep in episodes]

    def step(self, outputs: list[tuple[int, PolicyOutput]]) -> list[_Packed]:
        assert self.stepper is not None  # `begin` came first
        pairs = [(self.stepper.live[i], output) for i, output in outputs]
        self.stepper.advance(pairs)
        return [self.packed(ep) for ep, _ in pairs]

    def packed(self, ep: Episode) -> _Packed:
        """The episode's news, pickled here, alone: news that cannot be (an object no pickle
        holds in its task, snapshots or trajectory) ends this episode as infra, and only it."""
        finished: Trajectory | None = None
        try:
            update = self.update(ep)
            finished = update.trajectory
            return ep.index, _dumps(update)
        except Exception as e:  # noqa: BLE001 - whatever copying or pickling raised, see the doc
            reason = f"the episode's data cannot be sent from its Ray actor: {type(e).__name__}: {str(e)[:300]}"
        if finished is None:  # its conversation (or its trajectory) could not be made: end it here
            finished = self.fail(ep, reason)
        return ep.index, _dumps(_Update(ep.index, trajectory=_plain(finished, reason, ep)))

    def update(self, ep: Episode) -> _Update:
        assert self.stepper is not None  # `begin` came first
        if ep.done:
            return _Update(ep.index, trajectory=self.stepper.finish(ep))
        return _Update(ep.index, conversation=ep.conversation())

    def fail(self, ep: Episode, reason: str) -> Trajectory | None:
        """End ``ep`` as infra for ``reason``, its env closed (never reused); its trajectory,
        or None when even that cannot be made."""
        assert self.stepper is not None  # `begin` came first
        ep.done, ep.error = True, reason
        try:
            return self.stepper.finish(ep)
        except Exception:  # noqa: BLE001 - `_plain` records the episode without its data
            self.stepper.live.pop(ep.index, None)
            if ep.env is not None:
                close_quietly(ep.env)
                ep.env = None
            return None

    def drop(self, indices: list[int], reason: str) -> None:
        """End live episodes whose news the caller could not read (it has recorded them)."""
        assert self.stepper is not None  # `begin` came first
        for index in indices:
            ep = self.stepper.live.get(index)
            if ep is not None:
                self.fail(ep, reason)

    def end(self) -> None:
        """Close every env and the thread pool (a rollout ended)."""
        if self.stepper is not None:
            self.stepper.close()
            self.stepper = None


class RayExecutor:
    """Env actors on a Ray cluster: an `agentenv.rollout.Executor` for `rollout`
    (``executor=``) and the trainer.

    The actors start on first use (or `start`) and live until `close` (or the end of
    a ``with`` block), so a trainer pays for them once, not every step. Pass a
    `RayConfig` or its fields: ``RayExecutor(actors=4, address="10.0.0.5:6379")``.
    """

    def __init__(self, config: RayConfig | None = None, **fields: Any) -> None:
        if config is not None and fields:
            raise TypeError("give a RayConfig or its fields, not both")
        self.config = config if config is not None else RayConfig(**fields)
        self.actors: list[Any] = []
        """The actor handles, one per slot (a lost actor's slot gets a fresh one)."""
        self._actor_class: Any = None
        self._run: tuple[_EnvSource, bool, int] | None = None  # the current rollout's `begin`

    def __enter__(self) -> RayExecutor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        """Join the cluster (or start a local Ray): a missing Ray or an unreachable
        address fails here, in seconds. A Ray this process has joined already is used
        as it is."""
        _connect(_import_ray(), self.config.address)

    def start(self) -> None:
        """Join (or start) the cluster and start the actors, once."""
        if self.actors:
            return
        self.connect()
        ray = _import_ray()
        self._actor_class = ray.remote(num_cpus=self.config.actor_cpus, max_restarts=0)(_EnvWorker)
        actors = [self._actor_class.remote() for _ in range(self.config.actors)]
        self._wait_ready(actors)
        self.actors = actors

    def close(self) -> None:
        """Stop the actors (their envs with them). A Ray started here stays up until the
        process exits or ``ray.shutdown()``: starting it again costs seconds."""
        if self.actors:
            ray = _import_ray()
            if ray.is_initialized():  # after ray.shutdown() the actors are gone already
                for actor in self.actors:
                    ray.kill(actor, no_restart=True)
        self.actors, self._run = [], None

    # -- one rollout -----------------------------------------------------------------

    def run(self, job: RolloutJob, policy: Policy, recorder: Recorder) -> None:
        """Run ``job``'s episodes on the actors (see the module doc for the rounds); each
        actor steps with ``job.threads`` threads, else ``threads`` of the config, else
        one per live episode."""
        threads = job.threads or self.config.threads or job.concurrency
        _RayRun(self, job, policy, recorder).run(threads)

    def begin(self, source: _EnvSource, keep_snapshots: bool, threads: int) -> None:
        """Every actor gets ready for a rollout of ``source``; a dead or silent one is replaced."""
        self.start()
        ray = _import_ray()
        self._run = (source, keep_snapshots, threads)
        calls = [actor.begin.remote(*self._run) for actor in self.actors]
        answered, _ = ray.wait(calls, num_returns=len(calls), timeout=self.config.step_timeout_s)
        for slot, call in enumerate(calls):
            if call not in answered:
                self.replace(slot)
                continue
            try:
                ray.get(call)
            except ray.exceptions.RayActorError:
                self.replace(slot)
            except ray.exceptions.RayTaskError as e:
                raise RayClusterError(f"a Ray env actor could not load the env: {_cause(e)}") from None

    def end(self) -> None:
        """Every live actor closes the rollout's envs (errors ignored: an actor may be gone);
        one that does not answer within ``step_timeout_s`` is killed (`begin` replaces it)."""
        ray = _import_ray()
        calls = [actor.end.remote() for actor in self.actors]
        answered, _ = ray.wait(calls, num_returns=len(calls), timeout=self.config.step_timeout_s)
        for actor, call in zip(self.actors, calls, strict=True):
            try:
                if call not in answered:
                    ray.kill(actor, no_restart=True)
                else:
                    ray.get(call)
            except ray.exceptions.RayError:
                pass  # a dead actor holds no envs; the next `begin` replaces it
        self._run = None

    def replace(self, slot: int) -> None:
        """A fresh actor in ``slot`` (ready for the current rollout, if one runs); the old
        one is killed, answering or not."""
        ray = _import_ray()
        try:
            ray.kill(self.actors[slot], no_restart=True)
        except ray.exceptions.RayError:
            pass  # it is gone already
        actor = self._actor_class.remote()
        self._wait_ready([actor])
        self.actors[slot] = actor
        if self._run is not None:
            try:
                ray.get(actor.begin.remote(*self._run), timeout=self.config.start_timeout_s)
            except ray.exceptions.GetTimeoutError:
                raise RayClusterError(
                    f"a fresh Ray env actor did not get ready for the rollout within {self.config.start_timeout_s:g} s"
                ) from None

    def _wait_ready(self, actors: list[Any]) -> None:
        ray = _import_ray()
        calls = [actor.ready.remote() for actor in actors]
        _, late = ray.wait(calls, num_returns=len(calls), timeout=self.config.start_timeout_s)
        if late:
            for actor in actors:
                ray.kill(actor, no_restart=True)
            cpus = ray.available_resources().get("CPU", 0.0)
            raise RayClusterError(
                f"{len(late)} of {len(actors)} Ray env actors did not start within {self.config.start_timeout_s:g} s; "
                f"each asks for {self.config.actor_cpus:g} CPU and the cluster has {cpus:g} free: "
                "lower ray.actors or ray.actor_cpus, or add nodes"
            )
        ray.get(calls)


class _RayRun:
    """One `rollout` on Ray, from the caller's side: the episodes waiting, where each live
    one is and its conversation (see the module doc for the rounds)."""

    def __init__(self, executor: RayExecutor, job: RolloutJob, policy: Policy, recorder: Recorder) -> None:
        self.executor, self.job, self.policy, self.recorder = executor, job, policy, recorder
        self.pending = deque(job.episodes)
        self.episodes = {ep.index: ep for ep in job.episodes}
        self.slot_of: dict[int, int] = {}  # episode -> actor slot, from its start to its end
        self.live: dict[int, Conversation] = {}

    def run(self, threads: int) -> None:
        try:
            self.executor.begin(_EnvSource(self.job.env, self.job.env_kwargs), self.job.keep_snapshots, threads)
            self.check_task_ids()
            self.recorder.open()
            while self.pending or self.live:
                self.start_episodes()
                if self.live:
                    self.step()
        finally:
            if self.executor.actors:
                self.executor.end()

    def check_task_ids(self) -> None:
        """A mistyped task id is the caller's error (as with threads), asked of one actor."""
        asked = asked_task_ids(self.pending)
        if asked:
            ray = _import_ray()
            timeout_s = self.executor.config.step_timeout_s
            try:
                env_name, known = ray.get(self.executor.actors[0].task_ids.remote(), timeout=timeout_s)
            except ray.exceptions.GetTimeoutError:
                raise RayClusterError(f"a Ray env actor did not list the env's tasks within {timeout_s:g} s") from None
            check_task_ids(asked, known, env_name)

    def start_episodes(self) -> None:
        """Fill the free slots, each episode on the actor with the fewest live ones."""
        load = [0] * len(self.executor.actors)
        for slot in self.slot_of.values():
            load[slot] += 1
        batches: dict[int, list[Episode]] = {}
        while self.pending and len(self.slot_of) < self.job.concurrency:
            ep = self.pending.popleft()
            slot = min(range(len(load)), key=lambda s: (load[s], s))
            load[slot] += 1
            self.slot_of[ep.index] = slot
            batches.setdefault(slot, []).append(ep)
        self.gather("start", batches)

    def step(self) -> None:
        order = sorted(self.live)
        outputs = ask_policy(self.policy, [self.live[i] for i in order])
        batches: dict[int, list[tuple[int, PolicyOutput]]] = {}
        for i, output in zip(order, outputs, strict=True):
            batches.setdefault(self.slot_of[i], []).append((i, _sendable(output, self.live[i].turn)))
        self.gather("step", batches)

    def gather(self, method: str, batches: Mapping[int, Sequence[Any]]) -> None:
        """Call ``method`` on each actor with its batch (all at once), wait for them together
        up to ``step_timeout_s``, then take in their news in episode order; an actor that
        fails or is late loses its episodes and is replaced."""
        ray = _import_ray()
        timeout_s = self.executor.config.step_timeout_s
        calls = {slot: getattr(self.executor.actors[slot], method).remote(batch) for slot, batch in batches.items()}
        answered, _ = ray.wait(list(calls.values()), num_returns=len(calls), timeout=timeout_s)
        news: list[_Update] = []
        for slot, call in sorted(calls.items()):
            if call not in answered:
                late = f"the Ray actor running this episode did not answer within step_timeout_s={timeout_s:g} s"
                self.lose_actor(slot, f"{late} (stopped, hung, or its node unreachable)")
                continue
            try:
                packed = ray.get(call)
            except ray.exceptions.RayError as e:
                self.lose_actor(slot, f"the Ray actor running this episode was lost: {_cause(e)}")
                continue
            news += self.unpacked(slot, packed)
        for update in sorted(news, key=lambda u: u.index):
            if update.trajectory is not None:
                self.finish(update.index, update.trajectory)
            elif update.conversation is not None:
                self.live[update.index] = update.conversation

    def unpacked(self, slot: int, packed: list[_Packed]) -> list[_Update]:
        """An actor's news, each episode's read on its own: one that cannot be read here (a
        class this process cannot import, an object that fails when rebuilt) ends that
        episode as infra, on the actor too."""
        news, unread = [], []
        for index, data in packed:
            try:
                news.append(pickle.loads(data))
            except Exception as e:  # noqa: BLE001 - whatever unpickling raised: that episode's loss
                reason = f"the episode's data from its Ray actor cannot be read here: {type(e).__name__}: {e}"
                self.fail(index, reason[:600])
                unread.append(index)
        if unread:
            self.executor.actors[slot].drop.remote(unread, "its news could not be read by the caller")
        return news

    def lose_actor(self, slot: int, reason: str) -> None:
        for index in [i for i, s in self.slot_of.items() if s == slot]:
            self.fail(index, reason)
        self.executor.replace(slot)

    def fail(self, index: int, reason: str) -> None:
        """End episode ``index`` as infra for ``reason``, with what the caller saw of it."""
        ep, conversation = self.episodes[index], self.live.get(index)
        ep.done, ep.error = True, reason
        traj = ep.trajectory(self.job.env_id)
        if conversation is not None:  # what the caller saw of it: its messages and task
            update: dict[str, Any] = {"messages": list(conversation.messages)}
            if conversation.task is not None:
                update["task"] = conversation.task
            traj = traj.model_copy(update=update)
        self.finish(index, traj)

    def finish(self, index: int, traj: Trajectory) -> None:
        self.slot_of.pop(index, None)
        self.live.pop(index, None)
        self.recorder.record(index, traj)


def _dumps(update: _Update) -> bytes:
    import ray.cloudpickle  # what Ray pickles with: by value where a class is not importable

    return ray.cloudpickle.dumps(update)


def _plain(trajectory: Trajectory | None, reason: str, ep: Episode) -> Trajectory:
    """``trajectory`` ended as infra for ``reason``, as plain JSON data (an object JSON cannot
    hold becomes its repr), so it pickles; without a trajectory, the episode's task and seed."""
    try:
        if trajectory is not None:
            failed = trajectory.model_copy(
                update={"failure": Failure.INFRA, "error": reason, "task_reward": None, "success": False}
            )
            return Trajectory.model_validate_json(failed.model_dump_json(fallback=_admit.safe_repr))
    except Exception:  # noqa: BLE001, S110 - what even JSON cannot write: the record below, without its data
        pass
    task = ep.task if isinstance(ep.task, Task) else Task(id=ep.task or "<unknown>", prompt="")
    return Trajectory(
        env_id=trajectory.env_id if trajectory is not None else None,
        task=Task(id=task.id, prompt=task.prompt),
        seed=ep.seed,
        messages=[],
        transitions=[],
        failure=Failure.INFRA,
        error=reason,
    )


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError(f"executor='ray' (and the trainer's ray option) needs Ray: {INSTALL_HINT}") from None
    return ray


def _connect(ray: Any, address: str | None) -> None:
    """Join the cluster at ``address`` (see `RayConfig.address`) unless this process has."""
    if address is not None and address not in ("auto", "local"):
        _check_reachable(address)
    if ray.is_initialized():
        return
    try:
        ray.init(address=address)
    except Exception as e:  # noqa: BLE001 - whatever Ray raised, the user needs one line
        where = f"at {address}" if address else "(RAY_ADDRESS or a new local one)"
        raise RayClusterError(f"could not join a Ray cluster {where}: {_cause(e)}") from None


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Ray would retry an address nobody answers at for a long while, then fail deep in
    its internals: a plain TCP connection says so in seconds."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise RayClusterError(
            f"no Ray cluster answers at {address} ({why}); start one there with "
            f"`ray start --head --port={port}`, or check the address (a head node's HOST:PORT, "
            "or ray://HOST:10001 for Ray Client) and that the port is open"
        ) from None


def _sendable(output: PolicyOutput, turn: int) -> PolicyOutput:
    """``output`` as plain data every actor can unpickle. The policy's Python objects
    stay on the driver: an action that is not plain JSON data is admitted here, as the
    env would admit it, and sent as what the env reads (or, refused, as the refusal), so
    an object Ray cannot pickle, or one that fails on the actor when unpickled, is that
    episode's format error, as with threads, never the loss of the rollout or the actor."""
    output = checked_output(output)
    if isinstance(output, PolicyFailure):
        return output
    if isinstance(output, Generation):
        if type(output.action) is str or _safejson.problem(output.action, max_depth=_admit.MAX_MESSAGE_DEPTH) is None:
            return output
        plain = _plain_action(output.action, turn)
        return output.model_copy(update={"action": plain}) if isinstance(plain, (str, dict)) else plain
    if type(output) is str or (
        type(output) is dict and _safejson.problem(output, max_depth=_admit.MAX_MESSAGE_DEPTH) is None
    ):
        return output
    return _plain_action(output, turn)


def _plain_action(action: Any, turn: int) -> Any:
    admitted = _admit.admit(action, turn)
    if admitted.error is None:
        return admitted.action
    return _admit.Refused(str(admitted.message["content"]), admitted.error)


def _cause(error: BaseException) -> str:
    """One line for what Ray raised: the original exception of a failed task, or Ray's
    first line and, when it wraps another error (a refused token, say), that error's last."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException) and cause is not error:
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = f"{type(error).__name__}: {lines[0] if lines else ''}"
    inner = error
    for _ in range(20):  # the innermost of a chain (which could loop)
        if inner.__cause__ is None:
            break
        inner = inner.__cause__
    inner_lines = [line.strip() for line in str(inner).splitlines() if line.strip()]
    if inner is not error and inner_lines:
        said += f" ({inner_lines[-1][:400]})"
    return said
