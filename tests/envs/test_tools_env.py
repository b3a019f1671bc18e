"""The tools env: HTTP services over per-episode SQLite databases, verified by final state."""

import ast
import base64
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import httpx

import agentenv
from agentenv import EnvStateError, ToolCall, check_env, tool_call_text
from agentenv.envs.tools import ToolsEnv, db_hash, oracle
from agentenv.envs.tools.domains import calendar, retail
from tests.envs._oracle import oracle_plan

pytestmark = pytest.mark.slow  # domain services

RETAIL = "agentenv.envs.tools.domains.retail:DOMAIN"
ALL_TABLES = {
    "customers": ("id", "name", "email", "zip"),
    "products": ("id", "name", "price_cents"),
    "orders": ("id", "customer_id", "status", "address", "cancel_reason"),
    "order_items": ("order_id", "product_id", "quantity", "price_cents", "returned"),
    "refunds": ("id", "order_id", "product_id", "quantity", "amount_cents", "reason"),
    "session": ("customer_id",),
}


@pytest.fixture
def env():
    env = agentenv.make("retail-v0")
    yield env
    env.close()


def _customer(order_id: str) -> tuple[str, str]:
    """(email, zip) of the owner of a seed order."""
    owner = {o[0]: o[1] for o in retail._orders()}[order_id]
    _, _, email, zip_code = {c[0]: c for c in retail._customers()}[owner]
    return email, zip_code


def _db(env: ToolsEnv) -> Path:
    return env.service.db_path(env.episode)


@pytest.mark.parametrize("env_id", ["retail-v0", "calendar-v0"])
def test_passes_check_env_with_the_oracles_actions(env_id):
    check_env(agentenv.make(env_id), seed=3, actions=oracle_plan(env_id, 3))


def test_passes_check_env_with_default_actions():
    check_env(agentenv.make("calendar-v0"))


def test_oracle_reaches_reward_1_on_every_task():
    for env_id in ("retail-v0", "calendar-v0"):
        tasks = agentenv.make(env_id).tasks
        assert len(tasks) >= 40
        trajs = agentenv.rollout(env_id, oracle(), tasks=tasks.ids, concurrency=8)
        assert [t.task_reward for t in trajs] == [1.0] * len(tasks), [t.task.id for t in trajs if not t.success]


def _refusals(domain) -> list:
    return [t for t in domain.tasks if "-refuse-" in t.metadata.family]


@pytest.mark.parametrize("domain", [retail.DOMAIN, calendar.DOMAIN], ids=lambda d: d.name)
def test_refusal_tasks_only_read_and_demand_the_rule_and_a_fact(domain):
    tasks = _refusals(domain)
    assert len(tasks) >= 12 and len({t.metadata.family for t in tasks}) >= 4
    for task in tasks:
        writes = [
            a["name"] for a in task.payload["actions"] if a["name"] in domain.routes and domain.routes[a["name"]].write
        ]
        assert set(writes) <= {"authenticate"}, task.id
        expect = task.payload["expect"]
        assert "rule" in expect and len(expect) >= 2, f"{task.id}: a refusal gives its rule and the fact behind it"


@pytest.mark.parametrize("env_id, domain", [("retail-v0", retail.DOMAIN), ("calendar-v0", calendar.DOMAIN)])
def test_a_refusal_scores_1_only_when_the_answer_gives_the_rule_and_the_fact(env_id, domain):
    tasks = [t.id for t in _refusals(domain)]
    for message in ("Done.", "Sorry, I can't do that for you."):
        vague = agentenv.ScriptedPolicy(lambda conv, m=message: tool_call_text("respond", message=m))
        trajs = agentenv.rollout(env_id, vague, tasks=tasks, concurrency=8)
        assert [t.task_reward for t in trajs] == [0.0] * len(tasks), message
    rule_only = agentenv.ScriptedPolicy(
        lambda conv: tool_call_text("respond", message="No.", rule=conv.task.payload["expect"]["rule"])
    )
    trajs = agentenv.rollout(env_id, rule_only, tasks=tasks, concurrency=8)
    assert [t.task_reward for t in trajs] == [0.0] * len(tasks)
    # The database is unchanged either way, but the golden answer alone is a guess: its facts
    # were never read, so it scores 0; with the golden reads before it, 1.
    golden = agentenv.ScriptedPolicy(
        lambda conv: tool_call_text("respond", **conv.task.payload["actions"][-1]["arguments"])
    )
    trajs = agentenv.rollout(env_id, golden, tasks=tasks, concurrency=8)
    assert [t.task_reward for t in trajs] == [0.0] * len(tasks)
    assert {t.transitions[-1].task_rewards["db_match"] for t in trajs} == {1.0}
    trajs = agentenv.rollout(env_id, oracle(), tasks=tasks, concurrency=8)
    assert [t.task_reward for t in trajs] == [1.0] * len(tasks)


def test_attempting_the_forbidden_write_is_refused_and_a_substitute_write_scores_0(env):
    env.reset(options={"task": "retail-refuse-quantity-O1003"})
    email, zip_code = _customer("O1003")
    env.step(tool_call_text("authenticate", email=email, zip=zip_code))
    _, _, _, _, info = env.step(
        tool_call_text("return_item", order_id="O1003", product_id="P13", quantity=3, reason="damaged")
    )
    assert "return_quantity_exceeded" in info["error"] and info["rewards"]["rule_violation"] == -0.1
    env.step(tool_call_text("get_order", order_id="O1003"))  # the fact the answer gives must have been read
    _, _, terminated, _, info = env.step(
        tool_call_text("respond", message="You bought only 2, not 3.", rule="return_quantity_exceeded", quantity=2)
    )
    assert terminated and info["task_reward"] == 1.0  # refused, so nothing changed: the penalty is per step

    env.reset(options={"task": "retail-refuse-quantity-O1003"})
    env.step(tool_call_text("authenticate", email=email, zip=zip_code))
    env.step(tool_call_text("return_item", order_id="O1003", product_id="P13", quantity=2, reason="damaged"))
    _, _, _, _, info = env.step(
        tool_call_text(
            "respond", message="You bought only 2; I returned those 2.", rule="return_quantity_exceeded", quantity=2
        )
    )
    assert info["task_reward"] == 0.0 and info["rewards"]["db_match"] == 0.0


def test_doing_nothing_scores_0_on_every_task_that_requires_writes():
    do_nothing = agentenv.ScriptedPolicy(lambda conv: tool_call_text("respond", message="Done."))
    for env_id, domain in (("retail-v0", retail.DOMAIN), ("calendar-v0", calendar.DOMAIN)):
        tasks = [
            t
            for t in domain.tasks
            if any(
                a["name"] in domain.routes and domain.routes[a["name"]].write and a["name"] != "authenticate"
                for a in t.payload["actions"]
            )
        ]
        assert len(tasks) >= 10
        trajs = agentenv.rollout(env_id, do_nothing, tasks=[t.id for t in tasks], concurrency=8)
        assert {t.task_reward for t in trajs} == {0.0}
        assert {t.failure for t in trajs} == {agentenv.Failure.POLICY}


def test_tool_schemas_come_from_the_request_models(env):
    schemas = {s["function"]["name"]: s["function"] for s in env.tool_schemas()}
    assert len(schemas) >= 9 and "respond" in schemas
    params = schemas["return_item"]["parameters"]
    assert params["required"] == ["order_id", "product_id", "quantity", "reason"]
    assert params["properties"]["reason"]["enum"] == ["damaged", "wrong_item", "not_needed"]
    assert params["properties"]["quantity"]["minimum"] == 1
    assert params["additionalProperties"] is False
    assert "delivered" in schemas["return_item"]["description"]
    assert "return_item" in env.reset(seed=0)[0][0]["content"]  # shown in the system prompt


def test_invalid_arguments_come_back_naming_the_field(env):
    env.reset(seed=0)
    _, reward, _, _, info = env.step(
        tool_call_text("return_item", order_id="O1003", product_id="P10", quantity="two", reason="damaged")
    )
    assert info["error_kind"] == "format" and "'quantity'" in info["error"] and reward < 0
    _, _, _, _, info = env.step(tool_call_text("cancel_order", order_id="O1001"))
    assert "missing argument 'reason'" in info["error"]
    _, _, _, _, info = env.step(tool_call_text("get_order", order_id="O1001", sql="1"))
    assert "unexpected argument 'sql'" in info["error"]


@pytest.mark.parametrize(
    "action, needle",
    [
        ('<tool_call>{"name": "get_order", "arguments": {"order_id": </tool_call>', "JSON"),
        (tool_call_text("drop_tables"), "unknown tool 'drop_tables'"),
        (tool_call_text("get_ordr", order_id="O1001"), "Did you mean 'get_order'"),
        (tool_call_text("update_address", order_id="O1001", address="x" * 40_000), "characters long"),
        (tool_call_text("update_address", order_id="O1001", address="x" * 5_000), "'address'"),
    ],
)
def test_bad_input_gets_a_clear_observation(env, action, needle):
    env.reset(seed=0)
    obs, _, terminated, truncated, info = env.step(action)
    assert info["error_kind"] == "format" and needle in obs[-1]["content"]
    assert not (terminated or truncated)


def test_business_rules_refuse_with_a_named_rule_and_a_step_penalty(env):
    env.reset(seed=0)
    obs, _, _, _, info = env.step(tool_call_text("cancel_order", order_id="O1001", reason="ordered_by_mistake"))
    assert info["error_kind"] == "tool" and "identity_required" in obs[0]["content"]
    assert info["rewards"]["rule_violation"] == -0.1 and info["rewards"]["server_error"] == 0.0
    email, zip_code = _customer("O1002")  # O1002 is shipped
    env.step(tool_call_text("authenticate", email=email, zip=zip_code))
    obs, _, _, _, _ = env.step(
        tool_call_text("return_item", order_id="O1002", product_id="P10", quantity=1, reason="damaged")
    )
    assert "refund_only_delivered" in obs[0]["content"]
    obs, _, _, _, _ = env.step(tool_call_text("cancel_order", order_id="O1004", reason="ordered_by_mistake"))
    assert "not_your_order" in obs[0]["content"] or "cancel_only_pending" in obs[0]["content"]
    assert env.state.violations[0] == "identity_required" and env.state.writes == ["authenticate"]


def test_sql_in_arguments_is_data_and_never_corrupts_the_database(env):
    env.reset(seed=0)
    before = db_hash(_db(env), ALL_TABLES)
    email, _zip_code = _customer("O1001")
    attacks = [
        tool_call_text("get_order", order_id="O1001' OR '1'='1"),
        tool_call_text("get_order", order_id="x'; DROP TABLE orders; --"),
        tool_call_text("find_customer", email="' UNION SELECT zip, email FROM customers --"),
        tool_call_text("search_products", text="%' ; DELETE FROM products; --"),
        tool_call_text("authenticate", email=email, zip="' OR 1=1"),
    ]
    for action in attacks:
        obs, _, _, _, info = env.step(action)
        assert info["error_kind"] == "tool" or obs[0]["content"] == "[]", obs
    assert db_hash(_db(env), ALL_TABLES) == before
    db = sqlite3.connect(_db(env))
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (36,)
    db.close()


def test_domain_queries_are_parameterised():
    """Every execute() in a built-in domain takes a literal SQL string: values go in as parameters."""
    for module in (retail, calendar):
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        calls = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("execute", "executemany", "executescript")
        ]
        assert calls
        for call in calls:
            sql = call.args[0]
            literal = isinstance(sql, ast.Constant) and isinstance(sql.value, str)
            assert literal or (isinstance(sql, ast.Name) and sql.id == "SCHEMA"), (
                f"{module.__name__}:{call.lineno} builds SQL at run time"
            )


def test_service_refuses_malformed_requests_on_the_wire(env):
    env.reset(seed=0)
    service, episode = env.service, env.episode
    assert service.call(episode, "get_order", b"{nope", 5.0).kind == "bad_json"
    reply = service.call(episode, "get_order", b'{"order_id": 7}', 5.0)
    assert reply.status == 422 and reply.kind == "validation" and "order_id" in reply.message
    assert service.call(episode, "nope", b"{}", 5.0).status == 404
    assert service.call(episode, "get_order", b"x" * 100_000, 5.0).status == 413
    with pytest.raises(agentenv.InfraError, match="lost the episode database"):
        service.call("../seed", "get_order", b'{"order_id": "O1001"}', 5.0)


def test_each_episode_has_its_own_database_reset_by_copy():
    a, b = agentenv.make("retail-v0"), agentenv.make("retail-v0")
    try:
        a.reset(options={"task": "retail-cancel-O1001"})
        b.reset(options={"task": "retail-cancel-O1001"})
        seed = db_hash(_db(a), ALL_TABLES)
        email, zip_code = _customer("O1001")
        a.step(tool_call_text("authenticate", email=email, zip=zip_code))
        a.step(tool_call_text("cancel_order", order_id="O1001", reason="no_longer_needed"))
        assert db_hash(_db(a), ALL_TABLES) != seed and db_hash(_db(b), ALL_TABLES) == seed
        assert a.service is b.service  # one service per domain per process
        a.reset(options={"task": "retail-cancel-O1001"})
        assert db_hash(_db(a), ALL_TABLES) == seed
    finally:
        a.close()
        b.close()


def test_snapshot_and_restore_include_the_database(env):
    env.reset(options={"task": "retail-cancel-O1001"})
    email, zip_code = _customer("O1001")
    env.step(tool_call_text("authenticate", email=email, zip=zip_code))
    blob = env.snapshot().model_dump_json()
    env.step(tool_call_text("cancel_order", order_id="O1001", reason="ordered_by_mistake"))
    assert env.step(tool_call_text("get_order", order_id="O1001"))[0][0]["content"].count('"cancelled"') == 1
    env.restore(blob)
    assert '"pending"' in env.step(tool_call_text("get_order", order_id="O1001"))[0][0]["content"]
    other = agentenv.make("retail-v0")  # a snapshot also restores into another env
    try:
        other.restore(blob)
        other.step(tool_call_text("cancel_order", order_id="O1001", reason="ordered_by_mistake"))
        _, _, terminated, _, info = other.step(tool_call_text("respond", message="Order O1001 is cancelled."))
        assert terminated and info["task_reward"] == 1.0
    finally:
        other.close()
    calendar = agentenv.make("calendar-v0")  # but not into another domain, whose env is a ToolsEnv too
    try:
        with pytest.raises(ValueError, match="a snapshot of a retail episode cannot be restored into a calendar env"):
            calendar.restore(blob)
    finally:
        calendar.close()


def test_a_restore_refuses_a_database_that_is_not_the_domains(env):
    """A snapshot on disk may be edited: SQL put in its database (a trigger) must never run."""
    env.reset(options={"task": "retail-cancel-O1001"})
    snap = env.snapshot().model_dump(mode="json")
    db = sqlite3.connect(":memory:")
    db.deserialize(base64.b64decode(snap["external"]["db"]))
    db.execute("CREATE TRIGGER t AFTER INSERT ON session BEGIN UPDATE orders SET status = 'cancelled'; END")
    db.commit()
    for data, match in ((db.serialize(), "schema"), (b"not a database" * 100, "not a SQLite database")):
        snap["external"]["db"] = base64.b64encode(data).decode()
        with pytest.raises(ValueError, match=match):
            env.restore(snap)
        with pytest.raises(EnvStateError):  # a refused restore leaves no half-restored episode
            env.step(tool_call_text("get_order", order_id="O1001"))
    env.reset(options={"task": "retail-cancel-O1001"})
    email, zip_code = _customer("O1001")
    env.step(tool_call_text("authenticate", email=email, zip=zip_code))  # an insert into session
    assert '"pending"' in env.step(tool_call_text("get_order", order_id="O1001"))[0][0]["content"]


def test_a_restore_refuses_a_snapshot_without_its_database(env):
    """Resumed over the database the env's last episode left, a turn-0 snapshot with its
    database taken out was solved by that episode's writes: answering at once scored 1."""
    env.reset(options={"task": "retail-cancel-O1001"})
    snap = env.snapshot().model_dump(mode="json")
    email, zip_code = _customer("O1001")
    env.step(tool_call_text("authenticate", email=email, zip=zip_code))
    env.step(tool_call_text("cancel_order", order_id="O1001", reason="ordered_by_mistake"))
    snap["external"] = None
    with pytest.raises(ValueError, match="no episode database"):
        env.reset(options={"snapshot": snap})
    with pytest.raises(EnvStateError):
        env.step(tool_call_text("respond", message="Order O1001 is cancelled."))


def test_a_killed_service_is_an_infra_failure_and_the_next_reset_recovers(env):
    env.reset(seed=0)
    env.service.process.kill()
    env.service.process.wait()
    _, reward, terminated, truncated, info = env.step(tool_call_text("get_order", order_id="O1001"))
    assert truncated and not terminated and info["failure"] == "infra" and info["success"] is None
    assert reward == 0.0
    env.reset(seed=0)  # a new service, a new database
    _, _, _, _, info = env.step(tool_call_text("get_order", order_id="O1001"))
    assert info["error"] is None


def test_a_hung_service_times_out_as_an_infra_failure():
    env = ToolsEnv(RETAIL, timeout_s=0.3)
    try:
        env.reset(seed=0)
        os.kill(env.service.process.pid, signal.SIGSTOP)  # alive but answering nothing: a slow service
        try:
            _, _, _, truncated, info = env.step(tool_call_text("get_order", order_id="O1001"))
        finally:
            os.kill(env.service.process.pid, signal.SIGCONT)
        assert truncated and info["failure"] == "infra" and "0.3 s" in info["error"]
    finally:
        env.close()


def test_nothing_starts_at_import_or_make_and_the_last_close_stops_the_service(tmp_path):
    code = """
        import json, time, agentenv
        from agentenv.envs.tools import service
        service.LINGER_S = 0.0
        env = agentenv.make("retail-v0")
        started = list(service._services)
        env.reset(seed=0)
        proc, data_dir = env.service.process, env.service.data_dir
        env.close()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while data_dir.exists() and time.monotonic() < deadline:  # removed just after the process exits
            time.sleep(0.01)
        print(json.dumps([started, proc.returncode is not None, data_dir.exists()]))
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [[], True, False]


def test_structured_tool_calls_work_like_text(env):
    env.reset(seed=0)
    obs, _, _, _, info = env.step(ToolCall(name="get_order", arguments={"order_id": "O1001"}))
    assert info["error"] is None and json.loads(obs[0]["content"])["order_id"] == "O1001"
    assert env.service.health()["domain"] == "retail"
    assert httpx.get(f"{env.service.base_url}/health").status_code == 401  # unsigned


def test_a_value_a_route_echoes_back_is_not_a_fact_the_agent_was_shown(env):
    # A read that returns its own argument would let a policy "see" any guess it sends:
    # only what the service adds counts as read.
    env.reset(options={"task": "retail-status-O1002"})
    env.step(tool_call_text("get_order", order_id="O1002"))
    seen = set(env.state.seen)
    assert '"O1002"' not in seen  # the order id the agent sent, echoed
    assert '"shipped"' in seen or '"pending"' in seen or '"delivered"' in seen  # the status it was shown


def test_a_resume_from_a_snapshot_carries_no_rule_penalty_from_a_step_that_ended_as_infra(env, monkeypatch):
    env.reset(options={"task": "retail-cancel-O1001"})
    snap = env.snapshot()
    service, call = env.service, env.service.call

    def call_then_crash(*args):  # the service dies right after the first call of the step
        reply = call(*args)
        service.process.kill()
        service.process.wait()
        return reply

    monkeypatch.setattr(service, "call", call_then_crash)
    refused = tool_call_text("cancel_order", order_id="O1001", reason="ordered_by_mistake")  # identity_required
    _, _, _, truncated, info = env.step(refused + tool_call_text("get_order", order_id="O1001"))
    assert truncated and info["failure"] == "infra" and env.state.violations == ["identity_required"]
    env.reset(options={"snapshot": snap})  # a new service: the resumed episode starts clean
    _, _, _, _, info = env.step(tool_call_text("get_order", order_id="O1001"))
    assert info["error"] is None and info["rewards"]["rule_violation"] == 0.0


def test_a_value_the_agent_wrote_itself_is_not_a_fact_it_was_shown(env):
    # Written into the asked order's address, read back, then put back: the database ends
    # as the golden one, yet "delivered" was only ever the agent's own words.
    order_id, email, zip_code = "O1013", *_customer("O1013")
    original = {o[0]: o for o in retail._orders()}[order_id][3]
    task = agentenv.Task(
        id="status-of-O1013",
        prompt=f"I'm {email}, zip {zip_code}. Is order {order_id} delivered?",
        payload={
            "actions": [
                {"name": "get_order", "arguments": {"order_id": order_id}},
                {"name": "respond", "arguments": {"message": "It is.", "order_status": "delivered"}},
            ],
            "expect": {"order_status": "delivered"},
        },
    )
    env.reset(options={"task": task})
    env.step(tool_call_text("authenticate", email=email, zip=zip_code))
    env.step(tool_call_text("update_address", order_id=order_id, address="delivered"))
    env.step(tool_call_text("get_order", order_id=order_id))
    assert '"delivered"' not in env.state.seen and '"delivered"' in env.state.written
    env.step(tool_call_text("update_address", order_id=order_id, address=original))
    *_, info = env.step(tool_call_text("respond", message="It is.", order_status="delivered"))
    assert info["rewards"]["db_match"] == 1.0 and info["task_reward"] == 0.0


def test_the_client_drops_an_idle_connection_before_the_server_does(env):
    # Equal keep-alives race: a request sent on a connection the server is closing is reset,
    # and an innocent episode would end as infra.
    from agentenv.envs.tools import serve, service

    env.reset(seed=0)
    assert env.service.client._transport._pool._keepalive_expiry == service.KEEPALIVE_EXPIRY_S  # type: ignore[attr-defined]
    assert 2 * service.KEEPALIVE_EXPIRY_S <= serve.SERVER_KEEP_ALIVE_S
    assert "timeout_keep_alive=SERVER_KEEP_ALIVE_S" in Path(serve.__file__).read_text(encoding="utf-8")
