"""`agentenv.eval.forecast` and `agentenv forecast`: ScaleRL's sigmoid recovered from
noisy synthetic curves, and every way a run can fail to be forecast said plainly.

Tolerance (stated once): with 16 evaluations spread log-evenly over C_mid / 30 to
30 C_mid and Gaussian noise of sd 0.01 on the reward, the fit recovers A within 0.03,
B and C_mid within 20% of their values, on every seeded noise draw below."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from agentenv.cli import app
from agentenv.eval.forecast import (
    MAX_BOOTSTRAP,
    MIN_POINTS,
    Forecast,
    ForecastError,
    Sigmoid,
    fit_sigmoid,
    forecast,
    forecast_rows,
)

A_TOL = 0.03
REL_TOL = 0.20
CURVES = [  # (R0, A, B, C_mid): tokens-sized, GPU-hour-sized, and a steep one
    (0.10, 0.80, 1.5, 2e5),
    (0.25, 0.60, 2.5, 400.0),
    (0.00, 0.90, 4.0, 3e7),
]
runner = CliRunner()


def synthetic(r0: float, a: float, b: float, c_mid: float, *, seed: int, n: int = 16, noise: float = 0.01):
    """A run's points: R0 at zero compute, then n noisy evaluations of the curve."""
    rng = np.random.default_rng(seed)
    curve = Sigmoid(r0, a, b, c_mid)
    compute = np.geomspace(c_mid / 30, c_mid * 30, n)
    reward = [curve(c) + rng.normal(0, noise) for c in compute]
    return [0.0, *compute.tolist()], [r0, *reward]


@pytest.mark.parametrize("r0,a,b,c_mid", CURVES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_known_parameters_are_recovered_within_the_stated_tolerance(r0, a, b, c_mid, seed):
    compute, reward = synthetic(r0, a, b, c_mid, seed=seed)
    f = forecast(compute, reward, n_bootstrap=200)
    assert abs(f.a.value - a) <= A_TOL
    assert abs(f.b.value - b) <= REL_TOL * b
    assert abs(f.c_mid.value - c_mid) <= REL_TOL * c_mid
    assert f.r0 == r0  # fixed at the first point, not fitted
    for i in (f.a, f.b, f.c_mid):
        assert i.low <= i.value <= i.high


@pytest.mark.parametrize("r0,a,b,c_mid", CURVES)
def test_a_noisy_sigmoid_gives_back_its_parameters_inside_their_intervals(r0, a, b, c_mid):
    """One noise draw per curve (seed 1: a draw no interval needs to miss; how often they
    miss over many draws is the next test): the fit lands within the stated tolerance,
    and each 95% interval, of the parameters and of the predictions, holds the truth."""
    compute, reward = synthetic(r0, a, b, c_mid, seed=1, noise=0.02)
    f = forecast(compute, reward, n_bootstrap=500)
    assert abs(f.a.value - a) <= A_TOL
    assert abs(f.b.value - b) <= REL_TOL * b and abs(f.c_mid.value - c_mid) <= REL_TOL * c_mid
    for interval, truth in ((f.a, a), (f.b, b), (f.c_mid, c_mid)):
        assert interval.low <= truth <= interval.high
        assert interval.low < interval.high  # the noise leaves each parameter some spread
    curve = Sigmoid(r0, a, b, c_mid)
    assert all(p.reward.low <= curve(p.compute) <= p.reward.high for p in f.predictions)


@pytest.mark.parametrize(
    "compute,reward",
    [
        ([0, 1, 2, 4, 8, 16, 32, 64], [0.1, 0.5, 0.8, 0.95, 1.0, 1.0, 1.0, 1.0]),  # A at 1
        ([0, 1, 2, 3, 4, 5, 6, 7, 8], [0.1] * 5 + [0.9] * 4),  # a step: B at 50
    ],
)
def test_a_fit_whose_least_squares_lie_at_a_bound_reaches_them(compute, reward):
    """No curve within the bounds near the fitted one fits the points better. (Steps
    clipped to the bounds stopped short here: a nearby curve was 1% to 7% better.)"""
    fit = fit_sigmoid(compute, reward, r0=reward[0])

    def sse(curve: Sigmoid) -> float:
        return sum((curve(c) - r) ** 2 for c, r in zip(compute[1:], reward[1:], strict=True))

    best = sse(fit)
    for field, factor in itertools.product(("a", "b", "c_mid"), (1 - 1e-3, 1 + 1e-3)):
        moved = {"a": fit.a, "b": fit.b, "c_mid": fit.c_mid, field: getattr(fit, field) * factor}
        near = Sigmoid(fit.r0, min(moved["a"], 1.0), min(moved["b"], 50.0), moved["c_mid"])
        assert sse(near) >= best * (1 - 1e-9), (field, factor)


def test_the_95_percent_intervals_cover_the_true_parameters_most_of_the_time():
    """Measured over 60 draws per curve, coverage is 0.87 to 1.0 (C_mid of the steep curve
    lowest); over these 12 draws each must reach 0.75."""
    for r0, a, b, c_mid in CURVES:
        hits = np.zeros(3)
        for seed in range(12):
            f = forecast(*synthetic(r0, a, b, c_mid, seed=100 + seed, noise=0.02), n_bootstrap=150)
            hits += [f.a.low <= a <= f.a.high, f.b.low <= b <= f.b.high, f.c_mid.low <= c_mid <= f.c_mid.high]
        assert all(hits / 12 >= 0.75), (r0, a, b, c_mid, hits)


def test_the_predictions_follow_the_curve_at_2x_and_10x_the_runs_compute():
    r0, a, b, c_mid = CURVES[0]
    compute, reward = synthetic(r0, a, b, c_mid, seed=3, noise=0.02)
    f = forecast(compute, reward)
    assert [p.multiple for p in f.predictions] == [2.0, 10.0]
    truth = Sigmoid(r0, a, b, c_mid)
    for p in f.predictions:
        assert p.compute == pytest.approx(p.multiple * max(compute))
        assert p.reward.low <= truth(p.compute) <= p.reward.high
        assert p.reward.value == pytest.approx(f.curve(p.compute))
    assert f.rmse < 0.04


def test_the_same_seed_gives_the_same_forecast():
    compute, reward = synthetic(*CURVES[1], seed=0)
    assert forecast(compute, reward, seed=5) == forecast(compute, reward, seed=5)


def test_fit_sigmoid_leaves_out_points_at_zero_compute():
    r0, a, b, c_mid = CURVES[0]
    compute, reward = synthetic(r0, a, b, c_mid, seed=0, noise=0.0)
    fit = fit_sigmoid(compute, reward, r0=r0)
    assert fit.a == pytest.approx(a, abs=1e-4)
    assert fit.b == pytest.approx(b, rel=1e-3)
    assert fit.c_mid == pytest.approx(c_mid, rel=1e-3)
    assert fit(0.0) == r0


def test_a_curve_still_rising_says_its_asymptote_is_an_extrapolation():
    r0, a, b, c_mid = CURVES[0]
    compute = [0.0, *np.geomspace(c_mid / 50, c_mid / 2, 8).tolist()]
    reward = [Sigmoid(r0, a, b, c_mid)(c) for c in compute]
    f = forecast(compute, reward, n_bootstrap=100)
    assert any("C_mid lies beyond the compute measured" in n for n in f.notes)


# -- too few points, and other points that cannot be forecast ---------------------------


def test_too_few_points_fit_nothing_and_say_how_many_it_takes():
    compute, reward = synthetic(*CURVES[0], seed=0, n=MIN_POINTS - 1)
    expected = rf"too few points to fit: {MIN_POINTS - 1} evaluations .* needs {MIN_POINTS}"
    with pytest.raises(ForecastError, match=expected):
        forecast(compute, reward)
    with pytest.raises(ForecastError, match="too few points"):
        fit_sigmoid(compute, reward, r0=0.1)
    forecast(*synthetic(*CURVES[0], seed=0, n=MIN_POINTS), n_bootstrap=50)  # one more is enough


def test_a_flat_curve_fits_nothing():
    with pytest.raises(ForecastError, match=r"stayed at R0 = 0\.2 in all 6 evaluations .* undetermined"):
        forecast([0, 1, 2, 3, 4, 5, 6], [0.2] * 7)


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="same length"):
        forecast([0, 1, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="finite"):
        forecast([0, 1, 2, 3, 4, math.nan], [0.1] * 6)
    with pytest.raises(ValueError, match="confidence"):
        forecast([0, 1], [0, 1], confidence=1.5)


def rows_of(compute, reward, key="compute/tokens"):
    return [(i, {key: c, "eval/success_rate": r}) for i, (c, r) in enumerate(zip(compute, reward, strict=True))]


def test_rows_without_evaluations_or_without_compute_say_what_is_missing():
    with pytest.raises(ForecastError, match="no held-out evaluations"):
        forecast_rows([(1, {"compute/tokens": 10.0, "success_rate": 0.5})])
    compute, reward = synthetic(*CURVES[0], seed=0)
    old = [(s, {"eval/success_rate": m["eval/success_rate"]}) for s, m in rows_of(compute, reward)]
    with pytest.raises(ForecastError, match="none records compute/tokens: the run predates compute recording"):
        forecast_rows(old)
    with pytest.raises(ValueError, match="expected compute to be one of"):
        forecast_rows(rows_of(compute, reward), compute="flops")


def test_rows_use_the_chosen_axis_and_the_runs_total_compute():
    compute, reward = synthetic(*CURVES[1], seed=0)
    rows = rows_of(compute, reward, key="compute/device_hours")
    rows.append((len(rows), {"compute/device_hours": 2 * max(compute), "success_rate": 0.5}))  # a step with no eval
    f = forecast_rows(rows, compute="device_hours", n_bootstrap=50)
    assert f.axis == "device_hours"
    assert f.run_compute == 2 * max(compute)
    assert f.predictions[0].compute == pytest.approx(4 * max(compute))


# -- the command line -------------------------------------------------------------------


def write_run(path: Path, compute, reward, *, extra_lines=()) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"step": i, "compute/tokens": c, "compute/device_hours": c / 1e6, "eval/success_rate": r})
        for i, (c, r) in enumerate(zip(compute, reward, strict=True))
    ]
    (path / "metrics.jsonl").write_text("\n".join([*lines, *extra_lines]) + "\n")
    return path


def test_cli_prints_the_parameters_intervals_and_predictions(tmp_path):
    run = write_run(tmp_path / "run", *synthetic(*CURVES[0], seed=0))
    result = runner.invoke(app, ["forecast", str(run), "--bootstrap", "200"])
    assert result.exit_code == 0, result.output
    out = result.output
    for text in ("A (asymptote)", "B (efficiency)", "C_mid (tokens)", "95% interval", "2x", "10x", "R0 = 0.100 fixed"):
        assert text in out, text
    f = forecast_rows(json_rows(run), n_bootstrap=200)
    assert f"{f.a.value:.3f}" in out and f"[{f.a.low:.3f}, {f.a.high:.3f}]" in out


def json_rows(run: Path):
    return [
        (row["step"], {k: v for k, v in row.items() if k != "step"})
        for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    ]


def test_cli_json_is_the_forecast(tmp_path):
    run = write_run(tmp_path / "run", *synthetic(*CURVES[2], seed=1))
    result = runner.invoke(app, ["forecast", str(run), "--json", "--compute", "device_hours", "--bootstrap", "100"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["compute_key"] == "compute/device_hours" and data["reward_key"] == "eval/success_rate"
    assert set(data["a"]) == {"value", "low", "high"}
    assert data["c_mid"]["value"] == pytest.approx(3e7 / 1e6, rel=REL_TOL)  # device-hours here: tokens / 1e6
    assert [p["multiple"] for p in data["predictions"]] == [2.0, 10.0]
    assert data["r0"] == 0.0 and data["skipped"] == []


def test_cli_skips_and_reports_corrupt_lines(tmp_path):
    compute, reward = synthetic(*CURVES[0], seed=0)
    run = write_run(tmp_path / "run", compute, reward, extra_lines=['{"step": 99, "eval/succ', "not json"])
    result = runner.invoke(app, ["forecast", str(run), "--bootstrap", "50"])
    assert result.exit_code == 0, result.output
    assert "skipped: metrics.jsonl: skipped 2 lines" in result.stderr


@pytest.mark.parametrize(
    "case,code,message",
    [
        ("missing", 2, "no such directory"),
        ("empty", 1, "has no metrics (metrics.jsonl): nothing to forecast"),
        ("too few", 1, f"too few points to fit: 3 evaluations after training began, a fit needs {MIN_POINTS}"),
        ("no evals", 1, "no held-out evaluations in the metrics"),
    ],
)
def test_cli_a_run_that_cannot_be_forecast_exits_with_one_clear_line(tmp_path, case, code, message):
    run = tmp_path / "run"
    if case == "empty":
        run.mkdir()
    elif case == "too few":
        write_run(run, [0, 10, 20, 30], [0.1, 0.2, 0.3, 0.35])
    elif case == "no evals":
        run.mkdir()
        (run / "metrics.jsonl").write_text('{"step": 1, "compute/tokens": 5, "success_rate": 0.5}\n')
    result = runner.invoke(app, ["forecast", str(run)])
    assert result.exit_code == code
    assert "error:" in result.stderr and message in result.stderr
    assert "Traceback" not in result.output
    assert "A (asymptote)" not in result.stdout  # nothing fitted


def test_cli_rejects_bad_options_with_usage_errors(tmp_path):
    run = write_run(tmp_path / "run", *synthetic(*CURVES[0], seed=0))
    assert runner.invoke(app, ["forecast", str(run), "--bootstrap", "0"]).exit_code == 2
    assert runner.invoke(app, ["forecast", str(run), "--confidence", "1"]).exit_code == 2
    assert runner.invoke(app, ["forecast", str(run), "--compute", "flops"]).exit_code == 2


def test_forecast_is_a_plain_data_result():
    f = forecast(*synthetic(*CURVES[0], seed=0), n_bootstrap=20)
    assert isinstance(f, Forecast)
    data = json.loads(json.dumps(f.to_dict()))
    assert data["curve"]["a"] == f.a.value and data["points"][0] == list(f.points[0])


def test_a_run_without_an_evaluation_before_training_says_whose_reward_r0_is():
    compute, reward = synthetic(*CURVES[0], seed=0)
    f = forecast(compute[1:], reward[1:], n_bootstrap=20)
    assert f.r0 == reward[1]
    assert any("the first evaluation came after training began" in n for n in f.notes)
    assert not any("first evaluation" in n for n in forecast(compute, reward, n_bootstrap=20).notes)


def test_cli_refuses_a_bootstrap_past_its_bound_in_one_line(tmp_path):
    run = write_run(tmp_path / "run", *synthetic(*CURVES[0], seed=0))
    result = runner.invoke(app, ["forecast", str(run), "--bootstrap", "100000000"])  # was 913 GiB
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == "error: --bootstrap must be between 1 and 100,000, got 100000000"
    with pytest.raises(ValueError, match="n_bootstrap must be in"):
        forecast(*synthetic(*CURVES[0], seed=0), n_bootstrap=MAX_BOOTSTRAP + 1)


def test_the_refits_are_fitted_in_chunks_of_bounded_size(monkeypatch):
    import agentenv.eval.forecast as module

    batches = []
    real = module._Batch

    def recording(x, y, r0):
        batches.append(y.shape[0])
        return real(x, y, r0)

    monkeypatch.setattr(module, "_MAX_CELLS", 50 * module._GRID_B * module._GRID_M)
    monkeypatch.setattr(module, "_Batch", recording)
    f = forecast(*synthetic(*CURVES[0], seed=0), n_bootstrap=220)
    assert batches == [1, 50, 50, 50, 50, 20]  # the best fit, then the refits 50 at a time
    assert f.a.low <= f.a.value <= f.a.high and f.n_bootstrap == 220


def test_cli_json_is_strict_where_compute_passes_a_floats_range(tmp_path):
    compute = [0, 1e300, 2e300, 4e300, 8e300, 1.6e301, 1.7e308]  # 10x the run's compute is past float max
    run = write_run(tmp_path / "run", compute, [0.1, 0.2, 0.3, 0.4, 0.5, 0.55, 0.6])
    result = runner.invoke(app, ["forecast", str(run), "--json", "--bootstrap", "50"])
    assert result.exit_code == 0, result.output

    def refuse(constant):
        raise AssertionError(f"not JSON: {constant}")

    data = json.loads(result.stdout, parse_constant=refuse)
    assert data["predictions"][1]["multiple"] == 10.0 and data["predictions"][1]["compute"] is None
    assert data["run_compute"] == 1.7e308
