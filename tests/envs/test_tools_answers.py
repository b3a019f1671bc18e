"""The tools env's answers are structured: stuffing the answer with keywords or guesses never scores.

Each task expects some of the domain's answer fields (`gold_task(..., expect=...)`);
``outputs`` is 1 only if each expected field is given exactly and every other one
is left empty. These tests attack every task of both built-in domains the way an
RL-trained policy would, and check that only the real answer scores.
"""

import json
import typing
from typing import Any, Literal

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import agentenv
from agentenv import ToolCall, tool_call_text
from agentenv.envs.tools import ToolsEnv
from agentenv.envs.tools.domains import calendar, retail

pytestmark = pytest.mark.slow  # every task of both domains, through their services

DOMAINS = [("retail-v0", retail.DOMAIN), ("calendar-v0", calendar.DOMAIN)]


def _literals(domain, field: str) -> list[Any]:
    """The values of a field's Literal type (empty for ints and free strings)."""
    annotation = domain.answer.model_fields[field].annotation
    for arg in typing.get_args(annotation) or (annotation,):
        if typing.get_origin(arg) is Literal:
            return list(typing.get_args(arg))
    return []


def _stuffed_message(domain) -> str:
    """Every task's id, golden message and expected values in one answer (capped at respond's limit)."""
    parts = []
    for task in domain.tasks:
        final = task.payload["actions"][-1]["arguments"]
        parts += [task.id, final["message"], *map(str, task.payload["expect"].values())]
    return " ".join(parts)[:4000]


def _guesses(domain, expect: dict[str, Any]) -> list[dict[str, Any]]:
    """What a stuffer fills the fields with, short of the exact answer: each field alone with
    each value of its closed set or with this task's own value, the answer missing one field,
    the answer plus one extra field, and every field at once."""
    fields = list(domain.answer.model_fields)
    extra = {
        f: (_literals(domain, f) or [v for t in domain.tasks for k, v in t.payload["expect"].items() if k == f])[0]
        for f in fields
    }
    guesses: list[dict[str, Any]] = [{}]
    guesses += [{f: v} for f in fields for v in _literals(domain, f)]
    guesses += [{f: v} for f, v in expect.items()]
    guesses += [{k: v for k, v in expect.items() if k != f} for f in expect]
    guesses += [{**expect, f: extra[f]} for f in fields if f not in expect]
    guesses.append({**extra, **expect})
    return [g for g in guesses if g != expect]


def _respond(env: ToolsEnv, fields: dict[str, Any], message: str) -> dict[str, Any]:
    _, _, terminated, _, info = env.step(ToolCall("respond", {"message": message, **fields}))
    assert terminated and info["error"] is None, info["error"]
    return info


@pytest.mark.parametrize("env_id, domain", DOMAINS, ids=[d for d, _ in DOMAINS])
def test_no_stuffed_answer_scores_on_any_task_without_tool_calls(env_id, domain):
    message = _stuffed_message(domain)
    env = agentenv.make(env_id)
    try:
        for task in domain.tasks:
            for fields in [*_guesses(domain, task.payload["expect"]), task.payload["expect"]]:
                # the exact answer too: without reading, a right answer is a lucky guess
                env.reset(options={"task": task.id})
                info = _respond(env, fields, message)
                assert info["task_reward"] == 0.0, (task.id, fields)
    finally:
        env.close()


@pytest.mark.parametrize("env_id, domain", DOMAINS, ids=[d for d, _ in DOMAINS])
def test_after_the_golden_actions_only_the_exact_answer_scores(env_id, domain):
    """The database matches, so only the fields decide: missing, extra or wrong ones score 0."""
    message = _stuffed_message(domain)
    env = agentenv.make(env_id)
    try:
        for task in domain.tasks:
            env.reset(options={"task": task.id})
            for action in task.payload["actions"][:-1]:
                _, _, _, _, info = env.step(ToolCall(action["name"], action["arguments"]))
                assert info["error"] is None, (task.id, info["error"])
            before_answer = env.snapshot()
            expect = task.payload["expect"]
            for fields in _guesses(domain, expect):
                env.restore(before_answer)
                info = _respond(env, fields, message)
                assert info["rewards"]["db_match"] == 1.0 and info["task_reward"] == 0.0, (task.id, fields)
            env.restore(before_answer)
            assert _respond(env, expect, "ok")["task_reward"] == 1.0, task.id  # the message is never scored
    finally:
        env.close()


@pytest.mark.parametrize("domain", [d for _, d in DOMAINS], ids=lambda d: d.name)
def test_every_task_needs_a_tool_call_and_every_read_only_task_two_facts(domain):
    """No task is answerable from the prompt alone, and no single guessed value answers a read-only task."""
    for task in domain.tasks:
        routes = [a["name"] for a in task.payload["actions"][:-1]]
        assert routes, f"{task.id}: the golden actions make no tool call"
        writes = [r for r in routes if domain.routes[r].write and r != "authenticate"]
        if not writes:
            assert len(task.payload["expect"]) >= 2, f"{task.id}: a read-only task must check two facts"


@pytest.mark.parametrize("domain", [d for _, d in DOMAINS], ids=lambda d: d.name)
def test_the_rule_field_names_every_rule_the_domain_raises(domain):
    import ast
    import inspect

    module = inspect.getmodule(domain.routes["authenticate"].handler)
    tree = ast.parse(inspect.getsource(module))
    raised = {
        n.args[0].value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and getattr(n.func, "id", None) == "RuleViolation"
        and isinstance(n.args[0], ast.Constant)
    }
    assert raised and raised == set(_literals(domain, "rule"))


def test_the_schema_of_respond_shows_the_answer_fields():
    env = agentenv.make("retail-v0")
    try:
        [respond] = [s["function"] for s in env.tool_schemas() if s["function"]["name"] == "respond"]
        params = respond["parameters"]
        assert params["required"] == ["message"] and params["additionalProperties"] is False
        assert list(params["properties"]) == ["message", *retail.DOMAIN.answer.model_fields]
        assert "not checked" in params["properties"]["message"]["description"]
    finally:
        env.close()


@pytest.mark.parametrize("env_id, domain", DOMAINS, ids=[d for d, _ in DOMAINS])
def test_a_read_in_the_same_action_as_the_answer_backs_nothing(env_id, domain):
    """The golden reads and the exact answer in one action: the reads' results reach the
    agent after the answer was written, so the answer is a guess however right, and the
    reads after the answer are not run at all."""
    env = agentenv.make(env_id)
    checked = 0
    try:
        for task in domain.tasks:
            expect, inferred = task.payload["expect"], domain.answer.inferred | set(task.payload.get("inferred", ()))
            if not any(k not in inferred for k in expect):
                continue  # nothing the agent must read
            checked += 1
            calls = [
                {
                    "id": f"c{i}",
                    "type": "function",
                    "function": {"name": a["name"], "arguments": json.dumps(a["arguments"])},
                }
                for i, a in enumerate(task.payload["actions"])
            ]
            for action in ([*calls[:-1], calls[-1]], [calls[-1], *calls[:-1]]):  # reads before, then after
                env.reset(options={"task": task.id})
                *_, info = env.step({"role": "assistant", "content": "", "tool_calls": action})
                assert info["rewards"]["outputs"] == 0.0 and info["task_reward"] == 0.0, (task.id, info)
    finally:
        env.close()
    assert checked >= 5


def _answer_after(env: ToolsEnv, task, calls: list[tuple[str, dict[str, Any]]]) -> float:
    """The task reward of the exact answer given after ``calls`` (one action, then respond)."""
    env.reset(options={"task": task.id})
    *_, info = env.step("".join(tool_call_text(name, **arguments) for name, arguments in calls))
    assert info["error"] is None, (task.id, info["error"])
    return _respond(env, task.payload["expect"], "ok")["task_reward"]


def test_a_retail_fact_counts_only_where_a_result_shows_it_of_the_order_asked_about():
    """A seed order's status follows from its id, and three other orders show every status
    string: the exact answer after reading only those is a guess. A listing that shows the
    order's own record backs it as well as ``get_order`` does."""
    orders = {o[0]: o for o in retail._orders()}
    env = agentenv.make("retail-v0")
    checked = 0
    try:
        for task in retail.DOMAIN.tasks:
            if not (task.metadata.family.startswith("retail-refuse") and "order_status" in task.payload["expect"]):
                continue
            checked += 1
            order_id = task.payload["actions"][-2]["arguments"]["order_id"]
            others = [next(o for o in orders if o != order_id and orders[o][2] == s) for s in retail.STATUSES]
            authenticate = task.payload["actions"][0]
            auth = (authenticate["name"], authenticate["arguments"])
            assert _answer_after(env, task, [auth, *(("get_order", {"order_id": o}) for o in others)]) == 0.0, task.id
            listing = ("list_orders", {"customer_id": orders[order_id][1]})
            assert _answer_after(env, task, [auth, listing]) == 1.0, task.id
    finally:
        env.close()
    assert checked == 8


def test_a_calendar_fact_counts_only_where_a_result_shows_it_of_the_booking_asked_about():
    """A booking's organiser follows from its id: the exact answer after reading every other
    booking is a guess. The organiser's own listing backs a booking's room and day."""
    bookings = calendar._bookings()
    env = agentenv.make("calendar-v0")
    try:
        refusals = [t for t in calendar.DOMAIN.tasks if t.metadata.family == "calendar-refuse-other"]
        for task in refusals:
            booking_id = task.payload["actions"][-2]["arguments"]["booking_id"]
            others = [("get_booking", {"booking_id": b}) for b in range(1, 18) if b != booking_id][:15]
            authenticate = task.payload["actions"][0]
            auth = (authenticate["name"], authenticate["arguments"])
            assert _answer_after(env, task, [auth, *others]) == 0.0, task.id
        asks = [t for t in calendar.DOMAIN.tasks if t.metadata.family == "calendar-ask"]
        for task in asks:
            booking_id = task.payload["actions"][0]["arguments"]["booking_id"]
            listing = ("list_bookings", {"employee_id": bookings[booking_id - 1][1]})
            assert _answer_after(env, task, [listing]) == 1.0, task.id
    finally:
        env.close()
    assert len(refusals) == 4 and len(asks) == 6
