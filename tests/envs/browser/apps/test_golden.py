"""Every task of every site is solvable: its golden actions, driven with raw Playwright
(``get_by_role(role, name=name, exact=True).nth(nth)``) against the real app, score 1;
and doing nothing scores 0 on every task that writes."""

from __future__ import annotations

import pytest

from agentenv.envs.browser.apps import SITES
from agentenv.envs.browser.site import Site, SiteTask

from .conftest import run_golden

pytestmark = pytest.mark.slow  # a browser and three servers

CASES = [
    pytest.param(site, task, index, id=f"{site.name}/{task.id}")
    for site in SITES.values()
    for index, task in enumerate(site.tasks)
]


@pytest.mark.parametrize(("site", "task", "index"), CASES)
def test_golden_actions_solve_the_task(serve, browser, site: Site, task: SiteTask, index: int) -> None:
    served = serve(site)
    seed = index  # each task on another seed: the facts a task names hold for every seed
    start = served.reset(seed)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(10_000)
        given = run_golden(page, served.origin, task)
    finally:
        context.close()
    assert served.score(task, start, given) == 1.0


@pytest.mark.parametrize(("site", "task", "index"), [c for c in CASES if c.values[1].writes])
def test_doing_nothing_scores_zero(serve, site: Site, task: SiteTask, index: int) -> None:
    served = serve(site)
    start = served.reset(index)
    assert served.score(task, start, None) == 0.0
