"""Reports opened in headless Chromium (Playwright): the charts render without a console
error, the viewer filters and opens episodes (embedded and from sidecar pages), hostile
text is shown as text and runs nothing, and a screenshot is taken.

Needs the ``playwright`` package and Debian's ``chromium``; without them these tests
skip, unless AGENTENV_REQUIRE_BROWSER=1 (scripts/test.sh sets it after installing both),
when they fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentenv
from agentenv.envs.arithmetic import oracle
from agentenv.eval.evaluation import score
from agentenv.report import build_eval_report, build_report
from tests.report.conftest import HOSTILE, hostile_trajectory, write_steps
from tests.report.test_report import parse

pytestmark = pytest.mark.slow  # a browser: over a second each


def _unavailable(what: str) -> None:
    if os.environ.get("AGENTENV_REQUIRE_BROWSER") == "1":
        pytest.fail(f"AGENTENV_REQUIRE_BROWSER=1 but {what}")
    pytest.skip(what)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[browser]')")
    executable = shutil.which("chromium")
    if executable is None:
        _unavailable("no chromium on PATH (apt-get install chromium; scripts/setup.sh does)")
    from agentenv.envs.browser.driver import CHROMIUM_ARGS  # the browser env's launch flags

    playwright = sync_playwright().start()
    try:
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=list(CHROMIUM_ARGS))
        yield launched
        launched.close()
    finally:
        playwright.stop()


class Opened:
    """A page with its console errors, uncaught exceptions and every URL it requested."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("html[data-ready='1']")

    def count_text(self) -> str:
        return str(self.page.text_content("#f-count"))

    def column(self, index: int) -> list[str]:
        return [str(c) for c in self.page.locator(f"#ae-rows tr td:nth-child({index})").all_text_contents()]

    def open_row(self, row: int) -> Any:
        self.page.click(f"#ae-rows tr[data-row='{row}']")
        return self.page.wait_for_selector(f"#ae-episode article[data-row='{row}']")


@pytest.fixture
def opened(browser: Any) -> Iterator[Any]:
    pages: list[Opened] = []

    def open_(path: Path) -> Opened:
        pages.append(Opened(browser, path))
        return pages[-1]

    yield open_
    for p in pages:
        p.page.close()


def test_the_run_report_renders_filters_opens_a_lazy_episode_and_is_captured(
    trained_run: Path, tmp_path: Path, opened: Any
) -> None:
    report = build_report(trained_run, tmp_path / "report.html", max_embedded=3, page_size=4)
    _, index, sample = parse(report.path)
    view = opened(report.path)
    page = view.page

    charts = page.locator("figure.chart svg.plot")
    assert charts.count() >= 20
    success = page.locator("figure.chart", has_text="Success: training episodes and held-out")
    assert success.locator("svg.plot path").count() >= 2  # the train line and the held-out line
    box = success.locator("svg.plot").bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 100
    n = index["episodes"]
    assert view.count_text() == f"{n} of {n} episodes"

    # Filter by failure kind: the count and every listed row follow.
    kinds = Counter(index["strings"]["failure"][i] for i in index["cols"]["failure"])
    kind, expected = kinds.most_common(1)[0]
    page.select_option("#f-failure", label=kind)
    assert view.count_text() == f"{expected} of {n} episodes"
    assert set(view.column(7)) == {kind}
    page.select_option("#f-failure", value="")
    page.select_option("#f-success", value="0")
    unsolved = n - sum(index["cols"]["success"])
    assert view.count_text() == f"{unsolved} of {n} episodes" and set(view.column(6)) == {"no"}
    page.select_option("#f-success", value="")
    page.select_option("#f-source", label="held-out")
    page.fill("#f-step-from", "2")
    page.fill("#f-step-to", "2")
    assert set(view.column(2)) == {"2"} and set(view.column(3)) == {"held-out"}
    page.fill("#f-task", "guess-")
    assert view.column(5) and all("guess-" in task for task in view.column(5))

    # Open an episode that is not embedded: it comes from a sidecar page.
    lazy = next(int(r) for r in page.locator("#ae-rows tr").evaluate_all("rows => rows.map(r => r.dataset.row)")
                if r not in sample)  # fmt: skip
    article = view.open_row(lazy)
    text = article.text_content()
    assert index["strings"]["task"][index["cols"]["task"][lazy]] in text
    assert "turn 0" in text and "format" in text  # a turn with its reward components
    page.click("#ae-episode details.record summary")
    raw = json.loads(str(page.locator("#ae-episode details.record pre").text_content()))
    assert raw["where"].startswith("evals/step-000002.jsonl line ")
    assert any(url.endswith(".js") and "report_files/episodes-" in url for url in view.requests)
    assert all(url.startswith("file://") for url in view.requests)
    assert view.errors == []

    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_hostile_episode_text_is_shown_as_text_and_runs_nothing(tmp_path: Path, opened: Any) -> None:
    run = tmp_path / "run"
    write_steps(run, {1: [json.dumps(hostile_trajectory(-0.1).model_dump(mode="json"))]})
    report = build_report(run, max_embedded=0)  # so the episode comes through a sidecar script too
    view = opened(report.path)
    page = view.page
    assert view.column(5) == ["<script>alert(1)</script>"]
    article = view.open_row(0)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert article.query_selector("img") is None and page.locator("#ae-episode b:text('bold?')").count() == 0
    actions = page.locator("#ae-episode pre.action").all_text_contents()
    assert actions[0] == HOSTILE["script"] and actions[1] == HOSTILE["markup"]
    assert "nul\u2400 bell\u2407 esc\u241b[31m del\u2421" in actions[2]  # control characters made visible
    assert actions[3] == HOSTILE["surrogate"]  # the page's text holds the lone surrogates as they were
    diff = page.locator("#ae-episode table.diff").first.text_content()
    assert "/said/</script>" in str(diff) and '"<b>"' in str(diff)
    assert "</script>format -0.100" in str(article.text_content())
    more = page.locator("#ae-episode .long button").first
    assert "show all 20," in str(more.text_content())
    more.click()
    assert len(actions[4]) < len(page.locator("#ae-episode pre.action").nth(4).text_content() or "")
    assert view.errors == [] and all(url.startswith("file://") for url in view.requests)


def test_an_episode_that_is_not_in_the_report_says_where_it_is(tmp_path: Path, opened: Any) -> None:
    run = tmp_path / "run"
    write_steps(run, {1: [json.dumps(hostile_trajectory().model_dump(mode="json"))]})
    report = build_report(run, max_embedded=0)
    alone = tmp_path / "elsewhere" / "report.html"
    alone.parent.mkdir()
    shutil.copy(report.path, alone)
    view = opened(alone)
    view.page.click("#ae-rows tr[data-row='0']")
    message = view.page.wait_for_selector("#ae-episode p.error").text_content()
    assert message == (
        "could not load report_files/episodes-00000.js: keep that folder next to the report "
        "(it holds the episodes not embedded)"
    )
    assert [e for e in view.errors if "ERR_FILE_NOT_FOUND" not in e] == []

    bare = build_report(run, tmp_path / "bare.html", max_embedded=0, pages=False)
    view = opened(bare.path)
    view.page.click("#ae-rows tr[data-row='0']")
    message = view.page.wait_for_selector("#ae-episode p.error").text_content()
    assert str(message).endswith("without sidecar pages; its record is trajectories/step-000001.jsonl line 1")
    assert view.errors == []


def test_an_evaluation_report_renders_and_opens_an_episode(tmp_path: Path, opened: Any) -> None:
    trajs = agentenv.rollout("arithmetic-v0", oracle(), n=6)
    report = build_eval_report(trajs, score(trajs, 1, label="oracle"), tmp_path / "eval.html")
    view = opened(report.path)
    assert view.page.locator("#figures table.data tbody tr").count() == 2  # pass@1, mean@1
    article = view.open_row(2)
    assert "submit" in str(article.text_content()) and "task 1.000" in str(article.text_content())
    view.page.select_option("#f-success", value="0")
    assert view.count_text() == "0 of 6 episodes" and view.column(1) == []
    view.page.select_option("#f-success", value="1")
    assert view.count_text() == "6 of 6 episodes"
    assert view.errors == []
