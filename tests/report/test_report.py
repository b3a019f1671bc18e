"""`agentenv report`: what the page holds for a real run, for bad run directories, for
hostile trajectory text, and for runs too large to embed (read without a browser;
tests/report/test_report_browser.py opens the pages in Chromium)."""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from agentenv.cli import app
from agentenv.eval.evaluation import score
from agentenv.report import build_eval_report, build_report
from agentenv.report.charts import MAX_POINTS, Series, chart
from agentenv.report.episodes import MAX_TEXT, embed_json
from tests.report.conftest import CORRUPT_STATES, HOSTILE, hostile_trajectory, write_checkpoint, write_steps

SECTIONS = (
    "overview",
    "curves",
    "forecast",
    "optimisation",
    "throughput",
    "groups",
    "failures",
    "turns",
    "miner",
    "episodes",
)


class _Page(HTMLParser):
    """The page's script elements (attributes and text) and its section ids."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.ids: list[str] = []
        self._in_script: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.append(str(found["id"]))
        if tag == "script":
            self._in_script, self._text = found, []

    def handle_data(self, data: str) -> None:
        if self._in_script is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._in_script is not None:
            self.scripts.append((self._in_script, "".join(self._text)))
            self._in_script = None


def parse(path: Path) -> tuple[_Page, dict[str, Any], dict[str, Any]]:
    """The page, its episode index and its embedded episodes (by row)."""
    text = path.read_bytes().decode("utf-8")  # strict: the file is valid UTF-8
    page = _Page()
    page.feed(text)
    blocks = {attrs.get("id"): body for attrs, body in page.scripts}
    return page, json.loads(blocks["ae-index"]), json.loads(blocks["ae-sample"])


def sidecar_rows(folder: Path, page_size: int) -> dict[int, dict[str, Any]]:
    """Every episode in the sidecar pages, by row."""
    rows = {}
    for path in sorted(folder.glob("episodes-*.js")):
        match = re.fullmatch(r"AgentenvReport\.page\((\d+),(.*)\);\n", path.read_text(encoding="utf-8"), re.DOTALL)
        assert match, path.name
        for i, episode in enumerate(json.loads(match.group(2))):
            rows[int(match.group(1)) * page_size + i] = episode
    return rows


def _lines(run: Path, folder: str) -> int:
    return sum(len(p.read_text().splitlines()) for p in (run / folder).glob("step-*.jsonl"))


# -- a real run ------------------------------------------------------------------------------


@pytest.mark.slow  # trains a tiny model for two steps (once per session)
def test_a_training_run_gives_every_section_and_every_episode(trained_run: Path, tmp_path: Path) -> None:
    report = build_report(trained_run, tmp_path / "report.html")
    assert report.skipped == [] and report.pages == 0 and report.sidecar_dir is None
    page, index, sample = parse(report.path)
    assert all(section in page.ids for section in SECTIONS)
    episodes = _lines(trained_run, "trajectories") + _lines(trained_run, "evals")
    assert index["episodes"] == report.episodes == episodes == len(sample)  # small: every episode embedded
    assert set(index["strings"]["source"]) == {"train", "held-out"}
    assert set(index["strings"]["env"]) == {"arithmetic-v0", "guess-number-v0"}  # the trainer names its envs
    text = report.path.read_text()
    assert text.count("<svg") >= 20
    assert str(trained_run.parent) not in text  # config.json's absolute output_dir is shown as "."
    assert "Top failing families" in text and "Pools over time" in text
    metrics = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()]
    assert {"eval/success_low", "eval/success_high", "eval/episodes"} <= set(metrics[0])
    episode = sample["0"]
    assert episode["where"] == "trajectories/step-000001.jsonl line 1"
    assert episode["steps"] and {"action", "calls", "rewards", "state_diff"} <= set(episode["steps"][0])
    assert not any("token_ids" in json.dumps(step) for step in episode["steps"])  # token ids left out


@pytest.mark.slow  # uses the trained run
def test_the_report_command_writes_next_to_the_run(trained_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    result = CliRunner().invoke(app, ["report", str(run), "--embed", "5"])
    assert result.exit_code == 0, result.output
    assert f"wrote {run / 'report.html'}" in result.output and "keep that folder next to the report" in result.output
    assert (run / "report_files" / "episodes-00000.js").exists()


# -- bad run directories ------------------------------------------------------------------------


def test_an_empty_run_directory_gives_a_report_that_says_so(tmp_path: Path) -> None:
    report = build_report(tmp_path)
    assert report.episodes == 0
    assert any("an empty run" in note for note in report.skipped)
    page, index, _ = parse(report.path)
    assert index["episodes"] == 0 and "episodes" in page.ids
    assert "Skipped while reading" in report.path.read_text()


def test_a_half_written_run_is_shown_with_what_was_skipped(tmp_path: Path) -> None:
    good = hostile_trajectory().model_copy(update={"transitions": [], "messages": []})
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "success_rate": 0.5}\n{"step": 2, "success_ra')
    write_steps(tmp_path, {1: [json.dumps(good.model_dump(mode="json"))]})
    (tmp_path / "trajectories" / ".step-000002.jsonl.tmp").write_text("{")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest").write_text("step-000002")  # never written: killed first
    (tmp_path / "config.json").write_text("{broken")
    report = build_report(tmp_path)
    notes = "\n".join(report.skipped)
    assert "metrics.jsonl: skipped 1 line (line 2: not JSON (cut short?))" in notes
    assert "trajectories/.step-000002.jsonl.tmp: an unfinished write" in notes
    assert "config.json: unreadable" in notes
    assert report.episodes == 1
    assert "No ledger to show" not in report.path.read_text()  # no miner metrics: the section says so instead
    assert "did not use the failure miner" in report.path.read_text()


def test_corrupt_lines_are_skipped_by_file_and_line_and_the_rest_is_read(tmp_path: Path) -> None:
    good = json.dumps(
        hostile_trajectory().model_copy(update={"transitions": [], "messages": []}).model_dump(mode="json")
    )
    write_steps(
        tmp_path,
        {
            3: [good, "{not json", '{"task": {"id": "t"}, "failure": "exploded"}', "[1, 2]", good],
            4: [good[: len(good) // 2]],  # killed mid-line
        },
    )
    with (tmp_path / "trajectories" / "step-000003.jsonl").open("ab") as f:
        f.write(b"\xff\xfe not utf-8\n")
    (tmp_path / "metrics.jsonl").write_text('{"step": -1}\n{"step": 3, "loss": NaN, "entropy": 1e999, "x": true}\n')
    report = build_report(tmp_path)
    notes = "\n".join(report.skipped)
    assert "trajectories/step-000003.jsonl: skipped 4 lines (line 2: not JSON (cut short?); line 3: failure:" in notes
    assert "line 4: Input should be an object" in notes and "line 6:" in notes
    assert "trajectories/step-000004.jsonl: skipped 1 line (line 1: not JSON (cut short?))" in notes
    assert "metrics.jsonl: skipped 1 line (line 1: step: Input should be greater than or equal to 0)" in notes
    assert report.episodes == 2


@pytest.mark.parametrize("case", list(CORRUPT_STATES))
def test_a_corrupt_trainer_state_is_skipped_with_a_note(tmp_path: Path, case: str) -> None:
    state, why = CORRUPT_STATES[case]
    path = write_checkpoint(tmp_path / "run", state)
    result = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    where = path.relative_to(tmp_path / "run")  # the page names paths within the run, as the notes do
    assert f"skipped: the miner's ledger: {where}: {why}" in " ".join(result.stderr.split())
    assert "Pools over time" in (tmp_path / "r.html").read_text()  # the charts of the metrics are still drawn


def test_a_path_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        build_report(tmp_path / "missing")


# -- hostile text ---------------------------------------------------------------------------------


def _hostile_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    data = hostile_trajectory().model_dump(mode="json")
    # As Python's json writes it: a lone surrogate as a \\udc80 escape (pydantic's writer refuses it).
    write_steps(run, {1: [json.dumps(data)]})
    (run / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "</script><b>metric": 1.0, "miner/top_failing_families": [["<i>fam</i>", 3, 1.0]]})
        + "\n"
    )
    return run


def test_hostile_text_stays_data_and_keeps_its_value(tmp_path: Path) -> None:
    report = build_report(_hostile_run(tmp_path), tmp_path / "r.html")
    assert report.skipped == []
    page, index, sample = parse(report.path)
    # Exactly the page's own three scripts: nothing in the trajectory opened one or closed one early.
    assert [attrs.get("id") or "viewer" for attrs, _ in page.scripts] == ["ae-index", "ae-sample", "viewer"]
    raw = report.path.read_text()
    assert "<script>window.__pwned" not in raw and "<img src=x" not in raw and "<i>fam</i>" not in raw
    assert "&lt;i&gt;fam&lt;/i&gt;" in raw  # escaped where Python writes it into the page
    steps = sample["0"]["steps"]
    assert [s["action"] for s in steps[:4]] == [HOSTILE[k] for k in ("script", "markup", "controls", "surrogate")]
    assert index["strings"]["task"] == ["<script>alert(1)</script>"]
    huge = steps[4]["action"]
    assert huge.startswith("x" * MAX_TEXT) and len(huge) < MAX_TEXT + 200
    assert "more characters in trajectories/step-000001.jsonl line 1" in huge


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.text() | st.integers(-(2**53), 2**53) | st.booleans() | st.none(), st.lists, max_leaves=20))
def test_embedded_json_has_no_markup_and_reads_back_as_written(value: Any) -> None:
    text = embed_json({"v": value})
    assert not set(text) & {"<", ">", "&", "\u2028", "\u2029"}
    text.encode("utf-8")  # no lone surrogate left raw
    assert json.loads(text) == {"v": value}


# -- large runs ----------------------------------------------------------------------------------


def _many(run: Path, episodes: int, per_step: int = 50) -> None:
    kinds = ["none", "policy", "format", "truncated", "infra"]
    base = hostile_trajectory().model_copy(update={"transitions": [], "messages": []}).model_dump(mode="json")
    lines: dict[int, list[str]] = {}
    for i in range(episodes):
        kind = kinds[i % len(kinds)] if i % 7 else "infra"
        item = {**base, "task": {"id": f"t{i % 13}", "prompt": "p"}, "failure": kind, "success": kind == "none"}
        item["messages"] = [{"role": "user", "content": f"episode {i} " + "y" * 300}]
        lines.setdefault(1 + i // per_step, []).append(json.dumps(item))
    write_steps(run, lines)


def test_a_large_run_embeds_a_stratified_sample_and_pages_every_episode(tmp_path: Path) -> None:
    _many(tmp_path, 430)
    out = tmp_path / "out" / "r.html"
    report = build_report(tmp_path, out, max_embedded=20, page_size=50)
    assert report.episodes == 430 and report.embedded <= 20 and report.pages == 9
    assert report.sidecar_dir == out.parent / "r_files"
    _, index, sample = parse(out)
    assert index["sidecar"] == "r_files/" and index["page_size"] == 50
    kinds = {index["strings"]["failure"][index["cols"]["failure"][int(row)]] for row in sample}
    assert kinds == {"none", "policy", "format", "truncated", "infra"}  # every outcome in the sample
    paged = sidecar_rows(report.sidecar_dir, 50)
    assert sorted(paged) == list(range(430))  # every episode, in index order
    assert all(paged[int(row)] == episode for row, episode in sample.items())
    assert paged[123]["messages"][0]["content"].startswith("episode 123 ")
    assert index["strings"]["file"][index["cols"]["file"][123]] == "trajectories/step-000003.jsonl"
    assert index["cols"]["line"][123] == 24
    # Without pages: the same index and sample, no sidecar, and the earlier pages gone.
    bare = build_report(tmp_path, out, max_embedded=20, pages=False)
    assert (bare.pages, bare.sidecar_dir, bare.embedded) == (0, None, report.embedded)
    assert parse(out)[1]["sidecar"] is None and not list(report.sidecar_dir.glob("episodes-*.js"))


def test_the_page_grows_by_a_few_dozen_bytes_an_episode_past_the_sample(tmp_path: Path) -> None:
    sizes = {}
    for n in (1000, 4000):
        run = tmp_path / str(n)
        _many(run, n)
        sizes[n] = build_report(run, max_embedded=200).size_bytes
    per_episode = (sizes[4000] - sizes[1000]) / 3000
    assert per_episode < 60
    assert sizes[1000] + per_episode * 100_000 < 20e6  # the bound at 100k episodes


# -- an evaluation ------------------------------------------------------------------------------


def test_an_evaluation_report_has_its_figures_and_every_episode(tmp_path: Path) -> None:
    trajs = [hostile_trajectory(), hostile_trajectory(0.5)]
    report = build_eval_report(trajs, score(trajs, 2, label="hostile <b>"), tmp_path / "eval.html")
    page, index, sample = parse(report.path)
    assert {"figures", "breakdown", "failures", "episodes"} <= set(page.ids)
    assert index["episodes"] == 2 and len(sample) == 2
    assert sample["0"]["steps"][3]["action"] == HOSTILE["surrogate"]
    assert "hostile &lt;b&gt;" in report.path.read_text() and "pass@2" in report.path.read_text()


def test_rewards_whose_sum_passes_a_floats_range_still_give_a_page(tmp_path: Path) -> None:
    # Two step rewards of 1e308 (each a float): their sum has no float; the page shows "-".
    episode = hostile_trajectory().model_copy(update={"transitions": [], "messages": []})
    episode = episode.model_copy(update={"rewards": [1e308, 1e308], "task_reward": 1e308})
    path = tmp_path / "big.jsonl"
    path.write_text("".join(episode.model_copy(update={"seed": s}).to_json() + "\n" for s in (1, 2)))
    result = CliRunner().invoke(app, ["report", str(path)])
    assert result.exit_code == 0, result.output
    _, index, sample = parse(tmp_path / "big.html")
    assert index["cols"]["reward"] == [None, None] and sample["0"]["total_reward"] is None


def test_metrics_past_a_floats_range_are_left_out_of_the_charts_not_fatal(tmp_path: Path) -> None:
    rows = [{"step": i, "reward/task": 1e308 if i % 2 else -1e308, "loss": 0.5} for i in range(1, 9)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    svg_numbers = re.findall(
        r' (?:d|points|x|y|x1|x2|y1|y2|cx|cy|width|height)="([^"]*)"', (tmp_path / "report.html").read_text()
    )
    assert svg_numbers and not any("nan" in v or "inf" in v for v in svg_numbers)


# -- charts --------------------------------------------------------------------------------------


def test_a_chart_draws_long_series_in_a_bounded_number_of_points_and_escapes_its_labels() -> None:
    xs = list(range(10_000))
    svg = chart("<b>title</b>", [Series("<script>x</script>", xs, [float(x % 7) for x in xs])])
    path = re.search(r'<path d="([^"]+)" fill="none"', svg)
    assert path is not None and path.group(1).count("L") == MAX_POINTS - 1
    assert "<script>" not in svg and "&lt;script&gt;x&lt;/script&gt;" in svg and "&lt;b&gt;title" in svg
    assert "no data" in chart("empty", [Series("a", [1.0], [None])])
