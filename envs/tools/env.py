"""`ToolsEnv`: an agent acting through a domain's HTTP API, verified by final database state.

The tools are the domain's routes: each request model becomes an OpenAI tool
schema (`agentenv.core.tools.spec_from_model`), so the core validates arguments before
anything is sent and names the bad field. A valid call is POSTed with httpx to the
domain's service (service.py) against this episode's own SQLite file. The env adds
one tool of its own, ``respond``, which ends the episode: a free-text ``message``
for the user (never scored) and the typed fields of the domain's `Answer` model.

Rewards. Step: ``rule_violation`` (-0.1 per call a business rule refused) and
``server_error`` (-0.1 per 5xx); an invalid call is the core's ``format`` penalty.
Task, the tau2-bench way: replay the golden actions on a fresh copy of the seed
through the same service and hash both databases (``db_match``): every table and
column but the few the domain ignores (`Domain.compare`), so a change to any record
the task does not name fails it; ``state.db_diff`` then names the rows that differ
(found by a second golden replay, on a mismatch only). ``outputs`` is 1 when the
answer fields given are exactly the task's ``expect`` (each expected field equal,
every other one empty), so stuffing the answer cannot help. Both are reported with weight 0; ``task`` is their product.

Each expected value (but the inferred ones) must also have been *seen*: shown in a
tool result before the answering action, and about the task's subject. The subject
is named by the argument pairs of the task's golden read calls (``get_order(order_id=
"O1013")`` names ``order_id = "O1013"``): a value counts when it came back in a result
object that holds such a pair (a dict at any depth, and everything beneath it), in
the result of a call whose arguments hold one, or in the result of a call the golden
actions make themselves. So reading three other orders shows every status string
but establishes none for O1013, while a listing that holds O1013's own object does.
A task whose golden actions make no read call with arguments keeps the plain rule
(any result). Never seen: a value the call sent itself (a route that echoes its
argument) or that an earlier successful write of the agent sent (written, then read
back). Golden reads that filter rather than name (``list_rooms(min_capacity=1)``)
make the filter the subject: a read with another filter does not count.

Faults: a killed, hung, unreachable or impersonated service, or a lost episode
database, raises `InfraError` (the episode is truncated as ``infra``, never
scored; `step` never raises for it); every call has ``timeout_s`` for its whole answer
(a service that trickles it a byte at a time is as late as one that says nothing). What an action
can cause (any argument value) is a ``format`` or tool error, never ``infra``:
request models bound their integers and pydantic refuses lone surrogates. Snapshots
carry the episode database (serialised, base64); a restore refuses (ValueError) one that
is not SQLite or lacks the seed's exact schema (a trigger added by hand never runs), and
a snapshot with no database at all (the episode would go on over the last one's).
Left out: user simulation (the task prompt is the whole request), concurrent writers
to one episode.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hashlib
import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from agentenv import CallOutcome, Env, InfraError, ScriptedPolicy, State, Task, TaskSet, ToolError
from agentenv.core.tools import ToolSpec, spec_from_model
from agentenv.envs.tools import service as services
from agentenv.envs.tools.domain import FINISH_TOOL, MESSAGE_FIELD, Domain, Route, load_domain, row_differences
from agentenv.envs.tools.service import db_hash

__all__ = ["ToolsEnv", "ToolsState", "db_hash", "oracle", "respond_spec", "route_specs"]

_ROUTE_ATTR = "route:"  # prefix of the per-instance callers the core dispatches to


class ToolsState(State):
    """What the episode did, as the reward hooks and the trajectory see it. The
    database itself lives in the episode's SQLite file and is snapshotted apart."""

    answer: str | None = None
    """The message of ``respond`` (shown to the user, never scored)."""
    answer_fields: dict[str, Any] = {}
    """The answer fields ``respond`` filled in (the empty ones left out): what ``outputs`` checks."""
    seen: list[str] = []
    """Every value (as JSON) that a tool result of the episode held: the facts the agent was shown."""
    seen_of_subject: list[str] = []
    """The values of ``seen`` that came back about the task's subject (see the module docstring)."""
    written: list[str] = []
    """Every scalar argument (as JSON) of the agent's successful writes: a result that shows one
    again after the write shows the agent's own words, not a fact."""
    answer_seen: list[str] = []
    """The values that back the answer: those of ``seen_of_subject`` (of ``seen`` when the task
    names no subject) shown by earlier steps, as a result of the answering action itself
    reaches the agent after it."""
    calls: int = 0
    writes: list[str] = []
    violations: list[str] = []
    server_errors: int = 0
    db_diff: list[str] = []
    """Set by `verify` when the final database is not the golden one: each compared row it lacks
    (``missing``) or holds beyond it (``unexpected``), by table (`Domain.compared_rows`)."""


class _Saved(BaseModel):
    """What `ToolsEnv.snapshot_external` saves (checked on restore: a snapshot on disk may have been edited)."""

    model_config = ConfigDict(extra="forbid")

    domain: str | None = None
    """The domain's name (None: this env's)."""
    db: str
    """The episode database, serialised and base64-encoded; restored only with the seed's schema."""


class ToolsEnv(Env[ToolsState]):
    state_type = ToolsState
    max_turns = 20
    reward_weights: ClassVar[Mapping[str, float]] = {"db_match": 0.0, "outputs": 0.0}  # diagnostics of "task"
    rule_penalty: float = 0.1
    server_error_penalty: float = 0.1

    def __init__(
        self, domain: str, tasks: TaskSet | Sequence[Task] | None = None, *, timeout_s: float = 5.0, **kwargs: Any
    ) -> None:
        """
        Args:
            domain: The domain as ``"module:ATTRIBUTE"`` (the service process imports it by that name).
            tasks: Default: the domain's tasks.
            timeout_s: Per tool call, for the whole answer; a slower service is an infrastructure failure.
            kwargs: Passed to `Env` (max_turns, parser, tool_prompt, render_mode).
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.domain_path = domain
        self.domain: Domain = load_domain(domain)  # an import; nothing starts until reset
        self.timeout_s = timeout_s
        self.instructions = (
            f"{self.domain.instructions}\nWhen you are done, call {FINISH_TOOL}; it ends the conversation. "
            f"Its {MESSAGE_FIELD!r} is what the user reads. Put each fact they asked for (or, when you refuse, "
            "the rule and the fact behind it) in its own field, exactly as the tools showed it, and leave out "
            "every field the request does not call for."
        )
        self.tools = {  # type: ignore[misc]  # per instance: the tools are the domain's routes
            **route_specs(self.domain),
            **type(self).tools,
            FINISH_TOOL: respond_spec(self.domain),
        }
        for route in self.domain.routes.values():
            setattr(self, _ROUTE_ATTR + route.name, functools.partial(self._call_route, route))
        self._service: services.Service | None = None
        self._episode: str | None = None
        self._step_faults: list[str] = []
        # (list of the state, value) first in that list by this step's results: not yet shown
        self._fresh: set[tuple[str, str]] = set()
        self._subject = _Subject()
        super().__init__(tasks, **kwargs)
        for task in self.tasks:  # a task from a file or a caller: a bad golden action fails here, not at verify
            self.domain.check_task(task)

    # -- hooks ---------------------------------------------------------------------

    def default_tasks(self) -> TaskSet:
        return self.domain.tasks

    def initial_state(self, task: Task) -> ToolsState:
        self.domain.check_task(task)  # a Task given in reset options was never checked
        service = self._live_service()
        if self._episode is None:
            self._episode = service.new_episode()
        else:
            service.reset_episode(self._episode)
        self._step_faults, self._fresh = [], set()
        self._subject = _Subject.of(self.domain, task)
        return ToolsState()

    def respond(self, message: str, **fields: Any) -> str:
        """The final tool (its spec is `respond_spec`): the core has validated every field."""
        self._live()  # an answer that cannot be verified ends as infra here, with its error shown
        self.state.answer = message
        self.state.answer_fields = {k: v for k, v in fields.items() if v is not None}
        # A read in the same action as the answer backs nothing: its result reaches the
        # agent after the answer was written (a guess beside the read that shows it).
        backing = "seen_of_subject" if self._subject.pairs else "seen"
        fresh = {text for name, text in self._fresh if name == backing}
        self.state.answer_seen = sorted(set(getattr(self.state, backing)) - fresh)
        return "sent"

    def step_rewards(self, outcomes: list[CallOutcome]) -> dict[str, float]:
        faults, self._step_faults = self._step_faults, []
        self._fresh = set()  # the step's results are shown now
        return {
            "rule_violation": -self.rule_penalty * faults.count("rule"),
            "server_error": -self.server_error_penalty * faults.count("server"),
        }

    def verify(self, task: Task) -> dict[str, float]:
        service, episode = self._live()  # never replaced here: a service that died is this episode's infra failure
        db_match = float(self._gold_hash(service, episode, task) == service.episode_hash(episode))
        self.state.db_diff = [] if db_match else self._db_diff(service, episode, task)
        expect = task.payload.get("expect", {})
        outputs = float(self.state.answer_fields == expect and self._seen_all(expect, task.payload.get("inferred", ())))
        return {"task": db_match * outputs, "db_match": db_match, "outputs": outputs}

    def snapshot_external(self) -> dict[str, str] | None:
        if self._episode is None or self._service is None:
            return None
        db = base64.b64encode(self._service.read_episode(self._episode)).decode("ascii")
        return {"domain": self.domain.name, "db": db}

    def restore_external(self, data: Any) -> None:
        # initial_state does not run on a resume: drop what an infra step left
        self._step_faults, self._fresh = [], set()
        if data is None:
            # `snapshot` always saves the database. Without one the episode would go on over
            # whatever this env's last episode left in its database (its writes, a solved task).
            raise ValueError("the snapshot holds no episode database (its 'external' is null)")
        saved = _Saved.model_validate(data)
        # Every domain's env is a ToolsEnv: the class cannot tell, the domain name can.
        if saved.domain not in (None, self.domain.name):
            raise ValueError(f"a snapshot of a {saved.domain} episode cannot be restored into a {self.domain.name} env")
        self.domain.check_task(self.task)  # a snapshot's task is as untrusted as one in reset options
        self._subject = _Subject.of(self.domain, self.task)
        try:
            database = base64.b64decode(saved.db, validate=True)
        except binascii.Error:
            raise ValueError("the snapshot's database is not base64") from None
        service = self._live_service()
        if self._episode is None:
            self._episode = service.new_episode()
        service.write_episode(self._episode, database)

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

    def _live(self) -> tuple[services.Service, str]:
        """This episode's service and id, for a step: missing ones are an infrastructure failure."""
        if self._service is None or self._episode is None:
            raise InfraError(f"no live {self.domain.name} episode (its service failed to start); reset again")
        if not self._service.alive():
            raise InfraError(f"the {self.domain.name} service exited with code {self._service.process.returncode}")
        return self._service, self._episode

    def _live_service(self) -> services.Service:
        """The domain's service at reset; a dead one is swapped for a new one (and a new database)."""
        if self._service is not None and not self._service.alive():
            services.release(self._service)
            self._service, self._episode = None, None
        if self._service is None:
            self._service = services.acquire(self.domain_path)
        return self._service

    def _call_route(self, route: Route, **fields: Any) -> Any:
        # The core has validated the fields against route.request already.
        body = route.request.model_construct(**fields).model_dump_json().encode()
        service, episode = self._live()
        reply = service.call(episode, route.name, body, self.timeout_s)
        self.state.calls += 1
        if reply.status == 200:
            arguments = json.loads(body)  # as sent: the defaults filled in, as the golden calls' are
            self._observe(reply.result, route.name, arguments)
            if route.write:
                self.state.writes.append(route.name)
                self.state.written = sorted(set(self.state.written) | {json.dumps(v) for v in _scalars(arguments)})
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

    def _observe(self, result: Any, route: str, arguments: Mapping[str, Any]) -> None:
        """Remember every scalar of a tool result (the service's answer: plain JSON, validated)
        that the agent did not bring itself, and which of them came back about the task's
        subject. A value a route merely echoes (a room id asked about) is the agent's guess,
        and one an earlier write of the agent stored is its own words: neither is a fact."""
        given = {json.dumps(v) for v in _scalars(dict(arguments))} | set(self.state.written)
        shown = [(json.dumps(v), about) for v, about in self._subject.values(result, route, arguments)]
        for name, values in (
            ("seen", {text for text, _ in shown}),
            ("seen_of_subject", {text for text, about in shown if about}),
        ):
            known: set[str] = set(getattr(self.state, name))
            new = values - given - known
            if new:
                self._fresh |= {(name, text) for text in new}
                setattr(self.state, name, sorted(known | new))

    def _seen_all(self, expect: Mapping[str, Any], task_inferred: Sequence[str]) -> bool:
        """Whether every expected fact the agent must read (not infer) came back in a tool
        result it was shown before it answered, about the task's subject (``answer_seen``)."""
        seen = set(self.state.answer_seen)
        inferred = self.domain.answer.inferred | set(task_inferred)
        return all(json.dumps(v) in seen for k, v in expect.items() if k not in inferred)

    def _gold_hash(self, service: services.Service, episode: str, task: Task) -> str:
        """The hash of the final state the golden actions reach, cached per service."""
        actions = [a for a in task.payload.get("actions", []) if a["name"] != FINISH_TOOL]
        key = hashlib.sha256(json.dumps([task.id, actions], sort_keys=True).encode()).hexdigest()
        if key not in service.gold_hashes:
            with self._gold_db(service, episode, task) as gold:
                service.gold_hashes[key] = service.episode_hash(gold)
        return service.gold_hashes[key]

    @contextlib.contextmanager
    def _gold_db(self, service: services.Service, episode: str, task: Task) -> Iterator[str]:
        """The golden actions replayed on a fresh copy of the seed: the episode id of that
        database, dropped on leaving."""
        actions = [a for a in task.payload.get("actions", []) if a["name"] != FINISH_TOOL]
        gold = f"{episode}-gold"
        service.reset_episode(gold)
        try:
            for action in actions:
                reply = service.call(gold, action["name"], json.dumps(action["arguments"]).encode(), self.timeout_s)
                if reply.status != 200:
                    raise ValueError(
                        f"task {task.id!r}: golden action {action['name']!r} failed: {reply.kind}: {reply.message}"
                    )
            yield gold
        finally:
            service.drop_episode(gold)

    def _db_diff(self, service: services.Service, episode: str, task: Task) -> list[str]:
        """The compared rows where the episode's database and the golden one differ."""
        try:
            with self._gold_db(service, episode, task) as gold:
                want = self.domain.compared_rows(service.db_path(gold))
            got = self.domain.compared_rows(service.db_path(episode))
        except (sqlite3.Error, OSError) as e:  # the files are the service's: gone or broken is its failure
            raise InfraError(f"could not read the {self.domain.name} databases to compare them: {e}") from None
        return row_differences(want, got)


@dataclass(frozen=True)
class _Subject:
    """What a task's golden actions say its subject is, each as JSON: the argument pairs
    ``[key, value]`` of its golden read calls, and its golden calls ``[route, arguments]``.
    Derived from the task, so a resumed episode derives it again rather than carry it."""

    pairs: frozenset[str] = frozenset()
    calls: frozenset[str] = frozenset()

    @classmethod
    def of(cls, domain: Domain, task: Task) -> _Subject:
        pairs: set[str] = set()
        calls: set[str] = set()
        for action in task.payload.get("actions", []):
            route = domain.routes.get(action["name"])
            if route is None:  # respond
                continue
            arguments = route.request.model_validate(action["arguments"]).model_dump(mode="json")
            calls.add(json.dumps([route.name, arguments], sort_keys=True))
            if not route.write:
                pairs |= _pairs(arguments, nested=True)
        return cls(frozenset(pairs), frozenset(calls))

    def values(self, result: Any, route: str, arguments: Mapping[str, Any]) -> Iterator[tuple[Any, bool]]:
        """Every scalar (not None) of ``result``, with whether it came back about the subject:
        the call is a golden one or its arguments hold a subject pair, or a dict it lies in
        (at any depth above it) holds one itself."""
        about = json.dumps([route, arguments], sort_keys=True) in self.calls or bool(
            _pairs(arguments, nested=True) & self.pairs
        )
        stack: list[tuple[Any, bool]] = [(result, about)]
        while stack:
            item, about = stack.pop()
            if isinstance(item, dict):
                about = about or bool(_pairs(item, nested=False) & self.pairs)
                stack.extend((v, about) for v in item.values())
            elif isinstance(item, list):
                stack.extend((v, about) for v in item)
            elif item is not None:
                yield item, about


def _pairs(value: Any, *, nested: bool) -> set[str]:
    """The ``[key, scalar]`` pairs (as JSON) of a dict's entries, and with ``nested`` of every dict inside it."""
    out: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, v in item.items():
                if isinstance(v, (dict, list)):
                    if nested:
                        stack.append(v)
                elif v is not None:
                    out.add(json.dumps([key, v]))
        elif isinstance(item, list) and nested:
            stack.extend(item)
    return out


def _scalars(value: Any) -> list[Any]:
    """Every scalar (not None) of a JSON value, at any depth."""
    out, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif item is not None:
            out.append(item)
    return out


def route_specs(domain: Domain) -> dict[str, ToolSpec]:
    """One `ToolSpec` per route, its schema generated from the route's request model."""
    return {
        name: spec_from_model(name, route.description, route.request, method_name=_ROUTE_ATTR + name)
        for name, route in domain.routes.items()
    }


def respond_spec(domain: Domain) -> ToolSpec:
    """The final tool: the message and the domain's answer fields, ending the episode."""
    return spec_from_model(
        FINISH_TOOL,
        "Send your final answer to the user and end the conversation.",
        domain.respond_model,
        method_name="respond",
        terminal=True,
    )


def oracle() -> ScriptedPolicy:
    """Replays the task's golden actions, one per turn (the last is ``respond``)."""
    return ScriptedPolicy.golden()
