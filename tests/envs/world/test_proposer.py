"""The world proposer: a drafted spec enters only if it loads, its invariants hold at the
start, and each task's golden actions reach its goal under the draft's own scripted model."""

from __future__ import annotations

import copy
import json

import yaml

from agentenv.envs.world import propose_world
from agentenv.envs.world.proposer import admit
from tests.envs.world.test_spec import SPEC
from tests.openai_server import OpenAIServer, Request, chat_reply

GOOD = yaml.safe_load(SPEC)


def broken(change) -> str:
    draft = copy.deepcopy(GOOD)
    change(draft)
    return json.dumps(draft)


NOT_LOADING = "Here is a world: it has notes."
INVARIANT_FALSE = broken(lambda d: d.update(initial_state={"notes": {"a": "1", "b": "2", "c": "3", "d": "4"}}))
MISSES_GOAL = broken(lambda d: d["tasks"][0]["golden"][0]["response"]["state_patch"][0].update(value="buy eggs"))
SOLVED_AT_START = broken(lambda d: d.update(initial_state={"notes": {"todo": "buy milk"}}))


def test_a_sound_draft_is_admitted() -> None:
    draft = admit(json.dumps(GOOD))
    assert draft.accepted and draft.world is not None and draft.problems == []


def test_each_unsound_draft_is_refused_with_the_reason() -> None:
    assert "does not load" in admit(NOT_LOADING).problems[0]
    assert "at_most_three" in " ".join(admit(INVARIANT_FALSE).problems)
    assert "saves_the_text" in " ".join(admit(MISSES_GOAL).problems)  # the golden answer is not what add_note does
    assert "already holds" in " ".join(admit(SOLVED_AT_START).problems)
    assert not any(admit(d).accepted for d in (NOT_LOADING, INVARIANT_FALSE, MISSES_GOAL, SOLVED_AT_START))


def test_propose_world_feeds_problems_back_until_a_draft_is_admitted(server: OpenAIServer) -> None:
    drafts = iter([NOT_LOADING, MISSES_GOAL, json.dumps(GOOD)])
    server.script = lambda request: chat_reply(next(drafts))
    draft = propose_world("a notes app", base_url=server.base_url, model="m", attempts=3)
    assert draft.accepted and draft.spec is not None and draft.spec.name == "notes"
    third = json.loads(server.requests[2].body["messages"][1]["content"])
    assert third["description"] == "a notes app" and len(third["previous_draft_problems"]) == 2


def test_propose_world_returns_the_last_refusal_when_no_draft_is_sound(server: OpenAIServer) -> None:
    def reply(request: Request):
        return chat_reply(INVARIANT_FALSE)

    server.script = reply
    draft = propose_world("a notes app", base_url=server.base_url, model="m", attempts=2)
    assert not draft.accepted and draft.world is None and len(server.requests) == 2
    assert any("at_most_three" in p for p in draft.problems)
