"""What a run's log shows of its long phases: a plain line at every tenth with the rate
and the time left, a line after any silence of ``every_s``, a closing line; bars on a
terminal, with other lines printed above them."""

from __future__ import annotations

import io
import re
import threading
import time

import pytest

from agentenv.trainers.progress import ProgressBoard, duration


class _Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_plain_phase_prints_a_line_at_every_tenth_with_its_rate_and_time_left() -> None:
    out, clock = io.StringIO(), _Clock()
    with ProgressBoard(out, plain=True, clock=clock).phase("warm start", 40) as phase:
        for i in range(40):
            clock.now += 0.5
            phase.advance(note=f"loss {1 / (i + 1):.3f}")
    lines = out.getvalue().splitlines()
    assert lines[:2] == [
        "warm start 4/40 steps (10%) | 2s | 2.00 steps/s | 18s left | loss 0.250",
        "warm start 8/40 steps (20%) | 4s | 2.00 steps/s | 16s left | loss 0.125",
    ]
    assert [line.split(" | ")[0] for line in lines] == [
        *(f"warm start {4 * k}/40 steps ({k}0%)" for k in range(1, 10)),
        "warm start 40/40 steps in 20s",
    ]
    assert lines[-1] == "warm start 40/40 steps in 20s | 2.00 steps/s | loss 0.025"


def test_a_resumed_phase_counts_from_where_it_stopped_and_a_slow_one_shows_seconds_per_unit() -> None:
    out, clock = io.StringIO(), _Clock()
    with ProgressBoard(out, plain=True, clock=clock).phase("GRPO", 10, done=6) as phase:
        clock.now += 20
        phase.advance()  # 7 of 10: the 70% line, the rate counting this process's steps alone
        clock.now += 60
        phase.advance(3)
    assert out.getvalue().splitlines() == [
        "GRPO 7/10 steps (70%) | 20s | 20.0 s/step | 1m00s left",
        "GRPO 10/10 steps in 1m20s | 20.0 s/step",
    ]


def test_a_silent_phase_still_prints_a_line_every_every_s() -> None:
    """A unit of work longer than every_s (one long step, a slow evaluation) is never one long silence."""
    out = io.StringIO()
    board = ProgressBoard(out, plain=True, every_s=0.05)
    with board.phase("held-out eval", 256, unit="episode"):
        deadline = time.monotonic() + 5
        while out.getvalue().count("\n") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3
    assert all(re.fullmatch(r"held-out eval 0/256 episodes \(0%\) \| \d+s", line) for line in lines[:2])
    assert lines[-1].startswith("held-out eval 0/256 episodes in")
    assert not [t for t in threading.enumerate() if t.name == "agentenv-progress"]  # the watcher stopped


def test_lines_written_through_the_board_count_as_output() -> None:
    """The per-step metrics line goes through `ProgressBoard.stream`: while those come, the
    board adds no line of its own."""
    out = io.StringIO()
    board = ProgressBoard(out, plain=True, every_s=0.2)
    with board.phase("GRPO", 100):
        for step in range(1, 9):
            board.stream.write(f"step {step:>4}/100 | reward 0.5\n")
            board.stream.flush()
            time.sleep(0.05)
    assert out.getvalue().splitlines()[:8] == [f"step {step:>4}/100 | reward 0.5" for step in range(1, 9)]


def test_a_burst_of_units_prints_the_closing_line_alone() -> None:
    """Tenths a phase crosses within ``min_gap_s`` of its last line (a short evaluation,
    episodes that finish together) print no line each."""
    out, clock = io.StringIO(), _Clock()
    with ProgressBoard(out, plain=True, clock=clock).phase("held-out eval", 8, unit="episode") as phase:
        clock.now += 0.5
        phase.advance(4)  # 50%, half a second in: too soon for a line
        clock.now += 0.6
        phase.advance()  # 62%, a second in: a line
        phase.advance(2)
        phase.advance()
    assert out.getvalue().splitlines() == [
        "held-out eval 5/8 episodes (62%) | 2s | 4.55 episodes/s | 1s left",
        "held-out eval 8/8 episodes in 2s | 7.27 episodes/s",
    ]


def test_a_phase_stopped_by_an_error_says_where_it_stopped() -> None:
    out, clock = io.StringIO(), _Clock()
    with pytest.raises(KeyboardInterrupt), ProgressBoard(out, plain=True, clock=clock).phase("warm start", 20) as phase:
        clock.now += 3
        phase.advance()
        raise KeyboardInterrupt
    assert out.getvalue() == "warm start 1/20 steps (5%) | 3s | 3.0 s/step | 57s left\n"  # not "in 3s"


def test_on_a_terminal_lines_print_above_the_bars_and_each_phase_closes_with_its_line() -> None:
    out = io.StringIO()
    board = ProgressBoard(out, plain=False)
    with board.phase("GRPO", 2) as steps:
        with board.phase("held-out eval", 3, unit="episode") as evaluation:
            evaluation.advance(3)
        board.stream.write("step    1/2 | reward 0.5\n")
        steps.advance(2)
    text = out.getvalue()
    assert "held-out eval 3/3 episodes in 1s" in text and "GRPO 2/2 steps in 1s" in text
    assert text.index("held-out eval 3/3") < text.index("step    1/2 | reward 0.5") < text.index("GRPO 2/2")


def test_a_disabled_board_prints_nothing() -> None:
    out = io.StringIO()
    with ProgressBoard(out, plain=True, enabled=False).phase("warm start", 10) as phase:
        phase.advance(10)
    assert out.getvalue() == ""


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.2, "1s"), (12, "12s"), (59.4, "1m00s"), (61, "1m01s"), (3600 * 2 + 300, "2h05m")]
)
def test_durations_read_as_a_person_would_write_them(seconds, text) -> None:
    assert duration(seconds) == text
