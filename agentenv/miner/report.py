"""What `agentenv miner show RUN_DIR` prints, read from a run directory without torch:
the miner state in the latest checkpoint and the last miner metrics in metrics.jsonl.
A corrupt checkpoint is one `ValueError` naming its file; a metrics line that cannot be
read (a run killed mid-write) is skipped and counted, as the report does."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentenv.core.checkpoints import latest_checkpoint
from agentenv.miner.ledger import TaskRecord

__all__ = ["MinerReport"]


class _Mined(BaseModel):
    """A mined task in the sampler's state, as far as the report reads it."""

    model_config = ConfigDict(extra="allow")

    origin: str


class _MinerState(BaseModel):
    """The miner's part of trainer_state.json (`MinerSampler.state_dict`), as far as the report reads it."""

    model_config = ConfigDict(extra="allow")

    ledger: dict[str, TaskRecord]
    mined: list[_Mined] = []


class _TrainerState(BaseModel):
    """trainer_state.json, validated at this boundary: a checkpoint may be corrupt or not the trainer's."""

    model_config = ConfigDict(extra="allow")

    step: int = Field(ge=0)
    sampler: Any = None


@dataclass
class MinerReport:
    step: int
    records: dict[str, TaskRecord]
    mined: Counter[str]
    """Mined tasks in the pool, by origin."""
    metrics: dict[str, Any]
    """The latest metrics row that has miner keys (empty if none)."""
    skipped_lines: int = 0
    """Lines of metrics.jsonl that could not be read (a run killed mid-write cuts the last)."""

    @classmethod
    def from_run(cls, run_dir: str | Path) -> MinerReport:
        """The miner state of a run directory. Raises `FileNotFoundError` when the run has no
        checkpoint yet and `ValueError`, one line naming the file, when its checkpoint is
        unreadable or the run did not use the miner."""
        run = Path(run_dir)
        # The trainer's rule: a pointer naming anything but a whole step-NNNNNN folder
        # beside it (``..``, a path elsewhere) is refused, never followed.
        checkpoint = latest_checkpoint(run)
        if checkpoint is None:
            raise FileNotFoundError(f"{run} has no checkpoint (no checkpoints/latest); is it a training run directory?")
        path = checkpoint / "trainer_state.json"
        try:
            state = _TrainerState.model_validate_json(path.read_bytes())
        except (OSError, ValueError) as e:  # ValidationError is a ValueError
            raise ValueError(f"{path}: not a readable trainer state ({_why(e)})") from None
        sampler = state.sampler
        if not isinstance(sampler, dict) or "ledger" not in sampler:
            raise ValueError(f"the run in {run} did not use the failure miner (set miner = {{}} in its config)")
        try:
            miner = _MinerState.model_validate(sampler)
        except ValidationError as e:
            raise ValueError(f"{path}: not a readable miner state ({_why(e, 'sampler')})") from None
        mined = Counter(m.origin for m in miner.mined)
        metrics, skipped = _last_miner_row(run / "metrics.jsonl")
        return cls(state.step, miner.ledger, mined, metrics, skipped)

    def pools(self) -> list[tuple[str, int]]:
        status = Counter(r.status for r in self.records.values())
        unseen = sum(not r.seen for r in self.records.values())
        return [
            ("active", status["active"]),
            ("solved (retired)", status["solved"]),
            ("quarantined", status["quarantined"]),
            ("never seen (in ledger)", unseen),
            *((f"mined: {k}", v) for k, v in sorted(self.mined.items())),
        ]

    def failures_by_kind(self) -> list[tuple[str, int]]:
        total: Counter[str] = Counter()
        for r in self.records.values():
            total.update(r.failures)
        return sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))

    def families(self, n: int = 10) -> list[tuple[str, int, int, float]]:
        """(family, attempts, failures, failure rate), most failures first."""
        attempts: Counter[str] = Counter()
        failed: Counter[str] = Counter()
        for r in self.records.values():
            attempts[r.family] += r.attempts
            failed[r.family] += r.attempts - r.successes
        rows = [(f, attempts[f], failed[f], failed[f] / attempts[f]) for f in attempts if attempts[f]]
        return sorted(rows, key=lambda row: (-row[2], row[0]))[:n]

    def hardest(self, n: int = 10) -> list[tuple[str, TaskRecord]]:
        seen = [(tid, r) for tid, r in self.records.items() if r.attempts]
        return sorted(seen, key=lambda item: (item[1].success_rate, -item[1].attempts, item[0]))[:n]


def _last_miner_row(path: Path) -> tuple[dict[str, Any], int]:
    """The last row with miner keys, and how many lines were skipped: like the report,
    a line that is not a JSON object (cut short, not UTF-8) is skipped, never fatal."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}, 0
    except OSError as e:
        raise ValueError(f"{path}: unreadable ({e.strerror or e})") from None
    last: dict[str, Any] = {}
    skipped = 0
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):
            row = None
        if not isinstance(row, dict):
            skipped += 1
        elif any(k.startswith("miner/") for k in row):
            last = row
    return last, skipped


def _why(e: Exception, prefix: str = "") -> str:
    """One line: the first thing pydantic or the OS found wrong, and where."""
    if not isinstance(e, ValidationError):
        return getattr(e, "strerror", None) or str(e)[:200]
    err = e.errors()[0]
    where = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
    return f"{where}: {err['msg']}" if where else str(err["msg"])
