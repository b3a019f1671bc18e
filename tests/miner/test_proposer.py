"""The LLM proposer against a real local OpenAI-compatible server, malformed and hostile replies included."""

import gzip
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import agentenv
from agentenv.envs.arithmetic import ArithmeticEnv
from agentenv.miner import OpenAIProposer, OracleValidator, cluster_failures
from agentenv.miner.proposer import MAX_PAYLOAD_CHARS, MAX_REPLY_BYTES, parse_proposals
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


def _drip_server(every_s: float, total_s: float) -> ThreadingHTTPServer:
    """Headers at once, then the body one byte every ``every_s`` for ``total_s``."""

    class Drip(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"choices": [{"message": {"content": "{}"}}]}).encode()
            pad = int(total_s / every_s)
            self.send_response(200)
            self.send_header("Content-Length", str(pad + len(body)))
            self.end_headers()
            try:
                for _ in range(pad):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(every_s)
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up, as it should

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, args=(0.01,), daemon=True).start()
    return srv


def test_timeout_s_bounds_the_whole_call_not_each_read():
    # Every read returns within timeout_s, so only a deadline on the call stops it.
    srv = _drip_server(every_s=0.05, total_s=3.0)
    proposer = OpenAIProposer(f"http://127.0.0.1:{srv.server_address[1]}/v1", "m", timeout_s=0.3)
    result = proposer.propose(_clusters())
    proposer.close()
    srv.shutdown()
    srv.server_close()
    # Without the deadline the 3 s drip ends in a reply that does not parse, said otherwise.
    assert result.tasks == []
    assert result.errors == ["request failed: no complete reply within timeout_s=0.3 s"]


def test_timeout_s_bounds_a_reply_whose_headers_trickle_in(server):
    # Each byte of the status line and headers comes within a read timeout; the reply never.
    server.script = lambda request: Reply({"choices": []}, drip_s=0.1)
    proposer = OpenAIProposer(server.base_url, "m", timeout_s=0.3)
    result = proposer.propose(_clusters())
    proposer.close()
    assert result.tasks == []
    assert result.errors == ["request failed: no complete reply within timeout_s=0.3 s"]


def test_an_example_task_with_a_lone_surrogate_is_sent_spelled_out_not_raised(server):
    # A task made in Python is not checked for surrogates; UTF-8 cannot encode one.
    odd = TASKS[0].model_copy(update={"prompt": "Compute \ud800 2 + 3."})
    server.script = lambda request: chat_reply(json.dumps({"tasks": []}))
    proposer = OpenAIProposer(server.base_url, "m")
    result = proposer.propose(cluster_failures([(odd, "policy", 1)]))
    proposer.close()
    assert result.errors == [] and "Compute \\ud800 2 + 3." in server.requests[0].messages[-1]["content"]


def test_a_reply_past_the_size_cap_is_refused(server):
    server.script = lambda request: Reply(b" " * (MAX_REPLY_BYTES + 1))
    proposer = OpenAIProposer(server.base_url, "m")
    result = proposer.propose(_clusters())
    proposer.close()
    assert result.errors == [f"request failed: the reply is over {MAX_REPLY_BYTES} bytes"]


def test_a_compressed_reply_is_refused_since_it_could_inflate_past_the_cap(server):
    good = {"steps": [[2, "+", 3, 5]], "intermediates": [5], "answer": 5}
    content = json.dumps({"tasks": [{"like": TASKS[0].id, "prompt": "Compute 2 + 3.", "payload": good}]})
    body = gzip.compress(json.dumps(chat_reply(content).body).encode())
    server.script = lambda request: Reply(body, headers={"Content-Encoding": "gzip"})
    proposer = OpenAIProposer(server.base_url, "m")
    result = proposer.propose(_clusters())
    proposer.close()
    assert server.requests[0].headers["accept-encoding"] == "identity"
    assert result.tasks == [] and "'gzip'-encoded reply" in result.errors[0]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("NaN", "NaN or infinity"),
        ("-Infinity", "NaN or infinity"),
        ("1e999", "NaN or infinity"),  # read as infinity
        ('"' + "A" * MAX_PAYLOAD_CHARS + '"', f"the limit is {MAX_PAYLOAD_CHARS}"),
    ],
)
def test_a_payload_with_nan_or_past_the_size_cap_is_refused(value, why):
    payload = {"steps": [[2, "+", 3, 5]], "intermediates": [5], "answer": 5, "x": "X"}
    proposal = {"like": TASKS[0].id, "prompt": "Compute 2 + 3.", "payload": payload}
    content = json.dumps({"tasks": [proposal]}).replace('"X"', value)  # json.dumps would write NaN too
    result = parse_proposals(content, {TASKS[0].id: TASKS[0]}, 4)
    assert result.tasks == [] and result.errors[0].startswith("malformed reply: tasks.0.payload: ")
    assert why in result.errors[0]


def test_a_proposal_carries_its_example_whatever_the_ids_hold():
    like = TASKS[0].model_copy(update={"id": "sum~pairs"})
    good = {"steps": [[2, "+", 3, 5]], "intermediates": [5], "answer": 5}
    content = json.dumps({"tasks": [{"like": like.id, "prompt": "Compute 2 + 3.", "payload": good}]})
    [proposed] = parse_proposals(content, {like.id: like}, 4).proposed
    assert proposed.like is like and proposed.task.metadata == like.metadata


def test_a_proposal_like_an_example_with_a_long_id_is_an_error_not_an_exception():
    like = TASKS[0].model_copy(update={"id": "t" * 256})  # LIKE~pHASH would be past Task's id limit
    good = {"steps": [[2, "+", 3, 5]], "intermediates": [5], "answer": 5}
    content = json.dumps({"tasks": [{"like": like.id, "prompt": "Compute 2 + 3.", "payload": good}]})
    result = parse_proposals(content, {like.id: like}, 4)
    assert result.tasks == [] and result.errors[0].startswith("proposal 0: ")
