"""`build_report` (a training run directory) and `build_eval_report` (an evaluation):
read, index the episodes, draw the charts, write the page.

The run report's sections: the run at a glance (in progress, in its warm start); the
supervised warm start's loss, when the run had one; rewards and success (held-out success
with its bootstrap interval); reward against compute (`agentenv.report.forecast`);
optimisation (loss, KL, entropy, clip fraction, advantages, gradient, learning rate);
throughput and the time split; success by env, task family and difficulty over
training; failures by kind over time; per-turn figures; the failure miner (pools over
time, mined tasks, top failing families and hardest tasks); every other logged figure;
the trajectory viewer. A path in the page is written relative to the run directory:
the page names no folder of the machine that wrote it.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.eval.evaluation import Estimate, EvalResult
from agentenv.report.charts import Series, chart
from agentenv.report.episodes import PAGE_EPISODES, BuiltEpisodes, EpisodeIndex, EpisodeRecord, read_episodes
from agentenv.report.forecast import forecast_section
from agentenv.report.page import Section, cards, html_table, render_page
from agentenv.report.rundir import RunDir, Skipped, WarmStartRow

__all__ = ["MAX_EMBEDDED", "Report", "build_eval_report", "build_report"]

MAX_EMBEDDED = 1000
"""Episodes embedded in the page at most (the rest load from sidecar pages)."""
EMBED_BYTES = 6_000_000
"""Bytes of embedded episodes at most: with the index of 100k episodes and the charts,
the page stays well under 20 MB."""
TOP_GROUPS = 8
"""Lines per success-by-group chart; the smaller groups are summed as "other"."""
OTHER_CHARTS = 40

Rows = list[tuple[int, dict[str, float]]]


@dataclass(frozen=True, slots=True)
class Report:
    """What was written."""

    path: Path
    size_bytes: int
    episodes: int
    embedded: int
    pages: int
    sidecar_dir: Path | None
    sidecar_bytes: int
    skipped: list[str]
    status: str | None = None
    """A run's state when it is not simply written out: ``in progress``, ``in its warm
    start: step 12 of 50, loss 0.731``, ``stopped (...)``; None otherwise."""


def _index(out: Path, max_embedded: int, embed_bytes: int, page_size: int, pages: bool) -> EpisodeIndex:
    sidecar = out.with_name(out.stem + "_files")
    return EpisodeIndex(
        sidecar,
        quote(sidecar.name) + "/",
        max_embedded=max_embedded,
        embed_bytes=embed_bytes,
        page_size=page_size,
        pages=pages,
    )


def _write(
    out: Path, text: str, built: BuiltEpisodes, index: EpisodeIndex, skipped: list[str], status: str | None = None
) -> Report:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    data = text.encode("utf-8")
    tmp.write_bytes(data)
    tmp.replace(out)
    return Report(
        path=out,
        size_bytes=len(data),
        episodes=built.episodes,
        embedded=built.embedded,
        pages=built.pages,
        sidecar_dir=index.sidecar_dir if built.pages else None,
        sidecar_bytes=built.sidecar_bytes,
        skipped=skipped,
        status=status,
    )


# -- a training run ---------------------------------------------------------------------------


def build_report(
    run_dir: str | Path,
    out: str | Path | None = None,
    *,
    max_embedded: int = MAX_EMBEDDED,
    embed_bytes: int = EMBED_BYTES,
    page_size: int = PAGE_EPISODES,
    pages: bool = True,
) -> Report:
    """Write the report of a training run directory to ``out`` (default
    ``RUN_DIR/report.html``); episodes past the embedded sample go to the folder
    ``<out stem>_files`` next to it (``pages=False``: nowhere; the viewer lists them
    and names their JSONL file and line). A missing, half-written or corrupt part of
    the run is skipped and listed at the top of the page. Raises `NotADirectoryError`
    when ``run_dir`` is not a directory."""
    run = Path(run_dir)
    if not run.is_dir():
        raise NotADirectoryError(f"{run} is not a directory (a training run's output_dir)")
    target = Path(out) if out is not None else run / "report.html"
    data = RunDir(run)
    index = _index(target, max_embedded, embed_bytes, page_size, pages)
    for file in data.files:
        for number, record in read_episodes(file, data.skipped):
            index.add(record, source=file.source, step=file.step, file=file.name, line=number)
    built = index.finish()
    rows = data.numbers()
    local = _relative_to(run)
    status = _status(data)
    sections = [
        Section("overview", "Run", _overview(data, rows, built, status, local)),
        *([Section("warm-start", "Warm start", _warm_start(data))] if data.warm_start else []),
        Section("curves", "Rewards and success", _grid(_reward_charts(rows))),
        Section("forecast", "Reward against compute", forecast_section(rows)),
        Section("optimisation", "Optimisation", _grid(_optimisation_charts(rows))),
        Section("throughput", "Throughput and time", _grid(_throughput_charts(rows))),
        Section("groups", "Success by env, family and difficulty", _grid(_group_charts(built))),
        Section("failures", "Failures by kind", _grid(_failure_charts(rows, built))),
        Section("turns", "Per turn", _grid(_turn_charts(rows))),
        Section("miner", "Failure miner", _miner(data, rows, local)),
        Section("other", "Other figures", _other(rows)),
    ]
    skipped = [local(note) for note in data.skipped.all()]
    steps = f"{len(rows)} logged steps" if rows else "no logged steps"
    about = [status, steps, f"{built.episodes:,} episodes", f"report written {_now()}"]
    text = render_page(
        title=f"agentenv run · {run.resolve().name}",
        subtitle=" · ".join(part for part in about if part),
        sections=sections,
        skipped=skipped,
        episodes=built,
    )
    return _write(target, text, built, index, skipped, status)


def _relative_to(run: Path) -> Callable[[str], str]:
    """A text (a note, an error, a config value) with the run directory's path, as given
    or absolute, written relative to it: ``/home/me/runs/tiny/config.json`` is
    ``config.json``, the directory itself ``.``."""
    forms = {f.rstrip(os.sep) for f in (str(run), os.path.abspath(run), str(run.resolve()))} - {"", os.curdir}
    if not forms:  # the run is the root folder: every path is relative to it as written
        return lambda text: text
    alternatives = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
    # Only where a path starts: "runs/tiny" is left alone inside "old-runs/tiny".
    pattern = re.compile(rf"(?<![\w.{re.escape(os.sep)}-])(?:{alternatives})(?:{re.escape(os.sep)}+|(?![\w.-]))")

    def local(text: str) -> str:
        return pattern.sub(lambda m: "" if m.group(0).endswith(os.sep) else ".", text)

    return local


def _status(data: RunDir) -> str | None:
    """Whether the run trains now (its `rundir.CLAIM_FILE`) and where it is, when it is
    not simply written out: ``in progress, in its warm start: step 12 of 50, loss 0.731``."""
    claim = data.claim
    live = claim.live() if claim is not None else False
    parts = []
    if claim is not None and live is None:
        parts.append(f"claimed by a process on {claim.host} (not checked from here)")
    elif live:
        parts.append("in progress")
    elif claim is not None:
        parts.append("stopped (the process that trained it is gone)")
    warm = data.warm_start_progress()
    if warm is not None:
        parts.append(f"in its warm start: {warm}")
    elif live and data.rows:
        parts.append(f"at step {data.rows[-1].step}{data.of_planned('steps')}")
    return ", ".join(parts) or None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _grid(charts: Sequence[str]) -> str:
    return f'<div class="grid">{"".join(charts)}</div>' if charts else '<p class="empty">nothing logged</p>'


def _series(rows: Rows, key: str, label: str | None = None, *, band: tuple[str, str] | None = None) -> Series:
    kept = [(step, m) for step, m in rows if key in m]
    return Series(
        label or key,
        [float(step) for step, _ in kept],
        [m[key] for _, m in kept],
        None if band is None else [m.get(band[0]) for _, m in kept],
        None if band is None else [m.get(band[1]) for _, m in kept],
    )


def _keys(rows: Rows) -> list[str]:
    seen: dict[str, None] = {}
    for _, m in rows:
        seen.update(dict.fromkeys(m))
    return list(seen)


def _overview(data: RunDir, rows: Rows, built: BuiltEpisodes, status: str | None, local: Callable[[str], str]) -> str:
    last = {k: v for _, m in rows for k, v in m.items()}  # the latest value of each figure
    held = [(s, m) for s, m in rows if "eval/success_rate" in m]
    items = [("status", status)] if status else []
    items += [("steps logged", str(len(rows))), ("episodes", f"{built.episodes:,}")]
    if "success_rate" in last:
        items.append(("train success (last step)", f"{last['success_rate']:.1%}"))
    if held:
        step, m = held[-1]
        low, high = m.get("eval/success_low"), m.get("eval/success_high")
        interval = f" [{low:.0%}, {high:.0%}]" if low is not None and high is not None else ""
        items.append((f"held-out success (step {step})", f"{m['eval/success_rate']:.1%}{interval}"))
    seconds = sum(m.get(k, 0.0) for _, m in rows for k in ("time/generate_s", "time/env_s", "time/train_s"))
    if seconds:
        items.append(("time in steps", f"{seconds / 60:.1f} min"))
    config = ""
    if data.config:
        shown = [(k, local(_short(v))) for k, v in data.config.items()]
        config = f"<details><summary>config.json</summary>{html_table(['field', 'value'], shown)}</details>"
    return cards(items) + config


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _warm_start(data: RunDir) -> str:
    """The supervised warm start: its steps, first and last loss, and the loss and
    learning rate over its steps (``sft_step``, before the first step of RL)."""
    rows = data.warm_start
    items = [
        ("warm-start steps logged", f"{len(rows)}{data.of_planned('sft_steps')}"),
        (f"first loss (step {rows[0].sft_step})", rows[0].loss_text()),
        (f"last loss (step {rows[-1].sft_step})", rows[-1].loss_text()),
    ]
    seconds = [r.time_s for r in rows if r.time_s is not None]  # since the warm start began
    if seconds:
        items.append(("time in the warm start", f"{seconds[-1] / 60:.1f} min"))

    def series(label: str, value: Callable[[WarmStartRow], float | None]) -> Series:
        return Series(label, [float(r.sft_step) for r in rows], [value(r) for r in rows])

    charts = [
        chart("Warm-start loss", [series("loss", lambda r: r.loss)], note="Over the warm start's steps (sft_step)."),
        chart("Warm-start learning rate", [series("lr", lambda r: r.lr)]),
    ]
    return cards(items) + _grid(charts)


def _reward_charts(rows: Rows) -> list[str]:
    keys = _keys(rows)
    components = [k for k in keys if k.startswith("reward/") and k not in ("reward/task", "reward/total")]
    return [
        chart("Task reward and total reward", [_series(rows, "reward/task"), _series(rows, "reward/total")]),
        chart(
            "Success: training episodes and held-out",
            [
                _series(rows, "success_rate", "train"),
                _series(rows, "eval/success_rate", "held-out", band=("eval/success_low", "eval/success_high")),
            ],
            fmt="percent",
            y_min=0.0,
            y_max=1.0,
            note="The band is the 95% bootstrap interval over held-out tasks.",
        ),
        chart("Reward components (per episode)", [_series(rows, k, k.removeprefix("reward/")) for k in components]),
    ]


def _optimisation_charts(rows: Rows) -> list[str]:
    def lines(title: str, keys: Sequence[str], **kw: Any) -> str:
        return chart(title, [_series(rows, k) for k in keys], **kw)

    return [
        lines("Loss", ["loss", "pg_loss"]),
        lines(
            "KL",
            ["approx_kl", "kl_ref", "update_kl"],
            note="approx_kl: to the sampling policy; kl_ref: to the reference; update_kl: one update's step",
        ),
        lines("Entropy", ["entropy"]),
        lines("Clip fraction", ["clipfrac"], fmt="percent"),
        lines("Advantages", ["adv/mean", "adv/std", "adv/min", "adv/max", "adv/token_mean"]),
        lines("Gradient norm", ["grad_norm"]),
        lines("Learning rate", ["lr"]),
        lines("Importance ratio and generation gap", ["ratio_mean", "gen_logprob_gap", "importance_weight/max"]),
    ]


def _throughput_charts(rows: Rows) -> list[str]:
    return [
        chart(
            "Tokens per second",
            [_series(rows, "gen_tokens_per_s", "generation"), _series(rows, "train_tokens_per_s", "training")],
        ),
        chart(
            "Time per step",
            [_series(rows, f"time/{k}_s", k) for k in ("generate", "env", "train")],
            kind="stacked",
            fmt="seconds",
            y_min=0.0,
        ),
        chart(
            "Episode length",
            [_series(rows, "turns/mean", "turns"), _series(rows, "gen/length_mean", "tokens per turn")],
        ),
        chart(
            "Cut short",
            [
                _series(rows, "gen/truncated_frac", "turns cut at max_new_tokens"),
                _series(rows, "seq_truncated_frac", "sequences cut at max_seq_len"),
            ],
            fmt="percent",
        ),
        chart(
            "Groups with signal",
            [
                _series(rows, "miner/informative_frac", "informative (miner)"),
                _series(rows, "zero_variance_frac", "zero variance"),
            ],
            fmt="percent",
            y_min=0.0,
            y_max=1.0,
        ),
    ]


def _group_charts(built: BuiltEpisodes) -> list[str]:
    counts = built.counts.get("train") or built.counts.get("held-out") or {}
    steps = sorted(counts)
    out = []
    for grouping, title in (("env", "env"), ("family", "task family"), ("difficulty", "difficulty")):
        totals: dict[str, int] = {}
        for step in steps:
            for key, (n, _) in counts[step].groups[grouping].items():
                totals[key] = totals.get(key, 0) + n
        ranked = sorted(totals, key=lambda k: (-totals[k], k))
        top, rest = ranked[:TOP_GROUPS], set(ranked[TOP_GROUPS:])
        series = []
        for key in top + (["other"] if rest else []):
            ys: list[float | None] = []
            for step in steps:
                cells = counts[step].groups[grouping]
                members = [cells[k] for k in (rest if key == "other" else {key}) if k in cells]
                n = sum(c[0] for c in members)
                ys.append(sum(c[1] for c in members) / n if n else None)
            series.append(Series(key, [float(s) for s in steps], ys))
        out.append(chart(f"Success by {title} (training episodes)", series, fmt="percent", y_min=0.0, y_max=1.0))
    return out


def _failure_charts(rows: Rows, built: BuiltEpisodes) -> list[str]:
    kinds = [k.value for k in Failure]
    if any(f"failure/{k}" in m for _, m in rows for k in kinds):
        series = [_series(rows, f"failure/{k}", k) for k in kinds]
    else:
        counts = built.counts.get("train", {})
        steps = sorted(counts)
        series = [
            Series(k, [float(s) for s in steps], [counts[s].failures[k] / max(counts[s].episodes, 1) for s in steps])
            for k in kinds
        ]
    miner = [_series(rows, f"miner/failures/{k}", k) for k in kinds if k != "none"]
    return [
        chart(
            "How episodes ended (share of each step's episodes)",
            series,
            kind="stacked",
            fmt="percent",
            y_min=0.0,
            y_max=1.0,
        ),
        chart("Failed episodes by kind, as the miner counted them", miner),
    ]


def _turn_charts(rows: Rows) -> list[str]:
    turns = sorted({int(k.split("/")[1]) for k in _keys(rows) if k.startswith("turn/") and k.split("/")[1].isdigit()})
    if not turns:
        return []
    shown = turns[:TOP_GROUPS]
    return [
        chart("Step reward at each turn", [_series(rows, f"turn/{t}/step_reward", f"turn {t}") for t in shown]),
        chart(
            "Format errors at each turn",
            [_series(rows, f"turn/{t}/format_error_rate", f"turn {t}") for t in shown],
            fmt="percent",
        ),
        chart("Episodes reaching each turn", [_series(rows, f"turn/{t}/episodes", f"turn {t}") for t in shown]),
    ]


def _miner(data: RunDir, rows: Rows, local: Callable[[str], str]) -> str:
    keys = _keys(rows)
    if not any(k.startswith("miner/") for k in keys):
        return '<p class="empty">This run did not use the failure miner.</p>'
    pools = [k for k in keys if k.startswith("miner/pool/")]
    mined = [k for k in keys if k.startswith("miner/new/")]
    charts = [
        chart("Pools over time", [_series(rows, k, k.removeprefix("miner/pool/")) for k in pools]),
        chart("Mined tasks per step", [_series(rows, k, k.removeprefix("miner/new/")) for k in mined]),
        chart("Top failing families over time (failed episodes so far)", _family_series(data)),
    ]
    return _grid(charts) + _miner_tables(data, local)


def _family_series(data: RunDir) -> list[Series]:
    """From each step's ``miner/top_failing_families`` ([[family, failed, rate], ...])."""
    points: dict[str, list[tuple[float, float]]] = {}
    for row in data.rows:
        top = row.value("miner/top_failing_families")
        if not isinstance(top, list):
            continue
        for entry in top:
            if isinstance(entry, list) and len(entry) >= 2 and isinstance(entry[0], str):
                failed = entry[1]
                if isinstance(failed, int | float) and not isinstance(failed, bool):
                    points.setdefault(entry[0], []).append((float(row.step), float(failed)))
    ranked = sorted(points, key=lambda f: -max(v for _, v in points[f]))[:TOP_GROUPS]
    return [Series(f, [x for x, _ in points[f]], [y for _, y in points[f]]) for f in ranked]


def _miner_tables(data: RunDir, local: Callable[[str], str]) -> str:
    from agentenv.miner.report import MinerReport

    try:
        report = MinerReport.from_run(data.path)
    except FileNotFoundError:  # no checkpoint yet: nothing was skipped
        return '<p class="muted">No ledger to show: the run has no checkpoint yet (no checkpoints/latest).</p>'
    except (OSError, ValueError) as e:  # a corrupt checkpoint: said with the rest that was skipped
        why = _short(local(str(e)))
        data.skipped.note(f"the miner's ledger: {why}")
        return f'<p class="muted">No ledger to show: {html.escape(why)}</p>'
    families = html_table(
        ["family", "attempts", "failures", "failure rate"],
        [(f, a, n, f"{rate:.0%}") for f, a, n, rate in report.families(10)],
    )
    hardest = html_table(
        ["task", "status", "attempts", "success", "failures by kind"],
        [
            (
                tid,
                r.status,
                r.attempts,
                f"{r.success_rate:.0%}",
                ", ".join(f"{k} {v}" for k, v in sorted(r.failures.items())),
            )
            for tid, r in report.hardest(10)
        ],
    )
    pools = html_table(["pool", "tasks"], report.pools())
    return (
        f"<p>Ledger of checkpoint step {report.step}.</p><div class='grid'>"
        f"<div><h3>Top failing families</h3>{families}</div><div><h3>Pools</h3>{pools}</div></div>"
        f"<h3>Hardest tasks</h3>{hardest}"
    )


def _other(rows: Rows) -> str:
    used = {
        "reward/task", "reward/total", "success_rate", "eval/success_rate", "eval/success_low", "eval/success_high",
        "loss", "pg_loss", "approx_kl", "kl_ref", "update_kl", "entropy", "clipfrac", "adv/mean", "adv/std",
        "adv/min", "adv/max", "adv/token_mean", "grad_norm", "lr", "ratio_mean", "gen_logprob_gap",
        "importance_weight/max", "gen_tokens_per_s", "train_tokens_per_s", "time/generate_s", "time/env_s",
        "time/train_s", "turns/mean", "gen/length_mean", "gen/truncated_frac", "seq_truncated_frac",
        "miner/informative_frac", "zero_variance_frac",
    }  # fmt: skip
    prefixes = ("reward/", "failure/", "turn/", "miner/pool/", "miner/new/", "miner/failures/")
    rest = [k for k in _keys(rows) if k not in used and not k.startswith(prefixes)]
    if not rest:
        return '<p class="empty">nothing else logged</p>'
    shown = rest[:OTHER_CHARTS]
    more = f'<p class="note">{len(rest) - OTHER_CHARTS} more not drawn.</p>' if len(rest) > OTHER_CHARTS else ""
    charts = _grid([chart(k, [_series(rows, k)]) for k in shown])
    return f"<details><summary>{len(rest)} more figures</summary>{charts}{more}</details>"


# -- an evaluation ----------------------------------------------------------------------------


def build_eval_report(
    trajectories: Iterable[Trajectory],
    result: EvalResult,
    out: str | Path,
    *,
    source: str = "the evaluation",
    max_embedded: int = MAX_EMBEDDED,
    embed_bytes: int = EMBED_BYTES,
    page_size: int = PAGE_EPISODES,
    pages: bool = True,
) -> Report:
    """Write the report of an evaluation: its figures with their intervals, by env,
    family and difficulty, failures by kind, the comparison with a baseline if it has
    one, and the trajectory viewer over its episodes. ``source`` names where the
    episodes are (a JSONL file, whose lines the viewer then cites)."""
    target = Path(out)
    index = _index(target, max_embedded, embed_bytes, page_size, pages)
    for number, t in enumerate(trajectories, 1):
        # Through Python objects, not JSON text: a policy's text may hold a lone surrogate.
        record = EpisodeRecord.model_validate(t.model_dump(mode="json"))
        index.add(record, source="eval", step=0, file=source, line=number)
    built = index.finish()
    sections = [
        Section("figures", "Figures", _figures(result)),
        Section("breakdown", "By env, family and difficulty", _breakdown(result)),
        Section("failures", "Failures by kind", html_table(["kind", "episodes"], list(result.failures.items()))),
    ]
    if result.comparison is not None:
        sections.append(Section("comparison", "Comparison", _comparison(result)))
    text = render_page(
        title=f"agentenv eval · {result.label or 'evaluation'}",
        subtitle=f"{result.episodes:,} episodes · {len(result.tasks):,} tasks · k = {result.k} · written {_now()}",
        sections=sections,
        skipped=Skipped().all(),
        episodes=built,
    )
    return _write(target, text, built, index, [])


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{round(100 * value, 1) + 0.0:.1f}%"


def _estimate(name: str, e: Estimate) -> tuple[str, str, str]:
    fmt = (lambda v: "-" if v is None else f"{v:.3f}") if name.startswith("mean@") else _pct
    return fmt(e.value), f"[{fmt(e.low)}, {fmt(e.high)}]", str(e.tasks)


def _figures(result: EvalResult) -> str:
    level = f"{result.confidence:.0%}"
    rows = [(name, *_estimate(name, e)) for name, e in result.overall.items()]
    note = (
        f"<p class='note'>{result.k} samples per task; {level} percentile bootstrap intervals over tasks "
        f"({result.n_bootstrap} resamples). Infra failures are left out of every figure "
        f"({result.failures.get('infra', 0)} episodes, {result.policy_failures} of them the policy's backend).</p>"
    )
    return html_table(["figure", "estimate", f"{level} interval", "tasks"], rows) + note


def _breakdown(result: EvalResult) -> str:
    parts = []
    for title, groups in (("env", result.by_env), ("family", result.by_family), ("difficulty", result.by_difficulty)):
        names = list(next(iter(groups.values()), {}))
        rows = [
            (group, next(iter(figures.values())).tasks, *(" ".join(_estimate(n, figures[n])[:2]) for n in names))
            for group, figures in groups.items()
        ]
        parts.append(f"<h3>by {html.escape(title)}</h3>" + html_table([title, "tasks", *names], rows))
    return "".join(parts)


def _signed(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    if name.startswith("mean@"):
        return f"{round(value, 3) + 0.0:+.3f}"
    return f"{round(100 * value, 1) + 0.0:+.1f} pts"


def _comparison(result: EvalResult) -> str:
    c = result.comparison
    assert c is not None  # the caller checked
    rows = [
        (
            name,
            _estimate(name, Estimate(value=c.a_values.get(name), low=None, high=None, tasks=0))[0],
            _estimate(name, Estimate(value=c.b_values.get(name), low=None, high=None, tasks=0))[0],
            _signed(name, d.value),
            f"[{_signed(name, d.low)}, {_signed(name, d.high)}]",
            str(d.tasks),
        )
        for name, d in c.differences.items()
    ]
    note = (
        f"<p class='note'>A: {html.escape(c.a)}; B: {html.escape(c.b)}. B - A on {c.matched} shared tasks "
        f"({c.only_a} only in A, {c.only_b} only in B); paired bootstrap over tasks.</p>"
    )
    return html_table(["figure", "A", "B", "B - A", f"{c.confidence:.0%} interval", "tasks"], rows) + note
