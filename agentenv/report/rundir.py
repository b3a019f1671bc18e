"""Reading a training run directory for the report, whatever state it is in.

A run directory (``GRPOConfig.output_dir``) holds metrics.jsonl (one row per step),
config.json, trajectories/step-NNNNNN.jsonl (each step's episodes),
evals/step-NNNNNN.jsonl (each held-out evaluation's episodes) and checkpoints/
(the failure miner's ledger is in the latest one's trainer_state.json). Any of them
may be missing (a run killed before its first step), cut short (killed mid-write) or
corrupt: what cannot be read is skipped and said in `RunDir.skipped`, never raised.
Every line is validated at this boundary with pydantic before anything uses it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["EpisodeFile", "MetricsRow", "RunDir", "Skipped", "validation_reason"]

_STEP_FILE = re.compile(r"^step-(\d{1,9})\.jsonl$")
MAX_METRICS_LINE = 1 << 20
"""A metrics line longer than this (1 MiB) is skipped: no step writes one."""


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
        self.rows = self._metrics()
        self.config = self._config()
        self.files = self._episode_files("trajectories", "train") + self._episode_files("evals", "held-out")
        if not self.rows and not self.files and not (self.path / "checkpoints").exists():
            self.skipped.note(f"{self.path} holds no metrics.jsonl, no trajectories and no checkpoints: an empty run")

    def _metrics(self) -> list[MetricsRow]:
        path = self.path / "metrics.jsonl"
        if not path.exists():
            self.skipped.note("no metrics.jsonl: no curves")
            return []
        by_step: dict[int, MetricsRow] = {}
        for number, line in _lines(path, self.skipped):
            if len(line) > MAX_METRICS_LINE:
                self.skipped.line("metrics.jsonl", number, f"longer than {MAX_METRICS_LINE} bytes")
                continue
            try:
                row = MetricsRow.model_validate_json(line)
            except ValidationError as e:
                self.skipped.line("metrics.jsonl", number, validation_reason(e))
                continue
            by_step[row.step] = row  # a step logged twice (a resume) counts once, the later line
        return [by_step[s] for s in sorted(by_step)]

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
