"""The evaluation's and the forecast's numerics on scipy vs the hand-written code they
replaced (`bench/_numerics_baseline.py`), in one process, on the same inputs.

    .venv/bin/python bench/numerics.py [--repeats 7] [--draws 20] [--trials 300]

What it prints, each part old against new:
- the sigmoid fit (`agentenv.eval.forecast`): on the shapes a run produces (the three
  curves of tests/eval/test_forecast.py, 6 to 16 evaluations, reward noise sd 0.01 and
  0.02, ``--draws`` noise draws each) and on curves whose fit ends at a bound, the
  largest parameter differences and how often either fit found the smaller squared
  error; the forecast's intervals from the same residual draws (same seed); how often
  the 95% intervals hold the true parameters; the time of one fit and of a forecast
  with 1,000 refits (medians over ``--repeats``);
- the bootstrap over tasks (`agentenv.eval.evaluation`): the time of one call over 7
  figures at 20 to 2,000 tasks (medians); the interval ends of each, averaged over
  ``--draws`` seeds, and their difference in standard errors (the two draw different
  resamples, so they agree only within Monte Carlo noise); a figure defined on few of
  the tasks, where the two resample differently by design; the coverage of the
  percentile and BCa intervals of scipy over ``--trials`` simulated evaluations;
- the first import of scipy.optimize and scipy.stats, in a fresh interpreter (agentenv
  imports them when a fit or a bootstrap first runs, never at ``import agentenv``).
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table
from _numerics_baseline import OldBatch, old_bootstrap

import agentenv.eval.forecast as fc
from agentenv.eval import evaluation as ev

CURVES = [(0.10, 0.80, 1.5, 2e5), (0.25, 0.60, 2.5, 400.0), (0.00, 0.90, 4.0, 3e7)]  # (R0, A, B, C_mid)
AT_BOUNDS = {  # fits that end at a bound: A, B, then C_mid beyond the points
    "A at 1": ([0, 1, 2, 4, 8, 16, 32, 64], [0.1, 0.5, 0.8, 0.95, 1.0, 1.0, 1.0, 1.0]),
    "B at 50": ([0, 1, 2, 3, 4, 5, 6, 7, 8], [0.1] * 5 + [0.9] * 4),
    "still rising": ([0, 1, 2, 3, 4, 5, 6], [0.1, 0.11, 0.12, 0.13, 0.14, 0.15, 0.16]),
    "pure noise": ([0, 1, 2, 4, 8, 16, 32], [0.2, 0.6, 0.1, 0.7, 0.2, 0.5, 0.3]),
}
FIGURES = 7  # k = 8: pass@1, 2, 4, 8, pass^8, mean@8, disagreement


def medians_s(old: Callable[[], object], new: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median seconds of each, the two alternating so that drift hits both alike."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, out in ((old, times[0]), (new, times[1])):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def with_old_fit(fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        with old_fit():
            return fn()

    return run


@contextmanager
def old_fit() -> Iterator[None]:
    """agentenv's forecast with the old batched fit in place of the scipy one."""
    new = fc._Batch
    fc._Batch = OldBatch  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        fc._Batch = new  # type: ignore[misc]


def synthetic(r0: float, a: float, b: float, c_mid: float, *, seed: int, n: int, noise: float):
    rng = np.random.default_rng(seed)
    compute = np.geomspace(c_mid / 30, c_mid * 30, n)
    reward = fc.Sigmoid(r0, a, b, c_mid)
    return [0.0, *compute.tolist()], [r0, *(reward(c) + rng.normal(0, noise) for c in compute)]


def fits(compute: list[float], reward: list[float]) -> tuple[fc._Fits, fc._Fits]:
    x, y = fc._fit_points(compute, reward)
    return OldBatch(np.log(x), y[None, :], reward[0]).fit(), fc._Batch(np.log(x), y[None, :], reward[0]).fit()


def fit_agreement(draws: int) -> None:
    print("\nthe sigmoid fit: old (batched Levenberg-Marquardt, steps clipped to bounds) vs new (least_squares, trf)")
    rows = []
    for n in (6, 10, 16):
        for noise in (0.01, 0.02):
            da, db, dm, lower, higher, excess = 0.0, 0.0, 0.0, 0, 0, -math.inf
            for curve in CURVES:
                for seed in range(draws):
                    o, w = fits(*synthetic(*curve, seed=seed, n=n, noise=noise))
                    da = max(da, abs(float(w.a[0] - o.a[0])))
                    db = max(db, abs(math.expm1(float(w.log_b[0] - o.log_b[0]))))
                    dm = max(dm, abs(math.expm1(float(w.m[0] - o.m[0]))))
                    lower += bool(w.sse[0] < o.sse[0] * (1 - 1e-6))
                    higher += bool(w.sse[0] > o.sse[0] * (1 + 1e-6))
                    excess = max(excess, float(w.sse[0] / o.sse[0] - 1))
            rows.append([n, noise, 3 * draws, f"{da:.1e}", f"{db:.1e}", f"{dm:.1e}", lower, higher, f"{excess:+.1e}"])
    print("(SSE lower/higher: by more than 1e-6 of the old; max excess: the largest (new - old) / old SSE)")
    heads = ["points", "noise", "fits", "max |dA|", "max dB/B", "max dC_mid/C_mid", "new SSE lower", "higher"]
    heads.append("max excess")
    print(table(heads, rows))
    rows = []
    for name, (c, r) in AT_BOUNDS.items():
        o, w = fits(c, r)
        rows.append([name, *(f"{v:.4g}" for v in (o.a[0], w.a[0], math.exp(o.log_b[0]), math.exp(w.log_b[0])))])
        rows[-1] += [f"{math.exp(o.m[0]):.4g}", f"{math.exp(w.m[0]):.4g}", f"{o.sse[0]:.4g}", f"{w.sse[0]:.4g}"]
    heads = ["at a bound", "A old", "A new", "B old", "B new", "C_mid old", "C_mid new", "SSE old", "SSE new"]
    print(table(heads, rows))


def interval_agreement() -> None:
    print("\nthe forecast's 95% intervals, 1,000 refits of the same residual draws (seed 0; 16 points, noise 0.02)")
    rows = []
    for curve in CURVES:
        points = synthetic(*curve, seed=0, n=16, noise=0.02)
        with old_fit():
            o = fc.forecast(*points)
        w = fc.forecast(*points)
        olds = [o.b, o.c_mid, *(p.reward for p in o.predictions)]
        news = [w.b, w.c_mid, *(p.reward for p in w.predictions)]
        rel = [max(abs(n.low / i.low - 1), abs(n.high / i.high - 1)) for i, n in zip(olds, news, strict=True)]
        a = [f"[{f.a.low:.4f}, {f.a.high:.4f}]" for f in (o, w)]
        rows.append([f"A={curve[1]}, B={curve[2]}, C_mid={curve[3]:g}", *a, *(f"{r:.1e}" for r in rel)])
    print("(B, C_mid and the predictions: the largest relative difference of an interval's end)")
    print(table(["curve", "A old", "A new", "B", "C_mid", "at 2x", "at 10x"], rows))


def coverage(draws: int) -> None:
    print(f"\nthe forecast's 95% intervals hold the true parameter (16 points, noise 0.02, {draws} draws, 200 refits)")
    rows = []
    for curve in CURVES:
        hits = {"old": np.zeros(3), "new": np.zeros(3)}
        for seed in range(draws):
            points = synthetic(*curve, seed=100 + seed, n=16, noise=0.02)
            with old_fit():
                o = fc.forecast(*points, n_bootstrap=200)
            for name, f in (("old", o), ("new", fc.forecast(*points, n_bootstrap=200))):
                truth = curve[1:]
                hits[name] += [i.low <= t <= i.high for i, t in zip((f.a, f.b, f.c_mid), truth, strict=True)]
        rows.append([f"A={curve[1]}, B={curve[2]}", *(f"{h / draws:.2f}" for h in (*hits["old"], *hits["new"]))])
    print(table(["curve", "A old", "B old", "C_mid old", "A new", "B new", "C_mid new"], rows))


def fit_timing(repeats: int) -> None:
    print(f"\nthe sigmoid fit's time, medians over {repeats} (16 points, noise 0.02)")
    rows = []
    points = synthetic(*CURVES[0], seed=0, n=16, noise=0.02)
    fc.fit_sigmoid(*points, r0=points[1][0])  # warm-up: scipy's first import
    for what, fn in (
        ("fit_sigmoid (one fit)", lambda: fc.fit_sigmoid(*points, r0=points[1][0])),
        ("forecast, 1,000 refits", lambda: fc.forecast(*points)),
    ):
        old, new = medians_s(with_old_fit(fn), fn, repeats)
        rows.append([what, f"{old * 1e3:.1f}", f"{new * 1e3:.1f}", f"{new / old:.1f}x"])
    print(table(["", "old (ms)", "new (ms)", "new / old"], rows))


def columns(n_tasks: int, seed: int) -> dict[str, np.ndarray]:
    """Seven per-task figures of an evaluation with k = 8: rates of a spread of task difficulties."""
    rng = np.random.default_rng(seed)
    p = rng.beta(0.7, 0.7, n_tasks)
    return {f"figure{i}": np.clip(p + 0.05 * i, 0, 1) for i in range(FIGURES)}


def bootstrap_timing(repeats: int) -> None:
    print(f"\nthe bootstrap over tasks: one call, {FIGURES} figures, 2,000 resamples, medians over {repeats}")
    rows = []
    ev._bootstrap(columns(5, 0), 10, 0.95, np.random.default_rng(0))  # warm-up: scipy's first import
    for n_tasks in (20, 200, 2000):
        cols = columns(n_tasks, 0)
        old, new = medians_s(
            lambda: old_bootstrap(cols, 2000, 0.95, np.random.default_rng(0)),  # noqa: B023
            lambda: ev._bootstrap(cols, 2000, 0.95, np.random.default_rng(0)),  # noqa: B023
            repeats,
        )
        rows.append([n_tasks, f"{old * 1e3:.1f}", f"{new * 1e3:.1f}", f"{new / old:.1f}x"])
    print(table(["tasks", "old (ms)", "new (ms)", "new / old"], rows))


def ends(fn: Callable[..., dict[str, ev.Estimate]], cols: dict[str, np.ndarray], draws: int, name: str) -> np.ndarray:
    """(draws, 2): the interval ends of one figure over seeds."""
    out = []
    for seed in range(draws):
        e = fn(cols, 2000, 0.95, np.random.default_rng(seed))[name]
        out.append((e.low, e.high))
    return np.array(out, dtype=float)


def bootstrap_agreement(draws: int) -> None:
    print(
        f"\nthe bootstrap's 95% interval ends, mean over {draws} seeds (2,000 resamples), diff in standard errors of "
        "the difference; the first figure of a call: the same draws of tasks in both (scipy draws them as the old "
        "code did), so equal ends; the last: different draws, equal within Monte Carlo noise"
    )
    rows = []
    for n_tasks in (20, 200):
        cols = columns(n_tasks, 1)
        for name in ("figure0", f"figure{FIGURES - 1}"):
            o, w = ends(old_bootstrap, cols, draws, name), ends(ev._bootstrap, cols, draws, name)
            se = np.sqrt(o.var(axis=0, ddof=1) / draws + w.var(axis=0, ddof=1) / draws)
            z = np.divide(w.mean(axis=0) - o.mean(axis=0), se, out=np.zeros(2), where=se > 0)
            low = [f"{o[:, 0].mean():.4f}", f"{w[:, 0].mean():.4f}", f"{z[0]:+.1f}"]
            high = [f"{o[:, 1].mean():.4f}", f"{w[:, 1].mean():.4f}", f"{z[1]:+.1f}"]
            which = "first" if name == "figure0" else "last"
            rows.append([n_tasks, which, *low, *high, f"{o[:, 0].std(ddof=1):.4f}"])
    heads = ["tasks", "figure", "low old", "low new", "diff/se", "high old", "high new", "diff/se", "sd of an end"]
    print(table(heads, rows))
    cols = columns(50, 2)
    few = {"figure0": np.where(np.arange(50) < 5, cols["figure0"], np.nan)}
    o, w = ends(old_bootstrap, few, draws, "figure0"), ends(ev._bootstrap, few, draws, "figure0")
    print(
        f"a figure 5 of 50 tasks define (value {np.nanmean(few['figure0']):.4f}): old [{o[:, 0].mean():.4f}, "
        f"{o[:, 1].mean():.4f}] (all 50 resampled, a resample's count of the 5 varies), new [{w[:, 0].mean():.4f}, "
        f"{w[:, 1].mean():.4f}] (the 5 resampled)"
    )


def method_coverage(trials: int) -> None:
    from scipy.stats import bootstrap

    print(
        f"\nscipy's 95% intervals over tasks, percentile vs BCa: coverage of the true mean over {trials} simulated "
        "evaluations (tasks' success rates from Beta(0.7, 0.7) and from Beta(5, 1), pass@1 of 4 samples each)"
    )
    rows = []
    rng = np.random.default_rng(7)
    for a, b in ((0.7, 0.7), (5.0, 1.0)):
        for n_tasks in (10, 30, 100):
            hits = {"percentile": 0, "BCa": 0}
            undefined = 0
            times = {"percentile": 0.0, "BCa": 0.0}
            for _ in range(trials):
                values = rng.binomial(4, rng.beta(a, b, n_tasks)) / 4
                for method in hits:
                    start = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        ci = bootstrap((values,), np.mean, n_resamples=2000, method=method, rng=rng).confidence_interval
                    times[method] += time.perf_counter() - start
                    if method == "BCa" and not (math.isfinite(ci.low) and math.isfinite(ci.high)):
                        undefined += 1
                        continue
                    hits[method] += bool(ci.low <= a / (a + b) <= ci.high)
            covered = [f"{hits[m] / trials:.3f}" for m in hits]
            ms = [f"{times[m] / trials * 1e3:.2f}" for m in times]
            rows.append([f"Beta({a:g}, {b:g})", n_tasks, *covered, undefined, *ms])
    heads = ["tasks' rates", "tasks", "percentile", "BCa", "BCa undefined (NaN)", "percentile ms", "BCa ms"]
    print(table(heads, rows))
    solved = np.ones(20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = {m: bootstrap((solved,), np.mean, method=m, rng=0).confidence_interval for m in ("percentile", "BCa")}
    print(
        f"every one of 20 tasks solved: percentile [{found['percentile'].low:g}, {found['percentile'].high:g}], "
        f"BCa [{found['BCa'].low:g}, {found['BCa'].high:g}] ({', '.join(type(w.message).__name__ for w in caught)})"
    )


def import_times() -> None:
    code = "import time; t = time.perf_counter(); import {}; print(time.perf_counter() - t)"
    rows = []
    for module in ("scipy.optimize", "scipy.stats"):
        runs = [float(subprocess.check_output([sys.executable, "-c", code.format(module)], cwd="/")) for _ in range(3)]
        rows.append([module, f"{statistics.median(runs) * 1e3:.0f}"])
    print("\nfirst import in a fresh interpreter (median of 3)")
    print(table(["module", "ms"], rows))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7, help="timed calls per implementation (default 7)")
    p.add_argument("--draws", type=int, default=20, help="noise draws per shape, seeds per interval (default 20)")
    p.add_argument("--trials", type=int, default=300, help="simulated evaluations per coverage row (default 300)")
    args = p.parse_args(argv)
    import scipy

    print(header("bench/numerics.py: the evaluation's and the forecast's numerics, scipy vs hand-written"))
    print(f"numpy {np.__version__}, scipy {scipy.__version__}")
    fit_agreement(args.draws)
    interval_agreement()
    coverage(args.draws)
    fit_timing(args.repeats)
    bootstrap_timing(args.repeats)
    bootstrap_agreement(args.draws)
    method_coverage(args.trials)
    import_times()


if __name__ == "__main__":
    main()
