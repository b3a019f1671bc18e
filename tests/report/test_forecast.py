"""The report's "Reward against compute" section: the fitted curve through the held-out
points when the run can be forecast, the reason when it cannot."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agentenv.eval.forecast import Sigmoid, forecast_rows
from agentenv.report import build_report
from agentenv.report.rundir import RunDir


def write_run(path: Path, evaluations: int) -> Path:
    """A run of 4 steps per evaluation whose held-out reward follows a known curve."""
    path.mkdir(parents=True)
    curve = Sigmoid(r0=0.1, a=0.7, b=2.0, c_mid=2.5e5)
    rows = [{"step": 0, "compute/tokens": 0, "eval/success_rate": 0.1}]
    for step in range(1, 4 * evaluations + 1):
        tokens = 2e4 * step
        row = {"step": step, "compute/tokens": tokens, "success_rate": 0.3}
        if step % 4 == 0:
            row["eval/success_rate"] = curve(tokens) + (0.01 if step % 8 else -0.01)
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def section(page: str) -> str:
    match = re.search(r'<section class="block" id="forecast">(.*?)</section>', page, re.DOTALL)
    assert match, "no forecast section"
    return match.group(1)


def test_a_run_that_can_be_forecast_shows_its_points_the_curve_and_the_parameters(tmp_path):
    run = write_run(tmp_path / "run", evaluations=10)
    body = section(build_report(run).path.read_text(encoding="utf-8"))
    assert "<svg" in body and "log scale" in body
    assert body.count('r="3" fill="#3366cc"') == 10  # one marker per evaluation after step 0
    assert 'stroke-dasharray="4 3"' in body  # the curve past the run's compute: the forecast
    f = forecast_rows(RunDir(run).numbers())  # the same numbers as `agentenv forecast`
    for text in ("A (asymptote)", f"{f.a.value:.3f}", f"[{f.a.low:.3f}, {f.a.high:.3f}]", "reward at 10x"):
        assert text in body, text


def test_a_run_with_too_few_evaluations_says_why_instead_of_a_chart(tmp_path):
    run = write_run(tmp_path / "run", evaluations=3)
    body = section(build_report(run).path.read_text(encoding="utf-8"))
    assert "<svg" not in body
    assert "No forecast: too few points to fit: 3 evaluations after training began, a fit needs 5" in body
