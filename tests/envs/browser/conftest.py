"""Browser env tests: envs made through `make_env` are closed after each test; the browser
and the site servers of the run are stopped at its end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentenv.envs.browser import BrowserEnv, shutdown


@pytest.fixture(scope="session", autouse=True)
def _stop_the_browser_at_the_end() -> Iterator[None]:
    yield
    shutdown()


@pytest.fixture
def make_env() -> Iterator[Callable[..., BrowserEnv]]:
    made: list[BrowserEnv] = []

    def make(*args: Any, **kwargs: Any) -> BrowserEnv:
        env = BrowserEnv(*args, **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()
