"""The process backend's pump: feed a child's stdin and read its stdout/stderr under
a byte cap and a deadline.

The pipes themselves are read and written by `agentenv.sandboxes._pipes` (the same
code the in-container runner uses): output beyond the cap is read and dropped,
never buffered, so a child printing gigabytes neither blocks on a full pipe nor
grows the host's memory. This module is the loop around them: it reads until the
pipes close, and at the deadline calls the caller's kill callback once; it only
watches the clock and the pipes.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from agentenv.sandboxes._pipes import Capture, feed

__all__ = ["Captured", "capture"]

# The end of stderr is kept apart from the capped copy: an error message printed
# last (a MemoryError) must be seen even when the output hit the cap.
_TAIL = 4096
# After the kill, descendants that escaped the process group may still hold a
# pipe open (only where nothing else tracks them); stop waiting for them then.
_DRAIN_AFTER_KILL_S = 1.0


@dataclass(frozen=True)
class Captured:
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    """The child had not exited when the deadline came and was killed."""
    stderr_tail: bytes
    """The last few KiB of stderr, even past the cap."""


def capture(
    proc: subprocess.Popen[bytes], stdin: bytes | None, cap_bytes: int, timeout_s: float, kill: Callable[[], None]
) -> Captured:
    """Pump ``proc``'s pipes until they close; call ``kill`` once at the deadline."""
    assert proc.stdout is not None and proc.stderr is not None  # the caller opened them
    out, err = Capture(proc.stdout.fileno(), cap_bytes), Capture(proc.stderr.fileno(), cap_bytes, _TAIL)
    streams = {out.fd: out, err.fd: err}
    pipes = {p.fileno(): p for p in (proc.stdin, proc.stdout, proc.stderr) if p is not None}
    sel = selectors.DefaultSelector()
    # Registered with the file objects so closing goes through them (no double close).
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    pending = memoryview(stdin or b"")
    if proc.stdin is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
        if not pending:
            _close(sel, proc.stdin)
    deadline = time.monotonic() + timeout_s
    drain_until: float | None = None
    timed_out = False
    while sel.get_map():
        now = time.monotonic()
        if drain_until is None and now >= deadline:
            timed_out = proc.poll() is None
            kill()
            drain_until = now + _DRAIN_AFTER_KILL_S
        if drain_until is not None and now >= drain_until:
            break
        limit = (drain_until if drain_until is not None else deadline) - now
        for key, _ in sel.select(timeout=max(limit, 0.0)):
            if key.fd in streams:
                streams[key.fd].read()
                if streams[key.fd].eof:
                    _close(sel, pipes[key.fd])
            else:
                pending = feed(key.fd, pending)
                if not pending:
                    _close(sel, pipes[key.fd])
    for key in list(sel.get_map().values()):
        _close(sel, pipes[key.fd])
    sel.close()
    return Captured(bytes(out.data), bytes(err.data), out.truncated, err.truncated, timed_out, err.tail)


def _close(sel: selectors.BaseSelector, pipe: IO[bytes]) -> None:
    sel.unregister(pipe)
    try:
        pipe.close()
    except BrokenPipeError:
        pass
