"""Run metrics: one JSON line per step, a console progress line, and TensorBoard
when it is installed."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, TextIO

__all__ = ["MetricsLogger"]


class MetricsLogger:
    def __init__(
        self,
        run_dir: Path,
        *,
        total_steps: int,
        tensorboard: bool = True,
        stream: TextIO | None = None,
        resume_step: int = 0,
    ) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.total = total_steps
        self.stream = stream or sys.stdout
        _truncate_after(self.path, resume_step)
        self._file = self.path.open("a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError:  # tensorboard is optional
                self._tb = None

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self._tb.add_scalar(key, value, step)
        self.stream.write(self._line(step, record) + "\n")
        self.stream.flush()

    def _line(self, step: int, r: dict[str, Any]) -> str:
        parts = [f"step {step:>4}/{self.total}"]
        for key, label, fmt in (
            ("reward/task", "reward", "{:.3f}"),
            ("success_rate", "success", "{:.0%}"),
            ("eval/success_rate", "eval", "{:.0%}"),
            ("loss", "loss", "{:+.4f}"),
            ("approx_kl", "kl", "{:.4f}"),
            ("entropy", "H", "{:.2f}"),
            ("time/generate_s", "gen", "{:.1f}s"),
            ("time/env_s", "env", "{:.1f}s"),
            ("time/train_s", "train", "{:.1f}s"),
        ):
            if isinstance(r.get(key), (int, float)):
                parts.append(f"{label} {fmt.format(r[key])}")
        return " | ".join(parts)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _truncate_after(path: Path, step: int) -> None:
    """On resume, drop lines of steps after the checkpoint: they will be run again."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line).get("step", 0) <= step]
    path.write_text("".join(line + "\n" for line in kept))
