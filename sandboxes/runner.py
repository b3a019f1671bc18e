"""The process that lives inside a sandbox container and runs code on request.

The container's command starts this script once; `DockerSandbox` then talks to it
over the container's attached stdin/stdout, so a run costs a fork and a few pipe
reads instead of a ``docker exec`` (~80 ms) or a new container (~0.5 s).

Wire format, both ways: a frame is ``>II`` (header length, blob length), a UTF-8
JSON header, then the blob (file contents, tar archives: raw bytes, no base64).
Requests carry ``"op"``; every response carries ``"ok"`` and, when false,
``"kind"`` (``not_found`` | ``refused`` | ``error``) and ``"message"``. The runner
never writes to stdout except frames, and writes nothing until it gets a request
(the host attaches before the container starts and must not miss a byte).

Each run is a fresh process in its own session: Python code runs in a fork of this
(pre-warmed) interpreter, commands are fork + exec. A wall-clock timeout kills the
whole process group; output is read through pipes up to a byte cap and the rest is
discarded as it arrives. After each run the process group is killed; ``reset``
kills every process in the container but this one and init, and wipes the
workspace and /tmp.

What a forked run shares with the runner (unlike ``python3 -c``): the modules this
script has already imported and the string-hash seed. Standard library only: the
image may have nothing else. Not a security boundary by itself; the container is.
"""

from __future__ import annotations

import errno
import io
import json
import os
import select
import shutil
import signal
import struct
import sys
import tarfile
import time
import types
from typing import Any

# Imported here so that forked runs find them warm; nothing below needs all of them.
import collections, functools, itertools, math, random, re, string, traceback, typing  # noqa: E401,F401,I001

PROTOCOL = 1  # bump on any change to the frames or ops; the host refuses a mismatch
FRAME = struct.Struct(">II")
READ_CHUNK = 65536
DRAIN_GRACE_S = 0.05  # how long to wait for output held open by a process that escaped the group
CHILD_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/workspace",
    "LANG": "C.UTF-8",
    "TMPDIR": "/tmp",
    "PYTHONDONTWRITEBYTECODE": "1",
}
OOM_COUNTERS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


class Refused(Exception):
    """The request asks for something outside the workspace."""


class Config:
    def __init__(self, argv: list[str]) -> None:
        self.workspace = "/workspace"
        self.tmp = "/tmp"
        # Killing every process we may signal is right in a container's PID
        # namespace and a disaster anywhere else, so it is opt-in.
        self.kill_all = False
        args = iter(argv)
        for arg in args:
            if arg == "--workspace":
                self.workspace = next(args)
            elif arg == "--tmp":
                self.tmp = next(args)
            elif arg == "--kill-all":
                self.kill_all = True
            else:
                raise SystemExit(f"runner: unknown argument {arg!r}")
        self.workspace = os.path.realpath(self.workspace)


# -- framing ----------------------------------------------------------------------


def read_exact(fd: int, n: int) -> bytes | None:
    """``n`` bytes from ``fd``, or None at end of input."""
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> tuple[dict[str, Any], bytes] | None:
    head = read_exact(fd, FRAME.size)
    if head is None:
        return None
    header_len, blob_len = FRAME.unpack(head)
    body = read_exact(fd, header_len + blob_len)
    if body is None:
        return None
    return json.loads(body[:header_len]), body[header_len:]


def write_frame(fd: int, header: dict[str, Any], blob: bytes = b"") -> None:
    data = json.dumps(header, separators=(",", ":")).encode()
    view = memoryview(FRAME.pack(len(data), len(blob)) + data + blob)
    while view:
        view = view[os.write(fd, view) :]


# -- running code -----------------------------------------------------------------


def oom_kills() -> int | None:
    """The cgroup's count of OOM kills so far (v2 memory.events, v1 memory.oom_control)."""
    for path in OOM_COUNTERS:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except OSError:
            continue
    return None


def _exec_python(code: str) -> int:
    """In the forked child: run ``code`` as ``python3 -c`` would and return the exit code."""
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8", errors="backslashreplace",
        line_buffering=True,
    )
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    sys.argv = ["-c"]
    sys.path[0] = ""
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)  # noqa: S102 - running it is the point
        status = 0
    except SystemExit as e:
        status = _exit_status(e.code)
    except BaseException as e:  # noqa: BLE001 - report it the way the interpreter does
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None  # drop this frame
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        status = 1
    return _finalize(status)


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _finalize(status: int) -> int:
    # What interpreter shutdown would do (we leave with os._exit, so it will not):
    # join non-daemon threads, run atexit handlers, flush the streams.
    for hook in (getattr(sys.modules.get("threading"), "_shutdown", None),
                 getattr(sys.modules.get("atexit"), "_run_exitfuncs", None)):
        if hook is not None:
            try:
                hook()
            except BaseException:  # noqa: BLE001 - a failing hook must not change the exit path
                pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            status = status or 120  # what CPython returns when flushing stdout fails
    return status


def _child(req: dict[str, Any], workspace: str, stdin_fd: int, out_fd: int, err_fd: int, close: list[int]) -> None:
    """In the forked child: become the run's process and never return."""
    status = 127
    try:
        os.setsid()
        set_dumpable(True)  # the run is an ordinary process; only the runner hides its memory
        for target, fd in ((0, stdin_fd), (1, out_fd), (2, err_fd)):
            os.dup2(fd, target)
        for fd in close:
            os.close(fd)
        os.chdir(workspace)
        try:  # make the run, not the runner, the OOM killer's first choice
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
        if "python" in req:
            status = _exec_python(req["python"])
        else:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # Python ignores it; exec'd programs expect the default
            argv = req["argv"]
            try:
                os.execvpe(argv[0], argv, CHILD_ENV)
            except OSError as e:
                os.write(2, f"{argv[0]}: {e.strerror}\n".encode())
                status = 126 if e.errno == errno.EACCES else 127
    finally:
        os._exit(status)


class Capture:
    """One output pipe read up to ``cap`` bytes; the rest is read and dropped."""

    def __init__(self, fd: int, cap: int) -> None:
        self.fd, self.cap = fd, cap
        self.data = bytearray()
        self.truncated = False
        self.open = True

    def read(self) -> None:
        try:
            chunk = os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return
        if not chunk:
            self.close()
            return
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        if room > 0:
            self.data += chunk[:room]

    def close(self) -> None:
        if self.open:
            os.close(self.fd)
            self.open = False


def _kill_group(pid: int) -> None:
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # old kernel, or seccomp says no
        return None


def _start(req: dict[str, Any], cfg: Config, *, with_stdin: bool) -> tuple[int, tuple[int, int, int]]:
    """Fork the run's process; its pid and our ends of its pipes (stdin end -1 without stdin)."""
    opened: list[int] = []
    try:
        in_r, in_w = os.pipe() if with_stdin else (os.open(os.devnull, os.O_RDONLY), -1)
        opened += [in_r, in_w]
        out_r, out_w = os.pipe()
        opened += [out_r, out_w]
        err_r, err_w = os.pipe()
        opened += [err_r, err_w]
        pid = os.fork()
    except OSError:
        for fd in opened:
            if fd >= 0:
                os.close(fd)
        raise
    if pid == 0:
        _child(req, cfg.workspace, in_r, out_w, err_w, [fd for fd in opened if fd >= 0])
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    return pid, (in_w, out_r, err_r)


def run(req: dict[str, Any], cfg: Config) -> dict[str, Any]:
    """Run one request's code or command; the result fields of `ExecResult`."""
    cap = int(req["output_bytes"])
    timeout_s = float(req["timeout_s"])
    stdin = req.get("stdin")
    stdin_data = stdin.encode() if stdin is not None else b""
    ooms_before = oom_kills()
    start = time.monotonic()
    try:
        pid, (in_w, out_r, err_r) = _start(req, cfg, with_stdin=stdin is not None)
    except OSError as e:
        # Most likely the process limit, used up by what earlier runs left behind:
        # the run's failure (data), not the sandbox's; reset() clears it.
        return {"stdout": "", "stderr": f"cannot start the process: {e}; reset the sandbox to clear leftovers\n",
                "exit_code": 126, "timed_out": False, "oom_killed": False, "duration_s": time.monotonic() - start,
                "stdout_truncated": False, "stderr_truncated": False}
    try:
        status, timed_out, captures = _supervise(pid, start + timeout_s, in_w, stdin_data, out_r, err_r, cap)
    finally:
        _kill_group(pid)
    duration_s = time.monotonic() - start
    ooms_after = oom_kills()
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    if ooms_before is not None and ooms_after is not None:
        oom = ooms_after > ooms_before
    else:  # no counter: a SIGKILL we did not send is the OOM killer's
        oom = killed and not timed_out
    out, err = captures
    return {
        "stdout": out.data.decode("utf-8", "replace"),
        "stderr": err.data.decode("utf-8", "replace"),
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) and not timed_out else None,
        "timed_out": timed_out,
        "oom_killed": oom and not timed_out,
        "duration_s": duration_s,
        "stdout_truncated": out.truncated,
        "stderr_truncated": err.truncated,
    }


def _supervise(pid: int, deadline: float, in_w: int, stdin_data: bytes, out_r: int, err_r: int,
               cap: int) -> tuple[int, bool, tuple[Capture, Capture]]:
    """Feed stdin, read output and wait for ``pid`` until it exits or ``deadline``."""
    captures = (Capture(out_r, cap), Capture(err_r, cap))
    by_fd = {c.fd: c for c in captures}
    pidfd = _pidfd(pid)
    poller = select.poll()
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    pending = memoryview(stdin_data)
    if in_w >= 0:
        os.set_blocking(in_w, False)
        poller.register(in_w, select.POLLOUT)
    status: int | None = None
    timed_out = False
    drain_until: float | None = None
    try:
        while True:
            now = time.monotonic()
            if status is None and now >= deadline:
                _kill_group(pid)
                timed_out = True
                deadline = float("inf")
            if status is None:
                status = _reap(pid)
                if status is not None:
                    _kill_group(pid)  # whatever it left behind in its group
                    drain_until = time.monotonic() + DRAIN_GRACE_S
            if drain_until is not None and (not any(c.open for c in captures) or now >= drain_until):
                break
            limit = drain_until if drain_until is not None else deadline
            wait_s = max(0.0, min(limit - now, 0.01 if pidfd is None else 3600.0))
            for fd, _ in poller.poll(wait_s * 1000):
                if fd in by_fd:
                    by_fd[fd].read()
                    if not by_fd[fd].open:
                        poller.unregister(fd)
                elif fd == in_w:
                    pending = _feed(in_w, pending)
                    if not pending:
                        poller.unregister(in_w)
                        os.close(in_w)
                        in_w = -1
                elif fd == pidfd:
                    poller.unregister(pidfd)
    finally:
        for c in captures:
            c.close()
        for fd in (in_w, pidfd):
            if fd is not None and fd >= 0:
                os.close(fd)
    return status, timed_out, captures


def _reap(pid: int) -> int | None:
    got, status = os.waitpid(pid, os.WNOHANG)
    return status if got == pid else None


def _feed(fd: int, pending: memoryview) -> memoryview:
    try:
        return pending[os.write(fd, pending[: 1 << 16]) :]
    except BlockingIOError:
        return pending
    except BrokenPipeError:  # the run closed its stdin: what is left is not wanted
        return pending[len(pending) :]


# -- files ------------------------------------------------------------------------


def _inside(cfg: Config, rel: str) -> str:
    """The path ``rel`` resolves to (symlinks followed), refused unless inside the workspace."""
    if rel.startswith("/") or "\x00" in rel:
        raise Refused(f"path {rel!r} is not relative to the workspace")
    resolved = os.path.realpath(os.path.join(cfg.workspace, rel))
    if resolved != cfg.workspace and not resolved.startswith(cfg.workspace + os.sep):
        raise Refused(f"path {rel!r} leads outside the workspace")
    return os.path.relpath(resolved, cfg.workspace)


def _open_dir(cfg: Config, parts: list[str], create: bool) -> int:
    """A descriptor of workspace/parts, walked one component at a time with
    O_NOFOLLOW, so a symlink swapped in after the check above is refused, not followed."""
    fd = os.open(cfg.workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _split(rel: str) -> tuple[list[str], str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise Refused(f"path {rel!r} does not name a file in the workspace")
    return parts[:-1], parts[-1]


def write_files(req: dict[str, Any], blob: bytes, cfg: Config) -> dict[str, Any]:
    offset = 0
    for rel, size in req["files"]:
        dirs, name = _split(_inside(cfg, rel))
        dir_fd = _open_dir(cfg, dirs, create=True)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        with open(fd, "wb") as f:
            f.write(blob[offset : offset + size])
        offset += size
    return {"ok": True}


def read_file(req: dict[str, Any], cfg: Config) -> tuple[dict[str, Any], bytes]:
    dirs, name = _split(_inside(cfg, req["path"]))
    dir_fd = _open_dir(cfg, dirs, create=False)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with open(fd, "rb") as f:
        return {"ok": True}, f.read()


def snapshot(cfg: Config) -> tuple[dict[str, Any], bytes]:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted(os.listdir(cfg.workspace)):
            tar.add(os.path.join(cfg.workspace, name), arcname=name)
    return {"ok": True}, buf.getvalue()


def _check_member(member: tarfile.TarInfo) -> None:
    # tarfile's "data" filter does this and more, but bookworm's Python 3.11.2 predates it.
    # A symlink may point anywhere (a run could make the same one); what is refused
    # is writing *through* one, checked as each member is extracted.
    name = member.name
    if name.startswith("/") or ".." in name.split("/"):
        raise Refused(f"archive member {name!r} leaves the workspace")
    if not (member.isfile() or member.isdir() or member.issym()):
        raise Refused(f"archive member {name!r} is not a file, directory or symlink")


def restore(blob: bytes, cfg: Config) -> dict[str, Any]:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
        members = tar.getmembers()
        for member in members:
            _check_member(member)
        wipe(cfg.workspace)
        for member in members:
            _inside(cfg, os.path.dirname(member.name) or ".")
            member.uid, member.gid = os.getuid(), os.getgid()
            member.uname = member.gname = ""
            member.mode &= 0o777  # no setuid/setgid/sticky bits from an archive
            tar.extract(member, cfg.workspace, set_attrs=not member.issym())
    return {"ok": True}


def wipe(root: str) -> None:
    """Remove everything under ``root`` (not root itself), even unwritable directories."""

    def retry(func: Any, path: str, _exc: Any) -> None:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, onerror=retry)
        else:
            func(path)

    os.chmod(root, 0o755 if root != "/tmp" else 0o1777)
    for entry in os.scandir(root):
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, onerror=retry)
            else:
                os.unlink(entry.path)
        except FileNotFoundError:
            pass


def _reap_children() -> None:
    while True:  # reap our own children; init reaps the rest
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _others() -> list[int]:
    me = os.getpid()
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) not in (1, me)]


def kill_others(deadline_s: float = 2.0) -> None:
    """SIGKILL every process but init and the runner, until none is left.

    One kill(-1) can miss children forked while the kernel walks the process list,
    and killed processes hold their pids until init reaps them: repeat until /proc
    shows nobody else, so the next run finds its pids free.
    """
    end = time.monotonic() + deadline_s
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _reap_children()
        if not _others() or time.monotonic() > end:
            return
        time.sleep(0.002)


def reset(cfg: Config) -> dict[str, Any]:
    if cfg.kill_all:
        kill_others()
    _reap_children()
    for root in (cfg.workspace, cfg.tmp):
        wipe(root)
    return {"ok": True}


# -- the loop ---------------------------------------------------------------------


def handle(req: dict[str, Any], blob: bytes, cfg: Config) -> tuple[dict[str, Any], bytes]:
    op = req.get("op")
    if op == "run":
        return {"ok": True, **run(req, cfg)}, b""
    if op == "write_files":
        return write_files(req, blob, cfg), b""
    if op == "read_file":
        return read_file(req, cfg)
    if op == "snapshot":
        return snapshot(cfg)
    if op == "restore":
        return restore(blob, cfg), b""
    if op == "reset":
        return reset(cfg), b""
    if op == "ping":
        return {"ok": True, "protocol": PROTOCOL, "pid": os.getpid(), "python": sys.version.split()[0]}, b""
    raise ValueError(f"unknown op {op!r}")


def _error(e: BaseException) -> dict[str, Any]:
    if isinstance(e, FileNotFoundError):
        kind = "not_found"
    elif isinstance(e, Refused) or (isinstance(e, OSError) and e.errno in (errno.ELOOP, errno.ENOTDIR)):
        kind = "refused"  # ELOOP / ENOTDIR: O_NOFOLLOW met a symlink
    else:
        kind = "error"
    return {"ok": False, "kind": kind, "message": f"{type(e).__name__}: {e}"}


def set_dumpable(on: bool) -> None:
    """prctl(PR_SET_DUMPABLE): a non-dumpable process's memory cannot be read through
    /proc/PID/mem or ptrace by other processes of the same uid. The runner holds each
    request (files, stdin of runs) in memory, so runs must not be able to read it."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, int(on), 0, 0, 0)  # 4 = PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    cfg = Config(argv)
    set_dumpable(False)
    os.environ.clear()
    os.environ.update(CHILD_ENV)
    os.umask(0o022)
    os.chdir(cfg.workspace)
    while True:
        frame = read_frame(0)
        if frame is None:  # the host went away
            return 0
        req, blob = frame
        try:
            header, out = handle(req, blob, cfg)
        except Exception as e:  # noqa: BLE001 - every failure goes back to the host as data
            header, out = _error(e), b""
        write_frame(1, header, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
