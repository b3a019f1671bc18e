"""The trusted half of a test run, inside the sandbox: holds the tests, emits the verdicts.

Run as the program of one ``run_python`` call, with the tests on stdin (never on
disk): a first line with the number of tasks, then the JSON spec. Order matters
for integrity:

1. make this process non-dumpable, so no process of the same uid (the worker,
   or anything an earlier run left behind) can read its memory, open its
   descriptors through /proc or ptrace it; before the worker exists, so there is
   no moment to attach in; and take off ``sys.path`` the workspace and the scratch
   directories, so no module the solution plants is ever imported here (`_trusted_path`);
2. read the first line (a count, nothing secret), then fork the worker
   (`_worker.py`) with no file descriptor but its two pipes, or, for a batch of
   tasks, the forker that will fork one worker per task (`_batch.py`); either
   inherits this process's memory as it is now, which holds no test, expected
   value or nonce (the sandbox forks each run from a process that never held a
   request: see `agentenv.sandboxes.runner`; the process backend starts each run
   as a fresh interpreter);
3. only then read the rest of stdin: the nonce, and each task's solution and tests;
4. for each task: send the solution to its worker, run each test, write one line
   per test: ``MARK NONCE {json}``, then an ``end`` line; then a ``done`` line,
   and exit 0.

Call tests send the arguments to the worker and report the encoded value it
returns; the *host* compares it with the expected value, which never enters the
sandbox. Code tests (a benchmark's ``check(candidate)``) run here, with
``candidate`` a proxy whose calls go to the worker and whose results are decoded
into plain values, so the solution never runs in this process. The task's own
code does, so a batch holds code tests of one task only (see `_batch.py`).
Pasted after `agentenv.sandboxes._pipes`, `_codec.py`, `_worker.py` and `_batch.py`; stdlib only.
"""

import json
import os
import signal
import sys
import time

TYPE_CHECKING = False  # as in _worker.py: the names below come from the parts pasted before this one
if TYPE_CHECKING:
    from agentenv.envs.code._batch import (
        BatchAborted,
        Forker,
        attributes,
        block_signals,
        clear_scratch,
        kill_strays,
        restore,
        scratch_modes,
    )
    from agentenv.envs.code._codec import decode, encode
    from agentenv.envs.code._worker import MAX_FRAME_BYTES, become_worker
    from agentenv.sandboxes._pipes import read_exact

MARK = "@@agentenv-verdict"


class CallFailed(Exception):
    """The worker raised, died or timed out; the message says which."""


class Worker:
    """The harness's end of one worker: ``reap(pid)`` waits for it once killed and
    gives its wait status (None when unknown)."""

    def __init__(self, pid, req, resp, reap):
        self.pid: int | None = pid  # None once reaped
        self.req, self.resp, self.reap = req, resp, reap
        self.dead = None  # why no more calls can be made

    @classmethod
    def fork(cls):
        """A worker forked from this process, now."""
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            become_worker(req_r, resp_w)
        os.close(req_r)
        os.close(resp_w)
        return cls(pid, req_w, resp_r, lambda pid: os.waitpid(pid, 0)[1])

    def request(self, message, deadline):
        if self.dead is not None:
            raise CallFailed(f"not run: {self.dead}")
        try:
            data = json.dumps(message).encode()
            view = memoryview(len(data).to_bytes(4, "big") + data)
            while view:
                view = view[os.write(self.req, view) :]
            head = self._read(4, deadline)
            size = int.from_bytes(head, "big")
            if size > MAX_FRAME_BYTES:
                raise CallFailed("the solution's process sent an oversized answer")
            return json.loads(self._read(size, deadline))
        except BrokenPipeError:
            self._end(self._exit_note())
        except CallFailed as e:
            self._end(str(e))
        except ValueError:
            self._end("the solution's process sent a garbled answer")
        raise CallFailed(self.dead)

    def _read(self, n, deadline):
        try:
            data = read_exact(self.resp, n, deadline)
        except TimeoutError:
            raise CallFailed("timed out") from None
        if data is None:
            raise CallFailed(self._exit_note())
        return data

    def _exit_note(self):
        """Why the worker stopped answering, once it is reaped (killed first if need be)."""
        pid, self.pid = self.pid, None
        if pid is None:
            return "the solution's process has ended"
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        status = self.reap(pid)
        if status is None:
            return "the solution's process has ended"
        if os.WIFEXITED(status):
            return f"the solution's process exited with code {os.WEXITSTATUS(status)} before answering"
        return f"the solution's process was killed by signal {os.WTERMSIG(status)}"

    def _end(self, why):
        self.dead = why
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.reap(self.pid)
            except ChildProcessError:
                pass
            self.pid = None
        for fd in (self.req, self.resp):
            try:
                os.close(fd)
            except OSError:
                pass
        self.req = self.resp = -1


def _no_dump():
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001, S110 - no ctypes or no prctl: the memory stays readable, as documented
        pass


class Proxy:
    """``candidate`` as code tests see it: each call goes to the worker."""

    def __init__(self, worker, deadline):
        self.worker, self.deadline = worker, deadline

    def __call__(self, *args, **kwargs):
        try:
            message = {"args": [encode(a) for a in args], "kwargs": {k: encode(v) for k, v in kwargs.items()}}
        except TypeError as e:
            raise CallFailed(f"the test passes an argument the sandbox cannot send: {e}") from None
        answer = self.worker.request(message, self.deadline)
        if not answer.get("ok"):
            raise CallFailed(f"the solution raised {answer.get('error')}")
        return decode(answer["value"])


def run_call(worker, test, timeout_s):
    answer = worker.request({"args": test["args"]}, time.monotonic() + timeout_s)
    if not answer.get("ok"):
        return {"error": f"raised {answer.get('error')}"}
    return {"value": answer.get("value")}


def run_code(worker, test, setup, entry_point, timeout_s):
    namespace: dict[str, object] = {"__name__": "__test__"}
    proxy = Proxy(worker, time.monotonic() + timeout_s)
    try:
        if setup:
            # The task's own text, trusted with its own verdict alone: a batch holds one task's (_batch.py).
            exec(compile(setup, "setup", "exec"), namespace)  # noqa: S102
        namespace[entry_point] = namespace["candidate"] = proxy
        exec(compile(test["code"], "test", "exec"), namespace)  # noqa: S102
    except AssertionError as e:
        return {"passed": False, "error": f"AssertionError: {e}" if str(e) else "an assertion failed"}
    except CallFailed as e:
        return {"passed": False, "error": str(e)}
    except BaseException as e:  # noqa: BLE001 - a failing test is a verdict
        return {"passed": False, "error": f"{type(e).__name__}: {e}"[:400]}
    return {"passed": True}


def read_count():
    """The first line of stdin, read byte by byte so that nothing after it is buffered yet."""
    line = b""
    while not line.endswith(b"\n") and len(line) < 16:
        byte = os.read(0, 1)
        if not byte:
            break
        line += byte
    return int(line)


def run_task(t, task, worker, emit):
    """One task's records: ``load``, one per test, then ``end``."""
    try:
        answer = worker.request(
            {"solution": task["solution"], "entry_point": task["entry_point"]},
            time.monotonic() + task["load_timeout_s"],
        )
        loaded = {"ok": bool(answer.get("ok")), "error": answer.get("error")}
    except CallFailed as e:
        loaded = {"ok": False, "error": str(e)}
    emit({"task": t, "event": "load", **loaded})
    for i, test in enumerate(task["tests"]):
        if not loaded["ok"]:
            break
        try:
            if test["kind"] == "call":
                record = run_call(worker, test, task["test_timeout_s"])
            else:
                record = run_code(worker, test, task.get("setup", ""), task["entry_point"], task["test_timeout_s"])
        except CallFailed as e:
            record = {"error": str(e)}
        emit({"task": t, "test": i, **record})
    worker._end("finished")
    emit({"task": t, "event": "end"})


def _trusted_path():
    """Take off ``sys.path`` every entry the run could plant a module in: relative ones
    (``''``, the current directory: Docker runs put it first) and any inside the
    workspace (the current directory) or a scratch directory. A solution can write
    ``heapq.py`` there, and a task's setup or code test that then imports heapq in this
    process would run it beside the nonce, free to write any verdict. Not "every
    writable entry": run as its owner, a Python installed in a home directory (uv,
    pyenv, conda) would lose its standard library."""
    planted = [os.path.realpath(d) for d in (os.getcwd(), "/tmp", "/dev/shm", os.environ.get("TMPDIR") or "/tmp")]
    planted = [d for d in planted if d != os.sep]

    def trusted(entry):
        real = os.path.realpath(entry)
        return os.path.isabs(entry) and not any(real == d or real.startswith(d + os.sep) for d in planted)

    sys.path[:] = [entry for entry in sys.path if trusted(entry)]


def main():
    _no_dump()
    _trusted_path()
    count = read_count()
    if count == 1:
        worker, forker = Worker.fork(), None
    else:  # a batch: see _batch.py
        block_signals()
        baseline = attributes()
        forker = Forker(baseline)
    spec = json.loads(sys.stdin.read())
    out = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what a test prints must not mix with the verdict lines

    def emit(record):
        line = f"{MARK} {spec['nonce']} {json.dumps(record)}\n".encode()
        view = memoryview(line)
        while view:
            view = view[os.write(out, view) :]

    if forker is None:
        run_task(0, spec["tasks"][0], worker, emit)
    else:
        scratch = scratch_modes(spec["scratch"])
        keep = {os.getpid(), forker.pid}
        for t, task in enumerate(spec["tasks"]):
            try:
                if t:
                    kill_strays(keep)
                    clear_scratch(scratch)
                restore(baseline)
                pid, req, resp = forker.worker()
            except BatchAborted as e:
                emit({"event": "abort", "reason": str(e)})
                break
            run_task(t, task, Worker(pid, req, resp, lambda _pid: forker.status()), emit)
    emit({"event": "done"})


main()
