"""Reading and writing pipes: one home for the host and the inside of the sandbox.

- `read_exact`: exactly ``n`` bytes from a pipe, or None at its end (optionally by a deadline);
- `Capture`: one output pipe read up to a byte cap, the rest read and dropped as it
  arrives, so a run printing gigabytes neither blocks on a full pipe nor grows memory;
- `feed`: write to a non-blocking pipe what it takes of a pending buffer.

Three programs use this file, so it is stdlib only, has no ``from __future__``
import and runs on Python 3.9+ (annotations that need 3.10 are quoted):

- the host imports it (`agentenv.sandboxes._capture`, the process backend's pump);
- the sandbox image gets it beside the runner (``/opt/agentenv/_pipes.py``, copied by
  `sandboxes/image/Dockerfile`; `agentenv.sandboxes.build` hashes it into the image's
  label), and `agentenv.sandboxes.runner` imports it from there;
- `agentenv.envs.code.verify` pastes its source at the head of the test harness
  program, which runs as one ``run_python`` and so can import nothing of agentenv.

Left out: the loops that wait on these pipes. They differ by what else they wait
for: the process backend reads until the pipes close and kills at the deadline
(`agentenv.sandboxes._capture`); the runner ends a run when the zygote reports its
exit (`agentenv.sandboxes.runner`).
"""

import os
import select
import time

READ_CHUNK = 65536


def read_exact(fd: int, n: int, deadline: "float | None" = None) -> "bytes | None":
    """``n`` bytes from ``fd``, or None at end of input; `TimeoutError` when a
    ``deadline`` (``time.monotonic()``) passes first."""
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError(f"{n - got} of {n} bytes still to come at the deadline")
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class Capture:
    """One output pipe, read up to ``cap`` bytes; the rest is read and dropped.

    ``tail_bytes`` > 0 also keeps the last that many bytes, cap or not: an error
    printed last (a MemoryError) must be seen even when the output hit the cap.
    The descriptor stays the caller's to close (a `subprocess.Popen` owns its pipes).
    """

    def __init__(self, fd: int, cap: int, tail_bytes: int = 0) -> None:
        self.fd, self.cap, self.tail_bytes = fd, cap, tail_bytes
        self.data = bytearray()
        self.tail = b""
        self.truncated = False
        self.eof = False

    def read(self) -> None:
        """Take what one read gives; call it when the pipe is readable. Sets `eof` at the end."""
        try:
            chunk = os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return
        if not chunk:
            self.eof = True
            return
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        if room > 0:
            self.data += chunk[:room]
        if self.tail_bytes:
            self.tail = (self.tail + chunk)[-self.tail_bytes :]


def feed(fd: int, pending: memoryview) -> memoryview:
    """Write what the non-blocking pipe ``fd`` takes of ``pending``; what is left.
    Nothing is left when the reader closed its end: what it did not read, it did not want."""
    try:
        return pending[os.write(fd, pending[:READ_CHUNK]) :]
    except BlockingIOError:
        return pending
    except BrokenPipeError:
        return pending[len(pending) :]
