from __future__ import annotations

import pytest

from tests.toy_envs import CounterEnv


@pytest.fixture
def counter() -> CounterEnv:
    env = CounterEnv()
    yield env
    env.close()
