"""What `agentenv miner show RUN_DIR` prints, read from a run directory without torch:
the miner state in the latest checkpoint and the last miner metrics in metrics.jsonl."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentenv.miner.ledger import TaskRecord

__all__ = ["MinerReport"]


@dataclass
class MinerReport:
    step: int
    records: dict[str, TaskRecord]
    mined: Counter[str]
    """Mined tasks in the pool, by origin."""
    metrics: dict[str, Any]
    """The latest metrics row that has miner keys (empty if none)."""

    @classmethod
    def from_run(cls, run_dir: str | Path) -> MinerReport:
        run = Path(run_dir)
        pointer = run / "checkpoints" / "latest"
        if not pointer.exists():
            raise FileNotFoundError(f"{run} has no checkpoint (no checkpoints/latest); is it a training run directory?")
        state = json.loads((run / "checkpoints" / pointer.read_text().strip() / "trainer_state.json").read_text())
        sampler = state.get("sampler") or {}
        if "ledger" not in sampler:
            raise ValueError(f"the run in {run} did not use the failure miner (set miner = {{}} in its config)")
        records = {tid: TaskRecord.model_validate(r) for tid, r in sampler["ledger"].items()}
        mined = Counter(m["origin"] for m in sampler.get("mined", []))
        return cls(int(state["step"]), records, mined, _last_miner_row(run / "metrics.jsonl"))

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


def _last_miner_row(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    last: dict[str, Any] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if any(k.startswith("miner/") for k in row):
                last = row
    return last
