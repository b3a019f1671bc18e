"""Soak: 1,000 episodes over the five built-in envs with injected faults, checking that
every fault ends as ``infra``, nothing else does, no trajectory is lost and nothing leaks.

    .venv/bin/python bench/soak.py [--episodes 200] [--fault-rate 0.12] [--seed 0] [--concurrency 8]

Each env (arithmetic, guess-number, code, retail, calendar) runs ``--episodes``
episodes of its scripted oracle through `agentenv.rollout` (``--concurrency`` live at
once), appending trajectories to a JSONL file. A wrapping policy injects the faults
from its ``act``, which the engine calls between turns, so a kill lands between two
steps of live episodes. A seeded plan faults ``--fault-rate`` of the episodes, each at
a turn drawn from 0-2, with one kind drawn from those the env has:

- service kill (retail, calendar): SIGKILL the domain's service process. Every live
  episode of the domain shares it, so the others in the batch are *collateral*.
- container kill (code): ``docker kill`` the workspace container of that episode
  alone (the verifier pool is left alone).
- policy exception: ``act`` raises RuntimeError; the engine ends every episode of
  the batch as infra, so the rest of the batch is collateral of the shared call.
- policy timeout: that conversation's call misses its deadline (a real
  ``future.result(timeout)``) and comes back as a `PolicyFailure`, as
  `OpenAIPolicy` reports one; no collateral.

A planned fault whose episode ended before its turn (collateral of an earlier fault,
or a short episode) is carried to the next episode that starts, so the faults fired
match the plan; "carried" counts those. Episodes are then read back from the JSONL
files and sorted into: faulted (a fault fired at them), collateral (live in a batch
whose service or policy call was faulted) and clean. Expected: every faulted and
collateral episode is infra with an error naming its cause, no clean one is infra
(an "unexplained" infra is a bug), clean ones are solved (the oracle solves every
task), every line parses as a `Trajectory`, and lost (episodes asked for minus
episodes written) is 0.

Host resources are measured after a warm-up (40 episodes per env under the same
faults, everything closed) and again after the soak, once every env, pool and
service is closed, the services' linger has passed and garbage is collected: open
fds and RSS of this process, live Python objects, threads, child processes and
zombie children, zombies on the host, domain service processes and this process's
sandbox containers; threads and fds held after but not before are named.

The code env is made through a factory here (the soak must find each episode's
container), so its JSONL lines carry ``env_id`` null; the other envs run by id.
Left out: faults inside a step (a kill while a request is in flight), the verifier
pool, the process sandbox backend (used, without container kills, when Docker does
not answer), OOM and disk faults, retries.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

import agentenv
from agentenv import Trajectory
from agentenv.core.env import Env
from agentenv.envs.code.sandboxes import CodeSandboxes
from agentenv.envs.tools import service as services
from agentenv.policies import Conversation, Policy, PolicyFailure, PolicyOutput

TOOLS_ENVS = ("retail-v0", "calendar-v0")
ENV_IDS = ("arithmetic-v0", "guess-number-v0", "code-v0", *TOOLS_ENVS)
FAULT_TURNS = 3  # a fault fires before turn 0, 1 or 2
POLICY_DEADLINE_S = 0.05
WARM_UP_EPISODES = 40  # per env, before the host is measured
SERVE_MODULE = "agentenv.envs.tools.serve"


class Kind(str, Enum):
    SERVICE_KILL = "service kill"
    CONTAINER_KILL = "container kill"
    POLICY_EXCEPTION = "policy exception"
    POLICY_TIMEOUT = "policy timeout"


# What an infra error must say to be the fault's doing (lower case).
CAUSE_TEXT = {
    Kind.SERVICE_KILL: ("service",),
    Kind.CONTAINER_KILL: ("container", "sandbox"),
    Kind.POLICY_EXCEPTION: ("injected policy exception",),
    Kind.POLICY_TIMEOUT: ("timeouterror",),
}


def kinds_of(env_id: str, docker: bool) -> tuple[Kind, ...]:
    policy = (Kind.POLICY_EXCEPTION, Kind.POLICY_TIMEOUT)
    if env_id in TOOLS_ENVS:
        return (Kind.SERVICE_KILL, *policy)
    if env_id == "code-v0" and docker:
        return (Kind.CONTAINER_KILL, *policy)
    return policy


@dataclass(frozen=True, slots=True)
class Fault:
    kind: Kind
    turn: int


@dataclass
class FaultLog:
    """The plan of one env's faults and what became of it, keyed by episode index."""

    planned: dict[int, Fault]
    fired: dict[int, Fault] = field(default_factory=dict)
    exposed: dict[int, list[Kind]] = field(default_factory=dict)
    """Episodes live in a batch whose shared service or policy call was faulted, and which faults."""
    carried: int = 0
    misfires: list[str] = field(default_factory=list)
    _pending: deque[Fault] = field(default_factory=deque)
    _seen: set[int] = field(default_factory=set)

    @classmethod
    def plan(cls, n: int, rate: float, kinds: Sequence[Kind], rng: np.random.Generator) -> FaultLog:
        hit = rng.random(n) < rate
        kind = rng.integers(len(kinds), size=n)
        turn = rng.integers(FAULT_TURNS, size=n)
        return cls({i: Fault(kinds[kind[i]], int(turn[i])) for i in range(n) if hit[i]})

    def due(self, conv: Conversation) -> Fault | None:
        """The fault to fire at ``conv`` now, if any (a new episode takes a carried fault first)."""
        if conv.id not in self._seen:
            self._seen.add(conv.id)
            if conv.id not in self.planned and self._pending:
                self.planned[conv.id] = self._pending.popleft()
        fault = self.planned.get(conv.id)
        return fault if fault is not None and conv.id not in self.fired and conv.turn >= fault.turn else None

    def expose(self, ids: Sequence[int], kind: Kind) -> None:
        for i in ids:
            self.exposed.setdefault(i, []).append(kind)

    def ended(self, index: int) -> None:
        """An episode finished: a fault planned for it that never fired moves on."""
        if index in self.planned and index not in self.fired:
            self._pending.append(self.planned.pop(index))
            self.carried += 1

    @property
    def unfired(self) -> int:
        return len(self._pending) + sum(1 for i in self.planned if i not in self.fired)


class EnvTracker:
    """Makes envs for the rollout and finds the env behind a conversation."""

    def __init__(self, make: Callable[[], Env]) -> None:
        self._make = make
        self._envs: weakref.WeakSet[Env] = weakref.WeakSet()

    def __call__(self) -> Env:
        env = self._make()
        self._envs.add(env)
        return env

    def find(self, conv: Conversation) -> Env | None:
        # The engine hands the policy the env's own message dicts, fresh at every reset.
        return next((e for e in list(self._envs) if e.messages and e.messages[0] is conv.messages[0]), None)


class Injector:
    """Kills the resource a fault names: the domain's service, or an episode's container."""

    def __init__(self, domain: str | None, tracker: EnvTracker | None) -> None:
        self.domain, self.tracker = domain, tracker

    def kill_service(self) -> str | None:
        """SIGKILL the live service of the domain and reap it; an error message if there was none."""
        service = services._services.get(self.domain or "")  # the registry of live services; no public accessor
        if service is None or not service.alive():
            return f"no live service for {self.domain}"
        os.kill(service.process.pid, signal.SIGKILL)
        service.process.wait(10)  # dead before the next step, so the fault is deterministic
        return None

    def kill_container(self, conv: Conversation) -> str | None:
        """``docker kill`` the workspace container of ``conv``'s episode and wait until it is down."""
        env = self.tracker.find(conv) if self.tracker is not None else None
        lease = getattr(env, "_lease", None)  # CodeEnv keeps the episode's workspace there
        container = getattr(getattr(lease, "sandbox", None), "container", None)
        if container is None:
            return f"no Docker workspace found for episode {conv.id}"
        if container.labels.get("agentenv.owner.pid") != str(os.getpid()):
            return f"container {container.short_id} is not this process's"
        container.kill()
        container.wait(timeout=30)
        return None


class FaultyPolicy:
    """Wraps a policy and fires the planned faults at the conversations they are due at."""

    def __init__(self, inner: Policy, log: FaultLog, injector: Injector, slow: ThreadPoolExecutor) -> None:
        self.inner, self.log, self.injector, self.slow = inner, log, injector, slow

    def act(self, conversations: Sequence[Conversation]) -> list[PolicyOutput]:
        raising: Conversation | None = None
        timed_out: set[int] = set()
        service_killed = False
        for conv in conversations:
            fault = self.log.due(conv)
            if fault is None or (fault.kind is Kind.SERVICE_KILL and service_killed):
                continue  # a second kill of the same service cannot fire: the fault carries on
            error = None
            if fault.kind in (Kind.SERVICE_KILL, Kind.CONTAINER_KILL):
                error = self._kill(fault.kind, conv)
                service_killed |= fault.kind is Kind.SERVICE_KILL and error is None
                if service_killed:
                    self.log.expose([c.id for c in conversations if c is not conv], fault.kind)
            elif fault.kind is Kind.POLICY_EXCEPTION:
                raising = conv
            else:
                timed_out.add(conv.id)
            if error is None:
                self.log.fired[conv.id] = fault
            else:
                self.log.misfires.append(error)
        if raising is not None:
            self.log.expose([c.id for c in conversations if c is not raising], Kind.POLICY_EXCEPTION)
            raise RuntimeError(f"injected policy exception (episode {raising.id}, turn {raising.turn})")
        answers = iter(self.inner.act([c for c in conversations if c.id not in timed_out]))
        return [self._late(c) if c.id in timed_out else next(answers) for c in conversations]

    def _kill(self, kind: Kind, conv: Conversation) -> str | None:
        """Run a kill; one that fails is a misfire to report, never an exception out of ``act``
        (the engine would take it for a policy failure of the whole batch)."""
        try:
            return self.injector.kill_service() if kind is Kind.SERVICE_KILL else self.injector.kill_container(conv)
        except Exception as e:  # noqa: BLE001 - docker, OS and subprocess errors alike
            return f"{kind.value} for episode {conv.id} failed: {type(e).__name__}: {e}"

    def _late(self, conv: Conversation) -> PolicyOutput:
        """The conversation's call, made too slow for its deadline; the miss is the answer."""

        def slow_call() -> list[PolicyOutput]:
            time.sleep(4 * POLICY_DEADLINE_S)
            return self.inner.act([conv])

        try:
            return self.slow.submit(slow_call).result(timeout=POLICY_DEADLINE_S)[0]
        except TimeoutError:
            return PolicyFailure(error=f"TimeoutError: no answer within {POLICY_DEADLINE_S} s (injected)")


# -- host resources ---------------------------------------------------------------------


def _proc_table() -> list[tuple[int, str, int, str]]:
    """(pid, state, ppid, cmdline) of every process readable in /proc."""
    rows = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # exited while we looked
            continue
        fields = stat.rsplit(")", 1)[1].split()
        rows.append((int(entry), fields[0], int(fields[1]), cmdline))
    return rows


@dataclass
class Host:
    """What this process holds on the host, as figures, plus what names the threads and fds."""

    figures: dict[str, float]
    threads: Counter[str]
    fds: Counter[str]


def host(docker: Any) -> Host:
    me = os.getpid()
    procs = _proc_table()
    children = [p for p in procs if p[2] == me]
    rss_kb = next(
        int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmRSS:")
    )
    containers = (
        len(docker.containers.list(all=True, filters={"label": f"agentenv.owner.pid={me}"}))
        if docker is not None
        else float("nan")
    )
    fds: Counter[str] = Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[os.readlink(f"/proc/self/fd/{fd}").split(":[")[0]] += 1
        except OSError:  # the listing's own fd, closed by now
            pass
    figures = {
        "open fds (this process)": sum(fds.values()),
        "RSS MiB (this process)": rss_kb / 1024,
        "Python objects tracked by gc": len(gc.get_objects()),
        "threads (this process)": threading.active_count(),
        "child processes": len(children),
        "zombie children": sum(1 for p in children if p[1] == "Z"),
        "zombies on the host (any owner)": sum(1 for p in procs if p[1] == "Z"),
        "domain service processes": sum(1 for p in children if SERVE_MODULE in p[3]),
        "sandbox containers (this process)": containers,
    }
    threads = Counter(re.sub(r"[-_]?\d+", "", t.name) for t in threading.enumerate())  # "Thread-7 (f)": "Thread (f)"
    return Host(figures, threads, fds)


def settle() -> None:
    """Wait out the services' linger (the last release stops a service after LINGER_S, and a dead
    one is only closed then), collect garbage and hand freed heap back, so what is left is held."""
    time.sleep(services.LINGER_S + 1.0)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(p[2] == os.getpid() and SERVE_MODULE in p[3] for p in _proc_table()):
        time.sleep(0.2)
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # glibc keeps freed memory in its arenas otherwise
    except (OSError, AttributeError):  # not glibc
        pass


# -- one env ------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One env's episodes sorted by what happened to them."""

    faulted: int = 0
    faulted_infra: int = 0
    collateral: Counter[Kind] = field(default_factory=Counter)
    collateral_infra: int = 0
    clean: int = 0
    clean_infra: int = 0
    clean_solved: int = 0
    infra: int = 0
    lines: int = 0
    lost: int = 0
    anomalies: list[str] = field(default_factory=list)


@dataclass
class EnvRun:
    env_id: str
    n: int
    faults: Counter[str]
    """Faults fired by kind, plus "fired", "carried" and "unfired"; counts only, so the soak's own
    records are not what the host figures after it measure."""
    outcome: Outcome
    seconds: float


def soak_env(env_id: str, n: int, args: argparse.Namespace, out_dir: Path, docker: bool, rate: float) -> EnvRun:
    """``n`` oracle episodes of ``env_id`` under the planned faults, written to a JSONL file."""
    spec = agentenv.spec(env_id)
    sandboxes = (
        CodeSandboxes("docker" if docker else "process", workspaces=args.concurrency, verifiers=2)
        if env_id == "code-v0"
        else None
    )
    tracker = EnvTracker(lambda: agentenv.make(env_id, sandboxes=sandboxes)) if sandboxes is not None else None
    rng = np.random.default_rng([args.seed, ENV_IDS.index(env_id)])
    log = FaultLog.plan(n, rate, kinds_of(env_id, docker), rng)
    slow = ThreadPoolExecutor(2, thread_name_prefix="soak-slow-policy")
    policy = FaultyPolicy(spec.make_oracle(), log, Injector(spec.kwargs.get("domain"), tracker), slow)
    out = out_dir / f"{env_id}.jsonl"
    t0 = time.perf_counter()
    try:
        returned = len(
            agentenv.rollout(
                tracker or env_id,
                policy,
                n=n,
                seed=args.seed,
                concurrency=args.concurrency,
                out=out,
                on_episode=lambda t: log.ended(t.seed - args.seed),
            )
        )
    finally:
        slow.shutdown()
        if sandboxes is not None:
            sandboxes.close()
    seconds = time.perf_counter() - t0
    # Only the counts are kept: the trajectories would otherwise sit in the RSS measured after.
    outcome = classify(env_id, n, log, out, args.seed)
    if returned != n:
        outcome.anomalies.append(f"{env_id}: rollout returned {returned} trajectories for {n} episodes")
    faults = Counter(f.kind.value for f in log.fired.values())
    faults.update(fired=len(log.fired), carried=log.carried, unfired=log.unfired)
    return EnvRun(env_id, n, faults, outcome, seconds)


def read_back(path: Path, seed: int, o: Outcome, env_id: str) -> dict[int, Trajectory]:
    """The JSONL file's trajectories by episode index; lines that do not parse are anomalies."""
    trajectories: dict[int, Trajectory] = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        o.lines += 1
        try:
            traj = Trajectory.model_validate_json(line)
        except ValueError as e:
            o.anomalies.append(f"{env_id}: a line does not parse: {str(e).splitlines()[0]}")
            continue
        if trajectories.setdefault((traj.seed or 0) - seed, traj) is not traj:
            o.anomalies.append(f"{env_id}: episode {(traj.seed or 0) - seed} written twice")
    return trajectories


def classify(env_id: str, n: int, log: FaultLog, path: Path, seed: int) -> Outcome:
    o = Outcome(anomalies=list(log.misfires))
    trajectories = read_back(path, seed, o, env_id)
    o.lost = n - len(trajectories)
    for i, traj in sorted(trajectories.items()):
        infra = traj.failure.value == "infra"
        o.infra += infra
        exposed = log.exposed.get(i, [])
        cause = log.fired[i].kind if i in log.fired else (exposed[0] if exposed else None)
        if cause is None:
            o.clean += 1
            o.clean_infra += infra
            o.clean_solved += traj.success
            if infra:
                o.anomalies.append(f"{env_id} #{i}: unexplained infra: {traj.error}")
            elif not traj.success:
                o.anomalies.append(f"{env_id} #{i}: clean but not solved ({traj.failure.value}): {traj.error}")
            continue
        if i in log.fired:
            o.faulted += 1
            o.faulted_infra += infra
        else:
            o.collateral[cause] += 1
            o.collateral_infra += infra
        # A faulted episode may also sit in a batch whose policy call raised, which ends it first.
        error = (traj.error or "").lower()
        if not infra:
            o.anomalies.append(f"{env_id} #{i}: hit by a {cause.value} but ended {traj.failure.value}")
        elif not any(word in error for c in {cause, *exposed} for word in CAUSE_TEXT[c]):
            o.anomalies.append(f"{env_id} #{i}: infra after a {cause.value}, but the error says: {traj.error}")
    return o


# -- the report ---------------------------------------------------------------------------


def fault_rows(runs: Sequence[EnvRun]) -> list[list[object]]:
    rows, total = [], Counter()
    for run in runs:
        row = Counter(episodes=run.n, **run.faults)
        total.update(row)
        rows.append((run.env_id, row))
    rows.append(("total", total))
    return [
        [
            name,
            c["episodes"],
            f"{c['fired']} ({c['fired'] / max(c['episodes'], 1):.1%})",
            *(c[k.value] for k in Kind),
            c["carried"],
            c["unfired"],
        ]
        for name, c in rows
    ]


def outcome_rows(runs: Sequence[EnvRun], outcomes: Sequence[Outcome]) -> list[list[object]]:
    rows, total = [], Counter()
    for run, o in zip(runs, outcomes, strict=True):
        c = Counter(
            {
                "episodes": run.n,
                "infra": o.infra,
                "faulted": o.faulted,
                "faulted_infra": o.faulted_infra,
                "coll_service": o.collateral[Kind.SERVICE_KILL],
                "coll_policy": o.collateral[Kind.POLICY_EXCEPTION],
                "coll_infra": o.collateral_infra,
                "clean": o.clean,
                "clean_infra": o.clean_infra,
                "clean_solved": o.clean_solved,
                "lines": o.lines,
                "lost": o.lost,
            }
        )
        total.update(c)
        rows.append((run.env_id, c))
    rows.append(("total", total))
    return [
        [
            name,
            c["episodes"],
            c["infra"],
            f"{c['faulted_infra']}/{c['faulted']}",
            f"{c['coll_infra']}/{c['coll_service'] + c['coll_policy']}",
            c["coll_service"],
            c["coll_policy"],
            c["clean"],
            c["clean_infra"],
            c["clean_solved"],
            c["lines"],
            c["lost"],
        ]
        for name, c in rows
    ]


def resource_rows(before: Host, after: Host) -> list[list[object]]:
    def fmt(v: float, sign: str = "") -> str:
        if math.isnan(v):  # not measured (no Docker engine)
            return "n/a"
        return f"{v:{sign}.1f}" if isinstance(v, float) else f"{v:{sign}d}"

    b, a = before.figures, after.figures
    return [[k, fmt(b[k]), fmt(a[k]), fmt(a[k] - b[k], "+")] for k in b]


def held_since(before: Host, after: Host) -> list[str]:
    """The threads and fds this process holds after the soak and did not before, by name."""
    lines = []
    for what, b, a in (("threads", before.threads, after.threads), ("fds", before.fds, after.fds)):
        grown = a - b
        if grown:
            lines.append(f"{what} held since before: " + ", ".join(f"{n} x {k}" for k, n in grown.most_common()))
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200, help="episodes per env (5 envs)")
    parser.add_argument("--fault-rate", type=float, default=0.12, help="share of episodes a fault is planned for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=8, help="live episodes per rollout")
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.concurrency < 1 or not 0 <= args.fault_rate <= 1:
        parser.error("--episodes and --concurrency must be >= 1, --fault-rate in [0, 1]")

    from agentenv.sandboxes.docker import docker_client

    try:
        docker = docker_client()
    except agentenv.InfraError as e:
        print(f"note: no Docker engine ({e}); the code env uses the process sandbox, without container kills")
        docker = None
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agentenv-soak-") as tmp:
        warm = Path(tmp) / "warm-up"
        warm.mkdir()
        for env_id in ENV_IDS:  # imports, caches, services, containers, every fault's path: not measured
            soak_env(env_id, WARM_UP_EPISODES, args, warm, docker is not None, args.fault_rate)
        settle()
        before = host(docker)
        runs = [
            soak_env(env_id, args.episodes, args, Path(tmp), docker is not None, args.fault_rate) for env_id in ENV_IDS
        ]
    settle()
    after = host(docker)
    report(args, runs, before, after, time.perf_counter() - t_start)
    if docker is not None:
        docker.close()


def report(args: argparse.Namespace, runs: Sequence[EnvRun], before: Host, after: Host, seconds: float) -> None:
    outcomes = [run.outcome for run in runs]
    print(header("soak: episodes over every built-in env with injected faults; infra, JSONL, host resources"))
    print(
        f"{args.episodes} episodes per env x {len(runs)} envs, fault rate {args.fault_rate} (planned), "
        f"seed {args.seed}, concurrency {args.concurrency}; {seconds:.0f} s "
        f"({', '.join(f'{r.env_id} {r.seconds:.0f} s' for r in runs)})\n"
    )
    print(table(["env", "episodes", "faults fired", *(k.value for k in Kind), "carried", "unfired"], fault_rows(runs)))
    print(
        "\n"
        + table(
            [
                "env",
                "episodes",
                "infra",
                "faulted->infra",
                "collateral->infra",
                "coll. service",
                "coll. policy call",
                "clean",
                "clean infra (unexplained)",
                "clean solved",
                "JSONL lines",
                "lost",
            ],
            outcome_rows(runs, outcomes),
        )
    )
    print(
        "\nfaulted: a fault fired at the episode. collateral: live in the same batch as a service kill (they"
        " share the\ndomain's one service process) or a policy exception (the engine fails every episode of"
        " the raising call).\nclean: neither; the oracle solves every task, so a clean episode should be"
        " solved and never infra."
    )
    print("\n" + table(["host resource", "before", "after", "delta"], resource_rows(before, after)))
    print(
        f"before: after a warm-up of {WARM_UP_EPISODES} episodes per env (same fault rate), all closed; after: the"
        " soak's envs,\npools and services closed; both after the services' linger, gc and malloc_trim. RSS also"
        " counts heap the\nallocators keep (pymalloc arenas, glibc); the gc row counts live Python objects."
    )
    for line in held_since(before, after):
        print(f"  {line}")
    anomalies = [a for o in outcomes for a in o.anomalies]
    for line in anomalies[:20]:
        print(f"  ! {line}")
    if len(anomalies) > 20:
        print(f"  ! ... {len(anomalies) - 20} more")
    lost = sum(o.lost for o in outcomes)
    unexplained = sum(o.clean_infra for o in outcomes)
    missed = sum(o.faulted - o.faulted_infra + sum(o.collateral.values()) - o.collateral_infra for o in outcomes)
    fired = sum(r.faults["fired"] for r in runs)
    total = sum(r.n for r in runs)
    verdict = "OK" if lost == 0 and unexplained == 0 and missed == 0 and not anomalies else "NOT OK"
    print(
        f"\n{verdict}: lost {lost} (want 0), unexplained infra {unexplained} (want 0), faulted or collateral"
        f" episodes not infra {missed} (want 0), {len(anomalies)} anomalies; faults fired {fired}/{total}"
        f" = {fired / max(total, 1):.1%} of episodes (issue: >= 10%)"
    )


if __name__ == "__main__":
    main()
