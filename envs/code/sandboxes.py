"""`CodeSandboxes`: the two sandbox pools a code env draws from, started on first use.

Agents work in sandboxes from the *workspace* pool; hidden tests run only in
sandboxes from the separate *verifier* pool, which no agent ever gets, each
handed out freshly reset (processes killed, workspace and /tmp wiped). Share one
`CodeSandboxes` between many envs (a rollout, a benchmark) to bound the number of
containers; an env that made its own closes it in ``close()``.

Backend "auto" is `make_sandbox("auto")`'s rule: Docker when an engine answers,
else the local process backend (weaker isolation; see its module docstring).

`verify` judges a solution on its hidden tests. On Docker, verifications that
wait at the same time (many episodes ending together in a rollout) share a run:
the caller that finds a verifier free takes up to ``verify_batch`` waiting jobs
and judges them in one run (`agentenv.envs.code.verify.run_batch`; a job the
batch did not finish is judged again alone), so no job waits for a batch to fill.
Left out: sizing pools to the load, per-task limits.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Literal

from agentenv.envs.code.verify import TestJob, TestReport, run_batch, run_job
from agentenv.sandboxes import Limits, SandboxError, SandboxInfraError, SandboxPool
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
        self.backend = backend
        self._sizes = {"workspace": workspaces, "verifier": verifiers}
        self._limits = {"workspace": limits, "verifier": verifier_limits}
        self._pools: dict[str, SandboxPool] = {}
        self._lock = threading.Lock()
        self._closed = False
        if not isinstance(verify_batch, int) or verify_batch < 1:
            raise SandboxError(f"expected verify_batch >= 1, got {verify_batch!r}")
        self._batcher = _Batcher(self._judge, slots=verifiers, size=verify_batch)
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
        """``job`` judged in a fresh verifier sandbox; on Docker, in one run with the
        other jobs waiting at the same time (see the module docstring)."""
        if self.kind != "docker":
            return self._judge([job])[0]
        return self._batcher.submit(job)

    def verify_many(self, jobs: list[TestJob]) -> list[TestReport]:
        """Each of ``jobs`` judged in a fresh verifier sandbox, in order; on Docker, in
        one run (a job the run did not finish is judged again alone)."""
        if self.kind != "docker":
            return [self._judge([job])[0] for job in jobs]
        return self._judge(jobs)

    def _judge(self, jobs: list[TestJob]) -> list[TestReport]:
        reports: list[TestReport | None] = [None]
        if len(jobs) > 1:
            try:
                with self.verifier() as sandbox:
                    self.verifier_runs += 1
                    reports = run_batch(sandbox, jobs, scratch=DOCKER_SCRATCH)
            except SandboxInfraError as e:  # judged alone below: a broken sandbox is one job's failure, not all
                logger.warning("a verification batch of %d failed (%s); judging each alone", len(jobs), e)
                reports = [None] * len(jobs)
        done = []
        for job, report in zip(jobs, reports, strict=True):
            if report is None:  # not finished in the batch (or no batch): alone, in a fresh sandbox
                with self.verifier() as sandbox:
                    self.verifier_runs += 1
                    report = run_job(sandbox, job)
            done.append(report)
        return done

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


class _Pending:
    def __init__(self, job: TestJob) -> None:
        self.job = job
        self.done = False
        self.report: TestReport | None = None
        self.error: BaseException | None = None


class _Batcher:
    """Jobs that wait at the same time, judged together: no thread of its own.

    A caller queues its job, then, while the job is not done and a slot (a
    verifier) is free, takes its share of the queued jobs (its own or earlier
    ones; at most ``size``, the queue spread over the free slots) and judges them;
    otherwise it waits for another caller to finish some."""

    def __init__(self, judge: Callable[[list[TestJob]], list[TestReport]], *, slots: int, size: int) -> None:
        self._judge, self._size = judge, size
        self._free = max(1, slots)
        self._queue: deque[_Pending] = deque()
        self._cond = threading.Condition()

    def submit(self, job: TestJob) -> TestReport:
        mine = _Pending(job)
        with self._cond:
            self._queue.append(mine)
        while True:
            with self._cond:
                while not mine.done and not (self._free and self._queue):
                    self._cond.wait()
                if mine.done:
                    break
                self._free -= 1
                share = -(-len(self._queue) // (self._free + 1))  # the waiting jobs, spread over the free verifiers
                batch = [self._queue.popleft() for _ in range(min(self._size, share))]
            try:
                self._run(batch)
            finally:
                with self._cond:
                    self._free += 1
                    self._cond.notify_all()
        if mine.error is not None:  # a copy: each waiting thread raises its own
            raise copy.copy(mine.error) from mine.error
        assert mine.report is not None
        return mine.report

    def _run(self, batch: list[_Pending]) -> None:
        try:
            reports = self._judge([p.job for p in batch])
        except BaseException as e:
            for p in batch:
                p.error, p.done = e, True
            if not isinstance(e, Exception):
                raise
            return
        for p, report in zip(batch, reports, strict=True):
            p.report, p.done = report, True
