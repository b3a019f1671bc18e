"""Fuzzed actions against a rotating sample of the listed envs: nothing escapes `step`, every episode serialises.

`tests/core/test_fuzz_actions.py` fuzzes one env of each kind at length; this one goes
wide: every id `agentenv.envs_list()` lists as ready (its `EnvSpec.needs` is None),
made with its defaults, gets `ACTIONS_PER_ID` generated actions (`tests.fuzz_strategies`:
tags anywhere, broken and deep JSON, huge numbers, NaN, lone surrogates, odd OpenAI
messages, odd `ToolCall`s, non-text objects, valid calls with random arguments), played
as episodes. After every step: it returned (no exception), nothing passed for infra, the
reward is a finite float and every observation UTF-8 text. After every episode: its
`Trajectory` serialises and round-trips through JSON.

Which ids: the listed ready ids, shuffled once with a fixed seed, fall into `DAYS`
groups (every `DAYS`-th one); a run takes the group of its date (UTC), so each id is
fuzzed once in every `DAYS` consecutive days, and the sample covers every namespace
each day. The date also seeds hypothesis, so a day's run reproduces: set
``AGENTENV_FUZZ_DATE=YYYY-MM-DD`` to replay that day's sample and actions. The sample is
printed in the run's output, and each case is named by its id. A reasoning-gym env is made with
``size=8`` (the fuzz needs a few tasks, not the 64 a default make generates: knight_swap
takes 20 s for those); `tests/envs/test_every_listed_env.py` makes each with its defaults.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import random
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import agentenv
from agentenv import Env, Trajectory
from agentenv.core.types import Failure
from tests.fuzz_strategies import ActionStrategies, Fuzzed

DAYS = 7
"""Every listed id is fuzzed once in this many consecutive days."""
EPISODES_PER_ID = 8
EPISODE_ACTIONS = (6, 10)
ACTIONS_PER_ID = EPISODES_PER_ID * EPISODE_ACTIONS[0]
"""At least this many actions per sampled id (episodes of 6 to 10 actions)."""
VALID_WEIGHT = 15
"""Weight (against ~100) of valid calls with random arguments."""
SMALL = {"reasoning-gym/": {"size": 8}}
"""Arguments the fuzz makes some ids with, by id prefix (see the module docstring)."""
ROLES = ("user", "tool", "assistant", "system")


def run_date() -> datetime.date:
    """The date whose sample this run fuzzes: ``AGENTENV_FUZZ_DATE``, else today (UTC)."""
    given_date = os.environ.get("AGENTENV_FUZZ_DATE")
    if given_date:
        return datetime.date.fromisoformat(given_date)
    return datetime.datetime.now(datetime.UTC).date()


def sample(ids: list[str], day: datetime.date) -> list[str]:
    """``day``'s ids: every `DAYS`-th of ``ids`` in a fixed shuffled order, from the day's offset."""
    order = sorted(ids)
    random.Random(0).shuffle(order)
    return sorted(order[day.toordinal() % DAYS :: DAYS])


READY = [s.id for s in agentenv.envs_list() if s.needs is None]
DAY = run_date()
SAMPLE = sample(READY, DAY)

FUZZ = settings(
    database=None,
    deadline=None,
    max_examples=EPISODES_PER_ID,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module", autouse=True)
def _say_which_ids(request: pytest.FixtureRequest) -> None:
    """Print the day's sample in the test run's output, captured or not."""
    line = f"\nfuzzing {len(SAMPLE)} of {len(READY)} ready ids, the sample of {DAY}: {', '.join(SAMPLE)}"
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        print(line)


@pytest.fixture(params=SAMPLE)
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    env_id: str = request.param
    kwargs = next((kw for prefix, kw in SMALL.items() if env_id.startswith(prefix)), {})
    made = agentenv.make(env_id, **kwargs)
    made.reset(seed=0)  # an MCP env learns its tools from its server on reset: the strategies read them
    yield made
    made.close()


def _check_step(env: Env, fuzzed: Fuzzed, result: tuple) -> dict:
    obs, reward, terminated, truncated, info = result
    where = f"after {fuzzed!r}"
    assert info["failure"] != "infra", f"{where}: an action passed for infra: {info['error']}"
    assert type(reward) is float and math.isfinite(reward), f"{where}: reward {reward!r}"
    assert type(terminated) is bool and type(truncated) is bool, where
    for message in obs:
        assert message["role"] in ROLES and type(message["content"]) is str, f"{where}: {message!r:.300}"
        message["content"].encode("utf-8")
    return info


def _check_trajectory(env: Env, failure: str) -> None:
    trajectory = Trajectory(
        task=env.task,
        messages=env.messages,
        transitions=env.transitions,  # type: ignore[arg-type]
        failure=Failure(failure),
    )
    line = trajectory.model_dump_json()
    json.loads(line)
    back = Trajectory.model_validate_json(line)
    assert back.turns == len(env.transitions) and back.model_dump_json() == line


def test_the_sample_covers_every_ready_id_in_a_week_of_runs() -> None:
    week = [DAY + datetime.timedelta(days=d) for d in range(DAYS)]
    samples = [sample(READY, day) for day in week]
    assert sorted(id_ for ids in samples for id_ in ids) == sorted(READY)  # each once
    assert max(map(len, samples)) - min(map(len, samples)) <= 1
    assert sample(READY, DAY) == SAMPLE  # a date's sample is fixed


@pytest.mark.slow
def test_generated_actions_never_escape_step_and_every_episode_serialises(env: Env) -> None:
    stepped = 0

    @seed(DAY.toordinal())
    @FUZZ
    @given(
        reset_seed=st.integers(0, 2**16),
        episode=st.lists(
            ActionStrategies(env, valid_weight=VALID_WEIGHT).actions,
            min_size=EPISODE_ACTIONS[0],
            max_size=EPISODE_ACTIONS[1],
        ),
    )
    def fuzz(reset_seed: int, episode: list[Fuzzed]) -> None:
        nonlocal stepped
        env.reset(seed=reset_seed)
        ended, failure = False, "truncated"
        for i, fuzzed in enumerate(episode):
            if ended:
                _check_trajectory(env, failure)
                env.reset(seed=reset_seed + i)
            info = _check_step(env, fuzzed, env.step(fuzzed.action))
            stepped += 1
            ended = info["failure"] is not None
            failure = info["failure"] or "truncated"
        _check_trajectory(env, failure)

    fuzz()
    assert stepped >= ACTIONS_PER_ID
