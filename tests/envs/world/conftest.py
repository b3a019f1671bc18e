"""A small notes world for the world-env tests, scripted models, and the OpenAI-protocol test server."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import Field

pytest.importorskip("jsonpatch")
pytest.importorskip("datalogic_py")

from agentenv import State, ToolError
from agentenv.envs.world import (
    Args,
    Response,
    World,
    WorldCache,
    WorldEnv,
    WorldMetrics,
    WorldRequest,
    respond,
    world_task,
)
from tests.openai_server import OpenAIServer


class Notes(State):
    notes: dict[str, str] = {}
    count: int = 0


class AddNote(Args):
    title: str = Field(min_length=1, max_length=40)
    text: str = Field(max_length=500)


class Title(Args):
    title: str = Field(min_length=1, max_length=40)


class NoArgs(Args):
    pass


def add(title: str, text: str, count: int) -> Response:
    """The golden answer to add_note in a state holding ``count - 1`` notes."""
    return respond(
        "saved",
        {"op": "add", "path": f"/notes/{title}", "value": text},
        {"op": "replace", "path": "/count", "value": count},
    )


def make_world() -> World:
    world = World(
        "notes",
        state=Notes,
        initial_state=Notes(),
        instructions="Keep the user's notes.",
        max_turns=6,
        tasks=lambda: [
            world_task(
                "todo",
                "Add a note 'todo' saying 'buy milk'.",
                goal={"==": [{"val": ["notes", "todo"]}, "buy milk"]},
                golden=[("add_note", {"title": "todo", "text": "buy milk"}, (add("todo", "buy milk", 1)))],
            ),
            world_task(
                "two",
                "Add notes 'a' saying '1' and 'b' saying '2'.",
                goal={"and": [{"==": [{"val": ["notes", "a"]}, "1"]}, {"==": [{"val": ["notes", "b"]}, "2"]}]},
                subgoals={"a": {"==": [{"val": ["notes", "a"]}, "1"]}},
                golden=[
                    ("add_note", {"title": "a", "text": "1"}, (add("a", "1", 1))),
                    ("list_notes", {}),
                    ("add_note", {"title": "b", "text": "2"}, (add("b", "2", 2))),
                ],
                difficulty=1,
            ),
        ],
    )
    world.emulated("add_note", AddNote, "Add a note under a title.", writes=["/notes/{title}", "/count"])
    world.emulated("read_note", Title, "Print a note's text.", reads=["/notes/{title}"])

    @world.code()
    def list_notes(state: Notes, args: NoArgs) -> str:
        """List the titles of the notes, one per line."""
        return "\n".join(sorted(state.notes))

    @world.code(writes=["/notes/{title}", "/count"])
    def delete_note(state: Notes, args: Title) -> str:
        """Delete a note."""
        if args.title not in state.notes:
            raise ToolError(f"no note {args.title!r}")
        del state.notes[args.title]
        state.count -= 1
        return "deleted"

    world.invariant("count_matches", lambda s: s.count == len(s.notes), "count is the number of notes")
    world.invariant("short_notes", {"none": [{"values": {"var": "notes"}}, {">": [{"length": {"var": ""}}, 100]}]})
    return world


class FakeModel:
    """A world model answering from a function of the request (or a list of replies, in order)."""

    def __init__(self, replies: Callable[[WorldRequest], str] | list[Any], model_id: str = "fake") -> None:
        self.model_id = model_id
        self.requests: list[WorldRequest] = []
        if callable(replies):
            self._fn = replies
        else:
            it = itertools.chain(replies, itertools.repeat(replies[-1]))
            self._fn = lambda request: _text(next(it))

    def propose(self, request: WorldRequest) -> str:
        self.requests.append(request)
        return self._fn(request)


def _text(reply: Any) -> str:
    if isinstance(reply, BaseException):
        raise reply
    return reply if isinstance(reply, str) else json.dumps(reply)


@pytest.fixture
def world() -> World:
    return make_world()


@pytest.fixture
def make_env(world: World) -> Iterator[Callable[..., WorldEnv]]:
    """``make_env(model=..., **kwargs)``: an env of the notes world with its own cache and metrics."""
    envs: list[WorldEnv] = []

    def make(**kwargs: Any) -> WorldEnv:
        kwargs.setdefault("cache", WorldCache())
        kwargs.setdefault("metrics", WorldMetrics())
        env = WorldEnv(kwargs.pop("world", world), **kwargs)
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.close()


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    srv = OpenAIServer().start()
    yield srv
    srv.stop()
