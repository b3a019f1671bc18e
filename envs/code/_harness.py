"""The trusted half of a test run, inside the sandbox: holds the tests, emits the verdicts.

Run as the program of one ``run_python`` call, with the tests on stdin (never on
disk). Order matters for integrity:

1. make this process non-dumpable, so no process of the same uid (the worker,
   or anything an earlier run left behind) can read its memory, open its
   descriptors through /proc or ptrace it; before the worker exists, so there is
   no moment to attach in;
2. fork the worker (`_worker.py`) with no file descriptor but its two pipes; it
   inherits this process's memory as it is now, which holds no test, expected
   value or nonce (the sandbox forks each run from a process that never held a
   request: see `agentenv.sandboxes.runner`; the process backend starts each run
   as a fresh interpreter);
3. only then read stdin: the nonce, the solution and the tests;
4. send the solution to the worker, run each test, write one line per test:
   ``MARK NONCE {json}``, then a ``done`` line, and exit 0.

Call tests send the arguments to the worker and report the encoded value it
returns; the *host* compares it with the expected value, which never enters the
sandbox. Code tests (a benchmark's ``check(candidate)``) run here, with
``candidate`` a proxy whose calls go to the worker and whose results are decoded
into plain values, so the solution never runs in this process.
Pasted after `agentenv.sandboxes._pipes`, `_codec.py` and `_worker.py`; stdlib only.
"""

import json
import os
import signal
import sys
import time

TYPE_CHECKING = False  # as in _worker.py: the names below come from the parts pasted before this one
if TYPE_CHECKING:
    from agentenv.envs.code._codec import decode, encode
    from agentenv.envs.code._worker import MAX_FRAME_BYTES, worker_main
    from agentenv.sandboxes._pipes import read_exact

MARK = "@@agentenv-verdict"


class CallFailed(Exception):
    """The worker raised, died or timed out; the message says which."""


class Worker:
    def __init__(self):
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        self.pid: int | None = os.fork()  # None once reaped
        if self.pid == 0:
            _become_worker(req_r, resp_w)
        os.close(req_r)
        os.close(resp_w)
        self.req, self.resp = req_w, resp_r
        self.dead = None  # why no more calls can be made

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
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status):
            return f"the solution's process exited with code {os.WEXITSTATUS(status)} before answering"
        return f"the solution's process was killed by signal {os.WTERMSIG(status)}"

    def _end(self, why):
        self.dead = why
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = None


def _become_worker(req_r, resp_w):
    """In the forked child: keep only the two pipes, then serve as the worker (`_worker.py`)."""
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        keep = sorted({req_r, resp_w})
        os.closerange(3, keep[0])
        os.closerange(keep[0] + 1, keep[1])
        os.closerange(keep[1] + 1, 1 << 16)
        worker_main(req_r, resp_w)
    finally:
        os._exit(127)


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
            exec(compile(setup, "setup", "exec"), namespace)  # noqa: S102 - the task's own trusted text
        namespace[entry_point] = namespace["candidate"] = proxy
        exec(compile(test["code"], "test", "exec"), namespace)  # noqa: S102
    except AssertionError as e:
        return {"passed": False, "error": f"AssertionError: {e}" if str(e) else "an assertion failed"}
    except CallFailed as e:
        return {"passed": False, "error": str(e)}
    except BaseException as e:  # noqa: BLE001 - a failing test is a verdict
        return {"passed": False, "error": f"{type(e).__name__}: {e}"[:400]}
    return {"passed": True}


def main():
    _no_dump()
    worker = Worker()
    spec = json.loads(sys.stdin.read())
    out = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what a test prints must not mix with the verdict lines

    def emit(record):
        line = f"{MARK} {spec['nonce']} {json.dumps(record)}\n".encode()
        view = memoryview(line)
        while view:
            view = view[os.write(out, view) :]

    try:
        answer = worker.request(
            {"solution": spec["solution"], "entry_point": spec["entry_point"]},
            time.monotonic() + spec["load_timeout_s"],
        )
        loaded = {"ok": bool(answer.get("ok")), "error": answer.get("error")}
    except CallFailed as e:
        loaded = {"ok": False, "error": str(e)}
    emit({"event": "load", **loaded})
    for i, test in enumerate(spec["tests"]):
        if not loaded["ok"]:
            break
        try:
            if test["kind"] == "call":
                record = run_call(worker, test, spec["test_timeout_s"])
            else:
                record = run_code(worker, test, spec.get("setup", ""), spec["entry_point"], spec["test_timeout_s"])
        except CallFailed as e:
            record = {"error": str(e)}
        emit({"test": i, **record})
    worker._end("finished")
    emit({"event": "done"})


main()
