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

Three kinds of process, two identities (with ``--run-uid``, as the container runs it):

    runner   root, holding only CAP_SETUID/CAP_SETGID, non-dumpable: the only
             process with the host's channel (besides init, also root)
    zygote   a fresh interpreter (fork + exec of this script) started before the
             runner reads any request, root and non-dumpable, with no channel:
             it forks one child per run and reports the child's pid and status
    run      a fork of the zygote that drops to the run uid (no capability left)
             and becomes the run: Python code is exec'd in it, commands are exec'd

So no process a run can signal, ptrace or read (same uid, dumpable) holds the
channel, a request or any secret: the runner and init are another uid, and runs
are forked from a process whose memory never held a request (a forked run cannot
find a verifier's stdin by walking frames or scanning memory). Runs start
non-dumpable too, so a process left behind by an earlier run cannot read a later
run's memory. The runner touches the workspace only with the run uid as its
effective uid: a symlink or a FIFO planted by a run gets it no further than the
run itself could go. A wall-clock timeout kills the run's process group; output
is read through pipes up to a byte cap and the rest is discarded as it arrives.
In a container (``--kill-all``) a run ends with every process of the run uid killed,
not only its group: a daemon left behind (a new session) could otherwise, once the
runner has cleaned up after the run, make what no process holds (a SysV segment,
files in /tmp or /dev/shm) and fill the container's memory with it, so that the
runner's next operation is OOM-killed: the container dead, an infra failure the
policy chose. As the process backend's PID namespace per run does, nothing of a run
outlives it. ``reset`` kills every process of the run uid and wipes the workspace and /tmp.

/tmp, /dev/shm and /dev/mqueue are scratch that lasts one run: emptied after every
run (and in ``reset``), as a snapshot keeps only the workspace, so a resumed episode
finds what the original found at that turn. Emptying a directory leaves the directory
itself, so each of these roots is also *settled*: the extended attributes a run can
set on it (``user.*``, POSIX ACLs) removed and its atime and mtime set to the epoch,
or a run's ``setxattr``/``utime`` on /workspace would reach the next episode. A root
is clean only while its ctime is the one settling left (nothing touched it since).

SysV IPC objects (shared memory segments, message queues, semaphore sets) last one
run: they belong to the container's IPC namespace, not to a process, so an
unattached segment would outlive every run, keep its memory charged to the
container (the next runner op OOM-killed, the container dead) and carry data to the
next episode. After each run, once its group is killed, and in ``reset``, the
runner removes every object listed in ``/proc/sysvipc`` (IPC_RMID, acting as the
run uid, which owns them: runs create them all), once every process of the run
uid is dead, so each is freed at once. A sandbox holding any is not clean.

Without ``--run-uid`` (tests on a host) every process keeps the runner's uid:
the same protocol, none of the separation. What a forked run shares with the
zygote (unlike ``python3 -c``): its imported modules and the string-hash seed.
Standard library only: the image may have nothing else. The pipe reading shared
with the host (`read_exact`, `Capture`, `feed`) lives in `agentenv.sandboxes._pipes`,
which the image gets beside this file (see `sandboxes/image/Dockerfile`).
"""

from __future__ import annotations

# Imported here so that forked runs find them warm; nothing below needs all of them.
import base64  # noqa: F401
import contextlib
import errno
import functools
import gc
import hashlib
import io
import json
import marshal
import os
import select
import signal
import socket
import stat
import struct
import sys
import tarfile
import time
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # imported as agentenv.sandboxes.runner (the host reads PROTOCOL and FRAME)
    from agentenv.sandboxes._pipes import Capture, feed, read_exact
else:  # run as a script: in the image, /opt/agentenv/_pipes.py sits beside this file
    from _pipes import Capture, feed, read_exact

PROTOCOL = 4  # bump on any change to the frames, ops or process model; the host refuses a mismatch
FRAME = struct.Struct(">II")
DRAIN_GRACE_S = 0.05  # how long to wait for output held open by a process that escaped the group
CHILD_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/workspace",
    "LANG": "C.UTF-8",
    "TMPDIR": "/tmp",
    "PYTHONDONTWRITEBYTECODE": "1",
}
OOM_COUNTERS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
PR_SET_DUMPABLE = 4


class Refused(Exception):
    """The request asks for something outside the workspace, or too big to send."""


class Config:
    def __init__(self, argv: list[str]) -> None:
        self.workspace = "/workspace"
        self.tmp = "/tmp"
        # Killing every process of the run uid is right in a container's PID
        # namespace and a disaster anywhere else, so it is opt-in.
        self.kill_all = False
        self.run_uid: int | None = None
        self.zygote_fd: int | None = None
        # The ctime of each root as `settle` left it: any later change to its entries,
        # mode, owner, extended attributes or times moves it (see `is_clean`).
        self.settled_ctime_ns: dict[str, int] = {}
        args = iter(argv)
        for arg in args:
            if arg == "--workspace":
                self.workspace = next(args)
            elif arg == "--tmp":
                self.tmp = next(args)
            elif arg == "--kill-all":
                self.kill_all = True
            elif arg == "--run-uid":
                self.run_uid = int(next(args))
            elif arg == "--zygote":
                self.zygote_fd = int(next(args))
            else:
                raise SystemExit(f"runner: unknown argument {arg!r}")
        self.workspace = os.path.realpath(self.workspace)
        if self.kill_all and self.run_uid is None:
            raise SystemExit("runner: --kill-all needs --run-uid (it kills every process of that uid)")

    def argv(self) -> list[str]:
        out = ["--workspace", self.workspace, "--tmp", self.tmp]
        if self.run_uid is not None:
            out += ["--run-uid", str(self.run_uid)]
        return out


# -- identities -------------------------------------------------------------------


def set_dumpable(on: bool) -> None:
    """prctl(PR_SET_DUMPABLE): a non-dumpable process's memory and descriptors cannot
    be reached through /proc/PID or ptrace by other processes of its uid."""
    try:
        _libc().prctl(PR_SET_DUMPABLE, int(on), 0, 0, 0)
    except (OSError, AttributeError):
        pass


@functools.cache
def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def drop_to(uid: int) -> None:
    """Become ``uid`` for good (real, effective and saved ids, no supplementary
    groups): every capability is gone and cannot come back."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


@contextlib.contextmanager
def acting_as_run(cfg: Config) -> Iterator[None]:
    """Run the block with the run uid as effective uid (files it creates are the
    run's, the kernel checks the run's permissions, signals reach only runs); the
    real and saved uid stay root, so runs still cannot signal or trace this process."""
    if cfg.run_uid is None or os.geteuid() == cfg.run_uid:  # re-entrant: only the outermost switches back
        yield
        return
    os.setresgid(-1, cfg.run_uid, -1)
    os.setresuid(-1, cfg.run_uid, -1)
    try:
        yield
    finally:
        os.setresuid(-1, 0, -1)
        os.setresgid(-1, 0, -1)


# -- framing ----------------------------------------------------------------------


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
    data = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "backslashreplace")
    view = memoryview(FRAME.pack(len(data), len(blob)) + data + blob)
    while view:
        view = view[os.write(fd, view) :]


# -- compiled code -------------------------------------------------------------------


class CodeCache:
    """Compiled programs the host sends again and again (a verifier's harness, ~20 KB):
    the runner compiles one the second time it sees it and hands runs the marshalled
    code object, so each run skips ``compile()`` (~2.5 ms for the harness). Small
    programs and anything that does not compile are left to the run itself."""

    MIN_CHARS = 2048
    SIZE = 16

    def __init__(self) -> None:
        self._seen: dict[bytes, int] = {}
        self._compiled: dict[bytes, bytes] = {}  # insertion order = age

    def marshalled(self, source: str) -> bytes | None:
        if len(source) < self.MIN_CHARS:
            return None
        key = hashlib.sha256(source.encode("utf-8", "surrogatepass")).digest()
        if key in self._compiled:
            self._compiled[key] = self._compiled.pop(key)  # the newest now
            return self._compiled[key]
        if len(self._seen) > 4096:
            self._seen.clear()
        self._seen[key] = self._seen.get(key, 0) + 1
        if self._seen[key] < 2:
            return None
        try:
            data = marshal.dumps(compile(source, "<string>", "exec", dont_inherit=True))
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError, SystemError):
            return None  # the run compiles it and reports the error as python3 -c would
        self._compiled[key] = data
        if len(self._compiled) > self.SIZE:
            del self._compiled[next(iter(self._compiled))]
        return data


# -- the zygote: forks runs from a memory that never held a request ------------------


class Zygote:
    """The runner's end of the zygote: start it, ask it for a run, hear how it ended.

    A SOCK_SEQPACKET pair: the runner sends ``b"run"`` with four descriptors (the
    request pipe and the run's stdin, stdout and stderr), the zygote answers
    ``{"pid": N}`` (or ``{"error": ...}`` when it cannot fork) and, when the run
    exits, ``{"status": S}`` (a wait status)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.pid = 0
        self.sock: socket.socket | None = None
        self.code = CodeCache()

    def ensure(self) -> socket.socket:
        if self.sock is None:
            self.sock, self.pid = self._start()
        return self.sock

    def _start(self) -> tuple[socket.socket, int]:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:  # exec at once: the zygote must not inherit this process's memory
            try:
                devnull = os.open(os.devnull, os.O_RDWR)
                os.dup2(devnull, 0)  # the host's channel stays with the runner alone
                os.dup2(devnull, 1)
                os.set_inheritable(theirs.fileno(), True)
                os.closerange(3, theirs.fileno())
                os.closerange(theirs.fileno() + 1, 1 << 16)
                os.execv(
                    sys.executable,
                    [sys.executable, os.path.abspath(__file__), *self.cfg.argv(), "--zygote", str(theirs.fileno())],
                )
            finally:
                os._exit(127)
        theirs.close()
        return mine, pid

    def spawn(self, fds: list[int]) -> int:
        """Ask for a run with ``fds``; its pid. OSError when none can be started."""
        sock = self.ensure()
        try:
            socket.send_fds(sock, [b"run"], fds)
            answer = self.receive()
        except (OSError, EOFError) as e:
            self.stop()
            raise OSError(errno.EAGAIN, f"the zygote failed ({e}); it is restarted for the next run") from None
        if "pid" not in answer:
            raise OSError(errno.EAGAIN, answer.get("error", "no pid"))
        return int(answer["pid"])

    def receive(self) -> dict[str, Any]:
        assert self.sock is not None
        data = self.sock.recv(4096)
        if not data:
            raise EOFError("the zygote exited")
        return json.loads(data)

    def stop(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = 0


def zygote_main(cfg: Config) -> int:
    """The zygote's loop: one forked child per request, its pid, then its status."""
    set_dumpable(False)
    assert cfg.zygote_fd is not None
    sock = socket.socket(fileno=cfg.zygote_fd)
    # The first compile() of a process sets up the parser (~4 ms): pay it here, once.
    exec(compile("print", "<warm-up>", "exec", dont_inherit=True), {})  # noqa: S102 - our own constant
    # Everything alive now is shared with every run: freeze it out of the collector's
    # reach, so a collection in a run does not touch (and so copy) every page of it.
    gc.collect()
    gc.freeze()
    while True:
        try:
            _, fds, _, _ = socket.recv_fds(sock, 16, 4)
        except OSError:
            return 0
        if len(fds) != 4:  # the runner went away (or sent garbage): nothing to do but leave
            return 0
        try:
            pid = os.fork()
        except OSError as e:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"error": f"cannot start the process: {e}"}).encode())
            continue
        if pid == 0:
            _child(cfg, *fds)
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"pid": pid}).encode())
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        sock.send(json.dumps({"status": status}).encode())


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


def _exec_python(code: str | types.CodeType) -> int:
    """In the forked child: run ``code`` (source, or compiled by `CodeCache`) as
    ``python3 -c`` would and return the exit code."""
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    # typeshed marks these Final; a run that restores them must get its own streams back.
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr  # type: ignore[misc]
    sys.argv = ["-c"]
    sys.path[0] = ""
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    try:
        if isinstance(code, str):  # dont_inherit: not this file's `from __future__` imports
            code = compile(code, "<string>", "exec", dont_inherit=True)
        exec(code, main.__dict__)  # noqa: S102 - running it is the point
        status = 0
    except SystemExit as e:
        status = _exit_status(e.code)
    except BaseException as e:  # noqa: BLE001 - report it the way the interpreter does
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None  # drop this frame
        try:
            sys.excepthook(type(e), e.with_traceback(tb), tb)
        except BaseException:  # noqa: BLE001 - a traceback too deep to print
            os.write(2, f"{type(e).__name__}\n".encode())
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
    for hook in (
        getattr(sys.modules.get("threading"), "_shutdown", None),
        getattr(sys.modules.get("atexit"), "_run_exitfuncs", None),
    ):
        if hook is not None:
            try:
                hook()
            except BaseException:  # noqa: BLE001, S110 - a failing hook must not change the exit path
                pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            status = status or 120  # what CPython returns when flushing stdout fails
    return status


def _child(cfg: Config, req_fd: int, stdin_fd: int, out_fd: int, err_fd: int) -> None:
    """In the zygote's forked child: read the request, become the run, never return."""
    status = 127
    try:
        with open(req_fd, "rb") as f:
            data = f.read()
        req = {"python": marshal.loads(data[1:])} if data[:1] == b"m" else json.loads(data[1:])
        os.setsid()
        for target, fd in ((0, stdin_fd), (1, out_fd), (2, err_fd)):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the zygote's socket and anything else inherited
        try:  # make the run, not the runner, the OOM killer's first choice
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
        if cfg.run_uid is not None:
            drop_to(cfg.run_uid)  # which also makes it non-dumpable: leftovers of earlier runs cannot trace it
        else:
            set_dumpable(False)
        os.chdir(cfg.workspace)
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


def _kill_group(pid: int, cfg: Config) -> None:
    with acting_as_run(cfg):
        for kill, target in ((os.killpg, pid), (os.kill, pid)):
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _start(req: dict[str, Any], zygote: Zygote, *, with_stdin: bool) -> tuple[int, tuple[int, int, int]]:
    """Have the zygote fork the run; its pid and our ends of its pipes (stdin end -1 without stdin)."""
    opened: list[int] = []
    try:
        req_r, req_w = os.pipe()
        opened += [req_r, req_w]
        in_r, in_w = os.pipe() if with_stdin else (os.open(os.devnull, os.O_RDONLY), -1)
        opened += [in_r, in_w]
        out_r, out_w = os.pipe()
        opened += [out_r, out_w]
        err_r, err_w = os.pipe()
        opened += [err_r, err_w]
        program = _program(req, zygote.code)
        os.set_blocking(req_w, False)  # what fits in the pipe goes now, so the child finds it at once
        try:
            sent = os.write(req_w, program)
        except BlockingIOError:
            sent = 0
        pid = zygote.spawn([req_r, in_r, out_w, err_w])
    except OSError:
        for fd in opened:
            if fd >= 0:
                os.close(fd)
        raise
    for fd in (req_r, in_r, out_w, err_w):
        os.close(fd)
    os.set_blocking(req_w, True)
    try:
        with open(req_w, "wb") as f:  # the child reads it whole before doing anything else
            f.write(program[sent:])
    except BrokenPipeError:
        pass  # the child died first; its status says how
    return pid, (in_w, out_r, err_r)


def _program(req: dict[str, Any], cache: CodeCache) -> bytes:
    """What the child reads first: ``m`` + a marshalled code object, or ``j`` + JSON."""
    compiled = cache.marshalled(req["python"]) if "python" in req else None
    if compiled is not None:
        return b"m" + compiled
    fields = {"python": req["python"]} if "python" in req else {"argv": req["argv"]}
    return b"j" + json.dumps(fields).encode("utf-8", "surrogatepass")


def _clear_scratch_after_run(cfg: Config) -> None:
    """`clear_scratch`, whose failure is no failure of the run: a process that left the
    run's group may still be writing there. What it leaves makes the sandbox unclean,
    and the host's reset (which kills that process first) clears it."""
    try:
        clear_scratch(cfg)
    except OSError:
        cfg.settled_ctime_ns.clear()  # not clean until a reset settles every root again


def run(req: dict[str, Any], cfg: Config, zygote: Zygote) -> dict[str, Any]:
    """Run one request's code or command; the result fields of `ExecResult`."""
    cap = int(req["output_bytes"])
    timeout_s = float(req["timeout_s"])
    stdin = req.get("stdin")
    stdin_data = stdin.encode("utf-8", "surrogatepass") if stdin is not None else b""
    ooms_before = oom_kills()
    start = time.monotonic()
    try:
        pid, (in_w, out_r, err_r) = _start(req, zygote, with_stdin=stdin is not None)
    except OSError as e:
        # Most likely the process limit, used up by what earlier runs left behind:
        # the run's failure (data), not the sandbox's; reset() clears it.
        return {
            "stdout": "",
            "stderr": f"cannot start the process: {e}; reset the sandbox to clear leftovers\n",
            "exit_code": 126,
            "timed_out": False,
            "oom_killed": False,
            "duration_s": time.monotonic() - start,
            "stdout_truncated": False,
            "stderr_truncated": False,
        }
    try:
        status, timed_out, captures = _supervise(
            pid, start + timeout_s, in_w, stdin_data, out_r, err_r, cap, zygote, cfg
        )
    finally:
        _kill_group(pid, cfg)
        if cfg.kill_all:  # what left the group too: nothing of a run outlives it (module docstring)
            kill_others(cfg)
        remove_sysv_ipc(cfg)  # they last one run: see the module docstring
        _clear_scratch_after_run(cfg)
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


def _supervise(
    pid: int,
    deadline: float,
    in_w: int,
    stdin_data: bytes,
    out_r: int,
    err_r: int,
    cap: int,
    zygote: Zygote,
    cfg: Config,
) -> tuple[int, bool, tuple[Capture, Capture]]:
    """Feed stdin, read output and wait for the zygote to report the run's exit (or ``deadline``)."""
    captures = (Capture(out_r, cap), Capture(err_r, cap))
    by_fd = {c.fd: c for c in captures}
    assert zygote.sock is not None
    zfd = zygote.sock.fileno()
    poller = select.poll()
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    poller.register(zfd, select.POLLIN)
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
                _kill_group(pid, cfg)
                timed_out = True
                deadline = float("inf")
            if drain_until is not None and (all(c.eof for c in captures) or now >= drain_until):
                break
            limit = drain_until if drain_until is not None else deadline
            wait_s = max(0.0, min(limit - now, 3600.0))
            for fd, _ in poller.poll(wait_s * 1000):
                if fd in by_fd:
                    by_fd[fd].read()
                    if by_fd[fd].eof:
                        poller.unregister(fd)
                elif fd == in_w:
                    pending = feed(in_w, pending)
                    if not pending:
                        poller.unregister(in_w)
                        os.close(in_w)
                        in_w = -1
                elif fd == zfd:
                    poller.unregister(zfd)
                    try:
                        status = int(zygote.receive()["status"])
                    except (OSError, EOFError, KeyError, ValueError):
                        zygote.stop()  # restarted for the next run; this one counts as killed
                        status = signal.SIGKILL
                    _kill_group(pid, cfg)  # whatever it left behind in its group
                    drain_until = time.monotonic() + DRAIN_GRACE_S
    finally:
        for c in captures:
            os.close(c.fd)
        if in_w >= 0:
            os.close(in_w)
    return status if status is not None else signal.SIGKILL, timed_out, captures


# -- files (always acting as the run uid) ---------------------------------------------


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


def _open_regular(cfg: Config, rel: str, flags: int, *, create: bool) -> int:
    """A descriptor of the regular file ``rel``: never through a symlink, and never a
    FIFO, socket or device (O_NONBLOCK: opening a FIFO must not wait for a writer)."""
    dirs, name = _split(_inside(cfg, rel))
    dir_fd = _open_dir(cfg, dirs, create=create)
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a socket, or a FIFO nobody reads
            raise Refused(f"{rel!r} is not a regular file") from None
        raise
    finally:
        os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Refused(f"{rel!r} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def write_files(req: dict[str, Any], blob: bytes, cfg: Config) -> dict[str, Any]:
    offset = 0
    for rel, size in req["files"]:
        fd = _open_regular(cfg, rel, os.O_WRONLY | os.O_CREAT, create=True)
        with open(fd, "wb") as f:
            f.truncate(0)
            f.write(blob[offset : offset + size])
        offset += size
    return {"ok": True}


def read_file(req: dict[str, Any], cfg: Config) -> tuple[dict[str, Any], bytes]:
    limit = int(req.get("max_bytes", 1 << 62))
    fd = _open_regular(cfg, req["path"], os.O_RDONLY, create=False)
    with open(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Refused(f"{req['path']!r} is larger than {limit} bytes")
    return {"ok": True}, data


def snapshot(req: dict[str, Any], cfg: Config) -> tuple[dict[str, Any], bytes]:
    limit = int(req.get("max_bytes", 1 << 62))
    buf = io.BytesIO()

    def admit(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if member.islnk():  # a second name of a file archived before: restore takes no hard
            # links, so it goes in as a file of its own (as on the host), not left out
            member.type, member.linkname = tarfile.REGTYPE, ""
            member.size = os.lstat(os.path.join(cfg.workspace, member.name)).st_size
        # Checked before the member's data is read: a sparse file costs a run no
        # quota, but its archive would cost this container its full length in memory.
        if member.size + 3 * tarfile.BLOCKSIZE + buf.tell() > limit:
            raise Refused(f"the workspace archive is larger than {limit} bytes")
        return _snapshot_member(member)

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted(os.listdir(cfg.workspace)):
            tar.add(os.path.join(cfg.workspace, name), arcname=name, filter=admit)
    if buf.tell() > limit:
        raise Refused(f"the workspace archive is larger than {limit} bytes")
    return {"ok": True}, buf.getvalue()


def _snapshot_member(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    # FIFOs, sockets and devices are not workspace content (and a FIFO would block a reader).
    return member if member.isfile() or member.isdir() or member.issym() else None


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
        wipe(cfg.workspace, cfg)
        for member in members:
            _inside(cfg, os.path.dirname(member.name) or ".")
            member.uid, member.gid = os.geteuid(), os.getegid()
            member.uname = member.gname = ""
            member.mode &= 0o777  # no setuid/setgid/sticky bits from an archive
            tar.extract(member, cfg.workspace, set_attrs=not member.issym())
    return {"ok": True}


def wipe(root: str, cfg: Config, *, own_root: bool = True) -> None:
    """Remove everything under ``root`` (not root itself), even unwritable directories.
    ``own_root``: the root is the run uid's (its mode is set back and it is `settle`d);
    else it is the system's (/dev/shm), and only what the runs made in it goes."""
    if own_root:
        os.chmod(root, 0o755 if root != "/tmp" else 0o1777)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        empty_dir(fd)
    finally:
        os.close(fd)
    if own_root:
        settle(root, cfg)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def empty_dir(top: int) -> None:
    """Remove everything in the directory open at ``top``, directories a run made
    unreadable or unwritable too, never following a symlink. Iterative, one descriptor
    per level: a run can nest directories past Python's recursion limit (where
    ``shutil.rmtree``, recursive up to Python 3.12, raises RecursionError) and past PATH_MAX.
    Also the host's (`agentenv.sandboxes._workspace.wipe`)."""
    stack: list[tuple[int, str, list[str]]] = [(top, "", _sweep(top))]  # (fd, its name, subdirectories left)
    try:
        while stack:
            fd, name, subdirs = stack[-1]
            if subdirs:
                child = subdirs.pop()
                child_fd = _open_to_empty(fd, child)
                if child_fd >= 0:
                    stack.append((child_fd, child, []))  # before the sweep: closed if it fails
                    stack[-1][2].extend(_sweep(child_fd))
                continue
            stack.pop()
            if stack:  # an emptied subdirectory: remove it from its parent
                os.close(fd)
                os.rmdir(name, dir_fd=stack[-1][0])
    finally:
        for fd, _, _ in stack[1:]:
            os.close(fd)


def _open_to_empty(parent: int, name: str) -> int:
    """The directory ``name`` of ``parent``, opened and made writable by its owner; -1 when gone."""
    try:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except PermissionError:  # a run took its own permissions away: its owner may give them back
            os.chmod(name, 0o700, dir_fd=parent)
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return -1
    try:
        os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _sweep(fd: int) -> list[str]:
    """Unlink every entry but the subdirectories of the directory open at ``fd``; their names."""
    subdirs = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.name)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=fd)
    return subdirs


# The atime and mtime `settle` gives every root (the epoch): a run may utime() a
# directory it owns, and a time is as good a channel to the next episode as a file.
ROOT_TIME_NS = 0
# The extended attributes a run can set on a directory it owns: user.* and its POSIX
# ACLs (system.posix_acl_*). trusted.* and security.* need capabilities no run holds.
RUN_XATTRS = ("user.", "system.posix_acl_")


def run_xattrs(root: str) -> list[str]:
    """The names of the extended attributes on ``root`` that a run could have set."""
    try:
        names = os.listxattr(root, follow_symlinks=False)
    except OSError as e:
        if e.errno == errno.ENOTSUP:  # a filesystem without them holds none
            return []
        raise
    return [name for name in names if name.startswith(RUN_XATTRS)]


def settle(root: str, cfg: Config) -> None:
    """Take off ``root`` what emptying it leaves: the extended attributes a run can set
    and the times it can choose (the entries go whole, so only the roots need this).
    Needs the root's owner as effective uid; records the ctime this leaves."""
    for name in run_xattrs(root):
        os.removexattr(root, name, follow_symlinks=False)
    os.utime(root, ns=(ROOT_TIME_NS, ROOT_TIME_NS), follow_symlinks=False)
    cfg.settled_ctime_ns[root] = os.stat(root, follow_symlinks=False).st_ctime_ns


def is_settled(root: str, cfg: Config, mode: int | None) -> bool:
    """Whether ``root`` is as `settle` left it, empty, and with ``mode`` (unless None).
    Its ctime unchanged says nothing touched it since (not even a utime() back); it is
    read with O_NOATIME (as its owner), or reading it would move the atime checked here."""
    st = os.stat(root, follow_symlinks=False)
    if st.st_ctime_ns != cfg.settled_ctime_ns.get(root) or not st.st_atime_ns == st.st_mtime_ns == ROOT_TIME_NS:
        return False
    if (mode is not None and stat.S_IMODE(st.st_mode) != mode) or run_xattrs(root):
        return False
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NOATIME | os.O_CLOEXEC)
    try:
        return not os.listdir(fd)
    finally:
        os.close(fd)


def clear_scratch(cfg: Config) -> None:
    """Empty and settle /tmp and, in a container, the shared directories: they last one
    run (see the module docstring). The shared ones are root's: only the runner's own
    uid may set their times."""
    with acting_as_run(cfg):
        wipe(cfg.tmp, cfg)
        if cfg.kill_all:
            for root in SHARED_DIRS:
                if os.path.isdir(root):
                    wipe(root, cfg, own_root=False)
    if cfg.kill_all:
        for root in SHARED_DIRS:
            if os.path.isdir(root):
                settle(root, cfg)


def _run_processes(cfg: Config) -> list[int]:
    """Pids of every process of the run uid (zombies too: they still hold a pid)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status") as f:
                uid_line = next(line for line in f if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue  # gone meanwhile
        if int(uid_line.split()[1]) == cfg.run_uid:  # the real uid
            pids.append(int(d))
    return pids


def kill_others(cfg: Config, deadline_s: float = 2.0) -> None:
    """SIGKILL every process of the run uid, until none is left.

    By pid, not with kill(-1): the runner's real uid is root, and kill(-1) would
    reach the zygote too. Killed processes hold their pids until init reaps them,
    and a fork bomb refills what a pass missed: repeat until /proc shows none, so
    the next run finds its pids free."""
    end = time.monotonic() + deadline_s
    while True:
        pids = _run_processes(cfg)
        if not pids or time.monotonic() > end:
            return
        with acting_as_run(cfg):  # the run uid as effective uid: allowed to signal runs, and only runs
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.002)


def is_clean(cfg: Config) -> bool:
    """Whether the sandbox is as a reset leaves it: no process of the run uid, no SysV
    IPC object, and the workspace, /tmp and the shared directories empty and `settle`d
    (no extended attribute a run can set, the fixed times, nothing changed since),
    with their modes as set. Then the host may skip the reset before the next episode
    (a verification run leaves nothing)."""
    if not cfg.kill_all:
        return False
    try:
        if _run_processes(cfg) or sysv_ipc_objects():
            return False
        with acting_as_run(cfg):  # their owner: O_NOATIME is the owner's
            if not all(is_settled(root, cfg, mode) for root, mode in ((cfg.workspace, 0o755), (cfg.tmp, 0o1777))):
                return False
        return all(is_settled(root, cfg, None) for root in SHARED_DIRS if os.path.isdir(root))
    except OSError:  # a run made a directory unreadable: only a reset knows what to do
        return False


# Writable by every process and as long-lived as the container (Docker mounts them):
# what a run leaves there would reach the next episode unless reset clears it too.
SHARED_DIRS = ("/dev/shm", "/dev/mqueue")


# Where the kernel lists the SysV IPC objects of this IPC namespace, and the call that removes each kind.
SYSV_IPC = (("/proc/sysvipc/shm", "shmctl"), ("/proc/sysvipc/msg", "msgctl"), ("/proc/sysvipc/sem", "semctl"))
IPC_RMID = 0


def sysv_ipc_objects() -> list[tuple[str, int]]:
    """(the call that removes it, its id) for every SysV IPC object of this IPC namespace.
    Read raw (twice per run: a text file object costs three times as much)."""
    found = []
    for path, ctl in SYSV_IPC:
        chunks = []
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                while chunk := os.read(fd, 1 << 16):
                    chunks.append(chunk)
            finally:
                os.close(fd)
        except OSError:
            continue  # a kernel without SysV IPC has nothing to remove
        for line in b"".join(chunks).splitlines()[1:]:  # after the column names
            fields = line.split()
            if len(fields) > 1 and fields[1].isdigit():
                found.append((ctl, int(fields[1])))
    return found


def remove_sysv_ipc(cfg: Config) -> None:
    """IPC_RMID every SysV IPC object (see the module docstring). Only in a container
    (``--kill-all``): on a host the namespace is everyone's."""
    if not cfg.kill_all:
        return
    objects = sysv_ipc_objects()
    if not objects:
        return
    libc = _libc()
    with acting_as_run(cfg):  # the run uid created them all, so it may remove them; runs hold nothing else
        for ctl, ident in objects:
            if ctl == "semctl":
                libc.semctl(ident, 0, IPC_RMID)
            else:
                getattr(libc, ctl)(ident, IPC_RMID, None)  # one gone since it was listed just fails


def reset(cfg: Config) -> dict[str, Any]:
    if cfg.kill_all:
        kill_others(cfg)
        remove_sysv_ipc(cfg)  # after the kill: a segment is freed when its last holder is gone
    with acting_as_run(cfg):
        wipe(cfg.workspace, cfg)
    clear_scratch(cfg)  # in a container the shared directories too: they are this sandbox's alone
    return {"ok": True}


# -- the loop ---------------------------------------------------------------------


def handle(req: dict[str, Any], blob: bytes, cfg: Config, zygote: Zygote) -> tuple[dict[str, Any], bytes]:
    op = req.get("op")
    if op == "run":
        return {"ok": True, **run(req, cfg, zygote), "clean": is_clean(cfg)}, b""
    if op == "ping":
        return {
            "ok": True,
            "protocol": PROTOCOL,
            "pid": os.getpid(),
            "zygote": zygote.pid,
            "python": sys.version.split()[0],
        }, b""
    if op == "reset":
        return reset(cfg), b""  # it acts as the run uid where it must, and as root on root's directories
    with acting_as_run(cfg):
        if op == "write_files":
            return write_files(req, blob, cfg), b""
        if op == "read_file":
            return read_file(req, cfg)
        if op == "snapshot":
            return snapshot(req, cfg)
        if op == "restore":
            return restore(blob, cfg), b""
    raise ValueError(f"unknown op {op!r}")


def _error(e: BaseException) -> dict[str, Any]:
    if isinstance(e, FileNotFoundError):
        kind = "not_found"
    elif isinstance(e, Refused) or (isinstance(e, OSError) and e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO)):
        kind = "refused"  # ELOOP / ENOTDIR: O_NOFOLLOW met a symlink; ENXIO: a socket
    else:
        kind = "error"
    return {"ok": False, "kind": kind, "message": f"{type(e).__name__}: {e}"}


def main(argv: list[str]) -> int:
    cfg = Config(argv)
    if cfg.zygote_fd is not None:
        return zygote_main(cfg)
    set_dumpable(False)
    if cfg.run_uid is not None:
        if os.getuid() != 0:
            raise SystemExit(f"runner: --run-uid needs the runner to start as root (it runs as uid {os.getuid()})")
        os.setgroups([])  # the root group must not come along when acting as the run uid
    os.environ.clear()
    os.environ.update(CHILD_ENV)
    os.umask(0o022)
    os.chdir(cfg.workspace)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    zygote = Zygote(cfg)
    zygote.ensure()  # before the first request: its memory must never hold one
    if cfg.kill_all:  # in a fresh container, where nothing ran yet: the roots as a reset leaves them
        with acting_as_run(cfg):
            settle(cfg.workspace, cfg)
        clear_scratch(cfg)
    while True:
        frame = read_frame(0)
        if frame is None:  # the host went away
            zygote.stop()
            return 0
        req, blob = frame
        try:
            header, out = handle(req, blob, cfg, zygote)
        except Exception as e:  # noqa: BLE001 - every failure goes back to the host as data
            header, out = _error(e), b""
        write_frame(1, header, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
