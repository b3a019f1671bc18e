"""`SandboxPool`: clean sandboxes on loan, recycled and replaced in the background,
stale containers reaped. The pool's logic runs on a fake backend; replacing a
dead container and the reaper run on Docker (skipped or failed as conftest says)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence

import pytest

from agentenv.sandboxes import ExecResult, Limits, SandboxError, SandboxInfraError, SandboxPool
from tests.sandboxes.conftest import IMAGE, _require


class FakeSandbox:
    """Counts what the pool does to it; ``dirty`` is what a reset must clear."""

    made = 0

    def __init__(self, *, reset_fails: bool = False) -> None:
        FakeSandbox.made += 1
        self.limits = Limits()
        self.dirty = False
        self.resets = 0
        self.closed = False
        self.alive = True
        self.in_use = threading.Lock()
        self.reset_fails = reset_fails

    def run_python(self, code: str, *, timeout_s: float | None = None, stdin: str | None = None) -> ExecResult:
        self.dirty = True
        return ExecResult(stdout=code, exit_code=0)

    def run(
        self, command: str | Sequence[str], *, timeout_s: float | None = None, stdin: str | None = None
    ) -> ExecResult:
        return self.run_python(str(command))

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        self.dirty = True

    def read_file(self, path: str) -> bytes:
        return b""

    def snapshot(self) -> bytes:
        return b""

    def restore(self, archive: bytes) -> None:
        pass

    def reset(self) -> None:
        if self.reset_fails:
            raise SandboxInfraError("reset failed")
        self.resets += 1
        self.dirty = False

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> FakeSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def made() -> list[FakeSandbox]:
    return []


@pytest.fixture
def pool(made: list[FakeSandbox]) -> Iterator[SandboxPool]:
    def factory() -> FakeSandbox:
        sb = FakeSandbox()
        made.append(sb)
        return sb

    p = SandboxPool(factory, size=2)
    p.wait_ready(timeout_s=10)
    yield p
    p.close()


def wait_for(pool: SandboxPool, available: int) -> None:
    for _ in range(500):
        if pool.available >= available:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"pool never had {available} sandboxes available: {pool}")


def test_pool_is_warm_and_hands_out_distinct_sandboxes(pool: SandboxPool, made: list[FakeSandbox]) -> None:
    assert len(made) == 2 and pool.available == 2
    with pool.acquire() as a, pool.acquire() as b:
        assert a.sandbox is not b.sandbox
        assert pool.available == 0


def test_a_returned_sandbox_is_reset_before_it_is_handed_out_again(pool: SandboxPool) -> None:
    with pool.acquire() as lease:
        lease.run_python("dirty")
        fake = lease.sandbox
    wait_for(pool, 2)
    assert fake.resets == 1 and not fake.dirty
    held = [pool.acquire(), pool.acquire()]
    assert fake in [h.sandbox for h in held] and not fake.dirty
    for h in held:
        pool.release(h)


def test_a_returned_lease_refuses_further_use(pool: SandboxPool) -> None:
    lease = pool.acquire()
    lease.close()
    lease.close()  # idempotent
    with pytest.raises(SandboxError, match="returned"):
        lease.run_python("print(1)")


def test_a_sandbox_whose_reset_fails_is_replaced(pool: SandboxPool, made: list[FakeSandbox]) -> None:
    lease = pool.acquire()
    broken = lease.sandbox
    broken.reset_fails = True
    lease.close()
    wait_for(pool, 2)
    assert broken.closed and len(made) == 3
    assert broken not in [pool.acquire().sandbox, pool.acquire().sandbox]


def test_a_sandbox_that_died_while_idle_is_not_handed_out(pool: SandboxPool, made: list[FakeSandbox]) -> None:
    made[0].alive = made[1].alive = False
    with pool.acquire(timeout_s=10) as lease:
        assert lease.sandbox.alive and lease.sandbox not in made[:2]


def test_a_backend_that_cannot_start_is_reported() -> None:
    def factory() -> FakeSandbox:
        raise SandboxInfraError("engine down")

    with SandboxPool(factory, size=1) as p, pytest.raises(SandboxInfraError, match="engine down"):
        p.acquire(timeout_s=10)


def test_acquire_times_out_when_every_sandbox_is_on_loan(pool: SandboxPool) -> None:
    held = [pool.acquire(), pool.acquire()]
    with pytest.raises(SandboxInfraError, match="no sandbox became free"):
        pool.acquire(timeout_s=0.05)
    for h in held:
        h.close()


def test_no_sandbox_is_ever_lent_twice_at_once(pool: SandboxPool) -> None:
    errors: list[str] = []

    def borrower() -> None:
        for _ in range(25):
            with pool.acquire(timeout_s=10) as lease:
                if not lease.sandbox.in_use.acquire(blocking=False):
                    errors.append("lent twice")
                    continue
                lease.run_python("work")
                lease.sandbox.in_use.release()

    threads = [threading.Thread(target=borrower) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_close_closes_every_sandbox_and_refuses_acquire(made: list[FakeSandbox]) -> None:
    p = SandboxPool(lambda: made.append(FakeSandbox()) or made[-1], size=3)
    p.wait_ready(timeout_s=10)
    lease = p.acquire()
    p.close()
    assert all(sb.closed for sb in made)
    with pytest.raises(SandboxError, match="closed"):
        p.acquire()
    lease.close()  # returning after close is harmless


def test_a_lease_whose_pool_was_closed_fails_as_infra(pool: SandboxPool) -> None:
    # Closing a shared pool closes the sandboxes on loan too: an episode's next step must end
    # as infra, not as the agent's error ("this sandbox is closed" shown as a tool failure).
    lease = pool.acquire()
    pool.close()
    with pytest.raises(SandboxInfraError, match="pool was closed"):
        lease.run_python("print(1)")
    lease.close()


def test_bad_arguments() -> None:
    with pytest.raises(SandboxError):
        SandboxPool(FakeSandbox, size=0)
    with pytest.raises(SandboxError):
        SandboxPool("kubernetes")  # type: ignore[arg-type]


# -- on Docker ----------------------------------------------------------------------


@pytest.mark.docker
def test_pool_replaces_a_dead_docker_sandbox() -> None:
    _require("docker")
    with SandboxPool("docker", size=1, limits=Limits(timeout_s=5)) as p:
        with p.acquire(timeout_s=60) as lease:
            dead_id = lease.sandbox.id
            lease.sandbox.container.kill()
            with pytest.raises(SandboxInfraError):
                lease.run_python("print(1)")
        with p.acquire(timeout_s=60) as lease:
            assert lease.sandbox.id != dead_id
            assert lease.run_python("print(1)").stdout == "1\n"


@pytest.mark.docker
def test_pool_start_reaps_containers_of_dead_owners_only() -> None:
    _require("docker")
    import docker

    from agentenv.sandboxes.docker import OWNER_HOST_LABEL, OWNER_PID_LABEL, SANDBOX_LABEL, reap_stale_containers

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = dead.stdout.strip()
    client = docker.from_env()
    host = socket.gethostname()

    def labelled(pid: str, owner_host: str = host) -> str:
        labels = {SANDBOX_LABEL: "1", OWNER_PID_LABEL: pid, OWNER_HOST_LABEL: owner_host}
        return client.containers.create(IMAGE, command=["true"], labels=labels).id

    stale, live, elsewhere = labelled(dead_pid), labelled(str(os.getpid())), labelled(dead_pid, "another-host")
    try:
        with SandboxPool("docker", size=1):  # reaps at start
            pass
        assert reap_stale_containers(client) == []  # nothing stale is left
        left = {c.id for c in client.containers.list(all=True, filters={"label": f"{SANDBOX_LABEL}=1"})}
        assert stale not in left and {live, elsewhere} <= left
    finally:
        for cid in (stale, live, elsewhere):
            try:
                client.containers.get(cid).remove(force=True)
            except docker.errors.NotFound:
                pass


class SlowResetSandbox(FakeSandbox):
    """A reset takes a while, as a real one does, so recycling overlaps with other events."""

    def reset(self) -> None:
        threading.Event().wait(0.05)
        super().reset()


def test_dead_sandboxes_are_replaced_while_others_recycle() -> None:
    # Recycling sandboxes were counted twice (live and "starting"), so a dead one
    # discarded meanwhile left its slot empty and acquire() waited out its timeout.
    made: list[SlowResetSandbox] = []

    def factory() -> SlowResetSandbox:
        sb = SlowResetSandbox()
        made.append(sb)
        return sb

    with SandboxPool(factory, size=3) as pool:
        pool.wait_ready(5)
        for _ in range(20):  # churn: kill one idle sandbox while the other two recycle
            leases = [pool.acquire(timeout_s=5) for _ in range(2)]
            for lease in leases:
                lease.close()
            for sb in made:
                if not sb.closed and sb.alive and sb.resets and not sb.dirty:
                    sb.alive = False  # the container died while idle
                    break
            lease = pool.acquire(timeout_s=5)  # must not wait for a slot that is never refilled
            lease.close()
        pool.wait_ready(5)
        live = [sb for sb in made if not sb.closed and sb.alive]
        assert len(live) == 3
        assert sum(not sb.alive for sb in made) >= 10


def test_a_sandbox_that_dies_while_recycling_is_replaced() -> None:
    class DiesOnReset(SlowResetSandbox):
        def reset(self) -> None:
            super().reset()
            self.alive = False

    made: list[FakeSandbox] = []

    def factory() -> FakeSandbox:
        sb = DiesOnReset() if len(made) < 2 else FakeSandbox()
        made.append(sb)
        return sb

    with SandboxPool(factory, size=2) as pool:
        pool.wait_ready(5)
        for lease in [pool.acquire(timeout_s=5) for _ in range(2)]:
            lease.close()
        pool.wait_ready(5)
        leases = [pool.acquire(timeout_s=5) for _ in range(2)]
        assert all(lease.sandbox.alive for lease in leases)
        assert len(made) == 4
        for lease in leases:
            lease.close()
