"""Forecasting held-out reward against compute: the sigmoid of ScaleRL
(Khatri et al. 2025, "The Art of Scaling Reinforcement Learning Compute for LLMs").

    R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)

``A`` is the asymptote (the reward the recipe plateaus at), ``B`` the efficiency (how
steeply reward rises with compute), ``C_mid`` the compute at which half the gain
``A - R0`` is reached. ``C`` is the cumulative training compute the trainer records
in every metrics row: ``compute/tokens`` (tokens generated plus tokens trained on) or
``compute/device_hours`` (the steps' wall time times the number of devices).

Decisions, once:
- ``R0`` is fixed, not fitted: it is the first held-out evaluation (normally step 0,
  before any training, at zero compute). ``A``, ``B`` and ``C_mid`` are fitted to the
  evaluations after training began (compute above 0); it takes `MIN_POINTS` of them.
- In x = ln C the curve is ``R0 + (A - R0) * logistic(B (x - ln C_mid))``: for fixed
  ``B`` and ``C_mid`` it is linear in ``A``. So a grid over (B, ln C_mid) with ``A``
  solved in closed form finds the basin with no start point to guess, and
  `scipy.optimize.least_squares` (trust region reflective, which keeps to the bounds)
  refines all three from there, in (A, ln B, ln C_mid) with the Jacobian in closed form.
  One fit at a time, so 1,000 refits take about 0.6 s, 10 to 20 times what a batched
  hand-written Levenberg-Marquardt took; that one stopped short of a minimum lying on
  a bound (bench/numerics.py), this one reaches it.
- Bounds: ``A`` in [0, 1] (the held-out reward is a success rate), ``B`` in
  [`B_BOUNDS`], ``C_mid`` within `C_MID_SPAN` times beyond the measured compute either
  way. A parameter at its bound is said in the notes.
- Intervals: residual bootstrap (the evaluations stay where they were; their
  residuals, rescaled for the three fitted parameters, are resampled and the curve
  refitted by the same fit), percentiles of the refits. Written here, not
  `scipy.stats.bootstrap`: that resamples observations and recomputes a statistic of
  them, where this resamples residuals onto the fitted curve.

Left out: fitting ``R0``; weighting points by their own bootstrap interval; ScaleRL's
practice of dropping the earliest, noisiest part of a run (here every evaluation
counts); sums of compute across ranks (a data-parallel run records what the trainer
process that writes metrics.jsonl counted).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "COMPUTE_KEYS",
    "MAX_BOOTSTRAP",
    "MIN_POINTS",
    "REWARD_KEY",
    "Forecast",
    "ForecastError",
    "Interval",
    "Prediction",
    "Sigmoid",
    "fit_sigmoid",
    "forecast",
    "forecast_rows",
]

COMPUTE_KEYS: dict[str, str] = {"tokens": "compute/tokens", "device_hours": "compute/device_hours"}
"""The compute axes a forecast can use, and the metrics column of each."""
REWARD_KEY = "eval/success_rate"
"""The held-out reward: the trainer's success rate on the held-out tasks."""
MIN_POINTS = 5
"""Evaluations after training began that a fit needs: three parameters and a margin of two."""
A_BOUNDS = (0.0, 1.0)
B_BOUNDS = (0.02, 50.0)
C_MID_SPAN = 100.0
"""``C_mid`` is sought between the least measured compute / this and the most * this."""
MULTIPLES = (2.0, 10.0)
"""The predictions: at these multiples of the run's compute."""
FLAT_GAIN = 0.01
"""A fitted gain ``|A - R0|`` below this leaves ``B`` and ``C_mid`` undetermined (said in the notes)."""

MAX_BOOTSTRAP = 100_000
"""Bootstrap refits at most: percentile intervals settle long before, and the refits'
time grows with their number (about 0.6 ms each; their grid is searched in chunks, so
memory does not grow)."""

_GRID_B = 25
_GRID_M = 49
_MAX_CELLS = 4_000_000
"""Floats one chunk of refits holds in its largest array, the grid's: (refits, grid points)."""


class ForecastError(ValueError):
    """The points cannot be forecast (too few, no compute recorded, a flat curve); the
    message says why and what would make it possible."""


@dataclass(frozen=True, slots=True)
class Interval:
    """An estimate with its bootstrap interval."""

    value: float
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class Sigmoid:
    """ScaleRL's curve with fixed parameters."""

    r0: float
    a: float
    b: float
    c_mid: float

    def __call__(self, compute: float) -> float:
        return float(_curve(np.array([compute], dtype=float), self.r0, self.a, self.b, self.c_mid)[0])


@dataclass(frozen=True, slots=True)
class Prediction:
    """The predicted reward at ``multiple`` times the run's compute."""

    multiple: float
    compute: float
    reward: Interval


@dataclass(frozen=True, slots=True)
class Forecast:
    """A fitted curve, its parameters with intervals, and its predictions.

    ``points`` are the (compute, reward) pairs fitted; ``r0_point`` the one that fixed
    ``R0``; ``run_compute`` the run's total compute (the last metrics row's)."""

    axis: str
    points: tuple[tuple[float, float], ...]
    r0_point: tuple[float, float]
    run_compute: float
    curve: Sigmoid
    a: Interval
    b: Interval
    c_mid: Interval
    predictions: tuple[Prediction, ...]
    rmse: float
    n_bootstrap: int
    confidence: float
    notes: tuple[str, ...]

    @property
    def r0(self) -> float:
        return self.curve.r0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["r0"] = self.r0
        data["points"] = [list(p) for p in self.points]
        data["r0_point"] = list(self.r0_point)
        data["notes"] = list(self.notes)
        return data


def _curve(c: np.ndarray, r0: float, a: float, b: float, c_mid: float) -> np.ndarray:
    """R(C), with R(0) = R0 (the limit: (C_mid / C)^B grows without bound)."""
    out = np.full(c.shape, r0, dtype=float)
    pos = c > 0
    z = b * (np.log(c[pos]) - math.log(c_mid))
    out[pos] = r0 + (a - r0) * _logistic(z)
    return out


def _logistic(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # 1 / (1 + e^-z), with no overflow


# -- the fit ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Fits:
    """One fit per row of Y: the asymptote, ln B and ln C_mid, and the squared error."""

    a: np.ndarray
    log_b: np.ndarray
    m: np.ndarray
    sse: np.ndarray


class _Batch:
    """Fits the curve to each row of ``y`` (K, n) at the same ``x`` = ln C (n,)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, r0: float) -> None:
        self.x, self.y, self.r0 = x, y, r0
        span = math.log(C_MID_SPAN)
        self.m_bounds = (float(x.min()) - span, float(x.max()) + span)
        self.log_b_bounds = (math.log(B_BOUNDS[0]), math.log(B_BOUNDS[1]))
        self.lows = np.array([A_BOUNDS[0], self.log_b_bounds[0], self.m_bounds[0]])
        self.highs = np.array([A_BOUNDS[1], self.log_b_bounds[1], self.m_bounds[1]])

    def fit(self) -> _Fits:
        """Each row refined by scipy's bounded least squares (trust region reflective)
        from its grid point: the grid finds the basin, the solver the minimum in it."""
        from scipy.optimize import least_squares

        starts = np.clip(self._grid(), self.lows, self.highs)
        p = np.empty_like(starts)
        sse = np.empty(len(starts))
        for i, (start, y) in enumerate(zip(starts, self.y, strict=True)):
            fit = least_squares(
                self._residuals, start, jac=self._jacobian, bounds=(self.lows, self.highs), args=(y,), method="trf"
            )
            p[i], sse[i] = fit.x, 2.0 * fit.cost
        return _Fits(p[:, 0], p[:, 1], p[:, 2], sse)

    def _grid(self) -> np.ndarray:
        """The best grid point (A, ln B, ln C_mid) per row (K, 3), with A in closed form."""
        bs = np.exp(np.linspace(*self.log_b_bounds, _GRID_B))
        ms = np.linspace(*self.m_bounds, _GRID_M)
        bb, mm = (g.ravel() for g in np.meshgrid(bs, ms, indexing="ij"))
        s = _logistic(bb[:, None] * (self.x[None, :] - mm[:, None]))  # (G, n)
        d = self.y - self.r0  # (K, n)
        sd = d @ s.T  # (K, G)
        ss = np.einsum("gn,gn->g", s, s)[None, :]
        gain = np.clip(sd / np.maximum(ss, 1e-300), A_BOUNDS[0] - self.r0, A_BOUNDS[1] - self.r0)
        sse = np.einsum("kn,kn->k", d, d)[:, None] - 2 * gain * sd + gain**2 * ss
        best = np.argmin(sse, axis=1)
        rows = np.arange(len(best))
        return np.stack([self.r0 + gain[rows, best], np.log(bb[best]), mm[best]], axis=1)

    def _residuals(self, p: np.ndarray, y: np.ndarray) -> np.ndarray:
        s = _logistic(math.exp(p[1]) * (self.x - p[2]))
        return self.r0 + (p[0] - self.r0) * s - y

    def _jacobian(self, p: np.ndarray, y: np.ndarray) -> np.ndarray:
        """(n, 3): the residuals' derivatives in A, ln B and ln C_mid (``y``, which they
        do not depend on, because least_squares passes both functions the same args)."""
        b, u = math.exp(p[1]), self.x - p[2]
        s = _logistic(b * u)
        ds = (p[0] - self.r0) * s * (1.0 - s) * b
        return np.stack([s, ds * u, -ds], axis=-1)


def fit_sigmoid(compute: Sequence[float], reward: Sequence[float], *, r0: float) -> Sigmoid:
    """The least-squares curve through (compute, reward) with ``R0`` fixed; points at
    compute 0 carry no information about A, B or C_mid and are left out."""
    x, y = _fit_points(compute, reward)
    fits = _Batch(np.log(x), y[None, :], r0).fit()
    return Sigmoid(r0, float(fits.a[0]), float(math.exp(fits.log_b[0])), float(math.exp(fits.m[0])))


def _fit_points(compute: Sequence[float], reward: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(compute, dtype=float)
    r = np.asarray(reward, dtype=float)
    if c.shape != r.shape or c.ndim != 1:
        raise ValueError(f"expected compute and reward of the same length, got {c.shape} and {r.shape}")
    if not (np.all(np.isfinite(c)) and np.all(np.isfinite(r))):
        raise ValueError("compute and reward must be finite numbers")
    keep = c > 0
    if int(keep.sum()) < MIN_POINTS:
        raise ForecastError(
            f"too few points to fit: {int(keep.sum())} evaluations after training began, a fit needs "
            f"{MIN_POINTS} (A, B and C_mid, and a margin); evaluate more often (eval_every) or train longer"
        )
    return c[keep], r[keep]


# -- the forecast -------------------------------------------------------------------------


def forecast(
    compute: Sequence[float],
    reward: Sequence[float],
    *,
    r0: float | None = None,
    run_compute: float | None = None,
    axis: str = "tokens",
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Forecast:
    """Fit the curve to held-out ``reward`` at cumulative ``compute`` (in run order)
    and bootstrap it. ``r0``: default the first point's reward. ``run_compute``: the
    run's total, which the predictions multiply (default the most compute measured).
    Raises `ForecastError` when the points cannot be fitted."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if not 1 <= n_bootstrap <= MAX_BOOTSTRAP:
        raise ValueError(f"n_bootstrap must be in [1, {MAX_BOOTSTRAP}], got {n_bootstrap}")
    if len(compute) == 0:
        raise ForecastError(f"no held-out evaluations with compute: a fit needs {MIN_POINTS}")
    first = (float(compute[0]), float(reward[0]))
    r0 = first[1] if r0 is None else float(r0)
    x, y = _fit_points(compute, reward)
    if np.all(np.abs(y - r0) < 1e-12):
        raise ForecastError(
            f"held-out reward stayed at R0 = {r0:.3g} in all {len(y)} evaluations after training began: "
            "no rise to fit, so A, B and C_mid are undetermined; train longer"
        )
    total = float(x.max()) if run_compute is None else float(run_compute)
    lx = np.log(x)
    batch = _Batch(lx, y[None, :], r0)
    best = batch.fit()
    fitted = _curve(x, r0, float(best.a[0]), math.exp(best.log_b[0]), math.exp(best.m[0]))
    residuals = y - fitted
    dof = max(len(y) - 3, 1)
    scaled = (residuals - residuals.mean()) * math.sqrt(len(y) / dof)
    boot = _refits(lx, fitted, scaled, r0, n_bootstrap, np.random.default_rng(seed))
    curve = Sigmoid(r0, float(best.a[0]), math.exp(float(best.log_b[0])), math.exp(float(best.m[0])))
    q = ((1 - confidence) / 2, (1 + confidence) / 2)

    def interval(value: float, samples: np.ndarray) -> Interval:
        low, high = np.quantile(samples, q)
        return Interval(value, float(min(low, value)), float(max(high, value)))

    predictions = []
    for multiple in MULTIPLES:
        at = total * multiple
        z = np.exp(boot.log_b) * (math.log(at) - boot.m)
        samples = r0 + (boot.a - r0) * _logistic(z)
        predictions.append(Prediction(multiple, at, interval(curve(at), samples)))
    return Forecast(
        axis=axis,
        points=tuple(zip(x.tolist(), y.tolist(), strict=True)),
        r0_point=first,
        run_compute=total,
        curve=curve,
        a=interval(curve.a, boot.a),
        b=interval(curve.b, np.exp(boot.log_b)),
        c_mid=interval(curve.c_mid, np.exp(boot.m)),
        predictions=tuple(predictions),
        rmse=float(math.sqrt(float(np.mean(residuals**2)))),
        n_bootstrap=n_bootstrap,
        confidence=confidence,
        notes=tuple(_notes(curve, x, batch, first)),
    )


def _refits(
    lx: np.ndarray, fitted: np.ndarray, scaled: np.ndarray, r0: float, n_bootstrap: int, rng: np.random.Generator
) -> _Fits:
    """The residual-bootstrap refits, a chunk at a time: one grid search of all of them
    would hold (refits x grid points) floats, 913 GiB for 10^8 refits."""
    chunk = max(1, _MAX_CELLS // (_GRID_B * _GRID_M))
    parts = []
    for start in range(0, n_bootstrap, chunk):
        rows = min(chunk, n_bootstrap - start)
        draws = fitted[None, :] + scaled[rng.integers(0, len(lx), size=(rows, len(lx)))]
        parts.append(_Batch(lx, draws, r0).fit())
    return _Fits(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("a", "log_b", "m", "sse")))


def _notes(curve: Sigmoid, x: np.ndarray, batch: _Batch, first: tuple[float, float]) -> list[str]:
    """What a reader must know before trusting the numbers."""
    notes = []
    if first[0] > 0:
        notes.append(
            f"the first evaluation came after training began (at compute {first[0]:.3g}): R0 is its reward, "
            "not the reward before training"
        )
    if abs(curve.a - curve.r0) < FLAT_GAIN:
        notes.append(
            f"the fitted gain A - R0 is below {FLAT_GAIN}: the points barely move, so B and C_mid are not determined"
        )
    elif curve.a < curve.r0:
        notes.append("A is below R0: held-out reward falls as compute grows")
    if curve.a >= A_BOUNDS[1] - 1e-9 or curve.a <= A_BOUNDS[0] + 1e-9:
        notes.append(f"A is at its bound ({curve.a:g}): the points do not pin the plateau down")
    log_b = math.log(curve.b)
    if min(abs(log_b - bound) for bound in batch.log_b_bounds) < 1e-6:
        notes.append(f"B is at its bound ({curve.b:g}): the rise is steeper or flatter than any curve tried")
    if curve.c_mid > float(x.max()):
        notes.append(
            "C_mid lies beyond the compute measured: the run has not reached half its forecast gain, "
            "so A is an extrapolation"
        )
    return notes


def forecast_rows(
    rows: Sequence[tuple[int, Mapping[str, float]]],
    *,
    compute: str = "tokens",
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Forecast:
    """The forecast of a run's metrics rows ((step, figures), in step order, as
    `agentenv.report.rundir.RunDir.numbers` reads them): ``REWARD_KEY`` against the
    ``COMPUTE_KEYS[compute]`` column."""
    if compute not in COMPUTE_KEYS:
        raise ValueError(f"expected compute to be one of {sorted(COMPUTE_KEYS)}, got {compute!r}")
    key = COMPUTE_KEYS[compute]
    evals = [(step, m) for step, m in rows if REWARD_KEY in m]
    if not evals:
        raise ForecastError(
            f"no held-out evaluations in the metrics ({REWARD_KEY}): train with eval_episodes > 0 "
            f"and eval_every so that at least {MIN_POINTS} evaluations are logged"
        )
    points = [(m[key], m[REWARD_KEY]) for _, m in evals if key in m]
    if not points:
        raise ForecastError(
            f"{len(evals)} held-out evaluations, but none records {key}: the run predates compute "
            "recording; train it again (or resume it) with this version"
        )
    totals = [m[key] for _, m in rows if key in m]
    return forecast(
        [c for c, _ in points],
        [r for _, r in points],
        run_compute=max(totals),
        axis=compute,
        n_bootstrap=n_bootstrap,
        confidence=confidence,
        seed=seed,
    )
