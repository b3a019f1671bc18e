"""A site's ``seed(db, seed)`` gets a seed in ``[0, SEEDS)``: a reset without a seed draws 128
bits, which overflowed SQLite's INTEGER in a site that keeps its seed in a column."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from agentenv.envs.browser import BrowserEnv, Site, SiteTask
from agentenv.envs.browser.site import SEEDS

pytestmark = pytest.mark.slow  # a browser and a site server


def seed(db: sqlite3.Connection, seed: int) -> None:
    db.execute("INSERT INTO meta (seed) VALUES (?)", (seed,))


def create_app(db_path: Path) -> Starlette:
    return Starlette(routes=[Route("/", lambda request: HTMLResponse("<title>Seeded</title><p>Seeded</p>"))])


SITE = Site(
    name="seeded",
    schema="CREATE TABLE meta (seed INTEGER NOT NULL);",
    seed=seed,
    create_app=create_app,
    checks={"none": lambda *args, **kwargs: 0.0},
    tasks=[SiteTask(id="t", prompt="p", golden=[], check="none", writes=False)],
)


def kept_seed(env: BrowserEnv) -> int:
    db = sqlite3.connect(env._db_path("seeded"))
    try:
        return int(db.execute("SELECT seed FROM meta").fetchone()[0])
    finally:
        db.close()


@pytest.mark.parametrize(("reset_seed", "expected"), [(None, None), (2**70 + 5, 5), (7, 7), (SEEDS, 0)])
def test_a_site_gets_a_seed_its_database_can_hold(make_env, reset_seed, expected):
    env = make_env(SITE)
    env.reset(seed=reset_seed)
    assert 0 <= kept_seed(env) == env.state.db_seed < SEEDS
    if expected is not None:
        assert env.state.db_seed == expected  # the reset's seed modulo SEEDS; one in range as it is


def test_a_snapshot_with_a_seed_out_of_range_is_refused(make_env):
    env = make_env(SITE)
    env.reset(seed=1)
    saved = env.snapshot().model_dump(mode="json")
    saved["state"]["db_seed"] = 2**64
    with pytest.raises(ValueError, match="db_seed"):
        make_env(SITE).restore(saved)
