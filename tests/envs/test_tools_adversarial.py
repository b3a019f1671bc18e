"""The tools env under attack: its service, its wire and its step, one test per property.

The service answers only the env that started it (a per-start secret), never lets an
episode id reach the seed, refuses oversized and out-of-range input as the caller's
error, and an impostor on a dead service's port is an infrastructure failure. `step`
never raises for anything an action causes, and nothing an action causes is
classified ``infra``.
"""

import contextlib
import dataclasses
import json
import re
import select
import socket
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import httpx
from pydantic import Field

import agentenv
from agentenv import InfraError, ToolCall, tool_call_text
from agentenv.envs.tools import (
    MAX_GOLD_ACTIONS,
    Answer,
    Domain,
    Request,
    auth,
    db_hash,
)
from agentenv.envs.tools.app import MAX_BODY_BYTES
from agentenv.envs.tools.domains import retail

pytestmark = pytest.mark.slow  # each test starts a domain service

ALL_RETAIL = {"customers": ("id", "zip"), "orders": ("id", "status", "address"), "session": ("customer_id",)}
GET_ORDER = b'{"order_id": "O1001"}'


@pytest.fixture
def env():
    env = agentenv.make("retail-v0")
    env.reset(options={"task": "retail-cancel-O1001"})
    yield env
    env.close()


@pytest.fixture
def calendar_env():
    env = agentenv.make("calendar-v0")
    env.reset(seed=0)
    yield env
    env.close()


def _port(env) -> int:
    return int(env.service.base_url.rsplit(":", 1)[1])


def _authenticate_body() -> bytes:
    _, _, email, zip_code = retail._customers()[0]
    return json.dumps({"email": email, "zip": zip_code}).encode()


def _kill(service) -> None:
    service.process.kill()
    service.process.wait()


# -- 1a: only episodes the env created exist; the seed is read-only -------------------


def test_the_seed_is_read_only_and_no_episode_id_reaches_it(env):
    service = env.service
    seed = db_hash(service.seed_db, ALL_RETAIL)
    assert stat.S_IMODE(service.seed_db.stat().st_mode) == 0o444
    assert service.episodes_dir not in service.seed_db.parents
    for episode in ("seed", "../seed", "..", "episodes", "x" * 65, "", "never-created", env.episode + "-gold"):
        with pytest.raises(InfraError, match="lost the episode database"):
            service.call(episode, "authenticate", _authenticate_body(), 5.0)
    assert db_hash(service.seed_db, ALL_RETAIL) == seed
    assert sorted(p.name for p in service.episodes_dir.iterdir()) == [f"{env.episode}.sqlite"]  # nothing created


# -- 1b: bodies are size-checked while they stream ------------------------------------


def test_a_streamed_body_is_refused_as_soon_as_it_passes_the_limit(env):
    head = (
        f"POST /call/get_order HTTP/1.1\r\nHost: x\r\nX-Episode: {env.episode}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b"%x\r\n%s\r\n" % (32 * 1024, b"x" * 32 * 1024)
    sent = 0
    with socket.create_connection(("127.0.0.1", _port(env)), timeout=10) as sock:
        sock.sendall(head)
        while sent < 200 * 2**20 and not select.select([sock], [], [], 0.05)[0]:  # 200 MiB, unless refused
            sock.sendall(chunk)
            sent += 32 * 1024
            assert sent <= 4 * MAX_BODY_BYTES, "the service is still reading the body past its limit"
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413")


def test_a_declared_oversized_body_is_refused_before_it_is_sent(env):
    head = (
        f"POST /call/get_order HTTP/1.1\r\nHost: x\r\nX-Episode: {env.episode}\r\nContent-Length: {200 * 2**20}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", _port(env)), timeout=10) as sock:
        sock.sendall(head)
        assert sock.recv(4096).startswith(b"HTTP/1.1 413")


# -- 1c: out-of-range integers are the caller's error ----------------------------------


@pytest.mark.parametrize("number", [str(2**70), str(-(2**70)), "9" * 5000, str(2**63)])
def test_an_out_of_range_integer_on_the_wire_is_a_validation_error(calendar_env, number):
    reply = calendar_env.service.call(calendar_env.episode, "get_booking", b'{"booking_id": %s}' % number.encode(), 5.0)
    assert (reply.status, reply.kind) == (422, "validation")


def test_an_out_of_range_integer_argument_is_a_format_error(calendar_env):
    _, _, _, _, info = calendar_env.step(tool_call_text("get_booking", booking_id=2**70))
    assert info["error_kind"] == "format" and "'booking_id'" in info["error"]
    assert info["rewards"]["server_error"] == 0.0


def test_integer_fields_must_be_bounded_when_a_domain_is_defined():
    domain = Domain("bounds", schema="", seed=lambda db: None, instructions="")

    class Loose(Request):
        n: int

    with pytest.raises(TypeError, match=r"\['n'\]"):

        @domain.route()
        def loose(db, req: Loose) -> None: ...

    class LooseAnswer(Answer):
        total: int | None = None

    with pytest.raises(TypeError, match=r"\['total'\]"):
        Domain("bounds", schema="", seed=lambda db: None, instructions="", answer=LooseAnswer)

    class RequiredAnswer(Answer):
        total: Annotated[int, Field(ge=0, le=10)]

    with pytest.raises(TypeError, match="default to None"):
        Domain("bounds", schema="", seed=lambda db: None, instructions="", answer=RequiredAnswer)


# -- 1d: the service answers only its env, and the env trusts only its service ---------


def test_the_service_refuses_requests_not_signed_with_its_secret(env):
    url, body = env.service.base_url, _authenticate_body()
    nonce = auth.new_nonce()
    forged = auth.request_mac(b"\0" * 32, nonce, "POST", "/call/authenticate", env.episode, body)
    replayed = auth.request_mac(env.service.secret, nonce, "POST", "/call/authenticate", env.episode, GET_ORDER)
    for headers in (
        {},
        {"X-Nonce": nonce},
        {"X-Nonce": nonce, "X-Auth": forged},
        {"X-Nonce": nonce, "X-Auth": replayed},
    ):  # signed for another body
        reply = httpx.post(f"{url}/call/authenticate", content=body, headers={"X-Episode": env.episode, **headers})
        assert reply.status_code == 401 and auth.PROOF_HEADER not in reply.headers
    assert httpx.get(f"{url}/health").status_code == 401
    assert env.state.writes == [] and db_hash(
        env.service.db_path(env.episode), {"session": ("customer_id",)}
    ) == db_hash(env.service.seed_db, {"session": ("customer_id",)})


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_the_secret_is_in_neither_the_argv_nor_the_environment_of_the_service(env):
    pid, secret = env.service.process.pid, env.service.secret.hex().encode()
    assert secret not in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert secret not in Path(f"/proc/{pid}/environ").read_bytes()


@contextlib.contextmanager
def _impostor(port: int, status: int, body: bytes, proof: bytes | str | None) -> Iterator[tuple[int, list[bytes]]]:
    """An HTTP server on ``port`` (0: any) answering every request with ``status`` and ``body``;
    ``proof`` is the secret to sign with (a buggy but real service), a fixed header value, or None.
    Yields its port and the requests it saw."""
    seen: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request_body = self.rfile.read(int(self.headers.get("content-length", 0)))
            seen.append(bytes(self.headers) + request_body)
            self.send_response(status)
            if isinstance(proof, bytes):
                self.send_header(
                    auth.PROOF_HEADER, auth.response_mac(proof, self.headers[auth.NONCE_HEADER], status, body)
                )
            elif proof is not None:
                self.send_header(auth.PROOF_HEADER, proof)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_an_impostor_on_a_dead_services_port_is_refused_by_its_missing_proof(env, monkeypatch):
    service, port = env.service, _port(env)
    _kill(service)
    monkeypatch.setattr(service, "alive", lambda: True)  # get past the liveness check: the answer itself must fail
    with _impostor(port, 200, b'{"result": {"order_id": "O1001", "status": "refunded"}}', None) as (_, seen):
        obs, reward, terminated, truncated, info = env.step(tool_call_text("get_order", order_id="O1001"))
    assert seen, "the impostor was never asked"
    assert truncated and not terminated and info["failure"] == "infra" and reward == 0.0
    assert "not signed" in info["error"] and obs[-1]["content"].startswith("Error: the environment failed")
    assert service.secret.hex().encode() not in seen[0]  # the secret never travels


def test_a_dead_service_is_never_asked(env):
    service, port = env.service, _port(env)
    _kill(service)
    with _impostor(port, 200, b'{"result": {"order_id": "O1001", "status": "refunded"}}', None) as (_, seen):
        _, _, _, truncated, info = env.step(tool_call_text("get_order", order_id="O1001"))
    assert truncated and info["failure"] == "infra" and "exited" in info["error"] and not seen


SIGNED = object()


@pytest.mark.parametrize(
    "status, body, proof",
    [
        (200, b'{"result": "forged"}', "0" * 64),  # an impostor: a made-up proof
        (500, b"<html>oops</html>", None),
        # A process that knows the secret but answers out of shape (a broken service): still infra, never a crash.
        (200, b'{"result": 1, "extra": 2}', SIGNED),
        (200, b'{"no": "result"}', SIGNED),
        (200, b"[1, 2]", SIGNED),
        (200, b"not json", SIGNED),
        (409, b'{"error": 5, "message": "x"}', SIGNED),
        (409, b'{"message": "no error kind"}', SIGNED),
        (404, b'{"error": "not_found"}', SIGNED),
        (409, b'{"error": "rule_violation", "message": "x", "rule": ["a"]}', SIGNED),
    ],
)
def test_a_forged_or_malformed_answer_is_an_infra_failure(env, monkeypatch, status, body, proof):
    service = env.service
    with (
        _impostor(0, status, body, service.secret if proof is SIGNED else proof) as (port, seen),
        httpx.Client(base_url=f"http://127.0.0.1:{port}") as client,
    ):
        # The env's service as it is, answered by another process (no kill: the real one keeps serving others).
        monkeypatch.setattr(env, "_service", dataclasses.replace(service, base_url=str(client.base_url), client=client))
        obs, reward, terminated, truncated, info = env.step(tool_call_text("get_order", order_id="O1001"))
    assert seen, "the impostor was never asked"
    assert truncated and not terminated and info["failure"] == "infra" and reward == 0.0
    assert obs[-1]["content"].startswith("Error: the environment failed")


@contextlib.contextmanager
def _trickling(secret: bytes, part: str) -> Iterator[int]:
    """A service that knows the secret and answers correctly, signed, but a byte every
    0.2 s: its status line and headers (``part="head"``) or its body (``"body"``).
    Yields its port."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            body = b'{"result": {"order_id": "O1001", "status": "pending"}}'
            mac = auth.response_mac(secret, self.headers[auth.NONCE_HEADER], 200, body)
            head = (
                f"HTTP/1.1 200 OK\r\n{auth.PROOF_HEADER}: {mac}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n"
            ).encode()
            slow, fast = (head, b"") if part == "head" else (b"", head)
            self.wfile.write(fast)
            self.wfile.flush()
            for i in range(len(slow)):
                if stop.wait(0.2):
                    return
                self.wfile.write(slow[i : i + 1])
                self.wfile.flush()
            if part == "body":
                for i in range(len(body)):
                    if stop.wait(0.2):
                        return
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
            else:
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize("part", ["head", "body"])
def test_a_service_that_trickles_its_answer_is_late_as_a_whole_not_per_read(env, monkeypatch, part):
    """httpx's timeout bounds each read; a byte every 0.2 s never trips a 1 s read timeout,
    and the answer (a valid one, signed) would take tens of seconds. The step ends as infra
    at the call's deadline, and the next reset works."""
    service = env.service
    env.timeout_s = 1.0
    with (
        _trickling(service.secret, part) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}") as client,
    ):
        monkeypatch.setattr(env, "_service", dataclasses.replace(service, base_url=str(client.base_url), client=client))
        _, reward, terminated, truncated, info = env.step(tool_call_text("get_order", order_id="O1001"))
        monkeypatch.undo()
    assert truncated and not terminated and info["failure"] == "infra" and reward == 0.0
    assert "did not answer /call/get_order within 1.0 s" in info["error"]
    env.reset(seed=0)
    assert env.step(tool_call_text("get_order", order_id="O1001"))[4]["error"] is None


def test_an_answer_without_end_is_cut_at_the_reply_limit(env, monkeypatch):
    """Whatever holds the port answers without end: read up to `MAX_REPLY_BYTES`, then
    infra; never read into memory without bound."""
    from agentenv.envs.tools.service import MAX_REPLY_BYTES

    class Endless(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the body ends when the connection does: here, never

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header(auth.PROOF_HEADER, "0" * 64)
            self.end_headers()
            with contextlib.suppress(OSError):
                while True:
                    self.wfile.write(b"x" * 65536)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    service = env.service
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_address[1]}") as client:
            replaced = dataclasses.replace(service, base_url=str(client.base_url), client=client)
            monkeypatch.setattr(env, "_service", replaced)
            _, _, _, truncated, info = env.step(tool_call_text("get_order", order_id="O1001"))
    finally:
        server.shutdown()
        server.server_close()
    assert truncated and info["failure"] == "infra" and f"over {MAX_REPLY_BYTES} bytes" in info["error"]


# -- 3: step never raises, and infra is only what the policy cannot cause --------------


@pytest.mark.parametrize("replaced", [False, True], ids=["killed", "killed-and-replaced"])
def test_a_service_killed_before_respond_is_an_infra_failure_not_an_exception(env, replaced):
    task = env.tasks.get("retail-cancel-O1001")
    for action in task.payload["actions"][:-1]:
        env.step(ToolCall(action["name"], action["arguments"]))
    _kill(env.service)
    if replaced:  # another env's reset replaces the dead service and removes its data directory
        other = agentenv.make("retail-v0")
        other.reset(seed=0)
        other.close()
        assert not env.service.data_dir.exists()
        with pytest.raises(InfraError):
            env.snapshot()
    obs, _reward, terminated, truncated, info = env.step(ToolCall("respond", task.payload["actions"][-1]["arguments"]))
    assert truncated and not terminated and info["failure"] == "infra" and info["success"] is None
    assert "Error: the environment failed" in obs[-1]["content"]
    env.reset(seed=0)  # and the next reset recovers
    assert env.step(tool_call_text("get_order", order_id="O1001"))[4]["error"] is None


def _nested(depth: int) -> object:
    value: object = "R1"
    for _ in range(depth):
        value = [value]
    return value


HOSTILE = [
    pytest.param(tool_call_text("get_booking", booking_id=2**70), id="int 2**70 (text)"),
    pytest.param(tool_call_text("get_booking", booking_id=-(2**70)), id="int -2**70 (text)"),
    pytest.param(ToolCall("get_booking", {"booking_id": 10**300}), id="int 10**300 (structured)"),
    pytest.param(ToolCall("get_booking", {"booking_id": float("inf")}), id="inf"),
    pytest.param(ToolCall("list_rooms", {"min_capacity": float("nan")}), id="nan"),
    pytest.param(ToolCall("get_booking", {"booking_id": {"$gt": 0}}), id="an object for an int"),
    pytest.param(
        ToolCall("room_schedule", {"room_id": "R1\x00\x07\x1b[2J\r\n", "day": "2025-03-03"}), id="control characters"
    ),
    pytest.param(ToolCall("authenticate", {"email": "a@b\x00", "pin": "\x00\x00\x00\x00"}), id="NUL in credentials"),
    pytest.param(
        ToolCall(
            "book_room",
            {
                "room_id": "R1",
                "day": "2025-03-03",
                "start_hour": 9,
                "end_hour": 10,
                "title": "\u2028\u2029\ufeff\U0010ffff",
                "attendees": 2,
            },
        ),
        id="odd unicode",
    ),
    pytest.param(
        '<tool_call>{"name": "list_rooms", "arguments": {"min_capacity": ' + "[" * 500 + "]" * 500 + "}}</tool_call>",
        id="nested JSON (text)",
    ),
    pytest.param(
        ToolCall("room_schedule", {"room_id": _nested(200), "day": "2025-03-03"}), id="nested JSON (structured)"
    ),
    pytest.param(ToolCall("respond", {"message": "x", "score": 1}), id="an unknown answer field"),
    pytest.param(
        '<tool_call>{"name": "room_schedule", "arguments": {"room_id": "\\udc80", "day": "2025-03-03"}}</tool_call>',
        id="surrogate (text)",
    ),
    pytest.param(ToolCall("room_schedule", {"room_id": "R1\udc80", "day": "2025-03-03"}), id="surrogate (structured)"),
    pytest.param(ToolCall("respond", {"message": "bye \ud800"}), id="surrogate in respond"),
    pytest.param(ToolCall("respond", {"message": "x", "room_id": "\udfff"}), id="surrogate in an answer field"),
    pytest.param(
        '<tool_call>{"name": "get_booking", "arguments": {"booking_id": ' + "9" * 5000 + "}}</tool_call>",
        id="5,000-digit int (text)",
    ),
    pytest.param(ToolCall("get_booking", {"booking_id": 10**5000}), id="5,000-digit int (structured)"),
    pytest.param(
        '<tool_call>{"name": "list_rooms", "arguments": {"min_capacity": ' + "[" * 3000 + "]" * 3000 + "}}</tool_call>",
        id="JSON nested 3,000 deep (text)",
    ),
]


@pytest.mark.parametrize("action", HOSTILE)
def test_nothing_an_action_holds_raises_counts_as_infra_or_breaks_the_trajectory(calendar_env, action):
    _, _, _, _, info = calendar_env.step(action)
    assert info["failure"] != "infra" and info["error_kind"] in (None, "format", "tool"), info["error"]
    traj = agentenv.Trajectory(
        task=calendar_env.task,
        messages=calendar_env.messages,
        transitions=calendar_env.transitions,
        failure=agentenv.Failure.TRUNCATED,
    )
    json.loads(traj.model_dump_json())


@pytest.mark.parametrize(
    "fields", [{"room_id": "R1\udc80", "day": "2025-03-03"}, {"message": "bye \ud800"}], ids=["route", "respond"]
)
def test_a_lone_surrogate_in_a_string_argument_is_an_invalid_argument(calendar_env, fields):
    tool = "respond" if "message" in fields else "room_schedule"
    _, reward, terminated, _, info = calendar_env.step(ToolCall(tool, fields))
    assert info["error_kind"] == "format" and not terminated and reward < 0


def test_a_dead_service_is_stopped_at_its_last_release_not_after_the_linger():
    import os
    import signal

    from agentenv.envs.tools import service as services

    s = services.acquire("agentenv.envs.tools.domains.retail:DOMAIN")
    os.kill(s.process.pid, signal.SIGKILL)
    s.process.wait()
    services.release(s)
    assert s.client.is_closed and not s.data_dir.exists() and s._linger is None
    fresh = services.acquire("agentenv.envs.tools.domains.retail:DOMAIN")
    try:
        assert fresh is not s and fresh.alive()
    finally:
        services.release(fresh)


# -- 4: a task's golden actions are checked wherever the task comes from ----------------


@pytest.mark.parametrize("reads", [[], ["get_order"], ["get_order", "get_order"]], ids=["none", "one", "two"])
def test_a_task_that_checks_nothing_is_refused_when_the_env_is_made(tmp_path, reads):
    """No expected field and no golden write: `respond` with no fields as the first action
    would pass it, whatever the user asked."""
    actions = [{"name": n, "arguments": {"order_id": "O1001"}} for n in reads]
    actions.append({"name": "respond", "arguments": {"message": "done"}})
    task = agentenv.Task(id="empty", prompt="Check on O1001.", payload={"actions": actions, "expect": {}})
    path = tmp_path / "tasks.jsonl"
    path.write_text(task.model_dump_json() + "\n")
    with pytest.raises(ValueError, match=r"task 'empty': checks nothing"):
        agentenv.make("retail-v0", tasks=agentenv.TaskSet.from_jsonl(path))
    env = agentenv.make("retail-v0")
    try:
        with pytest.raises(ValueError, match="checks nothing"):
            env.reset(options={"task": task})
    finally:
        env.close()


HOSTILE_GOLD_NAMES = ["get_order/x", "get_order%2Fx", "..", "get_order?x=1", "get_order#frag", "get order"]


def _gold(task_id: str, names: list[str]) -> agentenv.Task:
    actions = [{"name": n, "arguments": {"order_id": "O1001"}} for n in names]
    actions.append({"name": "respond", "arguments": {"message": "ok", "order_status": "pending"}})
    payload = {"actions": actions, "expect": {"order_status": "pending"}}
    return agentenv.Task(id=task_id, prompt="What is the status of O1001?", payload=payload)


def _answer_it(env: Any) -> None:
    """Solve a `_gold` task: read the order, answer its status."""
    env.step(ToolCall("get_order", {"order_id": "O1001"}))
    _, _, terminated, _, info = env.step(ToolCall("respond", {"message": "ok", "order_status": "pending"}))
    assert terminated and info["failure"] == "none" and info["task_reward"] == 1.0


@pytest.mark.parametrize("name", HOSTILE_GOLD_NAMES)
def test_a_task_file_with_a_golden_action_that_is_no_route_is_refused_when_the_env_is_made(tmp_path, name):
    path = tmp_path / "tasks.jsonl"
    path.write_text(_gold("ok", ["get_order"]).model_dump_json() + "\n" + _gold("bad", [name]).model_dump_json())
    with pytest.raises(ValueError, match=rf"task 'bad': golden action 0 {re.escape(repr(name))} is not a route"):
        agentenv.make("retail-v0", tasks=agentenv.TaskSet.from_jsonl(path))


@pytest.mark.parametrize("name", HOSTILE_GOLD_NAMES)
def test_a_task_with_a_golden_action_that_is_no_route_is_refused_at_reset(env, name):
    with pytest.raises(ValueError, match=rf"task 'bad': golden action 0 {re.escape(repr(name))} is not a route"):
        env.reset(options={"task": _gold("bad", [name])})
    env.reset(options={"task": _gold("good", ["get_order"])})  # the env is still usable
    _answer_it(env)


def test_a_snapshot_whose_task_has_a_golden_action_that_is_no_route_is_refused(env):
    snap = json.loads(env.snapshot().model_dump_json())
    snap["task"]["payload"]["actions"][0]["name"] = "get_order/x"
    with pytest.raises(ValueError, match=r"golden action 0 'get_order/x' is not a route"):
        env.reset(options={"snapshot": snap})


def test_golden_actions_are_capped_so_verify_replays_a_bounded_number(env):
    at_cap = _gold("at-cap", ["get_order"] * (MAX_GOLD_ACTIONS - 1))  # respond is the last of them
    over = _gold("over", ["get_order"] * MAX_GOLD_ACTIONS)
    with pytest.raises(ValueError, match=rf"task 'over': {MAX_GOLD_ACTIONS + 1} golden actions, expected at most"):
        agentenv.make("retail-v0", tasks=[at_cap, over])
    with pytest.raises(ValueError, match=rf"task 'over': {MAX_GOLD_ACTIONS + 1} golden actions"):
        env.reset(options={"task": over})
    env.reset(options={"task": at_cap})
    _answer_it(env)


@pytest.mark.parametrize("name", HOSTILE_GOLD_NAMES)
def test_a_tool_that_is_no_route_is_refused_by_the_service_client_without_a_request(env, monkeypatch, name):
    service, sent = env.service, []
    monkeypatch.setattr(service, "send", lambda *args: sent.append(args))
    reply = service.call(env.episode, name, GET_ORDER, 5.0)
    assert (reply.status, reply.kind, reply.message) == (404, "unknown_tool", f"no tool {name!r}") and not sent
