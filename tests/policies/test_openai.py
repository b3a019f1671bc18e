"""OpenAIPolicy against a real local HTTP server speaking the chat completions protocol."""

from __future__ import annotations

import ast
import copy
import gzip
import json
import re
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

import agentenv
from agentenv import Conversation, Failure, Generation, OpenAIPolicy, Policy, PolicyFailure, tool_call_text
from agentenv.policies.openai import _retry_after_s
from tests.openai_server import OpenAIServer, Reply, Request, chat_reply, tool_call

SYSTEM = {"role": "system", "content": "You are a test."}


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    srv = OpenAIServer().start()
    yield srv
    srv.stop()
    assert not srv.errors, "the server's script raised:\n" + "\n".join(srv.errors)


def make_policy(server: OpenAIServer, **kwargs: Any) -> OpenAIPolicy:
    kwargs = {"backoff_s": 0.001, "timeout_s": 5.0, **kwargs}
    return OpenAIPolicy(server.base_url, "test-model", **kwargs)


def conversation(text: str = "hi", *, id: int = 0, **kwargs: Any) -> Conversation:
    return Conversation(id, [SYSTEM, {"role": "user", "content": text}], **kwargs)


def act_one(policy: OpenAIPolicy, conv: Conversation | None = None) -> Generation | PolicyFailure:
    [output] = policy.act([conv or conversation()])
    assert isinstance(output, (Generation, PolicyFailure))
    return output


# -- replies --------------------------------------------------------------------


def test_plain_text_reply(server: OpenAIServer) -> None:
    server.script = lambda request: chat_reply("Hello there.", finish_reason="length")
    with make_policy(server) as policy:
        assert isinstance(policy, Policy)
        output = act_one(policy)
    assert output == Generation(action={"role": "assistant", "content": "Hello there."}, finish_reason="length")
    [request] = server.requests
    assert request.body["model"] == "test-model"
    assert request.messages == [SYSTEM, {"role": "user", "content": "hi"}]
    assert "tools" not in request.body


def test_structured_tool_calls_are_returned_as_an_assistant_message(server: OpenAIServer) -> None:
    call = tool_call("submit", {"answer": 3}, id="call_abc")
    server.script = lambda request: chat_reply(None, tool_calls=[call], finish_reason="tool_calls")
    with make_policy(server) as policy:
        output = act_one(policy)
    assert isinstance(output, Generation)
    assert output.finish_reason == "tool_calls"
    assert output.action == {"role": "assistant", "content": "", "tool_calls": [call]}


def test_tool_calls_without_an_id_get_one(server: OpenAIServer) -> None:
    call = {"type": "function", "function": {"name": "submit", "arguments": {"answer": 3}}}
    server.script = lambda request: chat_reply("", tool_calls=[call])
    with make_policy(server) as policy:
        output = act_one(policy, conversation(id=7))
    assert isinstance(output, Generation) and isinstance(output.action, dict)
    [made] = output.action["tool_calls"]
    assert made["id"] and made["function"] == {"name": "submit", "arguments": '{"answer": 3}'}


# -- end to end through the rollout engine --------------------------------------


def evaluate(expr: str) -> int:
    """The value of an integer expression of + - * and parentheses, without eval()."""
    if not re.fullmatch(r"[0-9+\-*() ]+", expr):
        raise ValueError(f"unexpected characters in {expr!r}")
    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"unexpected node {ast.dump(node)}")

    return value(ast.parse(expr, mode="eval").body)


def arithmetic_player(*, structured: bool, wrong: bool = False) -> Any:
    """Turn 0: a harmless calculate call; turn 1: submit the value of the task (or a wrong one)."""

    def script(request: Request) -> Reply:
        messages = request.messages
        [task] = [m["content"] for m in messages if m["role"] == "user" and m["content"].startswith("Compute ")]
        answer = evaluate(task.removeprefix("Compute ").removesuffix(".")) + (1 if wrong else 0)
        turn = sum(m["role"] == "assistant" for m in messages)
        name, args = ("calculate", {"a": 1, "op": "+", "b": 1}) if turn == 0 else ("submit", {"answer": answer})
        if structured:
            return chat_reply(None, tool_calls=[tool_call(name, args, id=f"call_t{turn}")], finish_reason="tool_calls")
        return chat_reply(tool_call_text(name, **args))

    return script


@pytest.mark.parametrize("wrong", [False, True], ids=["solves", "wrong-answer"])
def test_structured_calls_play_arithmetic_end_to_end(server: OpenAIServer, wrong: bool) -> None:
    server.script = arithmetic_player(structured=True, wrong=wrong)
    with make_policy(server) as policy:
        trajectories = agentenv.rollout("arithmetic-v0", policy, n=2)
    assert len(trajectories) == 2
    for traj in trajectories:
        assert traj.error is None
        assert traj.success is not wrong
        assert traj.failure is (Failure.POLICY if wrong else Failure.NONE)
        assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    # The second turn answered the structured call with a real tool message.
    second_turns = [r for r in server.requests if sum(m["role"] == "assistant" for m in r.messages) == 1]
    assert len(second_turns) == 2
    for request in second_turns:
        assistant, result = request.messages[2:4]
        assert assistant["tool_calls"][0]["id"] == "call_t0"
        assert result == {"role": "tool", "tool_call_id": "call_t0", "content": "2"}
        assert {t["function"]["name"] for t in request.body["tools"]} == {"calculate", "submit"}


def test_text_tool_calls_play_arithmetic_and_results_go_back_as_user_messages(server: OpenAIServer) -> None:
    server.script = arithmetic_player(structured=False)
    with make_policy(server) as policy:
        trajectories = agentenv.rollout("arithmetic-v0", policy, n=2)
    assert [t.failure for t in trajectories] == [Failure.NONE, Failure.NONE]
    # The env recorded a tool message the model's text call has no id for.
    assert trajectories[0].messages[3]["role"] == "tool"
    second_turn = next(r for r in server.requests if sum(m["role"] == "assistant" for m in r.messages) == 1)
    assert second_turn.messages[3] == {"role": "user", "content": "[tool result: calculate]\n2"}


def test_a_failed_request_ends_only_its_episode_as_infra(server: OpenAIServer) -> None:
    def script(request: Request) -> Reply:
        if "Compute " in request.messages[1]["content"] and request.body["seed"] == 1:
            return Reply({"error": {"message": "bad request"}}, status=400)
        return arithmetic_player(structured=True)(request)

    server.script = script
    with make_policy(server, seed=0) as policy:
        first, second = agentenv.rollout("arithmetic-v0", policy, n=2)
    assert first.failure is Failure.NONE
    assert second.failure is Failure.INFRA
    assert second.error is not None and "HTTP 400" in second.error


@pytest.mark.parametrize("status", [400, 413])
def test_a_conversation_its_own_turns_grew_past_the_context_is_the_policys_failure(
    server: OpenAIServer, status: int
) -> None:
    """A model that rambles until its conversation no longer fits: as the trainer's policy
    does at max_context_tokens, a refused turn (a format error), never infra, and never an
    empty action that an env could take as a move or an answer."""
    ramble = "Let me think about this step by step. " * 40  # no tool call

    def script(request: Request) -> Reply:
        if sum(len(m.get("content") or "") for m in request.messages) > 4000:
            message = "This model's maximum context length is 2048 tokens. However, you requested 2301 tokens."
            return Reply({"error": {"message": message}}, status=status)
        return chat_reply(ramble)

    server.script = script
    with make_policy(server) as policy:
        trajs = agentenv.rollout("arithmetic-v0", policy, n=2)
    assert [t.failure for t in trajs] == [Failure.FORMAT] * 2
    for t in trajs:
        last = t.transitions[-1]
        assert t.generations[-1] is None and last.error_kind == "format"
        assert "no room left in the model's context" in (last.error or "") and "maximum context length" in last.error


def test_a_first_turn_past_the_context_is_infra_and_says_the_prompt_does_not_fit(server: OpenAIServer) -> None:
    server.script = lambda request: Reply({"error": {"message": "maximum context length is 16 tokens"}}, status=400)
    with make_policy(server) as policy:
        (traj,) = agentenv.rollout("arithmetic-v0", policy, n=1)
    assert traj.failure is Failure.INFRA and "the prompt alone is past the model's context" in (traj.error or "")


# -- concurrency ----------------------------------------------------------------


def test_a_batch_is_sent_concurrently_and_answered_in_order(server: OpenAIServer) -> None:
    server.script = lambda request: chat_reply(f"echo {request.messages[-1]['content']}", delay_s=0.2)
    conversations = [conversation(f"q{i}", id=i) for i in range(8)]
    with make_policy(server, concurrency=8) as policy:
        outputs = policy.act(conversations)
    assert [o.action["content"] for o in outputs] == [f"echo q{i}" for i in range(8)]  # type: ignore[union-attr,index]
    assert server.max_in_flight > 1


def test_concurrency_caps_requests_in_flight(server: OpenAIServer) -> None:
    server.script = lambda request: chat_reply("ok", delay_s=0.05)
    with make_policy(server, concurrency=2) as policy:
        outputs = policy.act([conversation(id=i) for i in range(6)])
    assert all(isinstance(o, Generation) for o in outputs)
    assert server.max_in_flight <= 2


# -- retries --------------------------------------------------------------------


def fail_then_succeed(replies: list[Reply]) -> Any:
    """Answer with ``replies`` in turn, then with a success."""

    def script(request: Request) -> Reply:
        return replies.pop(0) if replies else chat_reply("finally")

    return script


def test_retries_5xx_then_succeeds(server: OpenAIServer) -> None:
    server.script = fail_then_succeed([Reply({"error": "overloaded"}, status=500), Reply(b"bad gateway", status=502)])
    with make_policy(server, max_retries=3) as policy:
        output = act_one(policy)
    assert isinstance(output, Generation) and output.action["content"] == "finally"  # type: ignore[index]
    assert len(server.requests) == 3


def test_backoff_grows_exponentially_with_jitter_and_is_capped(server: OpenAIServer) -> None:
    server.script = lambda request: Reply({"error": "down"}, status=503)
    with make_policy(server, max_retries=4, backoff_s=0.5, max_backoff_s=1.5) as policy:
        slept: list[float] = []
        policy._sleep = slept.append
        output = act_one(policy)
    assert isinstance(output, PolicyFailure)
    assert "gave up after 5 attempts" in output.error and "HTTP 503" in output.error
    assert len(server.requests) == 5
    bounds = [(0.25, 0.5), (0.5, 1.0), (0.75, 1.5), (0.75, 1.5)]
    assert len(slept) == 4 and all(lo <= s <= hi for s, (lo, hi) in zip(slept, bounds, strict=True))


def test_429_waits_as_long_as_retry_after_says_capped(server: OpenAIServer) -> None:
    server.script = fail_then_succeed(
        [
            Reply({"error": "slow down"}, status=429, headers={"Retry-After": "2"}),
            Reply({"error": "slow down"}, status=429, headers={"Retry-After": "3600"}),
        ]
    )
    with make_policy(server, max_backoff_s=10.0) as policy:
        slept: list[float] = []
        policy._sleep = slept.append
        output = act_one(policy)
    assert isinstance(output, Generation)
    assert slept == [2.0, 10.0]
    assert len(server.requests) == 3


def test_no_retry_on_400(server: OpenAIServer) -> None:
    server.script = lambda request: Reply({"error": {"message": "context too long"}}, status=400)
    with make_policy(server, max_retries=3) as policy:
        output = act_one(policy)
    assert isinstance(output, PolicyFailure)
    assert "HTTP 400" in output.error and "context too long" in output.error
    assert len(server.requests) == 1


def test_timeout_is_a_failure_after_retries(server: OpenAIServer) -> None:
    server.script = lambda request: chat_reply("too late", delay_s=5.0)
    with make_policy(server, timeout_s=0.2, max_retries=1) as policy:
        output = act_one(policy)
    assert isinstance(output, PolicyFailure)
    assert "timed out" in output.error and "2 attempts" in output.error
    assert len(server.requests) == 2


def test_a_server_that_trickles_its_headers_times_out(server: OpenAIServer) -> None:
    """timeout_s bounds the whole attempt: httpx's bounds each read, and a status line and
    headers sent a byte at a time, each within it, held the conversation (and the rollout
    waiting on it) for as long as the server went on (here, until it hangs up)."""
    server.script = lambda request: Reply(chat_reply("too late").body, drip_s=0.05)
    with make_policy(server, timeout_s=0.3, max_retries=0) as policy:
        output = act_one(policy)
    assert isinstance(output, PolicyFailure)
    assert "timed out" in output.error


def test_unreachable_server_is_a_failure_not_an_exception() -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "m", max_retries=2, backoff_s=0.001) as policy:
        [output] = policy.act([conversation()])
    assert isinstance(output, PolicyFailure)
    assert "gave up after 3 attempts" in output.error and "Connect" in output.error


# -- malformed responses --------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"<html>not json", "server returned invalid JSON"),
        ({"object": "chat.completion", "choices": []}, "response lacks choices[0].message"),
        ({"choices": [{"index": 0, "text": "legacy"}]}, "response lacks choices[0].message"),
        ([1, 2], "expected an object"),
        ({"error": {"message": "model 'x' not found"}}, "server returned an error: model 'x' not found"),
        ({"choices": [{"message": {"content": 42}}]}, "invalid response: choices.0.message.content"),
        (b"[" * 10**5 + b"]" * 10**5, "server returned invalid JSON"),
        (b'{"choices": [], "usage": ' + b"9" * 5000 + b"}", "server returned invalid JSON"),
    ],
    ids=["not-json", "no-choices", "no-message", "not-an-object", "error-body", "bad-content", "deep", "long-int"],
)
def test_malformed_response_is_a_clear_failure(server: OpenAIServer, body: Any, expected: str) -> None:
    server.script = lambda request: Reply(body)
    with make_policy(server) as policy:
        output = act_one(policy)
    assert isinstance(output, PolicyFailure)
    assert expected in output.error
    assert len(server.requests) == 1


def test_a_compressed_body_is_refused_before_it_is_inflated(server: OpenAIServer) -> None:
    """MAX_RESPONSE_BYTES counts the bytes as they arrive; a few hundred bytes of
    stacked gzip inflate to gigabytes in one chunk before any count. The policy asks
    for the body as is and refuses one that comes encoded anyway."""
    bomb = gzip.compress(gzip.compress(b" " * 2**24))  # 16 MiB in a few hundred bytes
    assert len(bomb) < 2**10
    server.script = lambda request: Reply(bomb, headers={"Content-Encoding": "gzip, gzip"})
    with make_policy(server) as policy:
        output = act_one(policy)
    assert server.requests[0].headers["accept-encoding"] == "identity"
    assert isinstance(output, PolicyFailure)
    assert "Content-Encoding 'gzip, gzip'" in output.error


def test_one_bad_item_does_not_fail_the_batch(server: OpenAIServer) -> None:
    server.script = lambda request: Reply(b"{") if request.messages[-1]["content"] == "bad" else chat_reply("ok")
    with make_policy(server) as policy:
        outputs = policy.act([conversation("good", id=0), conversation("bad", id=1), conversation("good", id=2)])
    assert [type(o) for o in outputs] == [Generation, PolicyFailure, Generation]


# -- the request ----------------------------------------------------------------


def test_api_key_is_a_bearer_header_and_never_in_repr(server: OpenAIServer) -> None:
    with make_policy(server, api_key="sk-secret-123") as policy:
        act_one(policy)
        assert "sk-secret-123" not in repr(policy) and "sk-secret-123" not in str(policy)
        assert "api_key=<set>" in repr(policy)
    assert server.requests[0].headers["authorization"] == "Bearer sk-secret-123"


def test_no_api_key_sends_no_authorization(server: OpenAIServer) -> None:
    with make_policy(server) as policy:
        act_one(policy)
    assert "authorization" not in server.requests[0].headers


def test_tools_are_sent_when_present(server: OpenAIServer) -> None:
    tools = [{"type": "function", "function": {"name": "submit", "parameters": {"type": "object"}}}]
    with make_policy(server) as policy:
        act_one(policy, conversation(tools=tools))
    with make_policy(server, send_tools=False) as policy:
        act_one(policy, conversation(tools=tools))
    assert server.requests[0].body["tools"] == tools
    assert "tools" not in server.requests[1].body


def test_sampling_params_and_extra_body_are_sent(server: OpenAIServer) -> None:
    sampling = {"temperature": 0.7, "top_p": 0.9, "max_tokens": 64, "stop": ["</s>"], "seed": 10}
    with make_policy(server, **sampling, extra_body={"top_k": 5, "temperature": 0.2}) as policy:
        policy.act([conversation(id=0), conversation(id=3)])
    bodies = sorted((r.body for r in server.requests), key=lambda b: b["seed"])
    for body, seed in zip(bodies, [10, 13], strict=True):
        assert {k: body[k] for k in ("temperature", "top_p", "max_tokens", "stop", "seed", "top_k")} == {
            "temperature": 0.2,
            "top_p": 0.9,
            "max_tokens": 64,
            "stop": ["</s>"],
            "seed": seed,
            "top_k": 5,
        }


def test_unset_sampling_params_are_left_to_the_server(server: OpenAIServer) -> None:
    with make_policy(server) as policy:
        act_one(policy)
    assert set(server.requests[0].body) == {"model", "messages"}


def test_orphan_tool_messages_are_sent_as_user_messages(server: OpenAIServer) -> None:
    messages = [
        SYSTEM,
        {"role": "user", "content": "Compute 1 + 1."},
        {"role": "assistant", "content": tool_call_text("calculate", a=1, op="+", b=1)},
        {"role": "tool", "tool_call_id": "call_0_0", "name": "calculate", "content": "2"},
    ]
    original = copy.deepcopy(messages)
    with make_policy(server) as policy:
        act_one(policy, Conversation(0, messages))
    assert messages == original  # the env's conversation is not touched
    assert server.requests[0].messages == [
        *original[:3],
        {"role": "user", "content": "[tool result: calculate]\n2"},
    ]


def test_answered_tool_calls_stay_structured_and_unknown_keys_are_dropped(server: OpenAIServer) -> None:
    call = tool_call("calculate", {"a": 1, "op": "+", "b": 1}, id="c1")
    messages = [
        SYSTEM,
        {"role": "user", "content": "go", "weight": 1},
        {"role": "assistant", "content": None, "tool_calls": [{**call, "index": 0}], "reasoning_content": "hmm"},
        {"role": "tool", "tool_call_id": "c1", "name": "calculate", "content": "2"},
    ]
    with make_policy(server) as policy:
        act_one(policy, Conversation(0, messages))  # type: ignore[arg-type]
    assert server.requests[0].messages[1:] == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "2"},
    ]


def test_unanswered_structured_calls_are_sent_as_text(server: OpenAIServer) -> None:
    # A call without an id cannot be answered by id; servers refuse such a message.
    unanswerable = {"id": None, "type": "function", "function": {"name": "submit", "arguments": '{"answer": 2}'}}
    messages = [
        SYSTEM,
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [unanswerable]},
        {"role": "tool", "tool_call_id": "call_0_0", "name": "submit", "content": "submitted"},
    ]
    with make_policy(server) as policy:
        act_one(policy, Conversation(0, messages))  # type: ignore[arg-type]
    sent = server.requests[0].messages
    assert sent[2] == {"role": "assistant", "content": tool_call_text("submit", answer=2)}
    assert sent[3] == {"role": "user", "content": "[tool result: submit]\nsubmitted"}


def parses_earlier_calls(then: Any) -> Any:
    """A script that first does as vLLM does with the conversation: every earlier
    structured call's arguments go through ``json.loads`` (the chat template wants a
    dict), and a ValueError is HTTP 400."""

    def script(request: Request) -> Reply:
        for message in request.messages:
            for call in message.get("tool_calls") or []:
                try:
                    json.loads(call["function"]["arguments"])
                except ValueError as e:
                    return Reply({"object": "error", "message": f"{e} None", "code": 400}, status=400)
        return then(request)

    return script


@pytest.mark.parametrize(
    "arguments",
    ['{"a": 1, "op": "+", "b": ', '{"a": ' + "9" * 5000 + "}", '"1 + 1"', "[1, 2]"],
    ids=["truncated", "long-int", "a-string", "a-list"],
)
def test_a_structured_call_whose_arguments_are_no_json_object_goes_back_as_text(
    server: OpenAIServer, arguments: str
) -> None:
    """The env answers such a call with a format error; sent back structured, a server that
    parses the arguments (vLLM) refuses every later turn, which ended the episode as infra:
    a model could dodge its format penalty, and the episode's training, by writing them."""

    def play(request: Request) -> Reply:
        if sum(m["role"] == "assistant" for m in request.messages) == 0:
            call = {"id": "c1", "type": "function", "function": {"name": "calculate", "arguments": arguments}}
            return chat_reply(None, tool_calls=[call], finish_reason="tool_calls")
        return chat_reply("no idea")

    server.script = parses_earlier_calls(play)
    with make_policy(server, max_retries=0) as policy:
        [traj] = agentenv.rollout("arithmetic-v0", policy, n=1)
    assert traj.error is None
    assert traj.failure is Failure.FORMAT
    second = server.requests[1].messages
    assert "tool_calls" not in second[2] and "<tool_call>" in second[2]["content"]
    assert second[3]["role"] == "user"


# -- construction and lifecycle -------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_url": "127.0.0.1:8000/v1"}, "must be an http(s) URL"),
        ({"base_url": "http://127.0.0.1:8000/v1/chat/completions"}, "use 'http://127.0.0.1:8000/v1'"),
        ({"model": ""}, "model must be a non-empty string"),
        ({"concurrency": 0}, "concurrency must be an int >= 1, got 0"),
        ({"timeout_s": 0}, "timeout_s must be a number > 0"),
        ({"max_retries": -1}, "max_retries must be an int >= 0"),
        ({"temperature": -0.5}, "temperature must be >= 0"),
        ({"top_p": 0}, "top_p must be in (0, 1]"),
        ({"max_tokens": 0}, "max_tokens must be an int >= 1"),
        ({"extra_body": {"messages": []}}, "extra_body may not set ['messages']"),
    ],
)
def test_bad_settings_fail_on_construction(kwargs: dict[str, Any], message: str) -> None:
    args = {"base_url": "http://127.0.0.1:8000/v1", "model": "m", **kwargs}
    with pytest.raises(ValueError) as info:
        OpenAIPolicy(**args)
    assert message in str(info.value)


def test_act_after_close_raises(server: OpenAIServer) -> None:
    policy = make_policy(server)
    policy.close()
    policy.close()  # idempotent
    with pytest.raises(RuntimeError, match="after close"):
        policy.act([conversation()])


def test_an_empty_batch_sends_nothing(server: OpenAIServer) -> None:
    with make_policy(server) as policy:
        assert policy.act([]) == []
    assert server.requests == []


@pytest.mark.parametrize(
    ("header", "seconds"),
    [(None, None), ("2", 2.0), ("0.5", 0.5), ("-3", 0.0), ("soon", None), ("nan", None)],
)
def test_retry_after_header(header: str | None, seconds: float | None) -> None:
    assert _retry_after_s(header) == seconds


def test_retry_after_http_date() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    when = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert _retry_after_s(when, now=now) == 30.0
    assert _retry_after_s(format_datetime(now - timedelta(seconds=5), usegmt=True), now=now) == 0.0


# -- trainable rollouts: token ids and log-probs (return_tokens) ---------------------------


def token_reply(prompt_ids: list[int], ids: list[int], logprobs: list[float] | None = None) -> Reply:
    """A chat completion with vLLM's token fields (return_token_ids, logprobs)."""
    reply = chat_reply("ok")
    logprobs = logprobs or [-0.5] * len(ids)
    steps = [{"token": f"t{t}", "logprob": lp, "top_logprobs": []} for t, lp in zip(ids, logprobs, strict=True)]
    reply.body["choices"][0].update(token_ids=ids, logprobs={"content": steps})
    reply.body["prompt_token_ids"] = prompt_ids
    return reply


def test_with_return_tokens_each_turn_keeps_only_the_ids_added_since_the_last(server: OpenAIServer) -> None:
    # The server renders the whole conversation each turn; turn 1's prompt extends turn 0's
    # prompt and reply, so turn 1 holds only the observation's ids.
    prompts = {0: [1, 2, 3], 1: [1, 2, 3, 7, 8, 9, 4, 5]}
    server.script = lambda request: token_reply(prompts[len(request.messages) // 2 - 1], [7, 8, 9], [-0.1, -0.2, -0.3])
    with make_policy(server, return_tokens=True) as policy:
        first = act_one(policy)
        conv = conversation()
        conv.messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}]
        second = act_one(policy, conv)
    assert server.requests[0].body["logprobs"] is True and server.requests[0].body["return_token_ids"] is True
    assert isinstance(first, Generation) and isinstance(second, Generation)
    assert (first.prompt_ids, first.token_ids, first.logprobs) == ([1, 2, 3], [7, 8, 9], [-0.1, -0.2, -0.3])
    assert (second.prompt_ids, second.full_prompt) == ([4, 5], False)


def test_a_prompt_that_does_not_extend_the_episodes_ids_is_kept_whole_and_marked(server: OpenAIServer) -> None:
    # Turn 0's reply [7, 8, 9] comes back re-tokenised as [7, 89]: the episode's ids are not a prefix.
    prompts = {0: [1, 2, 3], 1: [1, 2, 3, 7, 89, 4, 5]}
    server.script = lambda request: token_reply(prompts[len(request.messages) // 2 - 1], [7, 8, 9])
    with make_policy(server, return_tokens=True) as policy:
        act_one(policy)
        conv = conversation()
        conv.messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}]
        second = act_one(policy, conv)
    assert isinstance(second, Generation)
    assert (second.prompt_ids, second.full_prompt) == ([1, 2, 3, 7, 89, 4, 5], True)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda body: body.pop("prompt_token_ids"), "no token ids or log-probs"),
        (lambda body: body["choices"][0].pop("logprobs"), "no token ids or log-probs"),
        (lambda body: body["choices"][0]["logprobs"]["content"].pop(), "2 log-probs for 3 generated tokens"),
        (lambda body: body["choices"][0]["logprobs"]["content"][0].update(logprob=0.5), "finite number <= 0"),
        (lambda body: body["choices"][0].update(token_ids=[7, -1, 9]), "token_ids"),
    ],
    ids=["no prompt ids", "no log-probs", "a log-prob short", "a positive log-prob", "a negative id"],
)
def test_a_reply_without_consistent_tokens_fails_its_conversation(server: OpenAIServer, edit, expected) -> None:
    def script(request: Request) -> Reply:
        reply = token_reply([1, 2, 3], [7, 8, 9])
        edit(reply.body)
        return reply

    server.script = script
    with make_policy(server, return_tokens=True, max_retries=0) as policy:
        out = act_one(policy)
    assert isinstance(out, PolicyFailure) and expected in out.error
