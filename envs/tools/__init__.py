"""The tools env: agents acting through real HTTP APIs over a SQLite database.

    import agentenv
    env = agentenv.make("retail-v0")      # or "calendar-v0"
    obs, info = env.reset(seed=0)         # starts the retail service on first use

A domain is pydantic request models + route functions + typed answer fields +
tasks with golden actions (`Domain`, domain.py); its service runs in a subprocess
that answers only the env that started it (service.py, app.py, auth.py); the env
(env.py) turns routes into tools and verifies by final database state and the
exact answer fields. See docs/tools_env.md for writing a domain. Nothing starts
at import.
"""

from agentenv.envs.tools.domain import (
    MAX_GOLD_ACTIONS,
    Answer,
    Domain,
    NotFound,
    Request,
    Route,
    RuleViolation,
    gold_task,
    load_domain,
)
from agentenv.envs.tools.env import ToolsEnv, ToolsState, db_hash, oracle, respond_spec, route_specs

__all__ = [
    "MAX_GOLD_ACTIONS",
    "Answer",
    "Domain",
    "NotFound",
    "Request",
    "Route",
    "RuleViolation",
    "ToolsEnv",
    "ToolsState",
    "db_hash",
    "gold_task",
    "load_domain",
    "oracle",
    "respond_spec",
    "route_specs",
]
