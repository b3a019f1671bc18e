"""The Docker sandbox's control channel, attacked from inside a run.

The host talks to the runner over the container's attached stdin/stdout, which
init (pid 1) and the runner hold. A run that could read, signal or ptrace either
of them could answer the host itself: forge a verdict, fake a reset, or flood
the host with a frame past every cap. Each test below is one such move, made by
code running in the sandbox; the last ones check the host's own bound on what
it reads. Skipped or failed as tests/sandboxes/conftest.py says.
"""

from __future__ import annotations

import json
import resource
import socket
import textwrap
import threading
from collections.abc import Iterator

import pytest

from agentenv.sandboxes import Limits, Sandbox, SandboxInfraError
from tests.sandboxes.conftest import _require

LIMITS = Limits(timeout_s=10, memory_mb=256, pids=48, output_bytes=64 * 1024, workspace_mb=16, tmp_mb=8)

# Finds the processes a run must not reach: init, the runner (and any helper of
# it: every process started from runner.py but this run) and any process of another uid.
FIND_HOLDERS = textwrap.dedent("""
    import os
    def status(pid):
        fields = {}
        for line in open(f"/proc/{pid}/status"):
            key, _, value = line.partition(":")
            fields[key] = value.split()
        return fields
    def cmdline(pid):
        return open(f"/proc/{pid}/cmdline", "rb").read()
    me = os.getpid()
    others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
    holders = sorted({1} | {p for p in others if b"runner.py" in cmdline(p) or int(status(p)["Uid"][0]) != os.getuid()})
""")


@pytest.fixture
def sb() -> Iterator[Sandbox]:
    _require("docker")
    from agentenv.sandboxes.docker import DockerSandbox

    sandbox = DockerSandbox(limits=LIMITS)
    yield sandbox
    sandbox.close()


def run_json(sb: Sandbox, code: str) -> dict:
    result = sb.run_python(FIND_HOLDERS + textwrap.dedent(code))
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_runs_execute_under_a_uid_other_than_init_and_the_runner(sb: Sandbox) -> None:
    report = run_json(
        sb,
        """
        import json
        uids = {pid: int(status(pid)["Uid"][0]) for pid in holders}
        cmd = {pid: open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")[:3] for pid in holders}
        runner = any(b"runner.py" in b"".join(c) for c in cmd.values())
        print(json.dumps({"me": os.getuid(), "uids": uids, "runner": runner}))
    """,
    )
    assert report["runner"], "the runner must be among the processes of another uid"
    assert report["me"] not in report["uids"].values()
    assert report["uids"]["1"] != report["me"]


def test_a_run_cannot_open_the_channel_descriptors(sb: Sandbox) -> None:
    report = run_json(
        sb,
        """
        import json
        opened = []
        for pid in holders:
            for fd in (0, 1, 2):
                for mode in ("rb", "wb"):
                    try:
                        open(f"/proc/{pid}/fd/{fd}", mode, buffering=0).close()
                        opened.append(f"{pid}/fd/{fd} {mode}")
                    except OSError:
                        pass
        print(json.dumps({"opened": opened, "holders": holders}))
    """,
    )
    assert len(report["holders"]) >= 2  # init and the runner at least
    assert report["opened"] == []


def test_a_run_cannot_signal_init_or_the_runner(sb: Sandbox) -> None:
    report = run_json(
        sb,
        """
        import json, signal
        signalled = []
        for pid in holders:
            for sig in (signal.SIGSTOP, signal.SIGCONT, 0):
                try:
                    os.kill(pid, sig)
                    signalled.append(f"{pid}:{int(sig)}")
                except PermissionError:
                    pass
        print(json.dumps({"signalled": signalled}))
    """,
    )
    assert report["signalled"] == []
    assert sb.run_python("print('still answering')").stdout == "still answering\n"


def test_a_run_cannot_ptrace_or_read_the_memory_of_init_or_the_runner(sb: Sandbox) -> None:
    report = run_json(
        sb,
        """
        import ctypes, json
        libc = ctypes.CDLL(None, use_errno=True)
        attached, read = [], []
        for pid in holders:
            if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
                attached.append(pid)
                libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
            for name in ("mem", "environ", "maps"):
                try:
                    with open(f"/proc/{pid}/{name}", "rb") as f:
                        f.read(1)
                    read.append(f"{pid}/{name}")
                except OSError:
                    pass
        print(json.dumps({"attached": attached, "read": read}))
    """,
    )
    assert report["attached"] == []
    assert report["read"] == []


def test_a_daemon_cannot_answer_the_hosts_reset(sb: Sandbox) -> None:
    # The forged-reset move: a process left behind by a run waits for the host's
    # next request on init's stdin and answers "ok" itself, so nothing is wiped.
    sb.write_files({"keep.txt": "state of the last episode"})
    launched = sb.run_python(
        FIND_HOLDERS
        + textwrap.dedent("""
        import json, struct, sys
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                fds = []
                for pid in holders:
                    try:
                        fds.append((os.open(f"/proc/{pid}/fd/0", os.O_RDONLY),
                                    os.open(f"/proc/{pid}/fd/1", os.O_WRONLY)))
                    except OSError:
                        pass
                for pid in holders:
                    try:
                        os.kill(pid, 19)  # SIGSTOP
                    except OSError:
                        pass
                for rfd, wfd in fds:
                    head = os.read(rfd, 8)
                    body = json.dumps({"ok": True}).encode()
                    os.write(wfd, struct.pack(">II", len(body), 0) + body)
                os._exit(0)
            os._exit(0)
        print("launched")
    """)
    )
    assert launched.stdout.strip() == "launched"
    sb.reset()
    listing = sb.run_python("import os; print(sorted(os.listdir('.')))")
    assert listing.stdout.strip() == "[]"


def test_a_run_cannot_send_the_host_a_frame_past_the_output_cap(sb: Sandbox) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = sb.run_python(
        FIND_HOLDERS
        + textwrap.dedent("""
        import struct
        wrote = []
        for pid in holders:
            try:
                fd = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY)
            except OSError:
                continue
            size = 100 << 20
            os.write(fd, struct.pack(">II", size, 0))
            chunk = b"x" * (1 << 20)
            for _ in range(100):
                os.write(fd, chunk)
            wrote.append(pid)
        print(wrote)
    """)
    )
    assert result.stdout.strip() == "[]"
    assert sb.run_python("print(6 * 7)").stdout == "42\n"
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 100


# -- the host bounds what it reads ----------------------------------------------------


def _muxed(payload: bytes) -> bytes:
    """``payload`` as Docker multiplexes attached stdout: an 8-byte header per chunk."""
    return bytes([1, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def test_the_host_refuses_an_oversized_frame_without_reading_it() -> None:
    pytest.importorskip("docker")
    from agentenv.sandboxes.docker import _Channel
    from agentenv.sandboxes.runner import FRAME

    host, runner = socket.socketpair()
    channel = _Channel(host, max_header_bytes=1 << 20, max_blob_bytes=1 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def flood() -> None:
        try:
            runner.sendall(_muxed(FRAME.pack(100 << 20, 0)))
            chunk = _muxed(b"x" * (1 << 20))
            for _ in range(100):
                runner.sendall(chunk)
        except OSError:
            pass  # the host hung up: what it should do

    writer = threading.Thread(target=flood, daemon=True)
    writer.start()
    import time

    with pytest.raises(SandboxInfraError, match="frame"):
        channel.receive(time.monotonic() + 10)
    channel.close()
    writer.join(10)
    runner.close()
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 50


def test_the_host_refuses_an_oversized_multiplexed_chunk() -> None:
    pytest.importorskip("docker")
    from agentenv.sandboxes.docker import _Channel

    host, runner = socket.socketpair()
    channel = _Channel(host, max_header_bytes=1 << 20, max_blob_bytes=1 << 20)
    runner.sendall(bytes([1, 0, 0, 0]) + (1 << 31).to_bytes(4, "big"))
    import time

    with pytest.raises(SandboxInfraError, match="chunk"):
        channel.receive(time.monotonic() + 5)
    channel.close()
    runner.close()


def test_the_host_refuses_a_garbled_header() -> None:
    pytest.importorskip("docker")
    from agentenv.sandboxes.docker import _Channel
    from agentenv.sandboxes.runner import FRAME

    host, runner = socket.socketpair()
    channel = _Channel(host, max_header_bytes=1 << 20, max_blob_bytes=1 << 20)
    body = b"[" * 100_000
    runner.sendall(_muxed(FRAME.pack(len(body), 0) + body))
    import time

    with pytest.raises(SandboxInfraError, match="header"):
        channel.receive(time.monotonic() + 5)
    channel.close()
    runner.close()
