"""Charts as inline SVG, drawn here: no plotting library, no script, nothing to fetch.

A chart is a `figure` element holding its title, a legend and an ``svg``: lines (with
an optional interval band) or stacked areas over training steps. Long series are
averaged into at most `MAX_POINTS` buckets, so a chart stays a few kilobytes however
long the run. Every label (a metric name, an env id, a task family) is escaped: they
come from files a run wrote. Hovering a column shows the values there (an SVG
``title``: the browser's own tooltip).

Left out: zoom, log scales, and anything that needs a script.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Literal

__all__ = ["MAX_POINTS", "PALETTE", "Scale", "Series", "chart", "format_value", "legend", "svg_path", "ticks_between"]

MAX_POINTS = 400
"""Points drawn per series; longer series are averaged into this many buckets."""
HOVER_COLUMNS = 80
"""Columns with a tooltip per chart."""
PALETTE = (
    "#3366cc",
    "#dc6b19",
    "#2a9d5c",
    "#c23b4b",
    "#8a5cc2",
    "#6b7280",
    "#d4a017",
    "#1fa2b8",
    "#b84f9a",
    "#556b2f",
)
MAX_DRAWN = 1e300
"""Values past this magnitude are left out of a chart (as missing points): a scale spanning
them would overflow a float, and no metric of a sound run gets near."""
WIDTH, HEIGHT = 480, 200
LEFT, RIGHT, TOP, BOTTOM = 52, 12, 10, 26
Kind = Literal["line", "stacked"]
Format = Literal["number", "percent", "seconds"]


@dataclass(frozen=True, slots=True)
class Series:
    """One line: y (None where missing) over x, and an optional interval band."""

    label: str
    x: Sequence[float]
    y: Sequence[float | None]
    low: Sequence[float | None] | None = None
    high: Sequence[float | None] | None = None
    dashed: bool = False


def chart(
    title: str,
    series: Sequence[Series],
    *,
    kind: Kind = "line",
    fmt: Format = "number",
    y_min: float | None = None,
    y_max: float | None = None,
    note: str = "",
) -> str:
    """A titled chart of ``series`` over their x (steps); "no data" when none has a point."""
    drawn = [_bucketed(_drawable(s)) for s in series]
    drawn = [s for s in drawn if any(v is not None for v in s.y)]
    head = f'<figure class="chart"><figcaption>{escape(title)}</figcaption>'
    if not drawn:
        return f'{head}<p class="empty">no data</p></figure>'
    if kind == "stacked":
        drawn = _stacked(drawn)
    xs = [x for s in drawn for x in s.x]
    ys = [v for s in drawn for seq in (s.y, s.low or (), s.high or ()) for v in seq if v is not None]
    x0, x1 = min(xs), max(xs)
    lo = min(ys) if y_min is None else min(y_min, min(ys))
    hi = max(ys) if y_max is None else max(y_max, max(ys))
    ticks = ticks_between(lo, hi)
    lo, hi = min(lo, ticks[0]), max(hi, ticks[-1])
    scale = Scale(x0, x1, lo, hi)
    parts = [
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}" class="plot">',
        _axes(scale, ticks, fmt),
    ]
    for i, s in enumerate(drawn):
        color = PALETTE[i % len(PALETTE)]
        if kind == "stacked":
            parts.append(_area(scale, s, drawn[i - 1] if i else None, color))
        elif s.low is not None and s.high is not None:
            parts.append(_band(scale, s, color))
        parts.append(_line(scale, s, color))
    parts.append(_hover(scale, drawn, fmt, kind == "stacked"))
    parts.append("</svg>")
    caption = f'<p class="note">{escape(note)}</p>' if note else ""
    return head + legend([s.label for s in drawn]) + "".join(parts) + caption + "</figure>"


def legend(labels: Sequence[str]) -> str:
    items = "".join(
        f'<span><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{escape(label)}</span>'
        for i, label in enumerate(labels)
    )
    return f'<div class="legend">{items}</div>'


@dataclass(frozen=True, slots=True)
class Scale:
    x0: float
    x1: float
    y0: float
    y1: float

    def x(self, value: float) -> float:
        span = self.x1 - self.x0
        frac = 0.5 if span == 0 else (value - self.x0) / span
        return LEFT + frac * (WIDTH - LEFT - RIGHT)

    def y(self, value: float) -> float:
        span = self.y1 - self.y0
        frac = 0.5 if span == 0 else (value - self.y0) / span
        return HEIGHT - BOTTOM - frac * (HEIGHT - TOP - BOTTOM)


def _drawable(s: Series) -> Series:
    """``s`` with every value past `MAX_DRAWN` (in size) missing."""

    def kept(values: Sequence[float | None] | None) -> list[float | None] | None:
        return None if values is None else [v if v is not None and abs(v) <= MAX_DRAWN else None for v in values]

    return Series(s.label, s.x, kept(s.y) or [], kept(s.low), kept(s.high), s.dashed)


def _bucketed(s: Series) -> Series:
    """At most MAX_POINTS points: the mean x and mean y (and band) of each bucket."""
    n = len(s.x)
    if n <= MAX_POINTS:
        return s
    edges = [round(i * n / MAX_POINTS) for i in range(MAX_POINTS + 1)]

    def mean(values: Sequence[float | None], a: int, b: int) -> float | None:
        kept = [v for v in values[a:b] if v is not None]
        return _mean(kept) if kept else None

    spans = list(itertools.pairwise(edges))
    return Series(
        s.label,
        [_mean(s.x[a:b]) for a, b in spans],
        [mean(s.y, a, b) for a, b in spans],
        None if s.low is None else [mean(s.low, a, b) for a, b in spans],
        None if s.high is None else [mean(s.high, a, b) for a, b in spans],
        s.dashed,
    )


def _mean(values: Sequence[float]) -> float:
    """The mean, summing each value's share: never past a float's range when no value is."""
    return math.fsum(v / len(values) for v in values)


def _stacked(series: list[Series]) -> list[Series]:
    """Cumulative sums over the series that share the first one's x (missing counts as 0);
    each result's ``low`` is the top of the one below it."""
    xs = list(series[0].x)
    below = [0.0] * len(xs)
    out = []
    for s in series:
        by_x = dict(zip(s.x, s.y, strict=True))
        top = [b + (by_x.get(x) or 0.0) for b, x in zip(below, xs, strict=True)]
        out.append(Series(s.label, xs, list(top), list(below), list(top)))
        below = top
    return out


def ticks_between(lo: float, hi: float, count: int = 4, *, whole: bool = False) -> list[float]:
    """Round tick values that cover [lo, hi]; ``whole``: integers only (steps)."""
    if hi - lo < 1e-12:
        lo, hi = lo - (abs(lo) * 0.1 or 0.5), hi + (abs(hi) * 0.1 or 0.5)
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    if whole:
        step = max(1.0, math.ceil(step))
    start = math.floor(lo / step) * step
    ticks: list[float] = []
    value = start
    while value < hi + step * 0.5 and len(ticks) < 12:
        ticks.append(round(value, 12) + 0.0)
        value += step
    return ticks


def format_value(value: float, fmt: Format) -> str:
    if fmt == "percent":
        return f"{round(100 * value, 1) + 0.0:g}%"
    if fmt == "seconds":
        return f"{value:.3g}s"
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.2e}"
    return f"{round(value, 4) + 0.0:g}"


def _axes(scale: Scale, ticks: list[float], fmt: Format) -> str:
    out = ['<g class="axes">']
    for t in ticks:
        y = scale.y(t)
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{LEFT - 4}" y="{y + 3:.1f}" text-anchor="end">{escape(format_value(t, fmt))}</text>'
        )
    for x in ticks_between(scale.x0, scale.x1, 5, whole=True):
        if scale.x0 <= x <= scale.x1 or scale.x0 == scale.x1:
            px = scale.x(x)
            out.append(f'<text x="{px:.1f}" y="{HEIGHT - 8}" text-anchor="middle">{format_value(x, "number")}</text>')
    out.append("</g>")
    return "".join(out)


def svg_path(points: list[tuple[float, float]]) -> str:
    return "".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(points))


def _runs(s: Series, values: Sequence[float | None]) -> list[list[tuple[float, float]]]:
    """The unbroken stretches of (x, value): a missing value breaks the line."""
    runs: list[list[tuple[float, float]]] = [[]]
    for x, v in zip(s.x, values, strict=True):
        if v is None or not math.isfinite(v):
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append((x, v))
    return [r for r in runs if r]


def _line(scale: Scale, s: Series, color: str) -> str:
    out = []
    dash = ' stroke-dasharray="4 3"' if s.dashed else ""
    for run in _runs(s, s.y):
        pts = [(scale.x(x), scale.y(v)) for x, v in run]
        if len(pts) == 1:
            x, y = pts[0]
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>')
        else:
            out.append(f'<path d="{svg_path(pts)}" fill="none" stroke="{color}" stroke-width="1.6"{dash}/>')
    return "".join(out)


def _band(scale: Scale, s: Series, color: str) -> str:
    assert s.low is not None and s.high is not None  # the caller checked
    pairs = [(x, lo, hi) for x, lo, hi in zip(s.x, s.low, s.high, strict=True) if lo is not None and hi is not None]
    if not pairs:
        return ""
    if len(pairs) == 1:  # one evaluation: an error bar
        x, lo, hi = pairs[0]
        px = scale.x(x)
        return f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{scale.y(lo):.1f}" y2="{scale.y(hi):.1f}" stroke="{color}"/>'
    upper = [(scale.x(x), scale.y(hi)) for x, _, hi in pairs]
    lower = [(scale.x(x), scale.y(lo)) for x, lo, _ in reversed(pairs)]
    return f'<path d="{svg_path(upper + lower)}Z" fill="{color}" fill-opacity="0.15" stroke="none"/>'


def _area(scale: Scale, s: Series, below: Series | None, color: str) -> str:
    top = [(scale.x(x), scale.y(v or 0.0)) for x, v in zip(s.x, s.y, strict=True)]
    base = below.y if below is not None else [0.0] * len(s.x)
    bottom = [(scale.x(x), scale.y(v or 0.0)) for x, v in zip(reversed(s.x), reversed(base), strict=True)]
    return f'<path d="{svg_path(top + bottom)}Z" fill="{color}" fill-opacity="0.55" stroke="none"/>'


def _hover(scale: Scale, drawn: list[Series], fmt: Format, stacked: bool) -> str:
    """Invisible columns whose tooltip lists each series' value at that x (a stacked
    series' own value, not its cumulative top)."""
    xs = sorted({x for s in drawn for x in s.x})
    if len(xs) > HOVER_COLUMNS:
        xs = [xs[round(i * (len(xs) - 1) / (HOVER_COLUMNS - 1))] for i in range(HOVER_COLUMNS)]
    values = [
        {
            x: (y - (low or 0.0) if stacked and y is not None else y)
            for x, y, low in zip(s.x, s.y, s.low if stacked and s.low is not None else [None] * len(s.x), strict=True)
        }
        for s in drawn
    ]
    width = (WIDTH - LEFT - RIGHT) / max(len(xs), 1)
    out = ['<g class="hover">']
    for x in xs:
        lines = [f"step {format_value(x, 'number')}"]
        for s, v in zip(drawn, values, strict=True):
            value = v.get(x)
            if value is not None:
                lines.append(f"{s.label}: {format_value(value, fmt)}")
        left = min(max(scale.x(x) - width / 2, LEFT), WIDTH - RIGHT - width)
        out.append(
            f'<rect x="{left:.1f}" y="{TOP}" width="{width:.1f}" height="{HEIGHT - TOP - BOTTOM}">'
            f"<title>{escape(chr(10).join(lines))}</title></rect>"
        )
    out.append("</g>")
    return "".join(out)
