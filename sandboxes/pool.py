"""`SandboxPool`: warm sandboxes handed out clean, recycled in the background.

    pool = SandboxPool("docker", size=4)
    with pool.acquire() as sb:          # a clean sandbox, in microseconds when one is warm
        sb.run_python("print(1)")
    # leaving the block returns it; a background thread resets it for the next caller
    pool.close()

A lease is the sandbox behind a thin wrapper: ``close()`` or leaving the ``with``
block (or ``pool.release(lease)``) returns it instead of destroying it, and the
lease refuses any call after that, so a stale reference can never reach a
sandbox that someone else now holds. Returned sandboxes are reset (processes
killed, workspace and /tmp wiped) on a worker thread; one whose reset fails, or
that died, is closed and replaced. With the ``"docker"`` backend, containers
left by dead processes on this host are removed at start (`reap_stale_containers`).

Left out: growing past ``size``, per-lease limits (build a pool per `Limits`),
fairness among waiters, health probes of idle sandboxes beyond their ``alive`` flag.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from agentenv.sandboxes.base import ExecResult, Limits, Sandbox, SandboxError, SandboxInfraError

__all__ = ["PooledSandbox", "SandboxPool"]

Backend = Callable[[], Sandbox] | Literal["docker", "process"]


class PooledSandbox:
    """A sandbox on loan from a `SandboxPool`; ``close`` gives it back."""

    def __init__(self, pool: SandboxPool, sandbox: Sandbox) -> None:
        self._pool = pool
        self._sandbox: Sandbox | None = sandbox
        self.limits = sandbox.limits

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox itself; `SandboxError` once the lease was returned, `SandboxInfraError`
        once the pool was closed under the lease (which closes its sandbox): not the doing
        of whoever holds the lease, whose agent would otherwise be blamed for the failure."""
        if self._sandbox is None:
            raise SandboxError("this sandbox was returned to its pool; acquire another")
        if self._pool.closed:
            raise SandboxInfraError("the sandbox pool was closed while this sandbox was on loan")
        return self._sandbox

    def run_python(self, code: str, *, timeout_s: float | None = None, stdin: str | None = None) -> ExecResult:
        return self.sandbox.run_python(code, timeout_s=timeout_s, stdin=stdin)

    def run(
        self, command: str | Sequence[str], *, timeout_s: float | None = None, stdin: str | None = None
    ) -> ExecResult:
        return self.sandbox.run(command, timeout_s=timeout_s, stdin=stdin)

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        self.sandbox.write_files(files)

    def read_file(self, path: str) -> bytes:
        return self.sandbox.read_file(path)

    def snapshot(self) -> bytes:
        return self.sandbox.snapshot()

    def restore(self, archive: bytes) -> None:
        self.sandbox.restore(archive)

    def reset(self) -> None:
        self.sandbox.reset()

    def close(self) -> None:
        """Return the sandbox to the pool; idempotent."""
        self._pool.release(self)

    def _take(self) -> Sandbox | None:
        sandbox, self._sandbox = self._sandbox, None
        return sandbox

    def __enter__(self) -> PooledSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PooledSandbox({self._sandbox!r})" if self._sandbox is not None else "PooledSandbox(returned)"


class SandboxPool:
    """``size`` warm sandboxes from ``backend`` (a factory, or "docker" / "process"
    built with ``limits``). Thread-safe. ``reap`` (default: when the backend is
    "docker") removes stale sandbox containers of dead processes first."""

    def __init__(
        self, backend: Backend = "docker", size: int = 4, *, limits: Limits | None = None, reap: bool | None = None
    ) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise SandboxError(f"expected size >= 1, got {size!r}")
        self.size = size
        self._factory = _factory(backend, limits)
        if reap if reap is not None else backend == "docker":
            from agentenv.sandboxes.docker import reap_stale_containers

            reap_stale_containers()
        self._cond = threading.Condition()
        self._idle: deque[Sandbox] = deque()
        self._leased: set[int] = set()  # id() of sandboxes on loan
        self._all: dict[int, Sandbox] = {}  # every live sandbox: idle, leased or recycling
        self._spawning = 0  # being created: not in _all yet
        self._recycling = 0  # being reset: already in _all
        self._error: BaseException | None = None
        self._closed = False
        self._workers = ThreadPoolExecutor(max_workers=min(size, 4), thread_name_prefix="sandbox-pool")
        with self._cond:
            self._top_up()

    # -- public

    def acquire(self, timeout_s: float | None = None) -> PooledSandbox:
        """A clean sandbox; waits for one when none is free (up to ``timeout_s``).

        Raises `SandboxInfraError` when none can be started (the last start error
        is in the message) or none frees up in time.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        topped_up = False
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxError("the pool is closed")
                while self._idle:
                    sandbox = self._idle.popleft()
                    if getattr(sandbox, "alive", True):
                        self._leased.add(id(sandbox))
                        return PooledSandbox(self, sandbox)
                    self._discard(sandbox)  # died while idle
                    topped_up = False  # its slot must be refilled
                if not topped_up:  # once per call: a backend that keeps failing is retried per acquire
                    self._top_up()
                    topped_up = True
                elif not self._busy and not self._leased and self._error is not None:
                    raise SandboxInfraError(f"the pool cannot start a sandbox: {self._error}") from self._error
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise SandboxInfraError(f"no sandbox became free within {timeout_s} s (pool of {self.size})")
                self._cond.wait(remaining)

    def release(self, lease: PooledSandbox) -> None:
        """Give a sandbox back; it is reset (or replaced) in the background. Idempotent."""
        if lease._pool is not self:
            raise SandboxError("this sandbox belongs to another pool")
        sandbox = lease._take()
        if sandbox is None:
            return
        with self._cond:
            self._leased.discard(id(sandbox))
            if self._closed:
                self._discard(sandbox)
                return
            self._recycling += 1
        self._workers.submit(self._recycle, sandbox)

    @property
    def available(self) -> int:
        """Clean sandboxes ready to hand out now."""
        with self._cond:
            return len(self._idle)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Block until all ``size`` sandboxes are warm (or raise `SandboxInfraError`)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self._idle) + len(self._leased) < self.size:
                if self._closed:
                    raise SandboxError("the pool is closed")
                if not self._busy and self._error is not None:
                    raise SandboxInfraError(f"the pool cannot start a sandbox: {self._error}") from self._error
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SandboxInfraError(f"the pool was not warm within {timeout_s} s")
                self._cond.wait(remaining)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close every sandbox, on loan or not; idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._workers.shutdown(wait=True, cancel_futures=True)
        with self._cond:
            sandboxes = list(self._all.values())
            self._all.clear()
            self._idle.clear()
        for sandbox in sandboxes:
            _close_quietly(sandbox)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SandboxPool(size={self.size}, idle={len(self._idle)}, leased={len(self._leased)})"

    # -- workers (hold no lock while a sandbox works)

    @property
    def _busy(self) -> int:
        """Sandboxes a worker is creating or resetting (call with the lock held)."""
        return self._spawning + self._recycling

    def _top_up(self) -> None:
        """Start sandboxes until live + spawning == size. Call with the lock held.

        A recycling sandbox is in ``_all`` already: it is counted once, as live."""
        missing = self.size - len(self._all) - self._spawning
        for _ in range(max(0, missing)):
            self._spawning += 1
            self._workers.submit(self._spawn)

    def _spawn(self) -> None:
        try:
            sandbox = self._factory()
        except BaseException as e:  # noqa: BLE001 - kept for acquire() to report
            with self._cond:
                self._spawning -= 1
                self._error = e
                self._cond.notify_all()
            return
        self._admit(sandbox)

    def _recycle(self, sandbox: Sandbox) -> None:
        try:
            sandbox.reset()
            clean = getattr(sandbox, "alive", True)
        except Exception:  # noqa: BLE001 - any failure to reset means: replace it
            clean = False
        if clean:
            self._admit(sandbox, new=False)
            return
        with self._cond:
            self._recycling -= 1
            self._discard(sandbox)
            if not self._closed:
                self._top_up()
            self._cond.notify_all()

    def _admit(self, sandbox: Sandbox, *, new: bool = True) -> None:
        with self._cond:
            if new:
                self._spawning -= 1
            else:
                self._recycling -= 1
            if self._closed:
                self._all.pop(id(sandbox), None)
                closed = True
            else:
                self._all[id(sandbox)] = sandbox
                self._idle.append(sandbox)
                if new:
                    self._error = None
                closed = False
            self._cond.notify_all()
        if closed:
            _close_quietly(sandbox)

    def _discard(self, sandbox: Sandbox) -> None:
        """Forget a sandbox and close it off the caller's thread (the lock is held)."""
        self._all.pop(id(sandbox), None)
        try:
            self._workers.submit(_close_quietly, sandbox)
        except RuntimeError:  # the workers are shut down: the pool is closing
            _close_quietly(sandbox)


def _factory(backend: Backend, limits: Limits | None) -> Callable[[], Sandbox]:
    if callable(backend):
        if limits is not None:
            raise SandboxError("limits= applies to the named backends; a factory sets its own")
        return backend
    if backend == "docker":
        from agentenv.sandboxes.docker import DockerSandbox
        from agentenv.sandboxes.engine import docker_client

        client = docker_client()  # one client for the pool; fails now if the engine is down
        return lambda: DockerSandbox(limits=limits, client=client)
    if backend == "process":
        from agentenv.sandboxes.process import ProcessSandbox

        return lambda: ProcessSandbox(limits)
    raise SandboxError(f"expected backend 'docker', 'process' or a callable, got {backend!r}")


def _close_quietly(sandbox: Sandbox) -> None:
    try:
        sandbox.close()
    except Exception:  # noqa: BLE001, S110 - closing what is already broken
        pass
