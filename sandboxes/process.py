"""The process backend: untrusted code in a local subprocess, for machines without Docker.

Weaker than the Docker backend, and said plainly here. Each run is a fresh process
started by a small launcher (`agentenv.sandboxes._process_launch`); what it gets
depends on what the host allows, and `ProcessSandbox.isolation` says which applied.

Protects against, when the launcher can create namespaces (as root, or through an
unprivileged user namespace; `Isolation.namespaces`):

- **Runaway processes**: a PID namespace per run whose init the kernel tears down
  when the command exits or the wall-clock timeout kills the launcher's process
  group, so daemonised grandchildren and processes that moved to new sessions
  die too; no zombies remain. `ps` and ``/proc`` show only the run's own processes.
- **Network**: with ``network="isolate"`` a fresh network namespace with only a
  downed loopback: no egress, no DNS, no reaching servers on the host's 127.0.0.1.
  Raw sockets also need CAP_NET_RAW, which the command never holds.
- **Host files**: a private ``/tmp`` (also at ``/var/tmp``, ``/dev/shm``,
  ``/run/lock``) emptied after every run; ``/root``, ``/home`` and the caller's home are
  covered by empty tmpfs mounts, with the workspace and the base Python
  installation bound back in read-only (workspace: read-write) where they live under them.
  Where that needs a mount point inside the private /tmp (a sandbox made under the
  host's /tmp), the launcher makes it by directory descriptor without following a
  symlink, and as root the private /tmp is root's with mode 1770 and the sandbox's
  group: runs write there but cannot rename or replace what the launcher made, so
  they can neither lead it (root) to another place on the host nor make a later
  run fail to start (without root, what a run put in the way fails the next run as
  data, exit 126, until `reset`).
- **SysV IPC and the next run**: an IPC namespace per run, gone with it, so shared
  memory segments, message queues and semaphore sets last one run: no data and no
  memory is carried to the next.
- **The host's Python packages, agentenv's among them** (its envs ship the answer
  keys: hidden tests, reference solutions; `Isolation.host_python_hidden`): empty
  read-only tmpfs mounts cover the venv, every site-/dist-packages directory (and
  ``.pth`` addition) of the interpreters on the run's PATH and of the caller, the
  caller's non-stdlib ``sys.path`` (PYTHONPATH) and agentenv's package directories
  with their source checkout (an editable install's repository). Covered, not
  merely left off ``sys.path``: ``open()`` on the answer key's file fails too. Runs
  get the stdlib only, no third-party package (the Docker image is for those).
- **Devices** (`Isolation.minimal_dev`): /dev is a fresh read-only tmpfs holding
  ``null``, ``zero``, ``full``, ``random``, ``urandom`` and ``tty`` (bound from the
  host's), the ``fd``/``stdin``/``stdout``/``stderr`` links and the private
  ``shm``. No fuse, tun, kvm, kmsg, block devices, consoles, and no ptys (no
  ``/dev/pts``: ``os.openpty`` fails).
- **Privilege**: as root, each sandbox runs as its own unnamed uid (allocated
  under a lock, never shared by two live sandboxes), so it holds no capability,
  cannot write /etc, /usr or other sandboxes' workspaces, and RLIMIT_NPROC counts
  exactly its own processes. ``no_new_privs`` stops setuid binaries from raising it.
  The workspace and /tmp are tmpfs mounts sized by `Limits.workspace_mb` /
  `Limits.tmp_mb` (mounted in the host's mount namespace and removed by `close`,
  by garbage collection or at exit; a SIGKILLed host process leaves them behind).
  An unnamed uid per sandbox, not ``nobody``: sandboxes sharing ``nobody`` could
  read each other's workspaces and would share one RLIMIT_NPROC count.

Always, namespaces or not: the private /tmp is scratch that lasts one run, emptied
after each (a snapshot keeps the workspace only, so a resumed episode finds what
the original found at that turn; as in the Docker backend); `reset` gives the
workspace and /tmp back their owners and modes before emptying them (a run's
``chmod('.', 0)`` does not reach the next episode), and takes off those two
directories themselves what a run can leave there: their extended attributes
(``user.*``, POSIX ACLs) and their times (set to the epoch), channels to the next
episode otherwise; `snapshot` archives only what `restore` takes back (regular files,
directories, symlinks that stay inside), walking by directory descriptor, and is
refused with `SandboxError` past twice the workspace size (sparse files) or for a
path too long to extract; a scrubbed environment (PATH, HOME=workspace, LANG,
PYTHONDONTWRITEBYTECODE; nothing of the caller's ``os.environ``, so no PYTHONPATH),
rlimits set before exec (RLIMIT_AS = memory_mb, RLIMIT_CPU = timeout + 1 s,
RLIMIT_FSIZE = the larger disk limit, RLIMIT_NPROC = pids, RLIMIT_CORE = 0), a
wall-clock timeout that SIGKILLs the process group, output read in chunks and
capped per stream, and workspace file access that refuses ``..``, absolute paths
and symlinks. Python is the caller's *base* interpreter (``sys._base_executable``,
never a venv's), run with ``-I`` by `run_python`; ``python``/``python3`` first on
PATH are links to it. Launcher failures reach the caller on a pipe the command
never holds, so a run cannot pass itself off as an infrastructure failure.

Where the kernel has seccomp filters (`Isolation.userns_denied`), also always: no
new **user namespaces**. One would give the command every capability over fresh
namespaces: mounts (fuse, overlay), network devices (tun), nftables, and the
kernel code behind them, the door to many recent local privilege escalations.
A seccomp filter installed just before exec makes ``unshare``/``clone`` with
CLONE_NEWUSER fail with EPERM, and ``clone3`` fail with ENOSYS (its flags are out
of a filter's reach; libc then falls back to ``clone``). Chosen over setting
``user.max_user_namespaces`` to 0, which would need each run to live in a user
namespace of its own (as root, runs need none) and would not hold without
namespaces. The filter is a probe result, not an assumption: the probe checks
that it does refuse; x86_64 and aarch64 are covered, with their 32-bit ABIs.

Does NOT protect against:

- **The shared kernel.** A kernel exploit escapes: the seccomp filter only takes
  user namespaces and the kernel keyrings away (``add_key``, ``request_key`` and
  ``keyctl`` fail with EPERM, as under Docker's default profile: a uid's keyrings
  would outlive `reset`); every other system call (io_uring, bpf, userfaultfd,
  perf_event_open...) is the host's to allow, and there is no separate
  kernel (gVisor, a VM). Use the Docker backend, or better, for code that is
  actively hostile rather than merely buggy.
- **Reading world-readable host files** outside what is covered: the filesystem
  is the host's, read-only only where permissions make it so. What the caller's
  uid can read elsewhere, the sandbox can read (as root: whatever ``others`` may
  read): /etc, /usr, /sys, /proc's system-wide files, and any other copy of the
  tasks or the repository a host keeps (a second checkout, a built wheel, a
  dataset directory). Keep those out of world-readable places.
- **Memory as a total.** RLIMIT_AS caps each process's address space, not the sum
  over processes (``pids`` x ``memory_mb`` at worst), and it also counts
  reserved-but-unused address space, so runtimes that reserve big arenas (the
  JVM, some Go and CUDA programs) fail under it. No cgroup is used.
- **Out-of-memory detection is inferred**: ``oom_killed`` is set when the command
  died of SIGKILL that this module did not send (the kernel's OOM killer sends
  that), or exited non-zero with an allocation failure at the end of stderr
  (Python's ``MemoryError``, ``Cannot allocate memory``, ``std::bad_alloc``).
- **CPU share**: `Limits.cpus` is not enforced (no cgroup); RLIMIT_CPU bounds
  the CPU seconds of each process only.

Without namespaces (non-root with user namespaces disabled, or a seccomp policy
that forbids ``unshare``), only the "always" lists hold: processes can escape the
run through a new session (as root they are still killed by uid after each run),
``/tmp`` is shared (``TMPDIR`` points to a private one), the network is the
host's (``network="isolate"`` then raises), /dev is the host's (its permissions
decide), the venv, the site-packages and the checkout stay readable (just not on
the run's ``sys.path``: ``import agentenv`` fails, ``open()`` on its files does
not), and as non-root RLIMIT_NPROC counts all of the caller's processes, so it is
set to their current number plus ``pids``. Inside namespaces entered without root,
where the kernel refuses the run a fresh ``/proc``, the host's stays, and the
caller's own processes' ``/proc/PID/root`` leads around the covers.
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import math
import os
import pwd
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentenv.sandboxes import _workspace
from agentenv.sandboxes._capture import capture
from agentenv.sandboxes._host_python import PRIVATE_TMP_AT, RUN_PATH, covers_for, host_python, link_interpreter
from agentenv.sandboxes._mounts import mount_tmpfs, unmount
from agentenv.sandboxes.base import ExecResult, Limits, SandboxError, SandboxInfraError

__all__ = ["Isolation", "ProcessSandbox"]

logger = logging.getLogger("agentenv.sandboxes")

Network = Literal["auto", "isolate", "host"]
_LAUNCHER = str(Path(__file__).with_name("_process_launch.py"))
_UID_LOCK_DIR = "/run/agentenv-sandbox-uids"
_OOM_PATTERN = re.compile(rb"(?m)^MemoryError\b|Cannot allocate memory|std::bad_alloc|[Oo]ut of memory")


@dataclass(frozen=True)
class Isolation:
    """What a `ProcessSandbox` could put in place on this host (see the module docstring)."""

    namespaces: bool
    """PID, mount, IPC and UTS namespaces per run: runaway processes die with the run, private /tmp."""
    network_isolated: bool
    """A network namespace per run: no egress, no DNS, no host loopback."""
    dedicated_uid: int | None
    """The sandbox's own uid (the caller is root), or None: it runs as the caller."""
    disk_quota: bool
    """Workspace and /tmp are size-limited tmpfs mounts; otherwise only RLIMIT_FSIZE (per file)."""
    host_python_hidden: bool = False
    """The venv, every site-/dist-packages directory of the host's Pythons and agentenv's
    source checkout are covered by empty tmpfs mounts: runs see the stdlib only (needs namespaces)."""
    minimal_dev: bool = False
    """/dev is a fresh tmpfs with null, zero, full, random, urandom, tty only (needs namespaces)."""
    userns_denied: bool = False
    """A seccomp filter refuses new user namespaces (``unshare -U``, ``clone(CLONE_NEWUSER)``)
    and the kernel keyrings (``add_key``, ``request_key``, ``keyctl``)."""
    why_not: str = ""
    """Why one of the properties above is missing, when one is."""


class ProcessSandbox:
    """A workspace directory and fresh subprocesses confined as well as the host allows.

    >>> with ProcessSandbox(Limits(timeout_s=5)) as sb:
    ...     sb.run_python("print(6 * 7)").stdout
    '42\\n'
    """

    limits: Limits
    isolation: Isolation

    def __init__(self, limits: Limits | None = None, *, network: Network = "auto") -> None:
        if network not in ("auto", "isolate", "host"):
            raise SandboxError(f"expected network 'auto', 'isolate' or 'host', got {network!r}")
        self.limits = limits if limits is not None else Limits()
        support = _host_support()
        if network == "isolate" and not support.namespaces:
            raise SandboxError(
                f"network='isolate' needs a network namespace, unavailable here: {support.why}; "
                "use the Docker backend or network='host'"
            )
        if network == "auto" and not support.namespaces:
            logger.warning("process sandbox: the network is NOT isolated (%s)", support.why)
        python = host_python()
        self._closed = False
        self._interrupts = 0  # resets and closes so far: one during a run killed it, not the command
        self._held = _Held(root=tempfile.mkdtemp(prefix="agentenv-sandbox-"))
        self._root = self._held.root
        # What is held is released by close(), or when garbage-collected, or at exit.
        self._finalizer = weakref.finalize(self, _release, self._held)
        try:
            uid = _allocate_uid(self._held) if os.geteuid() == 0 else None
            self.workspace = os.path.join(self._root, "workspace")
            self._tmp = os.path.join(self._root, "tmp")
            self._bin = os.path.join(self._root, "bin")
            self._dirs = _writable_dirs(self.workspace, self._tmp, uid)
            quota = self._make_dirs(uid)
            link_interpreter(self._bin, python.executable)
        except BaseException:
            self.close()
            raise
        covers, visible = covers_for(python, self._root)
        visible = visible if support.namespaces else ""  # without namespaces nothing is covered, as said
        if visible:
            logger.warning("process sandbox: host Python packages stay visible: %s", visible)
        self.isolation = Isolation(
            namespaces=support.namespaces,
            network_isolated=support.namespaces and network != "host",
            dedicated_uid=uid,
            disk_quota=quota,
            host_python_hidden=support.namespaces and not visible,
            minimal_dev=support.minimal_dev,
            userns_denied=support.seccomp,
            why_not="; ".join(w for w in (support.why, visible) if w),
        )
        self._python = python.executable
        self._covers = covers
        self._env = _scrubbed_env(self.workspace, self._bin, None if support.namespaces else self._tmp)

    # --- setup ---------------------------------------------------------------------

    def _make_dirs(self, uid: int | None) -> bool:
        """Create workspace and /tmp (see `_writable_dirs`); as root, as tmpfs mounts. True if sized."""
        os.chmod(self._root, 0o711)  # the sandbox uid must traverse it to reach its workspace
        for d in self._dirs:
            os.mkdir(d.path, 0o700)
        if uid is None:
            return False
        quota = True
        limits = {self.workspace: self.limits.workspace_mb, self._tmp: self.limits.tmp_mb}
        for d in self._dirs:
            owner_uid, owner_gid = d.owner or (uid, uid)  # every one has an owner when there is a sandbox uid
            try:
                mount_tmpfs(d.path, size_mb=limits[d.path], uid=owner_uid, gid=owner_gid, mode=d.mode)
                self._held.mounts.append(d.path)
            except OSError as exc:
                logger.warning("process sandbox: no tmpfs at %s (%s); disk use is limited per file only", d.path, exc)
                d.set_owner_and_mode()
                quota = False
        return quota

    # --- running -------------------------------------------------------------------

    def run_python(self, code: str, *, timeout_s: float | None = None, stdin: str | None = None) -> ExecResult:
        """Run ``code`` in isolated mode (``-I``) in the workspace, with the base interpreter
        of this one (never a venv: runs get the standard library only)."""
        if len(code.encode()) > 100_000:  # beyond what one argv string may hold
            self._put_private("main.py", code.encode())
            return self.run(
                [
                    self._python,
                    "-I",
                    "/tmp/.agentenv/main.py"
                    if self.isolation.namespaces
                    else os.path.join(self._tmp, ".agentenv", "main.py"),
                ],
                timeout_s=timeout_s,
                stdin=stdin,
            )
        return self.run([self._python, "-I", "-c", code], timeout_s=timeout_s, stdin=stdin)

    def run(
        self, command: str | Sequence[str], *, timeout_s: float | None = None, stdin: str | None = None
    ) -> ExecResult:
        """Run ``command`` (a string goes to ``/bin/sh -c``) as a fresh process in the workspace."""
        self._check_open()
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else [str(a) for a in command]
        if not argv:
            raise SandboxError("expected a command, got an empty sequence")
        timeout = self.limits.timeout_s if timeout_s is None else timeout_s
        if timeout <= 0:
            raise SandboxError(f"expected timeout_s > 0, got {timeout_s}")
        started, interrupts = time.monotonic(), self._interrupts
        # The launcher's own failures come back on a pipe the command never holds:
        # stderr and the exit status are the command's to forge.
        report_r, report_w = os.pipe()
        try:
            try:
                proc = self._spawn(argv, timeout, stdin is not None, report_w)
            finally:
                os.close(report_w)
            killer = functools.partial(self._kill_run, proc)
            got = capture(proc, None if stdin is None else stdin.encode(), self.limits.output_bytes, timeout, killer)
            killed_late = _wait_rest(proc, started + timeout, killer)  # always: it reaps the launcher
            setup_failure = _read_report(report_r)
        finally:
            os.close(report_r)
        if setup_failure:
            raise SandboxInfraError(setup_failure)
        if self._interrupts != interrupts:  # not the command's doing, nor an OOM kill
            raise SandboxInfraError("the sandbox was reset or closed (from another thread) during the run")
        timed_out = got.timed_out or killed_late
        if not self.isolation.namespaces:
            self._kill_strays()
        self._clear_tmp()
        return _result(proc.returncode, got, timed_out, time.monotonic() - started)

    def _spawn(self, argv: list[str], timeout_s: float, with_stdin: bool, report_fd: int) -> subprocess.Popen[bytes]:
        config = self._launch_config(argv, timeout_s, report_fd)
        try:
            return subprocess.Popen(
                [sys.executable, "-I", "-S", _LAUNCHER, json.dumps(config)],
                stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(report_fd,),
                env=self._env,
                cwd=self._root,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise SandboxInfraError(f"cannot start the sandbox launcher: {exc}") from exc

    def _launch_config(self, argv: list[str], timeout_s: float, report_fd: int) -> dict[str, Any]:
        iso = self.isolation
        return {
            "mode": "run",
            "argv": argv,
            "env": self._env,
            "cwd": self.workspace,
            "uid": iso.dedicated_uid,
            "gid": iso.dedicated_uid,
            "namespaces": iso.namespaces,
            "userns": iso.namespaces and os.geteuid() != 0,
            "isolate_net": iso.network_isolated,
            "tmp": self._tmp,
            "private_tmp_at": list(PRIVATE_TMP_AT),
            "hide": _homes(),
            "reveal": [[self.workspace, True], [self._bin, False]] + [[p, False] for p in host_python().dirs],
            "cover": self._covers,
            "minimal_dev": iso.minimal_dev,
            "deny_userns": iso.userns_denied,
            "rlimits": self._rlimits(timeout_s),
            "report_fd": report_fd,
        }

    def _rlimits(self, timeout_s: float) -> dict[str, int]:
        mib = 1024 * 1024
        pids = self.limits.pids
        if self.isolation.dedicated_uid is None:
            # RLIMIT_NPROC counts every task of the real uid, not just this sandbox's.
            pids += _tasks_of_uid(os.getuid())
        return {
            "RLIMIT_AS": self.limits.memory_mb * mib,
            "RLIMIT_CPU": math.ceil(timeout_s) + 1,  # a backstop: the wall clock kills first
            "RLIMIT_FSIZE": max(self.limits.workspace_mb, self.limits.tmp_mb) * mib,
            "RLIMIT_NPROC": pids,
            "RLIMIT_CORE": 0,
        }

    def _clear_tmp(self) -> None:
        """Empty /tmp after a run: it lasts one run (see the module docstring)."""
        tmp = self._dirs[1]
        try:
            tmp.set_owner_and_mode()
            _workspace.wipe(tmp.path)
        except OSError as exc:  # only a stray without a PID namespace races this; reset retries
            logger.warning("process sandbox: cannot empty /tmp after a run: %s", exc)

    def _kill_run(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the run's process group; with namespaces that takes the whole PID namespace."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if not self.isolation.namespaces:
            self._kill_strays()

    def _kill_strays(self) -> None:
        """Without a PID namespace, processes that left the group are found only by uid."""
        uid = self.isolation.dedicated_uid
        if uid is None:
            return  # runs as the caller: nothing tells its strays from the caller's processes
        config = {"mode": "killall", "uid": uid}
        subprocess.run(
            [sys.executable, "-I", "-S", _LAUNCHER, json.dumps(config)],
            env=self._env,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    # --- files ---------------------------------------------------------------------

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Write files into the workspace (UTF-8 for str), creating directories."""
        self._check_open()
        for path, content in files.items():
            data = content.encode() if isinstance(content, str) else bytes(content)
            _workspace.write_file(self.workspace, path, data, self._owner)

    def read_file(self, path: str) -> bytes:
        """Read a workspace file; symlinks and non-regular files are refused."""
        self._check_open()
        return _workspace.read_file(self.workspace, path)

    def snapshot(self) -> bytes:
        """The workspace as an uncompressed tar archive; `SandboxError` when what a run left
        cannot be archived (past the size cap, a path too long to extract). Not /tmp,
        which lasts one run, so a resume finds what the original found."""
        self._check_open()
        return _workspace.snapshot_tar(self.workspace, _workspace.max_archive_bytes(self.limits))

    def restore(self, archive: bytes) -> None:
        """Replace the workspace with a `snapshot`; members that would escape it are refused.
        The workspace gets its owner and mode back too (a run may have chmod-ed it to 0):
        a resumed episode finds what the original found."""
        self._check_open()
        self._dirs[0].set_owner_and_mode()  # first: without root, emptying a 0500 workspace fails
        _workspace.restore_tar(self.workspace, archive, self._owner)

    def _put_private(self, name: str, data: bytes) -> None:
        _workspace.write_file(self._tmp, f".agentenv/{name}", data, self._owner)

    @property
    def _owner(self) -> tuple[int, int] | None:
        uid = self.isolation.dedicated_uid
        return None if uid is None else (uid, uid)

    # --- lifecycle -----------------------------------------------------------------

    def reset(self) -> None:
        """Kill anything left from earlier runs, give the workspace and /tmp back their
        owners and modes (a run may chmod its workspace to 0) and empty them."""
        self._check_open()
        self._interrupts += 1
        self._kill_strays()
        for d in self._dirs:
            d.set_owner_and_mode()
            _workspace.wipe(d.path)

    def close(self) -> None:
        """Kill leftovers, unmount and delete the workspace, free the uid. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._interrupts += 1
        if getattr(self, "isolation", None) is not None:
            self._kill_strays()
        self._finalizer()

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("this sandbox is closed; create a new one")

    def __enter__(self) -> ProcessSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else self.workspace
        return f"ProcessSandbox({state}, {self.isolation})" if hasattr(self, "isolation") else "ProcessSandbox()"


# --- results -------------------------------------------------------------------------


def _wait_rest(proc: subprocess.Popen[bytes], deadline: float, kill: Any) -> bool:
    """Wait for the launcher after its pipes closed; True if it had to be killed at the deadline."""
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
        return False
    except subprocess.TimeoutExpired:
        kill()
        proc.wait()
        return True


def _read_report(fd: int) -> str:
    """What the launcher wrote on the report pipe: empty unless it failed to set up.

    Read without blocking: init may still hold the write end for a moment after a
    timeout kill, and a failure is written before the launcher exits.
    """
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 4096).decode(errors="replace").strip()
    except BlockingIOError:
        return ""


def _result(returncode: int, got: Any, timed_out: bool, duration_s: float) -> ExecResult:
    signalled = returncode < 0
    timed_out = timed_out or returncode == -signal.SIGXCPU
    return ExecResult(
        stdout=got.stdout.decode(errors="replace"),
        stderr=got.stderr.decode(errors="replace"),
        exit_code=None if signalled or timed_out else returncode,
        timed_out=timed_out,
        oom_killed=not timed_out and _looks_out_of_memory(returncode, got.stderr_tail),
        duration_s=duration_s,
        stdout_truncated=got.stdout_truncated,
        stderr_truncated=got.stderr_truncated,
    )


def _looks_out_of_memory(returncode: int, stderr_tail: bytes) -> bool:
    """An inference, see the module docstring: SIGKILL we did not send, or an allocation failure."""
    if returncode == -signal.SIGKILL:
        return True
    return returncode != 0 and _OOM_PATTERN.search(stderr_tail) is not None


# --- host facts ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Support:
    namespaces: bool
    minimal_dev: bool
    seccomp: bool
    why: str


@functools.cache
def _host_support() -> _Support:
    """Probe once what the launcher can put in place here: namespaces, the minimal /dev
    in them, and a seccomp filter that does refuse a new user namespace."""
    if _probe(namespaces=True, minimal_dev=True, deny_userns=True) is None:
        return _Support(True, True, True, "")  # the usual case: one probe
    dev_why = _probe(namespaces=True, minimal_dev=True, deny_userns=False)
    namespaces_why = dev_why and _probe(namespaces=True, minimal_dev=False, deny_userns=False)
    seccomp_why = _probe(namespaces=False, minimal_dev=False, deny_userns=True)
    if dev_why is None and seccomp_why is None:  # each works alone, not together
        seccomp_why = "the seccomp filter fails inside the namespaces"
    reasons = {"namespaces": namespaces_why, "/dev": None if namespaces_why else dev_why, "seccomp": seccomp_why}
    return _Support(
        namespaces_why is None,
        dev_why is None,
        seccomp_why is None,
        "; ".join(f"{what}: {why}" for what, why in reasons.items() if why),
    )


# Exits 0 only if a new user namespace is refused (as it is under the launcher's filter).
_USERNS_REFUSED = (
    "import ctypes, errno, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.unshare(0x10000000) == 0 or ctypes.get_errno() != errno.EPERM:\n"
    "    sys.exit('the seccomp filter did not refuse unshare(CLONE_NEWUSER)')\n"
)


def _probe(*, namespaces: bool, minimal_dev: bool, deny_userns: bool) -> str | None:
    """Run a trivial command the way runs are started; None if it worked, else why not."""
    argv = [host_python().executable, "-I", "-S", "-c", _USERNS_REFUSED] if deny_userns else ["true"]
    config = {
        "mode": "run",
        "argv": argv,
        "env": {"PATH": "/usr/bin:/bin"},
        "cwd": "/",
        "uid": None,
        "gid": None,
        "namespaces": namespaces,
        "userns": namespaces and os.geteuid() != 0,
        "isolate_net": namespaces,
        "tmp": "/tmp",
        "private_tmp_at": [],
        "hide": [],
        "reveal": [],
        "cover": [],
        "minimal_dev": minimal_dev,
        "deny_userns": deny_userns,
        "rlimits": {},
        "report_fd": None,
    }
    try:
        probe = subprocess.run(
            [sys.executable, "-I", "-S", _LAUNCHER, json.dumps(config)],
            capture_output=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the probe failed: {exc}"
    if probe.returncode == 0:
        return None
    return probe.stderr.decode(errors="replace").strip() or f"exit status {probe.returncode}"


def _scrubbed_env(workspace: str, bindir: str, tmpdir: str | None) -> dict[str, str]:
    """The whole environment of sandboxed code: nothing is inherited from ``os.environ``."""
    env = {"PATH": ":".join((bindir, *RUN_PATH)), "HOME": workspace, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    if tmpdir is not None:  # without a private /tmp, point temp files somewhere private
        env["TMPDIR"] = tmpdir
    return env


def _homes() -> list[str]:
    homes = {"/root", "/home", os.path.expanduser("~")}
    try:
        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    return sorted(h for h in homes if h not in ("/", "") and os.path.isdir(h))


def _tasks_of_uid(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue  # exited meanwhile
    return count


def _allocate_uid(held: _Held) -> int:
    """A uid no account and no other live sandbox uses, held by a lock until close."""
    os.makedirs(_UID_LOCK_DIR, mode=0o700, exist_ok=True)
    low, high = _uid_range()
    for _ in range(200):
        uid = random.randrange(low, high)
        if _uid_has_account(uid):
            continue
        fd = os.open(os.path.join(_UID_LOCK_DIR, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        held.uid_lock = fd
        return uid
    raise SandboxInfraError(f"no free sandbox uid in [{low}, {high}) after 200 tries")


def _uid_range() -> tuple[int, int]:
    """Unnamed uids this (possibly user-namespaced) root can switch to."""
    with open("/proc/self/uid_map") as f:
        for line in f:
            start, _, count = (int(x) for x in line.split())
            if start <= 100_000 and start + count >= 1_100_000:
                return (100_000, 1_100_000)
    return (20_000, 60_000)  # a user namespace of 65536 ids, as Docker's userns-remap gives


def _uid_has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


@dataclass(frozen=True)
class _WritableDir:
    """The workspace or /tmp of a sandbox: its path, and the owner and mode a reset gives it back."""

    path: str
    owner: tuple[int, int] | None  # (uid, gid); None: the caller's, left as it is
    mode: int

    def set_owner_and_mode(self) -> None:
        if self.owner is not None:
            os.chown(self.path, *self.owner)
        os.chmod(self.path, self.mode)


def _writable_dirs(workspace: str, tmp: str, uid: int | None) -> tuple[_WritableDir, _WritableDir]:
    """With a sandbox uid: the workspace is that uid's (0700); /tmp is root's with mode 1770
    and the sandbox's group, so runs write there but cannot rename or remove what root
    made in it (the launcher's mount points, see `_process_launch`), as in a host's
    /tmp. Without one, both are the caller's (0700)."""
    if uid is None:
        return _WritableDir(workspace, None, 0o700), _WritableDir(tmp, None, 0o700)
    return _WritableDir(workspace, (uid, uid), 0o700), _WritableDir(tmp, (0, uid), 0o1770)


@dataclass
class _Held:
    """What a sandbox holds on the host, kept apart from it so a finalizer can free it."""

    root: str
    mounts: list[str] = field(default_factory=list)
    uid_lock: int | None = None


def _release(held: _Held) -> None:
    """Unmount, delete, free the uid lock. Runs once (weakref.finalize)."""
    for path in held.mounts:
        try:
            unmount(path)
        except OSError as exc:
            logger.warning("process sandbox: cannot unmount %s: %s", path, exc)
    shutil.rmtree(held.root, ignore_errors=True)
    if held.uid_lock is not None:
        os.close(held.uid_lock)  # the uid is free again once its processes are gone (close killed them)
