"""`ToolsEnv`: an agent acting through a domain's HTTP API, verified by final database state.

The tools are the domain's routes: each request model becomes an OpenAI tool
schema (`agentenv.tools.spec_from_model`), so the core validates arguments before
anything is sent and names the bad field. A valid call is POSTed with httpx to the
domain's service (service.py) against this episode's own SQLite file. The env adds
one tool of its own, ``respond``, which carries the final answer and ends the episode.

Rewards. Step: ``rule_violation`` (-0.1 per call a business rule refused) and
``server_error`` (-0.1 per 5xx); an invalid call is the core's ``format`` penalty.
Task, the tau2-bench way: replay the golden actions on a fresh copy of the seed
through the same service, hash the compared tables of both databases, and require
the final answer to contain the task's ``outputs``. ``db_match`` and ``outputs`` are
reported with weight 0; ``task`` is their product.

Faults: a killed, hung or unreachable service raises `InfraError` (the episode is
truncated as ``infra``, never scored); every call has ``timeout_s``. Snapshots carry
the episode database (serialised, base64). Left out: user simulation (the task
prompt is the whole request), concurrent writers to one episode.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field

from agentenv import CallOutcome, Env, ScriptedPolicy, State, Task, TaskSet, ToolError, tool, tool_call_text
from agentenv.envs.tools import service as services
from agentenv.envs.tools.domain import FINISH_TOOL, Domain, Route, load_domain
from agentenv.tools import ToolSpec, spec_from_model

__all__ = ["ToolsEnv", "ToolsState", "db_hash", "oracle", "route_specs"]

_ROUTE_ATTR = "route:"  # prefix of the per-instance callers the core dispatches to


class ToolsState(State):
    """What the episode did, as the reward hooks and the trajectory see it. The
    database itself lives in the episode's SQLite file and is snapshotted apart."""

    answer: str | None = None
    calls: int = 0
    writes: list[str] = []
    violations: list[str] = []
    server_errors: int = 0


class ToolsEnv(Env[ToolsState]):
    state_type = ToolsState
    max_turns = 20
    reward_weights: ClassVar[Mapping[str, float]] = {"db_match": 0.0, "outputs": 0.0}  # diagnostics of "task"
    rule_penalty: float = 0.1
    server_error_penalty: float = 0.1

    def __init__(self, domain: str, tasks: TaskSet | Sequence[Task] | None = None, *,
                 timeout_s: float = 5.0, **kwargs: Any) -> None:
        """
        Args:
            domain: The domain as ``"module:ATTRIBUTE"`` (the service process imports it by that name).
            tasks: Default: the domain's tasks.
            timeout_s: Per tool call; a slower service is an infrastructure failure.
            kwargs: Passed to `Env` (max_turns, parser, tool_prompt, render_mode).
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.domain_path = domain
        self.domain: Domain = load_domain(domain)  # an import; nothing starts until reset
        self.timeout_s = timeout_s
        self.instructions = (f"{self.domain.instructions}\nWhen you are done, call {FINISH_TOOL} with your "
                             "final answer to the user; it ends the conversation.")
        self.tools = {**route_specs(self.domain), **type(self).tools}  # type: ignore[misc]
        for route in self.domain.routes.values():
            setattr(self, _ROUTE_ATTR + route.name, functools.partial(self._call_route, route))
        self._service: services.Service | None = None
        self._episode: str | None = None
        self._step_faults: list[str] = []
        super().__init__(tasks, **kwargs)

    # -- hooks ---------------------------------------------------------------------

    def default_tasks(self) -> TaskSet:
        return self.domain.tasks

    def initial_state(self, task: Task) -> ToolsState:
        service = self._live_service()
        if self._episode is None:
            self._episode = service.new_episode()
        else:
            service.reset_episode(self._episode)
        self._step_faults = []
        return ToolsState()

    @tool(terminal=True)
    def respond(self, message: Annotated[str, Field(max_length=4000)]) -> str:
        """Send your final answer to the user and end the conversation.

        Args:
            message: What you tell the user: what you did, or what they asked to know.
        """
        self.state.answer = message
        return "sent"

    def step_rewards(self, outcomes: list[CallOutcome]) -> dict[str, float]:
        faults, self._step_faults = self._step_faults, []
        return {
            "rule_violation": -self.rule_penalty * faults.count("rule"),
            "server_error": -self.server_error_penalty * faults.count("server"),
        }

    def verify(self, task: Task) -> dict[str, float]:
        service = self._live_service()
        db_match = float(self._gold_hash(task) == db_hash(service.db_path(self.episode), self.domain.compare))
        answer = (self.state.answer or "").lower()
        outputs = float(all(o.lower() in answer for o in task.payload.get("outputs", [])))
        return {"task": db_match * outputs, "db_match": db_match, "outputs": outputs}

    def snapshot_external(self) -> dict[str, str] | None:
        if self._episode is None or self._service is None:
            return None
        db = sqlite3.connect(self._service.db_path(self._episode))
        try:
            return {"db": base64.b64encode(db.serialize()).decode("ascii")}
        finally:
            db.close()

    def restore_external(self, data: Any) -> None:
        if data is None:
            return
        service = self._live_service()
        if self._episode is None:
            self._episode = service.new_episode()
        service.write_episode(self._episode, base64.b64decode(data["db"]))

    def on_close(self) -> None:
        if self._service is not None:
            if self._episode is not None:
                self._service.drop_episode(self._episode)
            services.release(self._service)
            self._service = None

    # -- internals -------------------------------------------------------------------

    @property
    def episode(self) -> str:
        """This env's episode id (its database is ``<data dir>/<episode>.sqlite``)."""
        if self._episode is None:
            raise RuntimeError("no episode yet: call reset() first")
        return self._episode

    @property
    def service(self) -> services.Service:
        if self._service is None:
            raise RuntimeError("no service yet: call reset() first")
        return self._service

    def _live_service(self) -> services.Service:
        """The domain's service; a dead one is swapped for a new one (and a new database)."""
        if self._service is not None and not self._service.alive():
            services.release(self._service)
            self._service, self._episode = None, None
        if self._service is None:
            self._service = services.acquire(self.domain_path)
        return self._service

    def _call_route(self, route: Route, **fields: Any) -> Any:
        # The core has validated the fields against route.request already.
        body = route.request.model_construct(**fields).model_dump_json().encode()
        reply = self.service.call(self.episode, route.name, body, self.timeout_s)
        self.state.calls += 1
        if reply.status == 200:
            if route.write:
                self.state.writes.append(route.name)
            return reply.result
        if reply.kind == "rule_violation":
            self.state.violations.append(reply.rule or "?")
            self._step_faults.append("rule")
            raise ToolError(f"refused by rule {reply.rule!r}: {reply.message}")
        if reply.status >= 500:
            self.state.server_errors += 1
            self._step_faults.append("server")
            raise ToolError(f"the service failed on {route.name!r}: {reply.message}")
        raise ToolError(f"{reply.kind}: {reply.message}")

    def _gold_hash(self, task: Task) -> str:
        """The hash of the final state the golden actions reach, cached per service."""
        service = self.service
        actions = [a for a in task.payload.get("actions", []) if a["name"] != FINISH_TOOL]
        key = hashlib.sha256(json.dumps([task.id, actions], sort_keys=True).encode()).hexdigest()
        if key not in service.gold_hashes:
            gold = f"{self.episode}-gold"
            service.reset_episode(gold)
            try:
                for action in actions:
                    reply = service.call(gold, action["name"], json.dumps(action["arguments"]).encode(), self.timeout_s)
                    if reply.status != 200:
                        raise ValueError(f"task {task.id!r}: golden action {action['name']!r} failed: "
                                         f"{reply.kind}: {reply.message}")
                service.gold_hashes[key] = db_hash(service.db_path(gold), self.domain.compare)
            finally:
                service.drop_episode(gold)
        return service.gold_hashes[key]


def route_specs(domain: Domain) -> dict[str, ToolSpec]:
    """One `ToolSpec` per route, its schema generated from the route's request model."""
    return {
        name: spec_from_model(name, route.description, route.request, method_name=_ROUTE_ATTR + name)
        for name, route in domain.routes.items()
    }


def db_hash(path: Path, compare: Mapping[str, Sequence[str]]) -> str:
    """SHA-256 of the compared columns of the compared tables, rows in sorted order."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        digest = hashlib.sha256()
        for table in sorted(compare):
            cols = ", ".join(f'"{c}"' for c in compare[table])  # names come from the domain's code, not the agent
            rows = db.execute(f'SELECT {cols} FROM "{table}" ORDER BY {cols}').fetchall()  # noqa: S608
            digest.update(json.dumps([table, rows]).encode())
        return digest.hexdigest()
    finally:
        db.close()


def oracle() -> ScriptedPolicy:
    """Replays the task's golden actions, one per turn (the last is ``respond``)."""

    def act(conv: Any) -> str:
        actions = conv.task.payload["actions"]
        action = actions[min(conv.turn, len(actions) - 1)]
        return tool_call_text(action["name"], **action["arguments"])

    return ScriptedPolicy(act)
