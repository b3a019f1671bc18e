"""World specs: a YAML or JSON world loads into the same env with no Python, and a bad
spec fails with the field named (a proposer's draft is untrusted input)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import agentenv
from agentenv.envs.world import WorldCache, WorldEnv, WorldMetrics, load_spec, oracle
from agentenv.envs.world.replay import checked_tasks
from agentenv.envs.world.spec import SpecError, parse_spec

SPEC = """
name: notes
instructions: Keep the user's notes.
state_schema:
  type: object
  additionalProperties: false
  required: [notes]
  properties:
    notes: {type: object, additionalProperties: {type: string, maxLength: 100}}
initial_state: {notes: {}}
tools:
  - name: add_note
    description: Add a note under a title.
    arguments:
      type: object
      properties:
        title: {type: string, minLength: 1, maxLength: 40}
        text: {type: string, maxLength: 100}
      required: [title, text]
    writes: ["/notes/{title}"]
    postconditions:
      - name: saves_the_text
        rule: {or: [{"==": [{val: [after, notes, {var: args.title}]}, {var: args.text}]},
                    {"===": [{var: after}, {var: before}]}]}
invariants:
  - {name: at_most_three, rule: {"<=": [{length: {keys: {var: notes}}}, 3]}}
tasks:
  - id: notes-1
    prompt: Add a note 'todo' saying 'buy milk'.
    goal: {"==": [{val: [notes, todo]}, buy milk]}
    golden:
      - tool: add_note
        arguments: {title: todo, text: buy milk}
        response: {observation: saved, state_patch: [{op: add, path: /notes/todo, value: buy milk}]}
"""


def test_a_yaml_spec_runs_in_the_env_and_its_oracle_solves_it(tmp_path: Path) -> None:
    path = tmp_path / "notes.yaml"
    path.write_text(SPEC)
    trajs = agentenv.rollout(lambda: WorldEnv(str(path), cache=WorldCache(), metrics=WorldMetrics()), oracle(), n=1)
    assert trajs[0].success and trajs[0].task.id == "notes-1"


def test_the_json_form_loads_the_same_world(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text(json.dumps(yaml.safe_load(SPEC)))
    assert load_spec(path).fingerprint == parse_spec(SPEC).build().fingerprint


def test_spec_postconditions_and_invariants_bind(tmp_path: Path) -> None:
    world = parse_spec(SPEC).build()
    env = WorldEnv(
        world,
        model=_Reply(
            {"observation": "ok", "state_patch": [{"op": "add", "path": "/notes/todo", "value": "something else"}]}
        ),
        cache=WorldCache(),
        metrics=WorldMetrics(),
        max_attempts=1,
    )
    env.reset()
    *_, info = env.step(agentenv.tool_call_text("add_note", title="todo", text="buy milk"))
    assert info["error_kind"] == "tool" and "saves_the_text" in info["error"]


class _Reply:
    model_id = "fixed"

    def __init__(self, reply: dict) -> None:
        self.reply = json.dumps(reply)

    def propose(self, request: object) -> str:
        return self.reply


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda d: d.pop("instructions"), "instructions"),
        (lambda d: d["tools"][0].update(writes=["/notes/{nope}"]), "nope"),
        (lambda d: d["tools"][0]["arguments"]["properties"]["title"].update(oneOf=[]), "oneOf"),
        (lambda d: d["invariants"][0].update(rule={"bogus_op": []}), "invariants[0]"),
        (lambda d: d["state_schema"].update(type="nonsense"), "state_schema"),
        (lambda d: d.update(initial_state={"notes": {"a": 5}}), "initial state"),
        (lambda d: d["tools"][0].update(name="bad name!"), "tools.0.name"),
        (lambda d: d.update(surprise=1), "surprise"),
    ],
)
def test_a_bad_spec_fails_naming_the_field(change, where: str) -> None:
    data = yaml.safe_load(SPEC)
    change(data)
    with pytest.raises(SpecError, match=None) as err:
        parse_spec(yaml.safe_dump(data)).build()
    assert where in str(err.value)


def test_a_task_whose_golden_steps_miss_the_goal_is_refused() -> None:
    data = yaml.safe_load(SPEC)
    data["tasks"][0]["goal"] = {"==": [{"val": ["notes", "todo"]}, "buy eggs"]}
    world = parse_spec(data).build()
    with pytest.raises(ValueError, match="do not reach the goal"):
        checked_tasks(world)
    with pytest.raises(ValueError, match="do not reach the goal"):
        WorldEnv(world, cache=WorldCache(), metrics=WorldMetrics())


@pytest.mark.slow  # parses megabytes of hostile text
def test_hostile_spec_text_is_refused_cheaply() -> None:
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    with pytest.raises(SpecError, match="aliases"):
        parse_spec(laughs)
    with pytest.raises(SpecError, match="nested"):
        parse_spec('{"a": ' + "[" * 200 + "]" * 200 + "}")
    with pytest.raises(SpecError, match="nested"):
        parse_spec("a: " + "[" * 5000 + "]" * 5000)  # YAML, past the parser's own recursion
    with pytest.raises(SpecError, match="over"):
        parse_spec("name: x\n" + "#" * (5 << 20))
    with pytest.raises(SpecError, match="mapping"):
        parse_spec("- just a list")
