"""Start one command of a `ProcessSandbox` inside its namespaces, as its uid, under its rlimits.

Run by `agentenv.sandboxes.process` as ``python -I -S _process_launch.py CONFIG_JSON``;
it is not an API. It is a separate script rather than a ``preexec_fn`` because
it has to fork twice (a PID namespace only applies to children of the process
that asked for it) and doing that in the forked child of a threaded parent can
deadlock. It imports nothing outside the standard library.

With ``namespaces`` on, the process tree is::

    launcher (host PID namespace, the caller's uid; new mount/net/IPC/UTS namespaces)
      `- init (PID 1 of a new PID namespace: mounts /proc, reaps, reports the status)
           `- the command (the sandbox uid, rlimits, no_new_privs, then exec)

When the command exits, init exits and the kernel kills everything left in the
namespace, so a daemonised grandchild cannot outlive its run. When the launcher
is killed (the wall-clock timeout kills its process group), init gets SIGKILL
through the parent-death signal, with the same effect.

Mode ``killall`` kills every process of a dedicated sandbox uid (fork, become the
uid, ``kill(-1, SIGKILL)``): used by reset/close when no PID namespace holds them.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RELATIME = 0x200000
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

_libc = ctypes.CDLL(None, use_errno=True)


def _checked(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    _checked(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def _prctl(option: int, arg: int) -> None:
    _checked(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _enter_namespaces(cfg: dict) -> None:
    """Unshare, then give the command its own /tmp and hide the homes, keeping
    the paths it needs (workspace, interpreter) visible at their usual places."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    flags |= CLONE_NEWNET if cfg["isolate_net"] else 0
    flags |= CLONE_NEWUSER if cfg["userns"] else 0
    _checked(_libc.unshare(flags), "unshare")
    if cfg["userns"]:
        # Map the caller's uid to itself (not to 0): after exec the command holds no capability.
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Opened before anything is covered (a covered path can no longer be reached by
    # name) and after unshare (a bind source must be a mount of this namespace).
    keep = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY), writable) for path, writable in cfg["reveal"]]
    private_tmp = f"/proc/self/fd/{os.open(cfg['tmp'], os.O_PATH | os.O_DIRECTORY)}"
    for target in cfg["private_tmp_at"]:
        if os.path.isdir(target) and not os.path.islink(target):
            _mount(private_tmp, target, None, MS_BIND | MS_REC)
    for target in cfg["hide"]:
        if os.path.isdir(target) and not os.path.islink(target):
            _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path, fd, writable in keep:
        _reveal(path, fd, writable)


def _reveal(path: str, fd: int, writable: bool) -> None:
    """Bind the directory open at ``fd`` back at ``path`` if a cover hid it."""
    seen, want = None, os.fstat(fd)
    try:
        seen = os.stat(path)
    except OSError:
        pass
    if seen is not None and (seen.st_dev, seen.st_ino) == (want.st_dev, want.st_ino):
        return
    os.makedirs(path, mode=0o755, exist_ok=True)
    _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    if not writable:
        # A remount must keep the locked flags of the mount it copies (userns rules).
        old = os.statvfs(path).f_flag
        keep = old & (MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048)
        keep |= MS_RELATIME if old & 4096 else 0
        try:
            _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | keep)
        except OSError:
            pass  # read-only is a second line here; file permissions are the first
    os.close(fd)


def _start_command(cfg: dict) -> None:
    """Become the sandbox user under its limits and exec the command. Never returns."""
    try:
        os.chdir(cfg["cwd"])
        if cfg["uid"] is not None:
            os.setgroups([])
            os.setgid(cfg["gid"])
            os.setuid(cfg["uid"])
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        if cfg["namespaces"]:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid, which clears it
        for name, value in cfg["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (value, value))
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; exec would keep that
            signal.signal(sig, signal.SIG_DFL)
        os.execvpe(cfg["argv"][0], cfg["argv"], cfg["env"])
    except OSError as exc:
        sys.stderr.write(f"agentenv sandbox: cannot start {cfg['argv'][0]!r}: {exc}\n")
        sys.stderr.flush()
        os._exit(126 if isinstance(exc, PermissionError) else 127)


def _run_init(cfg: dict, status_fd: int) -> None:
    """PID 1 of the namespace: start the command, reap orphans, report its status."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass  # the old /proc stays: the command sees host PIDs (the process module says so)
    child = os.fork()
    if child == 0:
        os.close(status_fd)
        _start_command(cfg)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        if pid == child:
            os.write(status_fd, str(status).encode())
            os._exit(0)  # the kernel now kills what is left in the namespace


def _exit_like(status: int) -> None:
    """Exit the way the command did, so the caller sees its code or its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def _launch(cfg: dict) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if not cfg["namespaces"]:
        _start_command(cfg)
    _enter_namespaces(cfg)
    status_r, status_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(status_r)
        _run_init(cfg, status_w)
    os.close(status_w)
    _, init_status = os.waitpid(init, 0)
    reported = os.read(status_r, 32)
    _exit_like(int(reported) if reported else init_status)


def _killall(uid: int) -> None:
    """Kill every process of ``uid``: a process of that uid may signal exactly those."""
    child = os.fork()
    if child == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        for _ in range(100):  # repeat: a fork bomb adds processes while we kill
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                os._exit(0)
        os._exit(1)
    os.waitpid(child, 0)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    if cfg["mode"] == "killall":
        _killall(cfg["uid"])
        return
    try:
        _launch(cfg)
    except OSError as exc:
        sys.stderr.write(f"agentenv sandbox: cannot set up the sandbox: {exc}\n")
        sys.stderr.flush()
        os._exit(125)


if __name__ == "__main__":
    main()
