"""Every id `agentenv list` shows as ready makes with its defaults, resets and passes `check_env`.

`agentenv.envs_list()` lists every registered id, the adapter namespaces' included
(reasoning-gym's datasets, TextArena's games). An id is ready when its `EnvSpec.needs` is
None: ``agentenv.make(id)`` alone must then make an env that resets and keeps the
contract. An id that is not ready must say what it needs, in the listing and in the
error ``make`` raises without it.

Cost: making, resetting and checking all 273 ready ids (of 274) takes 90 to 140 s on an
idle 2-core machine, most of it the four browser envs' checks (10 to 25 s each, a real
Chromium) and the reasoning-gym datasets that are slow to generate (knight_swap 16 s,
futoshiki 10 s, zebra_puzzles 7 s, puzzle24 6 s): hence ``slow``.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import agentenv
from agentenv.cli import app

LISTED = agentenv.envs_list()
READY = [spec.id for spec in LISTED if spec.needs is None]
NOT_READY = [spec.id for spec in LISTED if spec.needs is not None]


@pytest.mark.slow
@pytest.mark.parametrize("env_id", READY)
def test_every_ready_id_makes_with_its_defaults_resets_and_passes_check_env(env_id: str) -> None:
    env = agentenv.make(env_id)
    try:
        obs, info = env.reset(seed=0)
        assert obs and info["task_id"] in env.tasks
        agentenv.check_env(env)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", NOT_READY)
def test_an_id_that_is_not_ready_says_what_it_needs_when_made_without_it(env_id: str) -> None:
    needs = agentenv.spec(env_id).needs
    assert needs
    with pytest.raises(agentenv.EnvArgumentError) as raised:
        agentenv.make(env_id)
    assert needs in str(raised.value)


def test_the_listing_shows_what_an_id_that_is_not_ready_needs() -> None:
    # Every namespace's ids are listed; reasoning-gym's composite alone needs arguments.
    pytest.importorskip("reasoning_gym")
    assert NOT_READY == ["reasoning-gym/composite-v0"] and len(LISTED) == len(READY) + 1
    result = CliRunner().invoke(app, ["list", "reasoning-gym"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "reasoning-gym/composite-v0" in line)
    assert "no: needs config={'datasets'" in row
    knight_swap = next(line for line in result.output.splitlines() if "reasoning-gym/knight_swap-v0" in line)
    assert "slow to make" in knight_swap
    summary = CliRunner().invoke(app, ["list"], env={"COLUMNS": "400"}).output
    assert "105 of 106" in next(
        line for line in summary.splitlines() if line.lstrip("│ ").startswith("reasoning-gym/*")
    )
