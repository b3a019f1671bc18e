"""The LLM proposer against a real local OpenAI-compatible server, malformed replies included."""

import json

import pytest

import agentenv
from agentenv.envs.arithmetic import ArithmeticEnv
from agentenv.miner import OpenAIProposer, OracleValidator, cluster_failures
from tests.openai_server import OpenAIServer, Reply, chat_reply

TASKS = list(ArithmeticEnv().tasks[:3])


@pytest.fixture
def server():
    srv = OpenAIServer().start()
    yield srv
    srv.stop()


def _clusters():
    return cluster_failures([(TASKS[0], "policy", 2), (TASKS[1], "policy", 2), (TASKS[2], "format", 0)])


def test_clusters_group_by_family_kind_and_break_turn():
    clusters = _clusters()
    assert [(c.family, c.kind, c.break_turn, c.count) for c in clusters] == [
        ("arithmetic", "policy", 2, 2),
        ("arithmetic", "format", 0, 1),
    ]
    assert [t.id for t in clusters[0].examples] == [TASKS[0].id, TASKS[1].id]


def test_proposals_are_parsed_and_only_valid_ones_pass_validation(server):
    good = {"steps": [[2, "+", 3, 5]], "intermediates": [5], "answer": 5}
    bad = {"steps": [[2, "+", 3, 5]], "intermediates": [5], "answer": 6}  # disagrees with the calculator
    content = json.dumps(
        {
            "tasks": [
                {"like": TASKS[0].id, "prompt": "Compute 2 + 3.", "payload": good},
                {"like": TASKS[1].id, "prompt": "Compute 2 + 3.", "payload": bad},
                {"like": "no-such-task", "prompt": "x", "payload": {}},
            ]
        }
    )
    server.script = lambda request: chat_reply(f"```json\n{content}\n```")
    proposer = OpenAIProposer(server.base_url, "test-model", max_tasks=4)
    result = proposer.propose(_clusters())
    proposer.close()
    request = server.requests[0]
    assert request.body["model"] == "test-model" and TASKS[0].id in request.messages[-1]["content"]
    assert len(result.tasks) == 2 and "not one of the examples" in result.errors[0]
    assert all(t.metadata.family == "arithmetic" for t in result.tasks)
    validate = OracleValidator(ArithmeticEnv, agentenv.spec("arithmetic-v0").make_oracle)
    assert [validate(t) is None for t in result.tasks] == [True, False]


@pytest.mark.parametrize(
    "reply",
    [
        chat_reply("I cannot help with that."),
        chat_reply(json.dumps({"tasks": [{"like": "x", "prompt": "p", "payload": {}, "extra": 1}]})),
        chat_reply(json.dumps({"tasks": "nope"})),
        Reply({"error": {"message": "overloaded"}}, status=503),
        Reply(b"not json at all"),
        Reply({"choices": []}),
    ],
)
def test_malformed_replies_become_errors_not_exceptions(server, reply):
    server.script = lambda request: reply
    proposer = OpenAIProposer(server.base_url, "m")
    result = proposer.propose(_clusters())
    proposer.close()
    assert result.tasks == [] and len(result.errors) == 1
