"""The process backend's own contract: results as data, its environment, snapshots, the factory."""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentenv.sandboxes import Limits, ProcessSandbox, Sandbox, SandboxError, SandboxInfraError, factory, make_sandbox
from tests.sandboxes.conftest import LIMITS

pytestmark = pytest.mark.slow  # process sandboxes


@pytest.fixture
def sb() -> Iterator[ProcessSandbox]:
    with ProcessSandbox(LIMITS) as sandbox:
        yield sandbox


def test_environment_is_the_minimal_one(sb: ProcessSandbox) -> None:
    result = sb.run_python("import json, os; print(json.dumps([dict(os.environ), os.getcwd()]))")
    env, cwd = __import__("json").loads(result.stdout)
    expected = {"PATH", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE"}
    if not sb.isolation.namespaces:
        expected.add("TMPDIR")  # a private temp dir stands in for the missing private /tmp
    assert set(env) - {"LC_CTYPE"} == expected  # Python may set LC_CTYPE when coercing the C locale
    assert env["HOME"] == cwd == sb.workspace


def test_exec_result_fields(sb: ProcessSandbox) -> None:
    result = sb.run("echo out; echo err >&2; exit 3")
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
    assert not result.ok and not result.timed_out and not result.oom_killed
    assert result.duration_s > 0
    assert sb.run(["cat"], stdin="piped in").stdout == "piped in"
    assert sb.run_python("print('é')").ok
    killed = sb.run("kill -SEGV $$")
    assert killed.exit_code is None and not killed.ok and not killed.timed_out


def test_isolation_says_what_applied(sb: ProcessSandbox) -> None:
    iso = sb.isolation
    seccomp = sb.run("grep '^Seccomp:' /proc/self/status").stdout.split()
    assert (seccomp[-1] == "2") == iso.userns_denied, (seccomp, iso)
    devices = sb.run("ls /dev").stdout.split()
    assert ("fuse" not in devices and "kmsg" not in devices) == iso.minimal_dev, (devices, iso)
    if iso.namespaces and iso.dedicated_uid is not None:  # root: nothing on the host stops any of them
        assert iso.host_python_hidden and iso.minimal_dev and iso.userns_denied, iso
    if iso.why_not == "":
        assert iso.namespaces and iso.host_python_hidden and iso.userns_denied, iso


def test_package_dirs_that_cannot_be_covered_are_reported_not_claimed() -> None:
    from agentenv.sandboxes._host_python import Python, covers_for

    python = Python(
        "/opt/py/bin/python3",
        ("/opt/py", "/opt/py/lib/python3"),
        packages=("/srv/checkout", "/tmp/script-dir", "/opt/py/lib/python3/site-packages", "/usr"),
        unasked=("/usr/bin/python2",),
    )
    covers, visible = covers_for(python, "/srv/checkout/.tmp/agentenv-sandbox-x")
    assert covers == ["/opt/py/lib/python3/site-packages"]  # /tmp/...: a run sees its private /tmp there
    assert "/srv/checkout" in visible and "/usr" in visible and "/usr/bin/python2" in visible
    coverable = dataclasses.replace(python, packages=python.packages[2:3], unasked=())
    assert covers_for(coverable, "/tmp/agentenv-sandbox-x") == (covers, "")


def test_a_forged_setup_failure_is_the_runs_own_result(sb: ProcessSandbox) -> None:
    forged = "import os, sys; sys.stderr.write('agentenv sandbox: cannot set up the sandbox: x\\n'); os._exit(125)"
    result = sb.run_python(forged)  # no SandboxInfraError: an infra failure would dodge the penalty
    assert result.exit_code == 125 and result.stderr.startswith("agentenv sandbox: cannot set up")


def test_a_real_setup_failure_is_an_infra_error(sb: ProcessSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    if not sb.isolation.namespaces:
        pytest.skip(f"the launcher sets up nothing that can fail without namespaces: {sb.isolation.why_not}")
    config = sb._launch_config
    monkeypatch.setattr(sb, "_launch_config", lambda *a: {**config(*a), "tmp": "/nonexistent/agentenv-tmp"})
    with pytest.raises(SandboxInfraError, match="cannot set up the sandbox"):
        sb.run("true")


def test_files_round_trip_and_are_visible_to_runs(sb: ProcessSandbox) -> None:
    sb.write_files({"a/b/c.txt": "hello", "bin.dat": b"\x00\xff"})
    assert sb.read_file("a/b/c.txt") == b"hello"
    assert sb.read_file("bin.dat") == b"\x00\xff"
    assert sb.run("cat a/b/c.txt && echo more >> a/b/c.txt").stdout == "hello"
    assert sb.read_file("a/b/c.txt") == b"hellomore\n"
    with pytest.raises(FileNotFoundError):
        sb.read_file("missing.txt")


def test_read_file_refuses_a_fifo_instead_of_hanging(sb: ProcessSandbox) -> None:
    assert sb.run("mkfifo pipe").ok
    with pytest.raises(SandboxError, match="not a regular file"):
        sb.read_file("pipe")


def test_a_path_the_filesystem_refuses_is_a_sandbox_error_not_an_os_error(sb: ProcessSandbox) -> None:
    # An agent's write_file path: refused as data the env shows, never a traceback on the host.
    with pytest.raises(SandboxError, match="cannot write"):
        sb.write_files({"a" * 5000: "x"})
    with pytest.raises(SandboxError, match="cannot read"):
        sb.read_file("a" * 5000)
    with pytest.raises(FileNotFoundError):  # an absent file stays what `Sandbox.read_file` promises
        sb.read_file("a/" * 10 + "missing.txt")


def test_snapshot_restore_round_trip(sb: ProcessSandbox) -> None:
    sb.write_files({"keep.txt": "v1", "dir/nested.txt": "n"})
    assert sb.run("ln -s keep.txt link").ok
    archive = sb.snapshot()
    sb.write_files({"keep.txt": "v2", "extra.txt": "x"})
    sb.restore(archive)
    assert sb.read_file("keep.txt") == b"v1"
    assert sb.read_file("dir/nested.txt") == b"n"
    assert sb.run("readlink link; ls").stdout == "keep.txt\ndir\nkeep.txt\nlink\n"
    assert sb.run("echo rewritten > keep.txt").ok, "restored files must stay writable by the sandbox"


@pytest.mark.parametrize("member", ["../escape.txt", "/abs.txt", "a/../../escape.txt"])
def test_restore_refuses_members_that_escape(sb: ProcessSandbox, member: str) -> None:
    sb.write_files({"keep.txt": "v1"})
    with pytest.raises(SandboxError):
        sb.restore(_tar({member: b"x"}))
    assert sb.read_file("keep.txt") == b"v1", "a refused archive must leave the workspace as it was"


def test_restore_refuses_symlinks_that_point_out(sb: ProcessSandbox) -> None:
    link = tarfile.TarInfo("out")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc"
    with pytest.raises(SandboxError):
        sb.restore(_tar({}, extra=[link]))


def test_restore_never_writes_through_the_archives_own_symlinks(sb: ProcessSandbox, tmp_path: Path) -> None:
    # A hand-edited snapshot (a miner checkpoint on disk): each symlink's target stays inside
    # on paper, but a chain of them nested past PATH_MAX leads `escape` to the host's root,
    # where tarfile's "data" filter stops resolving (CVE-2025-4517); then a file is written
    # through `escape`. As root, that is any file on the host.
    victim = tmp_path / "victim.txt"
    victim.write_text("the host's")
    comp, steps, path, members = "d" * 247, "abcdefghijklmnop", "", []
    for step in steps:
        members.append(_info(os.path.join(path, comp), tarfile.DIRTYPE))
        members.append(_info(os.path.join(path, step), tarfile.SYMTYPE, comp))
        path = os.path.join(path, comp)
    deep = os.path.join(*steps, "l" * 254)
    members.append(_info(deep, tarfile.SYMTYPE, "../" * (len(steps) - 1)))
    members.append(_info("escape", tarfile.SYMTYPE, deep + "/.." * len(steps) + str(victim)))
    with pytest.raises(SandboxError, match=r"goes through|comes twice"):
        sb.restore(_tar({"escape": b"written by the archive"}, extra=members, extra_first=True))
    assert victim.read_text() == "the host's"


def _info(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def _tar(files: dict[str, bytes], extra: list[tarfile.TarInfo] | None = None, *, extra_first: bool = False) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        entries: list[tuple[tarfile.TarInfo, bytes | None]] = []
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            entries.append((info, data))
        others = [(info, None) for info in extra or []]
        for info, data in others + entries if extra_first else entries + others:
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("interrupt", ["reset", "close"])
def test_a_run_killed_by_a_reset_or_close_is_infra_not_oom(interrupt: str) -> None:
    # A pool recycling a lease returned mid-step, or closing: the run dies of a SIGKILL the
    # command did not ask for. Reported as the command's OOM kill, the agent would carry it.
    sandbox = ProcessSandbox(LIMITS)
    try:
        timer = threading.Timer(0.5, getattr(sandbox, interrupt))
        timer.start()
        with pytest.raises(SandboxInfraError, match="during the run"):
            sandbox.run("sleep 2")
        timer.join()
    finally:
        sandbox.close()


def test_large_code_runs(sb: ProcessSandbox) -> None:
    code = "x = 1\n" * 30_000 + "print('done')\n"  # beyond what one argv string may hold
    assert sb.run_python(code).stdout == "done\n"


def test_close_is_idempotent_and_final() -> None:
    sandbox = ProcessSandbox(LIMITS)
    workspace = sandbox.workspace
    sandbox.close()
    sandbox.close()
    assert not os.path.exists(workspace)
    with pytest.raises(SandboxError, match="closed"):
        sandbox.run("true")


def test_sandboxes_get_distinct_uids_as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("dedicated uids are allocated only when the caller is root")
    with ProcessSandbox(LIMITS) as a, ProcessSandbox(LIMITS) as b:
        assert a.isolation.dedicated_uid not in (None, b.isolation.dedicated_uid)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(SandboxError, match="network"):
        ProcessSandbox(LIMITS, network="none")  # type: ignore[arg-type]
    with ProcessSandbox(LIMITS, network="host") as sandbox:
        assert not sandbox.isolation.network_isolated
        with pytest.raises(SandboxError):
            sandbox.run([])


def test_make_sandbox_process() -> None:
    with make_sandbox("process", Limits(timeout_s=2)) as sandbox:
        assert isinstance(sandbox, ProcessSandbox) and isinstance(sandbox, Sandbox)
        assert sandbox.limits.timeout_s == 2
    with pytest.raises(SandboxError, match="expected kind"):
        make_sandbox("vm")  # type: ignore[arg-type]


def test_make_sandbox_auto_falls_back_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(factory, "docker_available", lambda: "no engine in this test")
    with caplog.at_level(logging.INFO, logger="agentenv.sandboxes"):
        with make_sandbox("auto", LIMITS) as sandbox:
            assert isinstance(sandbox, ProcessSandbox)
    assert "process" in caplog.text and "no engine in this test" in caplog.text
