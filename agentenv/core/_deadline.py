"""`run_within`: a blocking call bounded as a whole, not per read.

An HTTP client's timeout bounds each read: a server that trickles its status line,
headers or body a byte per read holds the caller for hours. So such a call runs in a
daemon thread that the caller waits on for its deadline; one still running past it is
left to end on its own (it should check the deadline itself as its data arrives).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Finished", "run_within"]

T = TypeVar("T")


@dataclass(frozen=True)
class Finished(Generic[T]):
    """How a call that ended in time ended: its value, or what it raised."""

    value: T | None = None
    error: BaseException | None = None

    def result(self) -> T:
        """The value, or what the call raised, raised again in the caller's thread."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


def run_within(seconds: float, call: Callable[[], T], *, name: str) -> Finished[T] | None:
    """``call()`` in a daemon thread named ``name``, waited on for ``seconds``: how it
    ended, or None when it had not by then."""
    box: list[Finished[T]] = []

    def run() -> None:
        try:
            box.append(Finished(value=call()))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box.append(Finished(error=e))

    worker = threading.Thread(target=run, name=name, daemon=True)
    worker.start()
    worker.join(seconds)
    return box[0] if box else None
