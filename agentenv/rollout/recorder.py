"""The caller's side of a finished episode: its place in the result, its JSONL line, ``on_episode``.

`Recorder` is what `rollout` hands its executor: the executor calls `Recorder.record`
once per finished episode, whichever executor it is, so the results come back in the
order asked for, each trajectory is appended to the ``out`` file and flushed as it
finishes (a crash loses nothing that had finished), and ``on_episode`` sees it then.

A trajectory holding something no encoder takes, or that a reader would refuse (an
integer past the digit limit, nesting past the readers' depth), is written with those
values spelled out rather than lost, so every line reads back (`jsonl_line`).

Left out: running episodes (the executors), reading the file back (`Trajectory.read_jsonl`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import IO, Any

from agentenv.core import _admit, _safejson
from agentenv.core.trajectory import Trajectory

__all__ = ["READ_DEPTH", "Recorder", "jsonl_line"]


class Recorder:
    """The trajectories of one rollout, by episode index, as they finish.

    The ``out`` file opens at `open` (executors call it once their checks passed, so a
    path that cannot be written fails before any episode runs, and a mistyped task id
    makes no file) or else at the first `record`."""

    def __init__(self, episodes: int, out: str | Path | None, on_episode: Callable[[Trajectory], None] | None) -> None:
        self.out, self.on_episode = out, on_episode
        self._results: list[Trajectory | None] = [None] * episodes
        self._sink: IO[str] | None = None

    def open(self) -> None:
        """Open the ``out`` file for appending (once; nothing to do without one)."""
        if self.out is not None and self._sink is None:
            self._sink = Path(self.out).open("a", encoding="utf-8")

    def record(self, index: int, traj: Trajectory) -> None:
        """Episode ``index`` finished: keep it, append its line (flushed), tell ``on_episode``."""
        self._results[index] = traj
        self.open()
        if self._sink is not None:
            self._sink.write(jsonl_line(traj))
            self._sink.flush()
        if self.on_episode is not None:
            self.on_episode(traj)

    def trajectories(self) -> list[Trajectory]:
        """The recorded trajectories in episode order (an episode never recorded is left out)."""
        return [t for t in self._results if t is not None]

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None


def jsonl_line(traj: Trajectory) -> str:
    """``traj`` as one JSONL line that reads back. Envs keep their records plain JSON
    data, but a custom env or policy may not: rather than lose the episode (and abort
    the rollout, or break every later reader of the file), what the encoder refuses
    or a reader would refuse is spelled out (see `_plain`)."""
    try:
        line = traj.model_dump_json()
        _safejson.loads(line, max_depth=READ_DEPTH)  # what json writes, it may not read back (10**5000)
        return line + "\n"
    except (ValueError, TypeError, RecursionError):  # pydantic's serialisation errors and UnsafeJSON are ValueErrors
        pass
    try:
        data = _plain(traj.model_dump(mode="python"), depth=0)
    except (ValueError, TypeError, RecursionError):  # not even a Python dump: keep what identifies it
        data = {
            "env_id": traj.env_id,
            "task": _plain(traj.task.model_dump(mode="python"), depth=0),
            "seed": traj.seed,
            "messages": [],
            "transitions": [],
            "failure": traj.failure.value,
            "error": "the episode's record could not be written",
        }
    return json.dumps(data, ensure_ascii=False, allow_nan=False) + "\n"


READ_DEPTH = 200
"""Lines nested deeper go through `_plain`: pydantic's JSON reader (`Trajectory.from_json`) refuses ~250."""
_PLAIN_DEPTH = 64


def _plain(value: Any, depth: int) -> Any:
    """``value`` as JSON data: lone surrogates spelled out, non-finite floats as None,
    integers past `_safejson.MAX_INT_BITS` as text, odd types and nesting past 64
    levels as their repr."""
    if isinstance(value, str):
        return _safejson.clean_text(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= _safejson.MAX_INT_BITS else _long_int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth > _PLAIN_DEPTH:
        return "<nested too deeply>"
    if isinstance(value, dict):
        return {_safejson.clean_text(str(k)): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, Enum):
        return _plain(value.value, depth + 1)
    return _admit.safe_repr(value)


def _long_int(value: int) -> str:
    try:
        return str(value)[:50]
    except ValueError:  # past the digit limit of str() itself
        return f"<int of {value.bit_length()} bits>"
