"""Run metrics: what a training step measures, and where it goes (one JSON line per
step, a console progress line, and the experiment trackers of ``report_to``). The warm start's
rows go to the same file with an ``sft_step`` and no ``step`` (`MetricsLogger.log_sft`).

`rollout_metrics` and `advantage_metrics` compute a step's figures from its episodes
and advantages; `MetricsLogger` writes them. Loss diagnostics come from the loss
functions (`agentenv.trainers.losses.LossOutput.metrics`), timings from the trainer.
Torch-free (each tracker's library is imported only when named: `agentenv.trainers.trackers`).
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.trainers.trackers import Trackers

__all__ = ["MetricsLogger", "advantage_metrics", "rollout_metrics", "truncate_metrics"]


def rollout_metrics(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Rewards, success, failures by kind, reward components, turns and generation
    lengths of a step's episodes. Infra failures count in ``failure/infra`` and
    ``episodes`` only: they are left out of every reward and success figure."""
    valid = [t for t in trajs if t.failure is not Failure.INFRA]
    m: dict[str, Any] = {
        "episodes": len(trajs),
        "reward/task": _mean(t.task_reward or 0.0 for t in valid),
        "reward/total": _mean(t.total_reward for t in valid),
        "success_rate": _mean(t.success for t in valid),
    }
    for kind in Failure:
        m[f"failure/{kind.value}"] = sum(t.failure is kind for t in trajs) / max(len(trajs), 1)
    m.update(_reward_components(valid))
    m["turns/mean"] = _mean(t.turns for t in trajs)
    gens = [g for t in trajs for g in t.generations if g is not None]
    m["gen/length_mean"] = _mean(len(g.token_ids) for g in gens)
    m["gen/truncated_frac"] = _mean(g.finish_reason == "length" for g in gens)
    m.update(_per_turn(valid))
    return m


def _reward_components(valid: Sequence[Trajectory]) -> dict[str, float]:
    """``reward/<name>``: the mean over episodes of each component summed over the episode."""
    components: dict[str, list[float]] = defaultdict(list)
    for t in valid:
        per_episode: dict[str, float] = defaultdict(float)
        for tr in t.transitions:
            for name, value in {**tr.rewards, **tr.task_rewards}.items():
                per_episode[name] += value
        for name, total in per_episode.items():
            components[name].append(total)
    return {f"reward/{name}": _mean(values) for name, values in components.items() if name != "task"}


def _per_turn(valid: Sequence[Trajectory]) -> dict[str, float]:
    """``turn/<k>/...``: episodes that reached turn k, their mean step reward there, and
    the share of format errors."""
    by_turn: dict[int, list[tuple[float, bool]]] = defaultdict(list)
    for t in valid:
        for turn, tr in enumerate(t.transitions):
            by_turn[turn].append((sum(tr.rewards.values()), tr.error_kind == "format"))
    m: dict[str, float] = {}
    for turn, rows in sorted(by_turn.items()):
        m[f"turn/{turn}/episodes"] = len(rows)
        m[f"turn/{turn}/step_reward"] = _mean(r for r, _ in rows)
        m[f"turn/{turn}/format_error_rate"] = _mean(e for _, e in rows)
    return m


def advantage_metrics(per_turn: Sequence[Sequence[float]]) -> dict[str, float]:
    """Mean, population std, min and max of every turn's advantage in the batch (0 when empty)."""
    flat = [a for turns in per_turn for a in turns]
    mean = _mean(flat)
    return {
        "adv/mean": mean,
        "adv/std": math.sqrt(_mean((a - mean) ** 2 for a in flat)),
        "adv/min": min(flat, default=0.0) + 0.0,
        "adv/max": max(flat, default=0.0) + 0.0,
    }


def _mean(values: Iterable[float]) -> float:
    """The mean, 0.0 for no values; never -0.0 (adding 0.0 turns -0.0 into 0.0)."""
    items = [float(v) for v in values]
    return math.fsum(items) / len(items) + 0.0 if items else 0.0


class MetricsLogger:
    """Writes each step's metrics to ``run_dir/metrics.jsonl`` (one JSON object a line), a
    progress line to ``stream`` and the experiment ``trackers`` (`trackers.Trackers`, which
    the logger closes). ``resume_step``: the step a resumed run continues from (the file's
    later lines are dropped: those steps run again); None starts the file afresh."""

    def __init__(
        self,
        run_dir: Path,
        *,
        total_steps: int,
        trackers: Trackers | None = None,
        stream: TextIO | None = None,
        resume_step: int | None = None,
    ) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.total = total_steps
        self.stream = stream or sys.stdout
        self.trackers = trackers or Trackers()
        try:
            if resume_step is None:  # a new run: a new file, nothing of an earlier run's kept
                self._file = self.path.open("w", encoding="utf-8")
            else:
                _truncate_after(self.path, resume_step)
                self._file = self.path.open("a", encoding="utf-8")
        except BaseException:  # the trackers are this logger's from here on
            self.trackers.close(failed=True)
            raise

    def records(self) -> list[dict[str, Any]]:
        """Every step's record written so far, in order (a resumed run's earlier steps too);
        the warm start's rows (`log_sft`) are left out."""
        self._file.flush()
        with self.path.open(encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return [row for row in rows if "step" in row]

    def log_sft(self, sft_step: int, metrics: dict[str, Any]) -> None:
        """A row of the supervised warm start: ``{"sft_step": N, **metrics}`` (N counted from
        1; ``sft/loss``, ``sft/lr``, ``time/sft_s``), with no ``step``: the steps' readers skip
        it. To metrics.jsonl and the trackers (at their axis "sft_step"); the console shows the
        warm start's progress (`agentenv.trainers.progress`), not a line per row."""
        record = {"sft_step": sft_step, **{k: _clean(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        self.trackers.log(sft_step, record, axis="sft_step")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        self.trackers.log(step, record)
        self.stream.write(self._line(step, record) + "\n")
        self.stream.flush()

    def _line(self, step: int, r: dict[str, Any]) -> str:
        parts = [f"step {step:>4}/{self.total}"]
        # "z": a value that rounds to zero prints as 0, never as -0.
        for key, label, fmt in (
            ("reward/task", "reward", "{:z.3f}"),
            ("rlpr/reward_mean", "rlpr", "{:z.4f}"),  # with reward="rlpr": what the advantage uses
            ("success_rate", "success", "{:z.0%}"),
            ("eval/success_rate", "eval", "{:z.0%}"),
            ("loss", "loss", "{:+z.4f}"),
            # The KL to the reference (with kl_coef > 0); the one to the sampling policy (0
            # with one PPO epoch, where the ratio is 1) is kl_old; update_kl, one step's size.
            ("kl_ref", "kl_ref", "{:z.4f}"),
            ("approx_kl", "kl_old", "{:z.4f}"),
            ("update_kl", "step", "{:z.4f}"),
            ("entropy", "H", "{:z.2f}"),
            ("time/generate_s", "gen", "{:.1f}s"),
            ("time/env_s", "env", "{:.1f}s"),
            ("time/train_s", "train", "{:.1f}s"),
        ):
            if isinstance(r.get(key), (int, float)):
                parts.append(f"{label} {fmt.format(r[key])}")
        return " | ".join(parts)

    def close(self, *, failed: bool = False) -> None:
        """Close metrics.jsonl and end the tracker runs; a run that completed (not
        ``failed``) gives its report to the trackers that keep files (`Trackers.close`)."""
        self._file.close()
        self.trackers.close(failed=failed)


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity (they become null), and -0.0 is written as 0.0."""
    if isinstance(value, float):
        return value + 0.0 if math.isfinite(value) else None
    return value


def _truncate_after(path: Path, step: int) -> None:
    """On resume, drop lines of steps after the checkpoint: they will be run again
    (`truncate_metrics`; the warm start's rows are all kept)."""
    truncate_metrics(path, step)


def truncate_metrics(path: Path, step: int, *, sft_step: int | None = None) -> None:
    """Drop the rows of ``path`` (a metrics.jsonl) after step ``step`` and, given ``sft_step``,
    the warm start's rows after that one: a run resuming there runs them again. The last
    line may be cut short (the run was killed while writing it) and is dropped then; any
    other line that is not a record of a step or of a warm-start step is a ValueError
    naming it, and the file is kept as is."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    except OSError as e:
        raise ValueError(f"{path}: unreadable ({e.strerror or e})") from None
    lines = data.split(b"\n")
    last = max((i for i, raw in enumerate(lines) if raw.strip()), default=-1)
    kept = []
    for i, raw in enumerate(lines[: last + 1]):
        if not raw.strip():
            continue
        row = _row_of(raw)
        if row is None:
            if i < last:
                raise ValueError(
                    f"{path}: line {i + 1} is not a metrics record (a JSON object with an integer step, "
                    "or sft_step for the warm start); fix or delete that line to resume"
                )
            continue
        kind, logged = row
        limit = step if kind == "step" else sft_step
        if limit is None or logged <= limit:
            kept.append(raw.decode("utf-8") + "\n")
    path.write_text("".join(kept), encoding="utf-8")


def _row_of(raw: bytes) -> tuple[str, int] | None:
    """("step", N) for a step's line, ("sft_step", N) for a warm-start line; None when the
    line is neither (cut short, edited)."""
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(record, dict):
        return None
    for key in ("step", "sft_step"):
        if key in record:
            logged = record[key]
            return (key, logged) if type(logged) is int else None
    return None
