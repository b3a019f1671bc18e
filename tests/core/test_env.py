import json

import gymnasium
import numpy as np
import pytest

import agentenv
from agentenv import Env, EnvStateError, State, Task, ToolCall, tool, tool_call_text
from tests.toy_envs import CounterEnv, CounterState

ADD1 = tool_call_text("add", amount=1)
SUBMIT = tool_call_text("submit")


def test_reset_returns_system_prompt_with_tools_and_task(counter):
    obs, info = counter.reset(seed=0, options={"task": "t0"})
    assert [m["role"] for m in obs] == ["system", "user"]
    assert '"name": "add"' in obs[0]["content"] and "<tool_call>" in obs[0]["content"]
    assert obs[1]["content"] == "Reach 2."
    assert info == {"task_id": "t0", "turn": 0}
    assert counter.observation_space.contains(obs)


def test_seeded_reset_is_deterministic():
    picks = [CounterEnv().reset(seed=7)[1]["task_id"] for _ in range(3)]
    assert len(set(picks)) == 1
    assert len({CounterEnv().reset(seed=s)[1]["task_id"] for s in range(20)}) > 1


def test_reset_by_task_object_and_by_id(counter):
    task = Task(id="custom", prompt="Reach 1.", payload={"target": 1})
    assert counter.reset(options={"task": task})[1]["task_id"] == "custom"
    assert counter.reset(options={"task": "t3"})[1]["task_id"] == "t3"
    with pytest.raises(KeyError, match="Did you mean 't3'"):
        counter.reset(options={"task": "t33"})
    with pytest.raises(ValueError, match="unknown reset option"):
        counter.reset(options={"tsk": "t3"})


def test_a_solved_episode_terminates_with_task_reward(counter):
    counter.reset(options={"task": "t0"})
    obs, reward, terminated, truncated, info = counter.step(ADD1)
    assert obs == [{"role": "tool", "tool_call_id": "call_0_0", "name": "add", "content": "1"}]
    assert (terminated, truncated, info["failure"], info["success"]) == (False, False, None, None)
    assert info["rewards"] == {"format": 0.0, "progress": 1.0} and reward == 0.5
    counter.step(ADD1)
    _, reward, terminated, truncated, info = counter.step(SUBMIT)
    assert (terminated, truncated) == (True, False)
    assert info["task_reward"] == 1.0 and info["success"] is True and info["failure"] == "none"
    assert info["rewards"] == {"format": 0.0, "progress": 0.0, "task": 1.0} and reward == 1.0
    last = counter.transitions[-1]
    assert last.rewards == {"format": 0.0, "progress": 0.0} and last.task_rewards == {"task": 1.0}
    assert all(t.task_rewards == {} for t in counter.transitions[:-1])


def test_wrong_submission_is_a_policy_failure(counter):
    counter.reset(options={"task": "t0"})
    *_, info = counter.step(SUBMIT)
    assert info["failure"] == "policy" and info["success"] is False and info["task_reward"] == 0.0


def test_running_out_of_turns_truncates(counter):
    counter.reset(options={"task": "t0"})
    for _ in range(4):
        assert counter.step(ADD1)[3] is False
    _, _, terminated, truncated, info = counter.step(ADD1)
    assert (terminated, truncated, info["failure"]) == (False, True, "truncated")


BAD_ACTIONS = {
    "empty": "",
    "plain text": "I think the answer is 4",
    "bad json": "<tool_call>{not json}</tool_call>",
    "no name": '<tool_call>{"arguments": {}}</tool_call>',
    "unknown tool": tool_call_text("multiply", x=2),
    "missing arg": tool_call_text("add"),
    "wrong type": tool_call_text("add", amount="lots"),
    "extra arg": tool_call_text("add", amount=1, colour="red"),
    "arguments not an object": '{"name": "add", "arguments": [1]}',
    "oversized": "x" * 40_000,
    "binary garbage": "\x00\x01\udcff\ufffe",
    "not text": 42,
    "none": None,
    "broken structured call": {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "add", "arguments": "{"}}],
    },
}


@pytest.mark.parametrize("action", BAD_ACTIONS.values(), ids=BAD_ACTIONS.keys())
def test_bad_actions_are_error_observations_with_a_format_penalty(counter, action):
    counter.reset(options={"task": "t0"})
    obs, reward, terminated, truncated, info = counter.step(action)
    assert obs and obs[0]["content"].startswith("Error:")
    assert info["error_kind"] == "format" and info["rewards"]["format"] == -0.1
    assert reward == pytest.approx(-0.1)
    assert (terminated, truncated) == (False, False)
    assert counter.state.count == 0


def test_error_messages_name_the_problem(counter):
    counter.reset(options={"task": "t0"})
    assert "missing argument 'amount'" in counter.step(tool_call_text("add"))[0][0]["content"]
    assert "argument 'amount'" in counter.step(tool_call_text("add", amount="x"))[0][0]["content"]
    msg = counter.step(tool_call_text("ad", amount=1))[0][0]["content"]
    assert "unknown tool 'ad'" in msg and "Did you mean 'add'" in msg


def test_structured_call_errors_answer_each_call_id(counter):
    counter.reset(options={"task": "t0"})
    obs = counter.step(BAD_ACTIONS["broken structured call"])[0]
    assert obs[0]["role"] == "tool" and obs[0]["tool_call_id"] == "c9"


def test_repeated_invalid_actions_end_the_episode_as_format_failure(counter):
    counter.reset(options={"task": "t0"})
    counter.step("nope")
    counter.step(ADD1)  # a valid action resets the streak
    for _ in range(2):
        assert counter.step("nope")[2] is False
    _, _, terminated, truncated, info = counter.step("nope")
    assert (terminated, truncated, info["failure"]) == (True, False, "format")


def test_tool_error_is_shown_to_the_agent_without_format_penalty(counter):
    counter.reset(options={"task": "t0"})
    obs, _, terminated, _, info = counter.step(tool_call_text("add", amount=13))
    assert obs[0]["content"] == "Error: 13 is unlucky"
    assert info["error_kind"] == "tool" and info["rewards"]["format"] == 0.0 and not terminated


@pytest.mark.parametrize("first", [tool_call_text("add", amount=13), ADD1], ids=["tool-error-first", "valid-first"])
def test_one_invalid_call_makes_the_action_a_format_error_whatever_ran_before_it(counter, first):
    counter.reset(options={"task": "t0"})
    action = (
        first + tool_call_text("no_such_tool") + '<tool_call>{"name": "add", "arguments": {"bogus": 1}}</tool_call>'
    )
    for _ in range(3):
        *_, terminated, _, info = counter.step(action)
        assert info["error_kind"] == "format" and info["rewards"]["format"] == -counter.format_penalty
        assert "unknown tool 'no_such_tool'" in info["error"]
    assert terminated and info["failure"] == "format"  # the streak of invalid actions ends it


class Settling(CounterEnv):
    """Pays progress for each add and takes back, at the end, what the verifier did not confirm."""

    def closing_rewards(self, task_rewards):
        return {"progress": -2.0 * (1.0 - task_rewards["task"]), "bonus": 0.25}


def test_closing_rewards_join_the_last_steps_step_channel_after_verify():
    env = Settling()
    env.reset(options={"task": "t1"})  # target 3
    env.step(ADD1)
    _, reward, terminated, _, info = env.step(tool_call_text("add", amount=1) + SUBMIT)
    assert terminated and info["task_reward"] == 0.0
    # add's progress (1.0) and the closing -2.0 add up; the weights apply as to any step reward
    assert info["rewards"] == {"format": 0.0, "progress": -1.0, "bonus": 0.25, "task": 0.0}
    assert env.transitions[-1].rewards == {"format": 0.0, "progress": -1.0, "bonus": 0.25}
    assert reward == pytest.approx(0.5 * -1.0 + 0.25)
    env.reset(options={"task": "t0"})  # target 2: solved, nothing taken back
    env.step(ADD1)
    *_, info = env.step(ADD1 + SUBMIT)
    assert info["rewards"]["progress"] == 1.0 and info["task_reward"] == 1.0


def test_closing_rewards_are_not_asked_for_an_infra_end(counter):
    env = Settling()
    env.reset(options={"task": "t0"})
    *_, info = env.step(tool_call_text("add", amount=666))
    assert info["failure"] == "infra" and "bonus" not in info["rewards"]


def test_infra_failure_truncates_and_is_not_scored(counter):
    counter.reset(options={"task": "t0"})
    _, _, terminated, truncated, info = counter.step(tool_call_text("add", amount=666))
    assert (terminated, truncated, info["failure"], info["success"]) == (False, True, "infra", None)
    assert "task" not in info["rewards"]
    with pytest.raises(EnvStateError):
        counter.step(ADD1)


def test_a_verifier_that_fails_for_infrastructure_reasons_is_an_infra_end_and_says_so():
    class LostBackend(CounterEnv):
        def verify(self, task):
            raise agentenv.InfraError("the database is gone")

    env = LostBackend()
    env.reset(options={"task": "t0"})
    _, _, terminated, truncated, info = env.step(tool_call_text("submit"))
    assert (terminated, truncated, info["failure"], info["success"]) == (False, True, "infra", None)
    assert info["error_kind"] == "infra" and info["error"] == "the database is gone"
    assert env.transitions[-1].error_kind == "infra" and "task" not in info["rewards"]


def test_structured_and_multiple_calls(counter):
    counter.reset(options={"task": "t2"})
    structured = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "add", "arguments": '{"amount": 2}'}},
            {"id": "b", "type": "function", "function": {"name": "add", "arguments": {"amount": 1}}},
        ],
    }
    obs, *_ = counter.step(structured)
    assert [(m["tool_call_id"], m["content"]) for m in obs] == [("a", "2"), ("b", "3")]
    obs, *_ = counter.step(ToolCall(name="add", arguments={"amount": 1}, id="z"))
    assert obs[0]["content"] == "4"
    obs, *_ = counter.step(
        {"content": "", "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": "{}"}}]}
    )
    assert counter.messages[-2]["tool_calls"][0]["id"] == obs[0]["tool_call_id"] == "call_2_0"
    obs, *_ = counter.step(ADD1 + "\nand\n" + tool_call_text("add", amount=-1))
    assert [m["content"] for m in obs] == ["5", "4"]
    assert structured["tool_calls"][0] == {
        "id": "a",
        "type": "function",
        "function": {"name": "add", "arguments": '{"amount": 2}'},
    }
    assert counter.messages[-3]["role"] == "assistant"


def test_transitions_record_each_step(counter):
    counter.reset(options={"task": "t0"})
    counter.step(tool_call_text("add", amount=2, note="hi"))
    counter.step("garbage")
    first, second = counter.transitions
    assert first.turn == 0 and first.calls == [ToolCall(name="add", arguments={"amount": 2, "note": "hi"})]
    assert first.state_diff == [
        {"op": "replace", "path": "/count", "value": 2},
        {"op": "replace", "path": "/log", "value": ["hi"]},
    ]
    assert first.rewards == {"format": 0.0, "progress": 1.0} and first.duration_s > 0
    assert second.error_kind == "format" and second.state_diff == [] and second.error


def test_snapshot_restore_replays_exactly(counter):
    counter.reset(seed=3, options={"task": "t4"})
    counter.step(tool_call_text("add", amount=2, note="a"))
    blob = counter.snapshot().model_dump_json()
    later = [counter.step(a) for a in (tool_call_text("add", amount=3), "junk", SUBMIT)]
    state_later = counter.state.model_dump()
    conversation = counter.restore(blob)
    assert conversation == counter.messages and len(conversation) == 4
    assert counter.turn == 1 and counter.state.count == 2
    again = [counter.step(a) for a in (tool_call_text("add", amount=3), "junk", SUBMIT)]
    assert again == later and counter.state.model_dump() == state_later


def test_snapshot_restores_the_rng():
    class Dice(CounterEnv):
        def initial_state(self, task):
            return CounterState(count=int(self.np_random.integers(1000)))

    env = Dice()
    env.reset(seed=1, options={"task": "t0"})
    snap = env.snapshot()
    draws = env.np_random.integers(1000, size=5)
    env.restore(snap)
    assert np.array_equal(env.np_random.integers(1000, size=5), draws)


def test_restore_rejects_a_snapshot_of_another_env(counter):
    counter.reset(options={"task": "t0"})
    other = agentenv.make("arithmetic-v0")
    other.reset(seed=0)
    with pytest.raises(ValueError, match="cannot restore"):
        counter.restore(other.snapshot())


@pytest.mark.parametrize("how", ["restore", "reset"])
def test_a_restored_episode_reads_its_own_tasks_payload(how: str):
    # An env that had read another task's typed payload kept it: the resumed episode
    # (the failure miner's) was verified against that task's secret.
    env = agentenv.make("guess-number-v0")
    first, second = list(env.default_tasks())[:2]
    assert first.payload != second.payload
    env.reset(options={"task": first.id})
    snap = env.snapshot()
    env.reset(options={"task": second.id})
    assert env.payload.secret == second.payload["secret"]
    if how == "restore":
        env.restore(snap)
    else:
        env.reset(options={"snapshot": snap})
    assert env.payload.secret == first.payload["secret"]


@pytest.mark.parametrize(
    "rng",
    [{"bit_generator": "seed"}, {"bit_generator": "PCG64", "state": "x"}, {}],
    ids=["a function", "bad state", "none"],
)
def test_an_edited_snapshot_rng_is_refused_and_calls_nothing(counter, rng):
    counter.reset(seed=1, options={"task": "t0"})
    blob = {**counter.snapshot().model_dump(mode="json"), "rng": rng}
    np.random.seed(7)
    expected = np.random.random()
    np.random.seed(7)
    with pytest.raises(ValueError, match="snapshot rng"):
        counter.restore(blob)
    assert np.random.random() == expected  # numpy's global generator untouched


def test_a_restore_whose_outside_world_fails_leaves_no_episode():
    class Fragile(CounterEnv):
        def restore_external(self, data):
            raise ValueError("the saved database is damaged")

    env = Fragile()
    env.reset(options={"task": "t0"})
    snap = env.snapshot()
    env.reset(options={"task": "t1"})
    with pytest.raises(ValueError, match="damaged"):
        env.restore(snap)
    with pytest.raises(EnvStateError):
        env.step(ADD1)


def test_lifecycle_errors():
    env = CounterEnv()
    with pytest.raises(EnvStateError, match="before reset"):
        env.step(ADD1)
    with pytest.raises(EnvStateError):
        env.snapshot()
    env.reset(options={"task": "t0"})
    env.step(SUBMIT)
    with pytest.raises(EnvStateError, match="ended"):
        env.step(ADD1)
    env.close()
    env.close()
    with pytest.raises(EnvStateError, match="closed"):
        env.reset()
    with pytest.raises(EnvStateError, match="closed"):
        env.step(ADD1)


def test_context_manager_closes():
    closed = []

    class Closing(CounterEnv):
        def on_close(self):
            closed.append(True)

    with Closing() as env:
        env.reset()
    env.close()
    assert closed == [True]


@pytest.mark.parametrize("method", ["reset", "step", "snapshot", "restore", "close"])
def test_the_loop_is_final(method):
    with pytest.raises(TypeError, match=f"{method}\\(\\) is final"):
        type("Bad", (Env,), {method: lambda self, *a, **k: None})


@pytest.mark.parametrize("name", ["verify", "is_done", "state", "tools", "messages", "render", "tool_schemas"])
def test_a_tool_method_cannot_replace_what_env_defines(name):
    # A `verify` tool became the verifier (a policy that did nothing scored 1.0), a
    # `tools` tool broke every call; check_env passed both.
    def method(self, x: int = 0) -> str:
        """A tool."""
        return "ok"

    with pytest.raises(TypeError, match=f"Bad.{name}\\(\\) is a tool and would replace Env.{name}"):
        type("Bad", (Env,), {name: tool(method)})
    type("Fine", (Env,), {"check": tool(name=name)(method)})  # the model may see the name


def test_two_methods_of_one_class_cannot_be_the_same_tool():
    def one(self) -> str:
        """One."""
        return "1"

    with pytest.raises(TypeError, match="methods 'a' and 'b' are both tool 'go'"):
        type("Bad", (Env,), {"a": tool(name="go")(one), "b": tool(name="go")(one)})


async def _async_tool(self, n: int) -> str:
    """Add."""
    return "added"


def _generator_tool(self, n: int):
    """Add."""
    yield "added"


def _positional_tool(self, n: int, /) -> str:
    """Add."""
    return "added"


def _model_config_tool(self, model_config: int) -> str:
    """Add."""
    return "added"


@pytest.mark.parametrize(
    ("method", "message"),
    [
        (_async_tool, "async or generator method would never run"),
        (_generator_tool, "async or generator method would never run"),
        (_positional_tool, "'n' is positional-only"),
        (staticmethod(_positional_tool), "marks a plain method"),
        # pydantic took it as the arguments' config: gone from the schema, every call failed
        (_model_config_tool, "'model_config' is a name pydantic reserves"),
    ],
    ids=["async", "generator", "positional-only", "staticmethod", "model_config"],
)
def test_a_tool_method_the_env_cannot_call_is_refused_when_the_class_is_made(method, message):
    # An async tool returned a coroutine without running, and the call counted as a success.
    with pytest.raises(TypeError, match=message):
        type("Bad", (Env,), {"add": tool(method)})


def test_an_argument_validator_that_raises_is_a_format_error_never_a_crash():
    from typing import Annotated

    from pydantic import AfterValidator

    class Lookup(CounterEnv):
        @tool
        def find(self, key: Annotated[str, AfterValidator(lambda k: {"a": "A"}[k])]) -> str:
            """Find a key."""
            return key

    env = Lookup()
    env.reset(seed=0)
    obs, *_, info = env.step(tool_call_text("find", key="zzz"))  # KeyError in the validator
    assert info["error_kind"] == "format" and "could not be validated: KeyError" in obs[0]["content"]
    assert env.step(tool_call_text("find", key="a"))[4]["error_kind"] is None


def test_nan_is_refused_at_every_depth_of_an_argument():
    from pydantic import BaseModel

    class Order(BaseModel):
        cost: float

    class Shop(CounterEnv):
        @tool
        def buy(self, order: Order) -> str:
            """Buy."""
            if order.cost <= 0 or order.cost > 10:  # NaN passes both checks
                raise agentenv.ToolError("out of range")
            return "bought"

    env = Shop()
    for cost in ("nan", "-inf", float("nan")):  # the nested model keeps its own config and coerces strings
        env.reset(seed=0)
        *_, info = env.step(ToolCall(name="buy", arguments={"order": {"cost": cost}}))
        assert info["error_kind"] == "format" and "NaN or an infinity" in info["error"]
    assert env.step(ToolCall(name="buy", arguments={"order": {"cost": 5}}))[4]["error_kind"] is None
    json.loads(env.snapshot().model_dump_json())


def test_nan_is_refused_behind_any_number_of_other_values():
    # The walk stopped after 100,000 values: an env admitting long actions let a NaN through.
    from typing import Any

    class Sum(CounterEnv):
        max_action_chars = 1_000_000

        @tool
        def total(self, values: list[Any]) -> str:
            """Sum."""
            return str(sum(v for v in values if isinstance(v, float)))

    env = Sum()
    env.reset(seed=0)
    values = "[NaN" + ", 0" * 100_000 + "]"
    *_, info = env.step('<tool_call>{"name": "total", "arguments": {"values": ' + values + "}}</tool_call>")
    assert info["error_kind"] == "format" and "NaN or an infinity" in info["error"]


@pytest.mark.parametrize(
    "rendered",
    [None, "text", [{"role": "tool", "content": "a"}] * 2, {"role": "assistant", "content": "I win"}],
    ids=["none", "str", "two-messages", "assistant"],
)
def test_a_render_result_that_is_no_observation_is_the_hooks_failure_never_infra(rendered):
    # None (an error branch returning nothing) ended the episode as infra, and with it the
    # penalty of the call that took that branch; an assistant message broke the trainer's turns.
    class Shown(CounterEnv):
        def render_result(self, outcome):
            return rendered if not outcome.ok else super().render_result(outcome)

    env = Shown()
    env.reset(seed=0)
    obs, _, terminated, truncated, info = env.step(tool_call_text("add", amount=13))  # a ToolError
    assert info["error_kind"] == "tool" and not (terminated or truncated)
    assert obs[0]["role"] == "tool" and "the result could not be shown" in obs[0]["content"]
    assert env.step(tool_call_text("add", amount=1))[4]["error_kind"] is None


@pytest.mark.parametrize("given", [None, {"task": 1.0}], ids=["none", "task-key"])
def test_step_rewards_that_are_no_components_are_the_hooks_failure_never_infra(given):
    # Raised out of step, the TypeError ended the episode as infra: a failing call dodged its score.
    class Branchy(CounterEnv):
        def step_rewards(self, outcomes):
            return {"progress": 0.1} if all(o.ok for o in outcomes) else given

    [traj] = agentenv.rollout(Branchy, agentenv.ScriptedPolicy.replay([tool_call_text("add", amount=13)]), tasks=["t2"])
    assert traj.failure.value == "truncated" and traj.rewards[0] == 0.0


def test_tool_schema_comes_from_signature_and_docstring():
    fn = CounterEnv.tools["add"].schema["function"]
    assert fn["name"] == "add" and fn["description"] == "Add to the counter."
    assert fn["parameters"] == {
        "type": "object",
        "properties": {
            "amount": {"type": "integer", "description": "How much to add; may be negative."},
            "note": {"type": "string", "description": "A note kept in the log.", "default": ""},
        },
        "required": ["amount"],
        "additionalProperties": False,
    }
    assert CounterEnv.tools["submit"].terminal and not CounterEnv.tools["add"].terminal
    arith = agentenv.make("arithmetic-v0").tool_schemas()
    assert arith[0]["function"]["parameters"]["properties"]["op"]["enum"] == ["+", "-", "*"]


def test_tools_need_annotations_and_valid_names():
    def untyped(self, x):
        return x

    with pytest.raises(TypeError, match="parameter 'x' needs a type annotation"):
        type("Bad", (Env,), {"t": tool(untyped)})
    with pytest.raises(TypeError, match="tool name must match"):
        type("Bad", (Env,), {"t": tool(name="has space")(lambda self: 1)})


def test_reward_weights_and_reward_sum(counter):
    counter.reset(options={"task": "t0"})
    _, reward, *_, info = counter.step(ADD1)
    assert reward == sum(counter.reward_weights.get(k, 1.0) * v for k, v in info["rewards"].items())


def test_spaces_accept_any_unicode():
    env = CounterEnv()
    assert env.observation_space.contains([{"role": "user", "content": "héllo 你好 🙂 \x00"}])
    assert not env.observation_space.contains([{"role": "robot", "content": "x"}])
    assert env.action_space.contains("ünïcödé") and env.action_space.contains(ToolCall(name="add"))
    assert env.observation_space.contains(env.observation_space.sample())
    assert env.action_space.contains(env.action_space.sample())


def test_gymnasium_make_works():
    env = gymnasium.make("agentenv/arithmetic-v0")
    env.reset(seed=0)
    _obs, _reward, terminated, _truncated, info = env.step("hello")
    assert info["error_kind"] == "format" and not terminated
    env.close()


def test_render_ansi():
    env = CounterEnv(render_mode="ansi")
    env.reset(options={"task": "t0"})
    assert "[user] Reach 2." in env.render()
    with pytest.raises(ValueError, match="render_mode"):
        CounterEnv(render_mode="human")


def test_subclass_state_is_typed_and_json_round_trips(counter):
    counter.reset(options={"task": "t0"})
    counter.step(tool_call_text("add", amount=2, note="é"))
    snap = json.loads(counter.snapshot().model_dump_json())
    assert snap["state"] == {"count": 2, "log": ["é"]}
    assert isinstance(counter.state, State)


def test_tool_prompt_modes():
    json_prompt = CounterEnv().reset(options={"task": "t0"})[0][0]["content"]
    compact = CounterEnv(tool_prompt="compact").reset(options={"task": "t0"})[0][0]["content"]
    bare = CounterEnv(tool_prompt="none").reset(options={"task": "t0"})[0][0]["content"]
    assert '"parameters"' in json_prompt and "add(amount: integer, note: string)" in compact
    assert "submit()" in compact and "<tool_call>" in compact
    assert bare == CounterEnv.instructions and len(compact) < len(json_prompt)
    with pytest.raises(ValueError, match="tool_prompt"):
        CounterEnv(tool_prompt="yaml")


# -- authoring says each thing once ------------------------------------------------------


def test_the_state_model_is_read_from_the_type_argument():
    class Tally(agentenv.State):
        n: int = 0

    class TallyEnv(agentenv.Env[Tally]):
        @agentenv.tool
        def bump(self) -> int:
            """Add one."""
            self.state.n += 1
            return self.state.n

    class Subclass(TallyEnv):
        pass

    for cls in (TallyEnv, Subclass):
        env = cls()
        env.reset(seed=0)
        assert cls.state_type is Tally and isinstance(env.state, Tally)


def test_an_env_without_tasks_gets_one_default_task():
    class Bare(agentenv.Env):
        @agentenv.tool(terminal=True)
        def done(self) -> str:
            """Finish."""
            return "ok"

    env = Bare()
    obs, info = env.reset(seed=0)
    assert info["task_id"] == "default" and env.tasks.ids == ["default"]
    assert obs[-1] == {"role": "user", "content": "Begin."}


def test_a_typed_payload_is_validated_once_per_task_and_read_as_a_model():
    from pydantic import BaseModel

    class Target(BaseModel):
        target: int

    class Reach(CounterEnv):
        payload_type = Target

        def verify(self, task):
            return float(self.state.count == self.payload.target)

    env = Reach([Task(id="t", prompt="Reach 2.", payload={"target": 2})])
    env.reset(seed=0)
    assert env.payload == Target(target=2)
    env.step(tool_call_text("add", amount=2))
    *_, info = env.step(tool_call_text("submit"))
    assert info["success"] is True
    with pytest.raises(ValueError, match=r"task 'bad': payload field 'target'"):
        Reach([Task(id="bad", prompt="", payload={"target": "many"})])


def test_every_hook_is_documented_where_authors_look_and_named_by_the_final_method_error():
    from pathlib import Path

    import agentenv.core.env as env_module

    docs = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    for hook in env_module.HOOKS:
        assert hook in env_module.__doc__, hook
        assert f"`{hook}" in docs, hook
        assert callable(getattr(agentenv.Env, hook))
    with pytest.raises(TypeError, match=", ".join(env_module.HOOKS)):

        class Broken(CounterEnv):
            def step(self, action):  # final
                return super().step(action)


def test_lean_mode_plays_the_same_episode_without_the_diff_or_the_observation_copies():
    actions = [
        tool_call_text("add", amount=1),
        "no call here",
        tool_call_text("add", amount=1),
        tool_call_text("submit"),
    ]
    results = []
    for lean in (False, True):
        env = CounterEnv(lean=lean)
        env.reset(seed=0, options={"task": "t0"})
        steps = [env.step(a) for a in actions]
        results.append((steps, env.messages, env.transitions))
    (full_steps, full_messages, full_transitions), (lean_steps, lean_messages, lean_transitions) = results
    assert full_steps == lean_steps and full_messages == lean_messages
    assert [t.rewards for t in full_transitions] == [t.rewards for t in lean_transitions]
    assert any(t.state_diff for t in full_transitions) and not any(t.state_diff for t in lean_transitions)
    assert all(t.observation == [] for t in lean_transitions)


def test_a_golden_policy_replays_each_tasks_own_tool_calls():
    def task(i: int) -> Task:
        actions = [{"name": "add", "arguments": {"amount": 1, "note": "one"}}] * (i + 2)
        return Task(
            id=f"g{i}",
            prompt="Reach it.",
            payload={"target": i + 2, "moves": [*actions, {"name": "submit", "arguments": {}}]},
        )

    tasks = agentenv.TaskSet(task(i) for i in range(3))
    trajs = agentenv.rollout(lambda: CounterEnv(tasks), agentenv.ScriptedPolicy.golden("moves"), n=3, seed=0)
    assert [t.success for t in trajs] == [True] * 3
    assert all(len(t.transitions) == t.task.payload["target"] + 1 for t in trajs)  # its own calls, then submit
    # A task without its moves fails its own episode, not the batch it was asked in.
    broken = Task(id="broken", prompt="Reach it.", payload={"target": 2})
    trajs = agentenv.rollout(
        lambda: CounterEnv(agentenv.TaskSet([*tasks, broken])),
        agentenv.ScriptedPolicy.golden("moves"),
        tasks=["g0", "broken", "g1"],
    )
    assert [t.failure.value for t in trajs] == ["none", "infra", "none"]
    assert "payload['moves']" in (trajs[1].error or "")


def test_max_calls_per_action_refuses_a_longer_action_before_any_call_runs():
    class TwoCalls(CounterEnv):
        max_calls_per_action = 2

    env = TwoCalls()
    env.reset(seed=0)
    three = "\n".join(tool_call_text("add", amount=1) for _ in range(3))
    _, _, _, _, info = env.step(three)
    assert info["error_kind"] == "format" and info["error"] == "at most 2 tool calls per turn here, got 3"
    assert env.state.count == 0
    env.step("\n".join(tool_call_text("add", amount=1) for _ in range(2)))
    assert env.state.count == 2


def test_max_calls_per_action_below_one_is_refused_at_construction():
    class NoCall(CounterEnv):
        max_calls_per_action = 0

    with pytest.raises(ValueError, match="max_calls_per_action must be None or >= 1, got 0"):
        NoCall()


def test_calls_after_a_terminal_call_in_one_action_are_not_run() -> None:
    """Submitting, then doing the work in the same action: the work would reach what
    verify reads after the answer was given (a guess, then the read that backs it)."""
    env = CounterEnv()
    env.reset(seed=0, options={"task": "t0"})  # target 2
    _, _, terminated, _, info = env.step(tool_call_text("submit") + tool_call_text("add", amount=2))
    assert terminated and env.state.count == 0 and info["success"] is False
    assert info["error_kind"] == "tool" and "not run: 'submit' ended the episode" in info["error"]
    replies = [m for m in env.messages if m["role"] == "tool"]
    assert replies[0]["content"] == "ok" and "not run" in replies[1]["content"]
    env.reset(seed=0, options={"task": "t0"})  # the work before the submit still counts
    *_, info = env.step(tool_call_text("add", amount=2) + tool_call_text("submit"))
    assert info["success"] is True and info["error"] is None


def test_nan_is_refused_where_an_argument_type_would_let_it_in():
    # Arguments whose types refuse NaN skip the walk; these types do not refuse it.
    import math
    from typing import Annotated

    from pydantic import AfterValidator, Field

    class Loose(CounterEnv):
        @tool
        def scale(self, factor: Annotated[float, Field(allow_inf_nan=True)]) -> str:
            """Scale by a factor that allows NaN by its own field."""
            return "scaled"

        @tool
        def halve(self, n: Annotated[int, AfterValidator(lambda n: math.inf if n == 7 else n / 2)]) -> str:
            """An int argument whose validator returns a float."""
            return "halved"

        @tool
        def shift(self, by: float = math.inf) -> str:
            """An infinite default."""
            return "shifted"

    env = Loose()
    for call in (ToolCall("scale", {"factor": "nan"}), ToolCall("halve", {"n": 7}), ToolCall("shift")):
        env.reset(seed=0)
        *_, info = env.step(call)
        assert info["error_kind"] == "format" and "NaN or an infinity" in info["error"], call
    env.reset(seed=0)
    assert env.step(ToolCall("scale", {"factor": 2.0}))[4]["error_kind"] is None
    assert env.step(ToolCall("shift", {"by": 1.0}))[4]["error_kind"] is None


def test_an_argument_model_with_its_own_validators_runs_them():
    # A spec's model may be more than its fields (the tools env's routes): its model
    # validator and model_post_init still run before the call.
    from pydantic import BaseModel, ConfigDict, model_validator

    from agentenv.core.tools import spec_from_model

    class Span(BaseModel):
        model_config = ConfigDict(extra="forbid")
        lo: int
        hi: int

        @model_validator(mode="after")
        def ordered(self) -> "Span":
            if self.lo > self.hi:
                raise ValueError("lo must not exceed hi")
            return self

    class Spans(CounterEnv):
        def __init__(self) -> None:
            super().__init__()
            self.tools = {**self.tools, "span": spec_from_model("span", "A span.", Span, method_name="width")}  # type: ignore[misc]

        def width(self, lo: int, hi: int) -> int:
            return hi - lo

    env = Spans()
    env.reset(seed=0)
    obs, *_, info = env.step(tool_call_text("span", lo=3, hi=1))
    assert info["error_kind"] == "format" and "lo must not exceed hi" in obs[0]["content"]
    obs, *_, info = env.step(tool_call_text("span", lo="1", hi=3))
    assert info["error_kind"] is None and obs[0]["content"] == "2"


def test_a_recorded_call_is_a_plain_frozen_tool_call():
    import dataclasses

    env = CounterEnv()
    env.reset(seed=0)
    env.step("<tool_call>\n" + tool_call_text("add", amount=1)[11:-12] + "\n</tool_call>")  # a Qwen template's newlines
    [call] = env.transitions[0].calls
    assert type(call) is ToolCall and call == ToolCall("add", {"amount": 1}) and call.id is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.name = "submit"  # type: ignore[misc]
