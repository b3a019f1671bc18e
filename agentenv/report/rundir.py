"""Reading a training run directory for the report, whatever state it is in.

A run directory (``GRPOConfig.output_dir``) holds metrics.jsonl (the supervised warm
start's rows, which have an ``sft_step`` and no ``step``, then one row per step),
config.json, trajectories/step-NNNNNN.jsonl (each step's episodes),
evals/step-NNNNNN.jsonl (each held-out evaluation's episodes) and checkpoints/
(the failure miner's ledger is in the latest one's trainer_state.json); while a run
trains, `CLAIM_FILE` names its process. Any of them may be missing (a run killed
before its first step), cut short (killed mid-write) or corrupt: what cannot be read is
skipped and said in `RunDir.skipped`, never raised. Every line is validated at this
boundary with pydantic before anything uses it. `is_run` and `runs_below` tell a run
directory from any other folder.

Left out: torch and the trainer; this module reads what a run wrote, from any process.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "CLAIM_FILE",
    "EpisodeFile",
    "MetricsRow",
    "RunClaim",
    "RunDir",
    "Skipped",
    "WarmStartRow",
    "is_run",
    "not_a_run",
    "runs_below",
    "validation_reason",
]

_STEP_FILE = re.compile(r"^step-(\d{1,9})\.jsonl$")
MAX_METRICS_LINE = 1 << 20
"""A metrics line longer than this (1 MiB) is skipped: no step writes one."""
CLAIM_FILE = "run.lock"
"""The file naming the process that trains in a run directory (`RunClaim`, as JSON)."""
RUN_MARKERS = ("metrics.jsonl", "trajectories", "evals", "checkpoints", CLAIM_FILE)
"""What only a training run leaves at the top of its directory (a run's config.json
alone is told from a model's by its ``output_dir``)."""


class MetricsRow(BaseModel):
    """One line of metrics.jsonl: a step and its figures. Numbers are kept for charts
    (NaN, infinities and booleans dropped), lists for the miner's top families."""

    model_config = ConfigDict(extra="allow")

    step: int = Field(ge=0, le=10**9)

    def numbers(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, value in (self.model_extra or {}).items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            try:
                number = float(value)
            except OverflowError:  # an integer past a float's range
                continue
            if math.isfinite(number):
                out[key] = number
        return out

    def value(self, key: str) -> Any:
        return (self.model_extra or {}).get(key)


class WarmStartRow(BaseModel):
    """A line of the supervised warm start: its own 1-based ``sft_step`` and no ``step``
    (the trainer writes these before the first step's row), the loss and learning rate."""

    model_config = ConfigDict(extra="ignore", strict=True)

    sft_step: int = Field(ge=1, le=10**9)
    loss: float | None = Field(validation_alias="sft/loss")
    """None where the loss was not finite (the trainer writes NaN and infinities as null)."""
    lr: float | None = Field(None, validation_alias="sft/lr")
    time_s: float | None = Field(None, validation_alias="time/sft_s")
    """Seconds since the warm start began."""

    def loss_text(self) -> str:
        return "not finite" if self.loss is None or not math.isfinite(self.loss) else f"{self.loss:.4g}"


class RunClaim(BaseModel):
    """`CLAIM_FILE`: the process training in a run directory. A claim whose process is
    gone, or whose pid now belongs to a process started later, is stale: the run stopped."""

    model_config = ConfigDict(extra="ignore")

    pid: int = Field(ge=1)
    host: str
    started: str | None = None
    """The process's start time (/proc/PID/stat field 22): tells it from a reused pid."""

    @classmethod
    def of_this_process(cls) -> RunClaim:
        return cls(pid=os.getpid(), host=socket.gethostname(), started=_process_start(os.getpid()))

    def live(self) -> bool | None:
        """Whether the claiming process still runs; None when it is on another host."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # alive, and another user's
            pass
        now = _process_start(self.pid)
        return self.started is None or now is None or now == self.started


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot; None without /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            # After the command name (which may hold spaces and parentheses): field 3 on.
            return f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


@dataclass(frozen=True, slots=True)
class EpisodeFile:
    """A JSONL file of episodes: where it is, whose they are (train or held-out), and the step."""

    path: Path
    source: str
    step: int

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"


@dataclass
class Skipped:
    """What could not be read, said once per file with the lines it concerned."""

    notes: list[str] = field(default_factory=list)
    _lines: dict[str, list[str]] = field(default_factory=dict)

    def note(self, message: str) -> None:
        self.notes.append(message)

    def line(self, where: str, number: int, why: str) -> None:
        self._lines.setdefault(where, []).append(f"line {number}: {why}")

    def all(self) -> list[str]:
        out = list(self.notes)
        for where, lines in self._lines.items():
            shown = "; ".join(lines[:5]) + (f"; and {len(lines) - 5} more" if len(lines) > 5 else "")
            out.append(f"{where}: skipped {len(lines)} line{'s' * (len(lines) > 1)} ({shown})")
        return out


class RunDir:
    """The readable parts of a run directory (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.skipped = Skipped()
        self.warm_start: list[WarmStartRow] = []
        """The warm start's rows, by ``sft_step``; `rows` are the steps after it."""
        self.rows = self._metrics()
        self.config = self._config()
        self.claim = self._claim()
        self.files = self._episode_files("trajectories", "train") + self._episode_files("evals", "held-out")
        if not (self.rows or self.warm_start or self.files or self.claim or (self.path / "checkpoints").exists()):
            self.skipped.note("the folder holds no metrics.jsonl, no trajectories and no checkpoints: an empty run")

    def _metrics(self) -> list[MetricsRow]:
        path = self.path / "metrics.jsonl"
        if not path.exists():
            self.skipped.note("no metrics.jsonl: no curves")
            return []
        by_step: dict[int, MetricsRow] = {}
        by_sft_step: dict[int, WarmStartRow] = {}
        for number, line in _lines(path, self.skipped):
            if len(line) > MAX_METRICS_LINE:
                self.skipped.line("metrics.jsonl", number, f"longer than {MAX_METRICS_LINE} bytes")
                continue
            try:
                row = _metrics_row(line)
            except ValidationError as e:
                self.skipped.line("metrics.jsonl", number, validation_reason(e))
                continue
            # A step logged twice (a resume) counts once, the later line.
            if isinstance(row, WarmStartRow):
                by_sft_step[row.sft_step] = row
            else:
                by_step[row.step] = row
        self.warm_start = [by_sft_step[s] for s in sorted(by_sft_step)]
        return [by_step[s] for s in sorted(by_step)]

    def _claim(self) -> RunClaim | None:
        path = self.path / CLAIM_FILE
        try:
            return RunClaim.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except OSError as e:
            self.skipped.note(f"{CLAIM_FILE}: unreadable ({_short(e)})")
        except ValidationError as e:
            self.skipped.note(f"{CLAIM_FILE}: {validation_reason(e)}")
        return None

    def warm_start_progress(self) -> str | None:
        """``step 12 of 50, loss 0.731`` while the run is in its warm start (rows of the
        warm start, none of a step after it); None otherwise."""
        if not self.warm_start or self.rows:
            return None
        last = self.warm_start[-1]
        return f"step {last.sft_step}{self.of_planned('sft_steps')}, loss {last.loss_text()}"

    def of_planned(self, key: str) -> str:
        """`` of N`` for the config's whole number ``key`` (``steps``, ``sft_steps``); "" without one."""
        total = self.config.get(key)
        return f" of {total}" if isinstance(total, int) and not isinstance(total, bool) else ""

    def _config(self) -> dict[str, Any]:
        path = self.path / "config.json"
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
            self.skipped.note(f"config.json: unreadable ({_short(e)})")
            return {}
        if not isinstance(data, dict):
            self.skipped.note(f"config.json: expected an object, got {type(data).__name__}")
            return {}
        return data

    def _episode_files(self, folder: str, source: str) -> list[EpisodeFile]:
        root = self.path / folder
        if not root.is_dir():
            return []
        found = []
        for path in root.iterdir():
            match = _STEP_FILE.match(path.name)
            if match and path.is_file():
                found.append(EpisodeFile(path, source, int(match.group(1))))
            elif path.name.endswith(".tmp"):
                self.skipped.note(f"{folder}/{path.name}: an unfinished write (the run was stopped while writing it)")
        return sorted(found, key=lambda f: f.step)

    def numbers(self) -> list[tuple[int, dict[str, float]]]:
        return [(row.step, row.numbers()) for row in self.rows]


def _metrics_row(line: str) -> MetricsRow | WarmStartRow:
    """A step's row, or the warm start's (no ``step``, an ``sft_step``); a line with
    neither fails as a step's row ("step: Field required")."""
    try:
        return MetricsRow.model_validate_json(line)
    except ValidationError as e:
        if not any(err["type"] == "missing" and err["loc"] == ("step",) for err in e.errors()):
            raise
        try:
            return WarmStartRow.model_validate_json(line)
        except ValidationError as warm:
            if any(err["type"] == "missing" and err["loc"] == ("sft_step",) for err in warm.errors()):
                raise e from None
            raise


def is_run(path: Path) -> bool:
    """Whether ``path`` is a training run's directory: it holds one of `RUN_MARKERS`, or a
    run's config.json (one that names its ``output_dir``), as a run killed before its
    first step leaves."""
    if not path.is_dir():
        return False
    if any((path / name).exists() for name in RUN_MARKERS):
        return True
    try:
        config = json.loads((path / "config.json").read_bytes())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(config, dict) and "output_dir" in config


def not_a_run(path: Path) -> str | None:
    """Why the folder ``path`` is not a training run's directory, naming the runs below it
    (a did-you-mean: ``runs`` for ``runs/tiny``); None when it is one."""
    if is_run(path):
        return None
    below = runs_below(path)
    shown = ", ".join(str(p) for p in below[:5]) + (f" and {len(below) - 5} more" if len(below) > 5 else "")
    hint = f"; did you mean a run below it: {shown}?" if below else "; no run below it either"
    return f"{path} is not a training run's directory (no metrics.jsonl, trajectories/, evals/ or checkpoints/){hint}"


def runs_below(path: Path, *, depth: int = 3, most_folders: int = 2000) -> list[Path]:
    """The run directories below ``path`` (``path / ...``, sorted), looking ``depth``
    folders down at most and into at most ``most_folders`` folders; hidden folders and
    the folders inside a run are not searched."""
    found: list[Path] = []
    queue = deque([(path, 0)])
    seen = 0
    while queue and seen < most_folders:
        folder, level = queue.popleft()
        try:
            children = sorted(c for c in folder.iterdir() if c.is_dir() and not c.name.startswith("."))
        except OSError:
            continue
        for child in children:
            seen += 1
            if is_run(child):
                found.append(child)
            elif level + 1 < depth:
                queue.append((child, level + 1))
    return sorted(found)


def _lines(path: Path, skipped: Skipped) -> list[tuple[int, str]]:
    """The non-empty lines of a text file, numbered from 1; bytes that are not UTF-8
    skip their line, never the file."""
    try:
        data = path.read_bytes()
    except OSError as e:
        skipped.note(f"{path.name}: unreadable ({_short(e)})")
        return []
    out = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            out.append((number, raw.decode("utf-8")))
        except UnicodeDecodeError:
            skipped.line(path.name, number, "not UTF-8")
    return out


def validation_reason(e: ValidationError) -> str:
    err = e.errors()[0]
    if err["type"] == "json_invalid":
        return "not JSON (cut short?)"
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])


def _short(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) <= 200 else text[:200] + "..."
