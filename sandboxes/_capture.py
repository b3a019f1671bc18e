"""Feed a child's stdin and read its stdout/stderr under a byte cap and a deadline.

Used by the process backend. Output beyond the cap is read and dropped, never
buffered, so a child printing gigabytes neither blocks on a full pipe nor grows
the host's memory. Killing the child at the deadline is the caller's callback;
this module only watches the clock and the pipes.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = ["Captured", "capture"]

_CHUNK = 64 * 1024
# The end of stderr is kept apart from the capped copy: an error message printed
# last (a MemoryError) must be seen even when the output hit the cap.
_TAIL = 4096
# After the kill, descendants that escaped the process group may still hold a
# pipe open (only where nothing else tracks them); stop waiting for them then.
_DRAIN_AFTER_KILL_S = 1.0


@dataclass
class _Stream:
    cap: int
    data: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    tail: bytes = b""

    def add(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        if room > 0:
            self.data += chunk[:room]
        self.tail = (self.tail + chunk)[-_TAIL:]


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
    out, err = _Stream(cap_bytes), _Stream(cap_bytes)
    streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
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
                chunk = os.read(key.fd, _CHUNK)
                if chunk:
                    streams[key.fd].add(chunk)
                else:
                    _close(sel, key.fileobj)
            else:
                pending = _feed(sel, key.fileobj, pending)
    for key in list(sel.get_map().values()):
        _close(sel, key.fileobj)
    sel.close()
    return Captured(bytes(out.data), bytes(err.data), out.truncated, err.truncated, timed_out, err.tail)


def _feed(sel: selectors.BaseSelector, pipe: IO[bytes], pending: memoryview) -> memoryview:
    try:
        written = os.write(pipe.fileno(), pending[:_CHUNK])
    except BlockingIOError:
        return pending
    except BrokenPipeError:  # the child stopped reading: its choice, not an error
        _close(sel, pipe)
        return pending[:0]
    pending = pending[written:]
    if not pending:
        _close(sel, pipe)
    return pending


def _close(sel: selectors.BaseSelector, pipe: Any) -> None:
    sel.unregister(pipe)
    try:
        pipe.close()
    except BrokenPipeError:
        pass
