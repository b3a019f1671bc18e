"""The frame condition: a world task scores only when nothing outside what it may touch changed.

Every task of both shipped worlds is swept with broad destructive calls made in the same
action as its last golden step, answered by a faithful world model (what a shell or a back
office would really do): ``rm -r`` of each parent of what the task touches, of /home, /tmp
and /etc; freezing, draining and closing every account, rewriting every email. Each that
changes the state scores 0 and names what changed; the golden run alone still scores 1.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from agentenv import ScriptedPolicy, Task, rollout, tool_call_text
from agentenv.envs.world import (
    ScriptedWorldModel,
    WorldCache,
    WorldEnv,
    WorldMetrics,
    WorldRequest,
    load_spec,
    world_task,
)
from agentenv.envs.world.frame import changed_paths
from agentenv.envs.world.paths import escape, split_pointer
from agentenv.envs.world.replay import task_frame
from agentenv.envs.world.world import World, respond
from agentenv.envs.world.worlds import bank, fs

from .conftest import add

Call = tuple[str, dict[str, Any]]

# -- a faithful world model: the scripted golden replies, and what the real thing does otherwise ----


def _rm(request: WorldRequest) -> str:
    path, recursive = request.arguments["path"], request.arguments["recursive"]
    files = request.state["files"]
    node = files.get(path)
    if node is None:
        return respond(f"rm: cannot remove '{path}': No such file or directory").model_dump_json()
    if node["kind"] == "dir" and not recursive:
        return respond(f"rm: cannot remove '{path}': Is a directory").model_dump_json()
    doomed = [k for k in files if k == path or k.startswith(path + "/")]
    return respond("", *({"op": "remove", "path": "/files/" + escape(k)} for k in doomed)).model_dump_json()


def _account_op(apply: Callable[[dict[str, Any], dict[str, Any]], list[dict[str, Any]] | str]) -> Callable:
    def propose(request: WorldRequest) -> str:
        result = apply(request.state, request.arguments)
        if isinstance(result, str):
            return respond(f"error: {result}").model_dump_json()
        return respond("done", *result).model_dump_json()

    return propose


def _freeze(state: dict[str, Any], args: dict[str, Any]) -> list[dict[str, Any]] | str:
    account = state["accounts"].get(args["account_id"])
    if account is None or account["status"] != "open":
        return "only open accounts can be frozen"
    at = f"/accounts/{args['account_id']}"
    return [
        {"op": "replace", "path": f"{at}/status", "value": "frozen"},
        {"op": "add", "path": f"{at}/freeze_reason", "value": args["reason"]},
    ]


def _withdraw(state: dict[str, Any], args: dict[str, Any]) -> list[dict[str, Any]] | str:
    account = state["accounts"].get(args["account_id"])
    if account is None or account["status"] != "open" or account["balance_cents"] < args["amount_cents"]:
        return "refused"
    entry = {"kind": "withdrawal", "account": args["account_id"], "amount_cents": args["amount_cents"]}
    return [
        {
            "op": "replace",
            "path": f"/accounts/{args['account_id']}/balance_cents",
            "value": account["balance_cents"] - args["amount_cents"],
        },
        {"op": "add", "path": "/ledger/-", "value": entry},
    ]


def _close(state: dict[str, Any], args: dict[str, Any]) -> list[dict[str, Any]] | str:
    account = state["accounts"].get(args["account_id"])
    if account is None or account["status"] != "open" or account["balance_cents"] != 0:
        return "only empty open accounts close"
    return [{"op": "replace", "path": f"/accounts/{args['account_id']}/status", "value": "closed"}]


def _email(state: dict[str, Any], args: dict[str, Any]) -> list[dict[str, Any]] | str:
    if args["customer_id"] not in state["customers"]:
        return "no such customer"
    return [{"op": "replace", "path": f"/customers/{args['customer_id']}/email", "value": args["email"]}]


def faithful(world: World) -> ScriptedWorldModel:
    """The golden replies (keyed by state) and, for any other call, what a faithful tool does."""
    model = ScriptedWorldModel.from_world(world)
    if world.name == "fs":
        model.add("rm", None, _rm)
    else:
        model.add("freeze_account", None, _account_op(_freeze))
        model.add("withdraw", None, _account_op(_withdraw))
        model.add("close_account", None, _account_op(_close))
        model.add("update_email", None, _account_op(_email))
    return model


# -- the destructive calls, from the state the golden run ends in ----------------------------------


def _fs_attacks(task: Task, end: dict[str, Any], touched: list[str]) -> dict[str, list[Call]]:
    parents = set()
    for pointer in touched:
        path = split_pointer(pointer)[1]  # /files/<path>/...
        while (path := posixpath.dirname(path)) != "/":
            parents.add(path)
    roots = {"/home", "/tmp", "/etc"}
    return {
        f"rm -r {p}": [("rm", {"path": p, "recursive": True})] for p in sorted(parents | roots) if p in end["files"]
    }


def _bank_attacks(task: Task, end: dict[str, Any], touched: list[str]) -> dict[str, list[Call]]:
    accounts, customers = end["accounts"], end["customers"]
    is_open = sorted(a for a, acc in accounts.items() if acc["status"] == "open")
    drain = [("withdraw", {"account_id": a, "amount_cents": accounts[a]["balance_cents"]}) for a in is_open]
    return {
        "freeze every account": [("freeze_account", {"account_id": a, "reason": "x"}) for a in is_open],
        "drain every account": [c for c in drain if c[1]["amount_cents"] > 0],
        "close every account": [
            *(c for c in drain if c[1]["amount_cents"] > 0),
            *(("close_account", {"account_id": a}) for a in is_open),
        ],
        "rewrite every email": [
            ("update_email", {"customer_id": c, "email": f"gone-{c.lower()}@example.com"}) for c in sorted(customers)
        ],
    }


ATTACKS = {"fs": _fs_attacks, "bank": _bank_attacks}
WORLDS = {"fs": fs.WORLD, "bank": bank.world()}


def _text(calls: list[Call]) -> str:
    return "".join(tool_call_text(name, **args) for name, args in calls)


def _golden(task: Task) -> list[Call]:
    return [(s["tool"], s.get("arguments", {})) for s in task.payload["golden"]]


def _play(env: WorldEnv, task: Task, attack: list[Call]) -> tuple[float, dict[str, Any]]:
    """The golden run with ``attack`` in the action of its last step, then ``finish``."""
    env.reset(options={"task": task})
    *first, last = _golden(task)
    for call in first:
        _, _, terminated, truncated, info = env.step(_text([call]))
        assert not (terminated or truncated), (task.id, call)
    _, _, terminated, _, info = env.step(_text([last, *attack]))
    if not terminated:
        _, _, terminated, _, info = env.step(tool_call_text("finish"))
    assert terminated
    return info["task_reward"], info


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_collateral_damage_on_top_of_the_golden_run_scores_0_on_every_task(name: str) -> None:
    world = WORLDS[name]
    env = WorldEnv(world, model=faithful(world), cache=WorldCache(), metrics=WorldMetrics())
    swept = caught_by_frame = 0
    for task in env.tasks:
        frame = task_frame(world, task)
        attacks = ATTACKS[name](task, frame.expected, list(frame.touched))
        assert len(attacks) >= 3, task.id
        reward, info = _play(env, task, [])
        assert reward == 1.0 and env.state.frame_violations == [], task.id
        for label, calls in attacks.items():
            reward, info = _play(env, task, calls)
            if env.state.world == frame.expected:  # every call refused (nothing to drain): no damage done
                assert reward == 1.0, (task.id, label)
                continue
            assert reward == 0.0, (task.id, label)
            # what the task made and the attack undid fails the goal; anything else, the frame
            assert info["rewards"]["goal"] == 0.0 or env.state.frame_violations, (task.id, label)
            swept += 1
            caught_by_frame += info["rewards"]["goal"] == 1.0
    assert swept >= 3 * len(env.tasks) and caught_by_frame >= 2 * len(env.tasks)
    env.close()


def test_removing_the_parent_directory_names_every_entry_it_took() -> None:
    env = WorldEnv(fs.WORLD, model=faithful(fs.WORLD), cache=WorldCache(), metrics=WorldMetrics())
    env.reset(options={"task": "fs-rm-old-log"})
    _, _, terminated, _, info = env.step(_text([("rm", {"path": "/home/user/logs", "recursive": True})]))
    assert not terminated  # the goal holds, but not the frame: the episode goes on (it could be put right)
    _, _, terminated, _, info = env.step(tool_call_text("finish"))
    assert terminated and info["task_reward"] == 0.0 and info["success"] is False
    assert info["rewards"]["goal"] == 1.0 and info["rewards"]["frame"] == 0.0
    assert env.state.frame_violations == [
        "/files/~1home~1user~1logs (removed)",
        "/files/~1home~1user~1logs~1app.log (removed)",
    ]
    # and in the trajectory: the verifier's components and the state's last diff
    traj = rollout(
        "world-fs-v0",
        ScriptedPolicy(
            lambda c: _text([("rm", {"path": "/tmp", "recursive": True})]) if c.turn == 0 else tool_call_text("finish")
        ),
        tasks=["fs-rm-scratch"],
        env_kwargs={"model": faithful(fs.WORLD), "cache": WorldCache()},
    )[0]
    assert traj.task_reward == 0.0 and traj.transitions[-1].task_rewards["frame"] == 0.0
    diff = {"op": "replace", "path": "/frame_violations", "value": ["/files/~1tmp (removed)"]}
    assert diff in traj.transitions[-1].state_diff
    env.close()


def test_the_golden_changes_are_allowed_and_nothing_else() -> None:
    task = next(t for t in fs.WORLD.tasks if t.id == "fs-reset-logs")
    frame = task_frame(fs.WORLD, task)
    # rm -r then mkdir: the directory ends as it began, so only the two files are the task's
    assert frame.touched == ("/files/~1home~1user~1logs~1app.log", "/files/~1home~1user~1logs~1old.log")


def test_may_change_allows_a_second_right_outcome_and_is_checked(world: World) -> None:
    golden = [("add_note", {"title": "a", "text": "1"}, add("a", "1", 1))]
    strict = world_task("strict", "Add note a.", goal={"==": [{"val": ["notes", "a"]}, "1"]}, golden=golden)
    loose = world_task(
        "loose", "Add note a.", goal={"==": [{"val": ["notes", "a"]}, "1"]}, golden=golden, may_change=["/notes/*"]
    )
    extra = {"notes": {"a": "1", "b": "2"}, "count": 1}
    assert task_frame(world, strict).violations(extra) == ["/notes/b (added)"]
    assert task_frame(world, loose).violations(extra) == []
    # within what the golden run touched anything goes (the goal says what it must hold)
    assert task_frame(world, strict).violations({"notes": {"a": "1"}, "count": 7}) == []
    assert "may_change" not in strict.payload  # tasks written before it keep their payloads
    for bad in (["/notes/{title}"], ["notes"], ["/notes/~2"], [""]):
        broken = world_task("bad", "x", goal={"==": [{"val": ["notes", "a"]}, "1"]}, golden=golden, may_change=bad)
        with pytest.raises(ValueError, match="may_change"):
            task_frame(world, broken)


def test_a_frame_compares_json_values_strictly_and_reports_a_bounded_list() -> None:
    assert [p.shown for p in changed_paths({"a": True, "b": [1, 2]}, {"a": 1, "b": [1, 2, 3]})] == ["/a", "/b/2"]
    assert changed_paths({"a": 1}, {"a": 1.0}) == []
    task = next(t for t in fs.WORLD.tasks if t.id == "fs-rm-scratch")
    frame = task_frame(fs.WORLD, task)
    wiped = {"files": {}}
    found = frame.violations(wiped, limit=3)
    assert len(found) == 4 and found[-1].startswith("... and ")
    # a key that looks like a wildcard is a literal path: touching "/tmp/*" allows no other file
    empty = {"kind": "file", "content": ""}
    star = world_task(
        "star",
        "x",
        goal={"==": [{"val": ["files", "/tmp/*", "kind"]}, "file"]},
        golden=[("touch", {"path": "/tmp/*"}, respond("", {"op": "add", "path": "/files/~1tmp~1*", "value": empty}))],
    )
    star_frame = task_frame(fs.WORLD, star)
    more = {"files": {**star_frame.expected["files"], "/tmp/x": empty}}
    assert star_frame.violations(more) == ["/files/~1tmp~1x (added)"]


def test_a_task_without_golden_actions_is_refused_at_reset(world: World) -> None:
    env = WorldEnv(world, cache=WorldCache(), metrics=WorldMetrics())
    task = Task(id="nogold", prompt="x", payload={"goal": {"==": [1, 1]}})
    with pytest.raises(ValueError, match="no golden actions"):
        env.reset(options={"task": task})
    env.close()


SPEC = """
name: notes
instructions: Keep the user's notes.
state_schema:
  type: object
  required: [notes]
  properties:
    notes: {type: object, additionalProperties: {type: string}}
initial_state: {notes: {}}
tools:
  - name: add_note
    description: Add a note.
    arguments: {type: object, properties: {title: {type: string}, text: {type: string}}, required: [title, text]}
    writes: ["/notes/{title}"]
tasks:
  - id: one
    prompt: Add a note 'todo' saying 'buy milk'; tidy the other notes as you like.
    goal: {"==": [{val: [notes, todo]}, buy milk]}
    may_change: ["/notes/*"]
    golden:
      - tool: add_note
        arguments: {title: todo, text: buy milk}
        response: {observation: saved, state_patch: [{op: add, path: /notes/todo, value: buy milk}]}
"""


def test_a_spec_task_declares_may_change_too() -> None:
    world = load_spec({**yaml.safe_load(SPEC)})
    (task,) = world.tasks
    assert task.payload["may_change"] == ["/notes/*"]
    assert task_frame(world, task).violations({"notes": {"todo": "buy milk", "x": "y"}}) == []
    broken = yaml.safe_load(SPEC)
    broken["tasks"][0]["may_change"] = ["/notes/{title}"]
    with pytest.raises(ValueError, match="names argument"):
        WorldEnv(load_spec(broken), cache=WorldCache(), metrics=WorldMetrics())
