"""Many verifications in one run, each as cut off from the others as a run of its own.

A batch spares each task the sandbox's per-run costs (a round trip from the host,
a fork from the zygote, the harness's start), but its tasks share the harness, so
nothing a task's solution can do may reach a later task's verdict. The host
batches only inside a container, where the run uid belongs to the sandbox alone
(`agentenv.envs.code.sandboxes`). What keeps the tasks apart:

- each task gets a fresh worker, forked by the *forker*: a process the harness
  forks before it reads any test, so no worker's memory ever held one (as the
  single worker of a one-task run);
- before every task: no process of the run uid is alive but the harness and the
  forker (the others are killed until /proc shows none), the scratch directories
  are empty with the modes they started with, without the extended attributes a
  task can set on them (``user.*``, POSIX ACLs) and with their times set back
  (the epoch where the run uid owns the directory, else now: a task's ``utime``
  or its chosen moment of reading them would otherwise reach the next task), no SysV IPC object is left (a
  segment, queue or semaphore set outlives its maker: a channel to later tasks,
  and memory they would lack; the runner clears them the same way after a run),
  and the harness and the forker
  still have the scheduling priority, policy, CPU affinity and resource limits
  they started with (a process of the same uid may lower them, which would make
  a later task time out or run out of memory);
- the harness and the forker block every signal that can be blocked; the two
  that cannot (SIGKILL, SIGSTOP) kill or stall the run, which the host sees.

Whatever breaks these (the forker killed or stalled, a process that will not die,
a directory that will not empty, a limit that cannot be restored) ends the batch
with an ``abort`` record: the host judges every task that has no ``end`` record
again, in a run of its own. Sabotage costs compute; it never changes a verdict.

All of this guards against the *solutions*. A task's code tests and setup run in
the harness itself, beside the nonce and every task's spec, so they could write
any task's verdict: task files are untrusted, and the host never puts a job with
code tests or setup in a batch with a job of other tests or setup
(`agentenv.envs.code.sandboxes`); jobs of call tests alone run nothing of their
task's here and share batches freely.

Pasted after `_worker.py` (whose `become_worker` each forked worker runs) and before
`_harness.py`; stdlib only.
"""

import os
import signal
import socket
import time

TYPE_CHECKING = False  # as in _worker.py
if TYPE_CHECKING:
    from agentenv.envs.code._worker import become_worker

FORKER_TIMEOUT_S = 2.0
STRAYS_TIMEOUT_S = 2.0


class BatchAborted(Exception):
    """The batch cannot go on with its tasks kept apart; the message says why."""


def block_signals():
    """Block every signal that can be blocked: another process of the run uid must not
    interrupt the harness or the forker (SIGINT would raise KeyboardInterrupt)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())


def attributes():
    """What a process of the same uid may change about this one, comparable with ==."""
    import resource  # only batches need it: a one-task run does not pay for the import

    limits = tuple(
        (name, resource.getrlimit(getattr(resource, name))) for name in sorted(dir(resource)) if name[:7] == "RLIMIT_"
    )
    return (os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0), frozenset(os.sched_getaffinity(0)), limits)


def restore(baseline):
    """Put this process's `attributes` back as they were; `BatchAborted` when one cannot be."""
    import resource

    now = attributes()
    if now == baseline:
        return
    nice, policy, cpus, limits = baseline
    try:
        if now[0] != nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)  # refused when it was raised: only root may lower it
        if now[1] != policy:
            os.sched_setscheduler(0, policy, os.sched_param(0))
        if now[2] != cpus:
            os.sched_setaffinity(0, cpus)
        for name, limit in limits:
            if resource.getrlimit(getattr(resource, name)) != limit:
                resource.setrlimit(getattr(resource, name), limit)  # refused when a hard limit was lowered
    except (OSError, ValueError) as e:
        raise BatchAborted(f"an earlier task changed this process's limits and they cannot be restored: {e}") from None
    if attributes() != baseline:
        raise BatchAborted("an earlier task changed this process's limits and they cannot be restored")


def _run_uid_pids(uid, keep):
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep:
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                text = f.read()
        except OSError:
            continue  # gone meanwhile
        state = text[text.find(b"\nState:") + 7 :].lstrip()[:1]
        uids = text[text.find(b"\nUid:") + 5 :].split(None, 1)
        if uids and uids[0] == str(uid).encode() and state != b"Z":  # a zombie can do nothing
            pids.append(int(name))
    return pids


def kill_strays(keep):
    """SIGKILL every process of this uid but ``keep`` (and pid 1 and the parent, which
    are not the run's), until none is left."""
    keep = {1, os.getppid(), *keep}
    uid, end = os.getuid(), time.monotonic() + STRAYS_TIMEOUT_S
    while True:
        pids = _run_uid_pids(uid, keep)
        if not pids:
            return
        if time.monotonic() > end:
            raise BatchAborted(f"{len(pids)} processes left by an earlier task would not die")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.001)


def scratch_modes(paths):
    """The scratch directories with their modes now, before any task ran."""
    return [(path, os.stat(path).st_mode & 0o7777) for path in paths if os.path.isdir(path)]


def clear_scratch(scratch):
    """Empty each scratch directory, give it back its mode, take off its extended
    attributes and times, and remove every SysV IPC object; `BatchAborted` when one resists."""
    for path, mode in scratch:
        try:
            if os.stat(path).st_mode & 0o7777 != mode:
                os.chmod(path, mode)
            _empty(path)
            _settle(path)
        except (OSError, RecursionError) as e:
            raise BatchAborted(f"cannot empty {path} after an earlier task: {e}") from None
    _clear_sysv_ipc()


SYSV_IPC = (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl"))  # as the runner's: this file is stdlib only
IPC_RMID = 0


def _sysv_ipc_objects():
    found = []
    for kind, ctl in SYSV_IPC:
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                next(f, None)  # the column names
                fields = [line.split() for line in f]
        except OSError:
            continue  # no SysV IPC in this kernel
        found += [(ctl, int(row[1])) for row in fields if len(row) > 1 and row[1].isdigit()]
    return found


def _clear_sysv_ipc():
    """IPC_RMID every SysV IPC object: the run uid made them all (the batch runs in a
    container, whose IPC namespace is the sandbox's alone), and the strays that held
    them are dead, so each is freed at once."""
    objects = _sysv_ipc_objects()
    if not objects:
        return
    import ctypes  # only a batch that met one pays for the import

    libc = ctypes.CDLL(None, use_errno=True)
    for ctl, ident in objects:
        if ctl == "semctl":
            libc.semctl(ident, 0, IPC_RMID)
        else:
            getattr(libc, ctl)(ident, IPC_RMID, None)
    left = _sysv_ipc_objects()
    if left:
        raise BatchAborted(f"{len(left)} SysV IPC objects left by an earlier task cannot be removed")


RUN_XATTRS = ("user.", "system.posix_acl_")  # as the runner's: what a run can set on a directory it owns


def _settle(path):
    for name in os.listxattr(path):
        if name.startswith(RUN_XATTRS):
            os.removexattr(path, name)
    try:
        os.utime(path, ns=(0, 0))
    except PermissionError:  # root's (/dev/shm): its owner alone may choose the times, anyone may set now
        os.utime(path)


def _empty(path):
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, 0o700)  # a task may have taken its own permissions away
                _empty(entry.path)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)


class Forker:
    """The harness's end of the forker: one fresh worker per task, and its exit status."""

    def __init__(self, baseline):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            _forker_main(theirs, baseline)
        theirs.close()
        ours.settimeout(FORKER_TIMEOUT_S)
        self.sock = ours
        self.broken = None  # why no more workers can be had

    def worker(self):
        """A fresh worker (pid, request fd, response fd); `BatchAborted` when the forker fails."""
        if self.broken is not None:
            raise BatchAborted(self.broken)
        try:
            os.kill(self.pid, signal.SIGCONT)  # undo a SIGSTOP from an earlier task
            self.sock.send(b"fork")
            message, fds, _, _ = socket.recv_fds(self.sock, 256, 2)
        except OSError as e:
            raise BatchAborted(f"the forker did not answer: {e}") from None
        if len(fds) != 2 or not message.startswith(b"pid "):
            for fd in fds:
                os.close(fd)
            raise BatchAborted(message.decode("utf-8", "replace") or "the forker has ended")
        return int(message[4:]), fds[0], fds[1]

    def status(self):
        """The wait status of the last worker, once it has ended; None if the forker cannot say."""
        try:
            os.kill(self.pid, signal.SIGCONT)  # a stopped forker cannot report
            message = self.sock.recv(64)
            if message.startswith(b"status "):
                return int(message[7:])
        except (OSError, ValueError):
            pass
        self.broken = "the forker did not report how a worker ended"
        return None


def _forker_main(sock, baseline):
    """In the forked child: on each request, check this process is as it started, then
    fork a worker and report its pid (with its two pipes) and, once it ends, its status."""
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # stdin still holds the tests: this process must never read them
            os.dup2(devnull, fd)
        keep = sock.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 1 << 16)
        while sock.recv(16):
            try:
                restore(baseline)
            except BatchAborted as e:
                sock.send(str(e).encode())
                break
            req_r, req_w = os.pipe()
            resp_r, resp_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                sock.close()
                os.close(req_w)
                os.close(resp_r)
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                become_worker(req_r, resp_w)
            os.close(req_r)
            os.close(resp_w)
            socket.send_fds(sock, [f"pid {pid}".encode()], [req_w, resp_r])
            os.close(req_w)
            os.close(resp_r)
            _, status = os.waitpid(pid, 0)
            sock.send(f"status {status}".encode())
    finally:
        os._exit(0)
