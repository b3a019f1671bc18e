"""The pipe helpers shared by the host, the in-container runner and the test harness
(sandboxes/_pipes.py): exact reads, capped capture, feeding stdin."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from agentenv.sandboxes._pipes import Capture, feed, read_exact


class Pipe:
    """Both ends of an os.pipe(), each closed once: by the test or at teardown."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        self.open = {self.r, self.w}

    def close(self, fd: int) -> None:
        self.open.discard(fd)
        os.close(fd)


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    p = Pipe()
    yield p
    for fd in list(p.open):
        p.close(fd)


def test_read_exact_gathers_short_reads_and_says_none_at_the_end(pipe: Pipe) -> None:
    r, w = pipe.r, pipe.w
    os.write(w, b"ab")
    os.write(w, b"cde")
    assert read_exact(r, 4) == b"abcd"
    pipe.close(w)
    assert read_exact(r, 2) is None  # one byte left, then the end: not a short answer


def test_read_exact_times_out_at_the_deadline(pipe: Pipe) -> None:
    r, w = pipe.r, pipe.w
    os.write(w, b"a")
    with pytest.raises(TimeoutError):
        read_exact(r, 2, deadline=time.monotonic() + 0.05)


def test_capture_keeps_the_cap_drops_the_rest_and_keeps_the_tail(pipe: Pipe) -> None:
    r, w = pipe.r, pipe.w
    capture = Capture(r, cap=10, tail_bytes=4)
    os.write(w, b"0123456789abcdef")
    pipe.close(w)
    while not capture.eof:
        capture.read()
    assert (bytes(capture.data), capture.truncated, capture.tail) == (b"0123456789", True, b"cdef")


def test_capture_under_the_cap_is_whole_and_not_truncated(pipe: Pipe) -> None:
    r, w = pipe.r, pipe.w
    capture = Capture(r, cap=10)
    os.write(w, b"hello")
    pipe.close(w)
    while not capture.eof:
        capture.read()
    assert (bytes(capture.data), capture.truncated, capture.tail) == (b"hello", False, b"")


def test_feed_writes_what_fits_and_drops_the_rest_when_the_reader_is_gone(pipe: Pipe) -> None:
    r, w = pipe.r, pipe.w
    os.set_blocking(w, False)
    pending = memoryview(b"x" * (1 << 20))
    left = feed(w, pending)
    assert 0 < len(left) < len(pending)  # a pipe holds far less than 1 MiB
    assert len(feed(w, left)) == len(left)  # full: nothing more goes, nothing raises
    pipe.close(r)
    assert len(feed(w, left)) == 0
