"""The `WorldModel` protocol and the scripted world model.

A world model is anything with a ``model_id`` (part of every cache key: two models
never share answers) and ``propose(request) -> str``, the reply text, which the
emulator validates. It raises `WorldModelError` when it cannot answer at all (the
endpoint is down after its retries): the episode then ends as ``infra``, counted in
the world metrics (a scripted table's miss is the exception, see below). Built in: `ScriptedWorldModel` (here),
`OpenAIWorldModel` (an OpenAI-compatible endpoint), `TransformersWorldModel` (a
local transformers model).

The scripted model is test and oracle machinery, and honest about it: a table
from (tool, canonical arguments, state hash) to a reply, with optional entries for
any state or any arguments, and nothing else. `ScriptedWorldModel.from_world`
fills it with every task's golden responses, keyed by the states the golden runs
pass through, so a golden run replays exactly and anything else is a miss. A miss
is refused to the agent as a tool error (counted as ``no_entry``), not an infra
failure: whether a call has a row depends on the action alone, and an action must
never be able to end an episode unscored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from agentenv.envs.world.keys import canonical_json
from agentenv.envs.world.prompt import WorldRequest
from agentenv.envs.world.replay import checked_tasks, golden_run
from agentenv.envs.world.world import Response, World

__all__ = ["ScriptedWorldModel", "WorldModel", "WorldModelError"]


class WorldModelError(Exception):
    """The world model gave no reply (not a wrong one: those are validation failures).
    ``kind`` names the cause for the metrics: timeout, connection, rate_limited,
    server_error, refused, bad_response, no_entry, too_long, content_policy, cut, error.
    Each ends the episode as ``infra`` but ``no_entry`` (a scripted table's miss), which
    the agent sees as a tool error; ``content_policy`` (the server refused what the
    request says: what the agent wrote, as one flagged argument could end any episode
    unscored as infra), a tool error too; ``too_long`` (a prompt past the model's
    context), a tool error where the agent made the request large; and ``cut`` (a reply cut at the
    token limit), a rejected attempt, asked again, or that tool error on a large
    request (see `agentenv.envs.world.emulator`)."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind


@runtime_checkable
class WorldModel(Protocol):
    @property
    def model_id(self) -> str: ...

    def propose(self, request: WorldRequest) -> str: ...


Reply = str | Response | Callable[[WorldRequest], str]
"""A scripted reply: text as is, a `Response` (sent as its JSON), or a function of the request."""


class ScriptedWorldModel:
    """A table of replies keyed by tool, canonical arguments and state hash (see the module doc)."""

    def __init__(self, name: str = "scripted") -> None:
        self.name = name
        self._table: dict[tuple[str, str | None, str | None], Reply] = {}
        self._id: str | None = None
        self.calls = 0

    def add(self, tool: str, arguments: dict[str, Any] | None, reply: Reply, *, state_hash: str | None = None) -> None:
        """Answer ``tool`` called with ``arguments`` (canonical; None: any) in the state of
        hash ``state_hash`` (None: any state) with ``reply``."""
        args = None if arguments is None else canonical_json(arguments)
        self._table[(tool, args, state_hash)] = reply
        self._id = None

    @property
    def model_id(self) -> str:
        if self._id is None:
            rows = sorted(
                (tool, args or "*", state or "*", _reply_id(reply))
                for (tool, args, state), reply in self._table.items()
            )
            digest = hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest()[:16]
            self._id = f"scripted:{self.name}:{digest}"
        return self._id

    def __len__(self) -> int:
        return len(self._table)

    def propose(self, request: WorldRequest) -> str:
        self.calls += 1
        args = canonical_json(request.arguments)
        for key in ((request.tool, args, request.state_hash), (request.tool, args, None), (request.tool, None, None)):
            reply = self._table.get(key)
            if reply is not None:
                if isinstance(reply, Response):
                    return reply.model_dump_json()
                if callable(reply):
                    return reply(request)
                return reply
        raise WorldModelError(
            f"the scripted model has no reply for {request.tool}({args[:200]}) in state {request.state_hash[:12]}",
            kind="no_entry",
        )

    @classmethod
    def from_world(cls, world: World) -> ScriptedWorldModel:
        """Every task's golden responses, keyed by the state each golden step starts from
        (the tasks checked first: ValueError naming the first unsound one)."""
        model = cls(world.name)
        for task in checked_tasks(world):
            for step in golden_run(world, task):
                if step.response is not None:
                    model.add(step.tool, step.arguments, step.response, state_hash=step.state_hash)
        return model


def _reply_id(reply: Reply) -> str:
    if isinstance(reply, Response):
        return reply.model_dump_json()
    if callable(reply):
        return f"fn:{getattr(reply, '__qualname__', type(reply).__name__)}"
    return reply
