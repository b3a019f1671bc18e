"""The untrusted half of a test run: loads the candidate solution and answers calls.

Runs inside the sandbox as a process the harness (`_harness.py`) forks *before*
it reads any test, so this process never holds a hidden test, an expected value
or the verdict nonce in its memory, and cannot reach the harness's. Its
stdin, stdout and stderr are /dev/null; it talks to the harness only through two
pipes given on the command line, one JSON frame per message (a 4-byte big-endian
length, then the UTF-8 JSON).

Whatever the solution does here (exit, print, patch builtins, return objects
with a lying ``__eq__``) it can only change the *data* this process sends back,
which the harness or the host then compares with what it alone knows.
Pasted after `agentenv.sandboxes._pipes` and `_codec.py`, before `_batch.py` and
`_harness.py` (which fork a child that runs `become_worker`, so the worker costs no compile);
stdlib only, no ``from __future__`` imports. The names it takes from the parts
pasted before it are imported under ``TYPE_CHECKING`` for the type checker only.
"""

import json
import os
import sys
import types

TYPE_CHECKING = False  # typing's flag, without importing typing: a fresh interpreter pays for each import
if TYPE_CHECKING:
    from agentenv.envs.code._codec import decode, encode
    from agentenv.sandboxes._pipes import read_exact

MAX_FRAME_BYTES = 8 << 20


def receive(fd):
    head = read_exact(fd, 4)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if size > MAX_FRAME_BYTES:
        raise ValueError("frame too large")
    body = read_exact(fd, size)
    return None if body is None else json.loads(body)


def send(fd, message):
    data = json.dumps(message).encode()
    if len(data) > MAX_FRAME_BYTES:
        data = json.dumps({"ok": False, "error": f"the result is too large ({len(data)} bytes encoded)"}).encode()
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view) :]


def describe(error):
    """``Type: message`` plus the solution's line where it was raised."""
    import traceback  # only on failure: a fresh interpreter pays for every import

    where = ""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if frame.filename == "solution.py":
            where = f" (solution.py, line {frame.lineno})"
            break
    text = f"{type(error).__name__}: {error}"
    return (text[:400] + where) if len(text) <= 400 else text[:400] + "..." + where


def load(message):
    module = types.ModuleType("solution")
    module.__file__ = "solution.py"
    sys.modules["solution"] = module
    exec(compile(message["solution"], "solution.py", "exec"), module.__dict__)  # noqa: S102 - the point
    entry = message["entry_point"]
    function = module.__dict__.get(entry)
    if not callable(function):
        raise NameError(f"the solution defines no function {entry!r}")
    return function


def worker_main(rfd, wfd):
    """Serve the harness over the pipes ``rfd`` / ``wfd`` until it closes them."""
    hello = receive(rfd)
    if hello is None:
        return
    try:
        function = load(hello)
    except BaseException as e:  # noqa: BLE001 - SystemExit too: a solution that exits has failed
        send(wfd, {"ok": False, "error": describe(e)})
        return
    send(wfd, {"ok": True})
    while True:
        call = receive(rfd)
        if call is None:
            return
        try:
            args = [decode(a) for a in call["args"]]
            kwargs = {k: decode(v) for k, v in call.get("kwargs", {}).items()}
            answer = {"ok": True, "value": encode(function(*args, **kwargs))}
            json.dumps(answer)  # fail here, as the candidate's error, not in send()
        except BaseException as e:  # noqa: BLE001 - the candidate's failure is data
            answer = {"ok": False, "error": describe(e)}
        send(wfd, answer)


def become_worker(req_r, resp_w):
    """In a freshly forked child: keep only the two pipes, then serve as the worker; never returns."""
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
