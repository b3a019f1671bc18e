"""The hand-written numerics that `scipy` replaced, kept as `bench/numerics.py`'s
baseline (verbatim from agentenv before the switch, commit c50f591): the forecast's
batched Levenberg-Marquardt fit (`OldBatch`, a drop-in for `agentenv.eval.forecast._Batch`)
and the evaluation's bootstrap over tasks (`old_bootstrap`, the signature of
`agentenv.eval.evaluation._bootstrap`). Not used by agentenv."""

from __future__ import annotations

import math

import numpy as np

from agentenv.eval.evaluation import _MAX_CELLS, Estimate, _clean
from agentenv.eval.forecast import _GRID_B, _GRID_M, A_BOUNDS, B_BOUNDS, C_MID_SPAN, _Fits, _logistic

__all__ = ["OldBatch", "old_bootstrap"]

_LM_ITERATIONS = 60


class OldBatch:
    """Fits the curve to each row of ``y`` (K, n) at the same ``x`` = ln C (n,): a grid
    over (B, ln C_mid) with A in closed form, then Levenberg-Marquardt on every row at
    once, steps clipped to the bounds."""

    def __init__(self, x: np.ndarray, y: np.ndarray, r0: float) -> None:
        self.x, self.y, self.r0 = x, y, r0
        span = math.log(C_MID_SPAN)
        self.m_bounds = (float(x.min()) - span, float(x.max()) + span)
        self.log_b_bounds = (math.log(B_BOUNDS[0]), math.log(B_BOUNDS[1]))

    def fit(self) -> _Fits:
        a, log_b, m = self._grid()
        return self._refine(a, log_b, m)

    def _grid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
        return self.r0 + gain[rows, best], np.log(bb[best]), mm[best]

    def _residuals(self, a: np.ndarray, log_b: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        b = np.exp(log_b)[:, None]
        u = self.x[None, :] - m[:, None]
        s = _logistic(b * u)
        gain = (a - self.r0)[:, None]
        r = self.r0 + gain * s - self.y
        ds = s * (1.0 - s)
        jac = np.stack([s, gain * ds * b * u, -gain * ds * b], axis=-1)
        return r, jac

    def _clip(self, p: np.ndarray) -> np.ndarray:
        lows = np.array([A_BOUNDS[0], self.log_b_bounds[0], self.m_bounds[0]])
        highs = np.array([A_BOUNDS[1], self.log_b_bounds[1], self.m_bounds[1]])
        return np.clip(p, lows, highs)

    def _refine(self, a: np.ndarray, log_b: np.ndarray, m: np.ndarray) -> _Fits:
        p = np.stack([a, log_b, m], axis=1)
        r, jac = self._residuals(*p.T)
        sse = np.einsum("kn,kn->k", r, r)
        damping = np.full(len(p), 1e-3)
        eye = np.eye(3)
        for _ in range(_LM_ITERATIONS):
            jtj = np.einsum("kni,knj->kij", jac, jac)
            jtr = np.einsum("kni,kn->ki", jac, r)
            diag = np.einsum("kii->ki", jtj)[:, :, None] * eye + 1e-12 * eye
            step = np.linalg.solve(jtj + damping[:, None, None] * diag, -jtr[:, :, None])[:, :, 0]
            trial = self._clip(p + step)
            r_new, jac_new = self._residuals(*trial.T)
            sse_new = np.einsum("kn,kn->k", r_new, r_new)
            better = sse_new < sse
            p = np.where(better[:, None], trial, p)
            r = np.where(better[:, None], r_new, r)
            jac = np.where(better[:, None, None], jac_new, jac)
            gain = sse - np.where(better, sse_new, sse)
            sse = np.where(better, sse_new, sse)
            damping = np.where(better, damping / 3.0, damping * 4.0).clip(1e-9, 1e9)
            if np.all(gain <= 1e-15 * (1.0 + sse)):
                break
        return _Fits(p[:, 0], p[:, 1], p[:, 2], sse)


def old_bootstrap(
    columns: dict[str, np.ndarray],
    n_bootstrap: int,
    confidence: float,
    rng: np.random.Generator,
    *,
    weights: np.ndarray | None = None,
) -> dict[str, Estimate]:
    """Each column's mean over tasks (NaN entries left out; weighted by ``weights`` when
    given) and its percentile interval, every column resampled with the same draws of
    all the tasks (a resample that drew no task defining a column is dropped for it)."""
    n_tasks = len(next(iter(columns.values()))) if columns else 0
    out: dict[str, Estimate] = {}
    if n_tasks == 0:
        return {name: Estimate(value=None, low=None, high=None, tasks=0) for name in columns}
    task_weight = np.ones(n_tasks) if weights is None else weights
    defined = {name: np.where(np.isnan(v), 0.0, task_weight) for name, v in columns.items()}
    filled = {name: np.where(np.isnan(v), 0.0, v * task_weight) for name, v in columns.items()}
    means = {name: np.empty(n_bootstrap) for name in columns}
    chunk = max(1, _MAX_CELLS // n_tasks)
    for start in range(0, n_bootstrap, chunk):
        rows = min(chunk, n_bootstrap - start)
        draws = rng.integers(0, n_tasks, size=(rows, n_tasks))
        flat = np.bincount((draws + n_tasks * np.arange(rows)[:, None]).ravel(), minlength=rows * n_tasks)
        counts = flat.reshape(rows, n_tasks).astype(float)
        for name in columns:
            with np.errstate(invalid="ignore", divide="ignore"):
                means[name][start : start + rows] = (counts @ filled[name]) / (counts @ defined[name])
    alpha = (1.0 - confidence) / 2
    for name, values in columns.items():
        count = int((~np.isnan(values)).sum())
        if count == 0:
            out[name] = Estimate(value=None, low=None, high=None, tasks=0)
            continue
        resampled = means[name][~np.isnan(means[name])]
        low, high = np.quantile(resampled, [alpha, 1 - alpha]) if resampled.size else (math.nan, math.nan)
        value = float(filled[name].sum() / defined[name].sum())
        out[name] = Estimate(value=_clean(value), low=_clean(low), high=_clean(high), tasks=count)
    return out
