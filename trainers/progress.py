"""Progress of a run's long phases, so that a run is never silent for long: the warm
start's supervised steps, the GRPO steps and each held-out evaluation's episodes.

On a terminal each phase is a rich bar (done / total, time spent, rate, time left),
redrawn in place. Anywhere else (CI, a log file, a pipe) a phase prints plain lines with
the same figures, e.g. ``warm start 100/1000 steps (10%) | 12s | 8.31 steps/s | 1m48s
left | loss 0.532``: one at every tenth of the phase, and one whenever nothing has been
printed for ``every_s`` seconds (30), even in the middle of one long step. A phase
prints no two tenth lines within ``min_gap_s`` (1 s), so a phase of a second, or units
that finish in a burst, print no flurry of them. In both modes a phase ends with one
line: done, time taken, rate. Lines the run prints through `ProgressBoard.stream` (the
per-step metrics line) appear above the bars and count as output.

Left out: what a line says about the run itself (the metrics line: `metrics`), and
transformers' own progress bars (`progress_bars` silences them).
"""

from __future__ import annotations

import io
import math
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, TextIO, cast

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID

__all__ = ["Phase", "ProgressBoard", "duration"]

EVERY_S = 30.0
"""The longest a plain-mode run stays silent."""


class ProgressBoard:
    """Where a run's phases show their progress: bars on a terminal, plain lines elsewhere.

    Args:
        stream: Where everything goes (None: ``sys.stdout`` as it is when a line is written).
        plain: Plain lines instead of bars (None: plain unless ``stream`` is a terminal).
        every_s: In plain mode, the longest silence before the innermost phase prints a line.
        min_gap_s: In plain mode, the least time between a phase's lines at its tenths.
        enabled: False shows nothing (a data-parallel rank other than rank 0).
        clock: Seconds, for rates and silences (``time.monotonic``).
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        plain: bool | None = None,
        every_s: float = EVERY_S,
        min_gap_s: float = 1.0,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._target = stream
        target = stream or sys.stdout
        self.plain = plain if plain is not None else not (hasattr(target, "isatty") and target.isatty())
        self.every_s = every_s
        self.min_gap_s = min_gap_s
        self.enabled = enabled
        self.clock = clock
        self._lock = threading.RLock()
        self._open: list[Phase] = []
        self._last_output = clock()
        self._watch_stop: threading.Event | None = None
        self._watcher: threading.Thread | None = None
        self._bars: RichProgress | None = None

    @property
    def stream(self) -> TextIO:
        """A text stream whose lines print above the bars (and count as output)."""
        return cast(TextIO, _Lines(self.write_line))  # a TextIOBase: what a stream is asked for

    def phase(self, label: str, total: int, *, unit: str = "step", done: int = 0) -> Phase:
        """A phase of ``total`` units, ``done`` of them done already (a resumed run's); use
        it as a context manager around the work, calling `Phase.advance` per unit."""
        return Phase(self, label, total, unit=unit, done=done)

    def write_line(self, line: str) -> None:
        """Print ``line`` (above the bars in terminal mode)."""
        with self._lock:
            self._last_output = self.clock()
            if self._bars is not None:
                self._bars.console.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True)
                return
            target = self._target or sys.stdout
            target.write(line + "\n")
            target.flush()

    # -- phases opening and closing ----------------------------------------------------

    def _opened(self, phase: Phase) -> None:
        with self._lock:
            self._open.append(phase)
            if self.plain:
                self._start_watch()
                return
            if self._bars is None:
                self._bars = _rich_bars(self._target or sys.stdout)
                self._bars.start()
            phase.task = self._bars.add_task(
                phase.label, total=phase.total, completed=phase.done, unit=phase.unit, note=phase.note
            )
            self._bars.refresh()

    def _advanced(self, phase: Phase) -> None:
        with self._lock:
            if self._bars is not None and phase.task is not None:
                self._bars.update(phase.task, completed=phase.done, note=phase.note)

    def _closed(self, phase: Phase, summary: str) -> None:
        with self._lock:
            if phase in self._open:
                self._open.remove(phase)
            if self._bars is not None and phase.task is not None:
                self._bars.remove_task(phase.task)
                self._bars.refresh()  # the closing line must not print above a bar already gone
            self.write_line(summary)
            if self._open:
                return
            if self._bars is not None:
                self._bars.stop()
                self._bars = None
        self._stop_watch()

    # -- plain mode: never silent for long ------------------------------------------

    def _start_watch(self) -> None:
        if self._watcher is not None:
            return
        self._watch_stop = threading.Event()
        self._watcher = threading.Thread(
            target=self._watch, args=(self._watch_stop,), name="agentenv-progress", daemon=True
        )
        self._watcher.start()

    def _stop_watch(self) -> None:
        with self._lock:
            watcher, stop = self._watcher, self._watch_stop
            self._watcher = self._watch_stop = None
        if watcher is not None and stop is not None:
            stop.set()
            watcher.join()

    def _watch(self, stop: threading.Event) -> None:
        """Print the innermost phase's line after every ``every_s`` without output."""
        while True:
            with self._lock:
                wait = self._last_output + self.every_s - self.clock()
            if stop.wait(max(wait, 0.01)):
                return
            with self._lock:
                if self._open and self.clock() - self._last_output >= self.every_s:
                    self._open[-1].print_status()


class Phase:
    """A phase of a run, shown by its `ProgressBoard` while the ``with`` block runs."""

    def __init__(self, board: ProgressBoard, label: str, total: int, *, unit: str, done: int) -> None:
        if total < 0 or not 0 <= done <= max(total, 0):
            raise ValueError(f"expected 0 <= done <= total, got done={done}, total={total}")
        self.board = board
        self.label = label
        self.total = total
        self.unit = unit
        self.done = self._first = done
        self.note = ""
        self.task: TaskID | None = None
        self._began = self._last_line = board.clock()
        self._tenths = self._tenth(done)

    def __enter__(self) -> Phase:
        self._began = self._last_line = self.board.clock()
        if self.board.enabled:
            self.board._opened(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self.board.enabled:
            # A phase cut short by an error says where it stopped, not that it finished.
            self.board._closed(self, self.summary() if kind is None else self.status())

    def advance(self, n: int = 1, *, note: str | None = None) -> None:
        """``n`` more units done; ``note`` (a loss, say) is shown after the figures."""
        self.done = min(self.done + n, self.total)
        if note is not None:
            self.note = note
        if not self.board.enabled:
            return
        if not self.board.plain:
            self.board._advanced(self)
            return
        tenths = self._tenth(self.done)
        waited = self.board.clock() - self._last_line >= self.board.min_gap_s
        if tenths > self._tenths and self.done < self.total and waited:
            self._tenths = tenths
            self.print_status()

    def print_status(self) -> None:
        self._last_line = self.board.clock()
        self.board.write_line(self.status())

    def _tenth(self, done: int) -> int:
        return done * 10 // self.total if self.total else 10

    def elapsed(self) -> float:
        return self.board.clock() - self._began

    def rate(self) -> float | None:
        """Units per second in this process (a resumed run's earlier units left out)."""
        elapsed, done = self.elapsed(), self.done - self._first
        return done / elapsed if done > 0 and elapsed > 0 else None

    def status(self) -> str:
        """The plain line: done / total, time spent, rate, time left, note."""
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        parts = [f"{self.label} {self.done}/{self.total} {self.unit}s{share}", duration(self.elapsed())]
        rate = self.rate()
        if rate is not None:
            parts += [_rate(rate, self.unit), f"{duration((self.total - self.done) / rate)} left"]
        return " | ".join(parts + ([self.note] if self.note else []))

    def summary(self) -> str:
        """The closing line: done / total, time taken, rate, note."""
        parts = [f"{self.label} {self.done}/{self.total} {self.unit}s in {duration(self.elapsed())}"]
        rate = self.rate()
        if rate is not None:
            parts.append(_rate(rate, self.unit))
        return " | ".join(parts + ([self.note] if self.note else []))


def duration(seconds: float) -> str:
    """``12s``, ``1m48s``, ``2h05m``."""
    s = max(0, math.ceil(seconds)) if seconds < 60 else round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _rate(per_s: float, unit: str) -> str:
    """``8.31 steps/s``, or ``4.1 s/step`` below one unit a second."""
    return f"{per_s:.2f} {unit}s/s" if per_s >= 1 else f"{1 / per_s:.1f} s/{unit}"


class _Lines(io.TextIOBase):
    """A text stream that hands each whole line to ``emit``."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._buffer = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._buffer += text
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            self._emit(line)
        return len(text)

    def flush(self) -> None:
        if self._buffer:
            line, self._buffer = self._buffer, ""
            self._emit(line)


def _rich_bars(stream: TextIO) -> RichProgress:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn
    from rich.text import Text

    class Figures(ProgressColumn):
        """Time spent, rate and time left, as the plain lines write them."""

        def render(self, task: Task) -> Text:
            parts = [duration(task.elapsed or 0.0)]
            if task.speed:
                parts.append(_rate(task.speed, task.fields["unit"]))
            if task.time_remaining is not None:
                parts.append(f"{duration(task.time_remaining)} left")
            return Text(" | ".join(parts))

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}s"),
        Figures(),
        TextColumn("{task.fields[note]}"),
        console=Console(file=stream),
        transient=True,
    )
