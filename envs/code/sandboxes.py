"""`CodeSandboxes`: the two sandbox pools a code env draws from, started on first use.

Agents work in sandboxes from the *workspace* pool; hidden tests run only in
sandboxes from the separate *verifier* pool, which no agent ever gets, each
handed out freshly reset (processes killed, workspace and /tmp wiped). Share one
`CodeSandboxes` between many envs (a rollout, a benchmark) to bound the number of
containers; an env that made its own closes it in ``close()``.

Backend "auto" is `make_sandbox("auto")`'s rule: Docker when an engine answers,
else the local process backend (weaker isolation; see its module docstring).

`verify` judges a solution on its hidden tests. Every verification waits its turn
for a verifier, first come first served and for as long as the ones before it
take: a slow solution delays the others, it never makes them infra failures (only
a pool that cannot start a sandbox does). On Docker, verifications that wait at
the same time (many episodes ending together in a rollout) share a run: the caller
that finds a verifier free takes up to ``verify_batch`` waiting jobs and judges
them in one run (`agentenv.envs.code.verify.run_batch`; a job the batch did not
finish is judged again alone), so no job waits for a batch to fill.

Who may share a run: a task's code tests and setup run in the batch's harness,
which holds every task's tests and the nonce, so a hostile task file could write
the verdicts of the tasks after it. A job with code tests or setup therefore
shares a run only with jobs of the identical tests and setup (the GRPO group of
one task, which ends together; that task's own test code decides its own verdict
anyway); jobs of call tests alone, which run nothing of the task's in the
harness, share runs with each other. A job the host cannot judge (it raised)
fails alone, never its batch-mates.
Left out: sizing pools to the load, per-task limits.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

from agentenv.envs.code.verify import CallTest, TestJob, TestReport, run_batch, run_job
from agentenv.sandboxes import Limits, SandboxError, SandboxPool
from agentenv.sandboxes.factory import auto_backend
from agentenv.sandboxes.pool import PooledSandbox

__all__ = ["Backend", "CodeSandboxes"]

logger = logging.getLogger("agentenv.envs.code")

Backend = Literal["auto", "docker", "process"]
WORKSPACE_LIMITS = Limits(timeout_s=10.0)
# Verdict lines of many tests must fit; the solution's own output never reaches stdout.
VERIFIER_LIMITS = Limits(timeout_s=60.0, output_bytes=1 << 20)
VERIFY_BATCH = 8
# What a run in a Docker sandbox can write (the runner's reset empties the same):
# a batch empties them between its tasks.
DOCKER_SCRATCH = ["/workspace", "/tmp", "/dev/shm", "/dev/mqueue"]
# How long a verification that holds a slot waits for its verifier (at most the
# reset of the one just given back, as no more run than there are verifiers):
# past it the pool is failing, an infra error. The wait for a slot has no limit.
ACQUIRE_TIMEOUT_S = 120.0

Judged = TestReport | Exception
"""A job's verdict, or what judging it raised: one job's failure is never its batch-mates'."""


class CodeSandboxes:
    """A workspace pool and a verifier pool of one backend, each started when first needed."""

    def __init__(
        self,
        backend: Backend = "auto",
        *,
        workspaces: int = 2,
        verifiers: int = 2,
        limits: Limits = WORKSPACE_LIMITS,
        verifier_limits: Limits = VERIFIER_LIMITS,
        verify_batch: int = VERIFY_BATCH,
    ) -> None:
        if backend not in ("auto", "docker", "process"):
            raise SandboxError(f"expected backend 'auto', 'docker' or 'process', got {backend!r}")
        if not isinstance(verify_batch, int) or verify_batch < 1:
            raise SandboxError(f"expected verify_batch >= 1, got {verify_batch!r}")
        self.backend = backend
        self._sizes = {"workspace": workspaces, "verifier": verifiers}
        self._limits = {"workspace": limits, "verifier": verifier_limits}
        self._pools: dict[str, SandboxPool] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._verify_batch = verify_batch
        self._queue: _Batcher | None = None  # made once the backend is known: only Docker batches
        self.verifier_runs = 0  # runs in verifier sandboxes by `verify` so far (a batch counts once)

    @property
    def kind(self) -> Literal["docker", "process"]:
        """The backend in use ("auto" resolved on first call)."""
        if self.backend == "auto":
            self.backend = auto_backend()  # logged with its reason, which the CLI prints
        return self.backend

    def workspace(self, timeout_s: float | None = 120.0) -> PooledSandbox:
        """A clean sandbox for an agent's episode; ``close()`` it to give it back."""
        return self._pool("workspace").acquire(timeout_s)

    def verifier(self, timeout_s: float | None = 120.0) -> PooledSandbox:
        """A clean sandbox no agent has used, for one verification."""
        return self._pool("verifier").acquire(timeout_s)

    def verify(self, job: TestJob) -> TestReport:
        """``job`` judged in a fresh verifier sandbox once its turn comes; on Docker, in
        one run with the other jobs it may share one with (see the module docstring)."""
        return self._batcher().submit([job])[0]

    def verify_many(self, jobs: list[TestJob]) -> list[TestReport]:
        """Each of ``jobs`` judged in a fresh verifier sandbox, in order; on Docker, in
        runs of up to ``verify_batch`` jobs that may share one (a job a run did not
        finish is judged again alone)."""
        return self._batcher().submit(jobs)

    def _batcher(self) -> _Batcher:
        kind = self.kind  # outside the lock: "auto" may probe the Docker engine
        with self._lock:
            if self._queue is None:
                size = self._verify_batch if kind == "docker" else 1  # only a container's run uid is its own
                self._queue = _Batcher(self._judge, slots=self._sizes["verifier"], size=size)
            return self._queue

    def _judge(self, jobs: list[TestJob]) -> list[Judged]:
        """One verdict per job (or what judging it raised): a batch first when there are
        several, then each job the batch did not finish alone, in a fresh sandbox."""
        reports = self._judge_batch(jobs) if len(jobs) > 1 else [None]
        return [self._judge_alone(job) if report is None else report for job, report in zip(jobs, reports, strict=True)]

    def _judge_batch(self, jobs: list[TestJob]) -> list[TestReport | None]:
        try:
            with self.verifier(ACQUIRE_TIMEOUT_S) as sandbox:
                self.verifier_runs += 1
                return run_batch(sandbox, jobs, scratch=DOCKER_SCRATCH)
        except Exception as e:  # noqa: BLE001 - judged alone: a broken sandbox or a bad job is one job's failure
            logger.warning("a verification batch of %d failed (%s); judging each alone", len(jobs), e)
            return [None] * len(jobs)

    def _judge_alone(self, job: TestJob) -> Judged:
        try:
            with self.verifier(ACQUIRE_TIMEOUT_S) as sandbox:
                self.verifier_runs += 1
                return run_job(sandbox, job)
        except Exception as e:  # noqa: BLE001 - raised to this job's caller alone
            return e

    def start(self) -> None:
        """Start both pools in the background (sandboxes warm up while the caller goes on)."""
        for role in self._sizes:
            self._pool(role)

    def warm(self, timeout_s: float = 120.0) -> None:
        """Start both pools now and wait until every sandbox is ready."""
        for role in self._sizes:
            self._pool(role).wait_ready(timeout_s)

    def _pool(self, role: str) -> SandboxPool:
        with self._lock:
            if self._closed:
                raise SandboxError("these sandboxes are closed")
            pool = self._pools.get(role)
            if pool is None:
                pool = self._pools[role] = SandboxPool(self.kind, self._sizes[role], limits=self._limits[role])
            return pool

    def close(self) -> None:
        """Close both pools; idempotent."""
        with self._lock:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    def __enter__(self) -> CodeSandboxes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run_key(job: TestJob) -> tuple[Any, ...] | None:
    """What a job may share a run with: every job of the same key. None for a job of
    call tests alone and no setup (nothing of its task runs in the harness); else its
    tests and setup, so a task's code runs only beside jobs of that very task."""
    if not job.setup and all(isinstance(t, CallTest) for t in job.tests):
        return None
    return (job.tests, job.setup)


class _Pending:
    def __init__(self, job: TestJob) -> None:
        self.job = job
        self.key = _run_key(job)
        self.done = False
        self.report: TestReport | None = None
        self.error: BaseException | None = None


class _Batcher:
    """Jobs that wait at the same time, judged together: no thread of its own.

    A caller queues its jobs, then, while one is not done and a slot (a verifier)
    is free, takes a share of the queue (see `_take`) and judges it; otherwise it
    waits for another caller to finish some. The oldest queued job is always the
    next judged (with the later ones that may share its run), so none is passed
    over; there is no timeout: a verification waits for its turn however long the
    ones ahead take."""

    def __init__(self, judge: Callable[[list[TestJob]], list[Judged]], *, slots: int, size: int) -> None:
        self._judge, self._size = judge, size
        self._free = max(1, slots)
        self._queue: deque[_Pending] = deque()
        self._idle_callers = 0  # callers waiting with jobs not done: those the free slots are spread over
        self._cond = threading.Condition()

    def submit(self, jobs: list[TestJob]) -> list[TestReport]:
        """The reports of ``jobs``, in order; raises what judging one of them raised."""
        mine = [_Pending(job) for job in jobs]
        with self._cond:
            self._queue.extend(mine)
        while (batch := self._next(mine)) is not None:
            try:
                self._run(batch)
            finally:
                with self._cond:
                    self._free += 1
                    self._cond.notify_all()
        reports = []
        for p in mine:
            if p.error is not None:  # a copy: each waiting thread raises its own
                raise copy.copy(p.error) from p.error
            assert p.report is not None
            reports.append(p.report)
        return reports

    def _next(self, mine: list[_Pending]) -> list[_Pending] | None:
        """The next batch this caller runs, once a slot is free; None when its jobs are done."""
        with self._cond:
            self._idle_callers += 1
            try:
                while not all(p.done for p in mine) and not (self._free and self._queue):
                    self._cond.wait()
            finally:
                self._idle_callers -= 1
            if all(p.done for p in mine):
                return None
            self._free -= 1
            return self._take()

    def _take(self) -> list[_Pending]:
        """The oldest job and the queued jobs that may share its run (`_run_key`), in order,
        up to ``size`` and the queue's share of the slots other callers could use now."""
        others = min(self._free, self._idle_callers)
        limit = min(self._size, -(-len(self._queue) // (others + 1)))
        key = self._queue[0].key
        batch: list[_Pending] = []
        rest: deque[_Pending] = deque()
        for p in self._queue:
            (batch if len(batch) < limit and p.key == key else rest).append(p)
        self._queue = rest
        return batch

    def _run(self, batch: list[_Pending]) -> None:
        try:
            judged = self._judge([p.job for p in batch])
        except BaseException as e:  # not a job's doing (an interrupt): every caller hears of it
            for p in batch:
                p.error, p.done = e, True
            if not isinstance(e, Exception):
                raise
            return
        for p, verdict in zip(batch, judged, strict=True):
            if isinstance(verdict, TestReport):
                p.report = verdict
            else:
                p.error = verdict
            p.done = True
