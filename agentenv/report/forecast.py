"""The report's compute forecast: held-out reward against compute on a log axis, the
fitted ScaleRL sigmoid through it (dashed past the run, to 10x its compute), R0 and the
asymptote A as dotted levels, the predictions at 2x and 10x with their intervals, and
the fitted parameters in a table. Inline SVG, drawn like `agentenv.report.charts`.

The numbers are those of ``agentenv forecast RUN_DIR`` (the same fit, seed and
bootstrap). A run that cannot be forecast yet says why instead of a chart.

Left out: the device-hours axis (the CLI has it; the page shows tokens, which do not
depend on the hardware), and intervals around the whole curve.
"""

from __future__ import annotations

import math
from html import escape

from agentenv.eval.forecast import COMPUTE_KEYS, REWARD_KEY, Forecast, ForecastError, forecast_rows
from agentenv.report.charts import HEIGHT, LEFT, PALETTE, RIGHT, WIDTH, Scale, format_value, svg_path, ticks_between
from agentenv.report.page import html_table

__all__ = ["forecast_section"]

CURVE_POINTS = 120
"""Points along the drawn curve."""
AXIS = "tokens"


def forecast_section(rows: list[tuple[int, dict[str, float]]]) -> str:
    """The section's body: the chart and table, or why there is no forecast."""
    try:
        f = forecast_rows(rows, compute=AXIS)
    except ForecastError as e:
        return f'<p class="empty">No forecast: {escape(str(e))}.</p>'
    note = (
        f"R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) fitted to {len(f.points)} held-out evaluations "
        f"({REWARD_KEY}) against {COMPUTE_KEYS[AXIS]}; R0 fixed at the first evaluation. "
        f"Intervals: {f.confidence:.0%}, from {f.n_bootstrap:,} bootstrap refits. Same as: agentenv forecast RUN_DIR."
    )
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in f.notes)
    return f'<div class="grid">{forecast_chart(f)}<div>{_table(f)}</div></div><p class="note">{escape(note)}</p>{notes}'


def _table(f: Forecast) -> str:
    level = f"{f.confidence:.0%}"
    rows: list[tuple[str, str, str]] = [
        ("R0 (fixed)", f"{f.r0:.3f}", "-"),
        ("A (asymptote)", f"{f.a.value:.3f}", f"[{f.a.low:.3f}, {f.a.high:.3f}]"),
        ("B (efficiency)", f"{f.b.value:.3g}", f"[{f.b.low:.3g}, {f.b.high:.3g}]"),
        (f"C_mid ({AXIS})", f"{f.c_mid.value:.3g}", f"[{f.c_mid.low:.3g}, {f.c_mid.high:.3g}]"),
    ]
    for p in f.predictions:
        at = f"reward at {p.multiple:g}x ({p.compute:.3g} {AXIS})"
        rows.append((at, f"{p.reward.value:.3f}", _span(p.reward.low, p.reward.high)))
    return html_table(["", "estimate", f"{level} interval"], rows)


def _span(low: float, high: float) -> str:
    return f"[{low:.3f}, {high:.3f}]"


def forecast_chart(f: Forecast) -> str:
    """The points, the curve, R0, A and the predictions over log10(compute)."""
    title = f"Held-out reward against compute ({AXIS}, log scale)"
    xs = [c for c, _ in f.points]
    lo_x = math.log10(min(xs))
    hi_x = math.log10(max(p.compute for p in f.predictions))
    grid = [lo_x + (hi_x - lo_x) * i / (CURVE_POINTS - 1) for i in range(CURVE_POINTS)]
    curve = [(x, f.curve(10**x)) for x in grid]
    ys = [r for _, r in f.points] + [y for _, y in curve] + [f.r0, f.a.value]
    ys += [v for p in f.predictions for v in (p.reward.low, p.reward.high)]
    ticks = ticks_between(min(ys), max(ys))
    scale = Scale(lo_x, hi_x, min(min(ys), ticks[0]), max(max(ys), ticks[-1]))
    measured = math.log10(f.run_compute)
    seen = [(x, y) for x, y in curve if x <= measured]
    ahead = [(x, y) for x, y in curve if x >= measured]
    colors = {"points": PALETTE[0], "fit": PALETTE[1], "levels": PALETTE[5], "predictions": PALETTE[2]}
    parts = [
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}" class="plot">',
        _axes(scale, ticks),
        _level(scale, f.r0, colors["levels"], f"R0 = {f.r0:.3f} (fixed)"),
        _level(scale, f.a.value, colors["levels"], f"A = {f.a.value:.3f} [{f.a.low:.3f}, {f.a.high:.3f}]"),
        _polyline(scale, seen, colors["fit"], dashed=False),
        _polyline(scale, ahead, colors["fit"], dashed=True),
    ]
    for c, r in f.points:
        parts.append(
            f'<circle cx="{scale.x(math.log10(c)):.1f}" cy="{scale.y(r):.1f}" r="3" fill="{colors["points"]}">'
            f"<title>{escape(f'{c:.3g} {AXIS}: {r:.3f}')}</title></circle>"
        )
    for p in f.predictions:
        px = scale.x(math.log10(p.compute))
        tip = f"{p.multiple:g}x ({p.compute:.3g} {AXIS}): {p.reward.value:.3f} {_span(p.reward.low, p.reward.high)}"
        parts.append(
            f'<g><line x1="{px:.1f}" x2="{px:.1f}" y1="{scale.y(p.reward.low):.1f}" y2="{scale.y(p.reward.high):.1f}" '
            f'stroke="{colors["predictions"]}" stroke-width="2"/>'
            f'<circle cx="{px:.1f}" cy="{scale.y(p.reward.value):.1f}" r="3" fill="{colors["predictions"]}"/>'
            f"<title>{escape(tip)}</title></g>"
        )
    parts.append("</svg>")
    labels = ["held-out evaluations", "fit (dashed: forecast)", "R0 and A", "at 2x and 10x"]
    head = f'<figure class="chart"><figcaption>{escape(title)}</figcaption>'
    return head + _legend(labels, list(colors.values())) + "".join(parts) + "</figure>"


def _legend(labels: list[str], colors: list[str]) -> str:
    pairs = zip(labels, colors, strict=True)
    items = "".join(f'<span><i style="background:{color}"></i>{escape(label)}</span>' for label, color in pairs)
    return f'<div class="legend">{items}</div>'


def _axes(scale: Scale, ticks: list[float]) -> str:
    out = ['<g class="axes">']
    for t in ticks:
        y = scale.y(t)
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{LEFT - 4}" y="{y + 3:.1f}" text-anchor="end">{escape(format_value(t, "percent"))}</text>'
        )
    for x in _log_ticks(scale.x0, scale.x1):
        out.append(f'<text x="{scale.x(x):.1f}" y="{HEIGHT - 8}" text-anchor="middle">{10**x:.3g}</text>')
    out.append("</g>")
    return "".join(out)


def _log_ticks(lo: float, hi: float) -> list[float]:
    """log10 of round values (1, 2, 5 times a power of ten) within [lo, hi]; decades
    alone when those are too many."""
    for multiples in ((1, 2, 5), (1,)):
        found = [
            math.log10(m * 10.0**k)
            for k in range(math.floor(lo) - 1, math.ceil(hi) + 1)
            for m in multiples
            if lo - 1e-9 <= math.log10(m * 10.0**k) <= hi + 1e-9
        ]
        if len(found) <= 6:
            break
    return found if len(found) <= 6 else found[:: math.ceil(len(found) / 6)]


def _level(scale: Scale, value: float, color: str, tip: str) -> str:
    y = scale.y(value)
    return (
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{color}" '
        f'stroke-dasharray="1 3" stroke-width="1.4"><title>{escape(tip)}</title></line>'
    )


def _polyline(scale: Scale, points: list[tuple[float, float]], color: str, *, dashed: bool) -> str:
    if len(points) < 2:
        return ""
    dash = ' stroke-dasharray="4 3"' if dashed else ""
    path = svg_path([(scale.x(x), scale.y(y)) for x, y in points])
    return f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.6"{dash}/>'
