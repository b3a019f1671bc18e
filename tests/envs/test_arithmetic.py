import json

import pytest

import agentenv
from agentenv import check_env, tool_call_text
from agentenv.envs.arithmetic import ArithmeticEnv, make_tasks
from tests.envs._oracle import oracle_plan


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_passes_check_env_with_the_oracles_actions(seed):
    check_env(agentenv.make("arithmetic-v0"), seed=seed, actions=oracle_plan("arithmetic-v0", seed))


def test_passes_check_env_with_default_actions():
    check_env(ArithmeticEnv())


def test_oracle_solves_every_task_at_every_difficulty():
    tasks = make_tasks(80, seed=9)
    trajs = agentenv.rollout(
        lambda: ArithmeticEnv(tasks), agentenv.spec("arithmetic-v0").make_oracle(), tasks=tasks.ids
    )
    assert all(t.success for t in trajs)
    turns = {d: {t.turns for t in trajs if t.task.metadata.difficulty == d} for d in range(4)}
    assert turns == {0: {2}, 1: {3}, 2: {4}, 3: {5}}  # d + 1 calculations, then submit


def test_task_generator_is_seeded_and_answers_are_right():
    assert make_tasks(20, seed=4).ids == make_tasks(20, seed=4).ids
    assert [t.prompt for t in make_tasks(20, seed=4)] != [t.prompt for t in make_tasks(20, seed=5)]
    for task in make_tasks(40, seed=4):
        expression = task.prompt.removeprefix("Compute ").removesuffix(".")
        assert eval(expression) == task.payload["answer"]


def test_progress_rewards_new_gold_steps_once():
    env = ArithmeticEnv(make_tasks(4, seed=0, difficulties=(1,)))
    env.reset(options={"task": env.tasks[0]})
    a, op, b, _value = env.task.payload["steps"][0]
    assert env.step(tool_call_text("calculate", a=a, op=op, b=b))[4]["rewards"]["progress"] == 0.1
    assert env.step(tool_call_text("calculate", a=a, op=op, b=b))[4]["rewards"]["progress"] == 0.0
    assert env.step(tool_call_text("calculate", a=10**13, op="+", b=1))[4]["error_kind"] == "format"


def test_progress_cannot_be_had_by_enumerating_values():
    # Paying for any result equal to a gold value paid calculate(0, "+", k), k = 1, 2, ...
    env = ArithmeticEnv(make_tasks(40, seed=0, difficulties=(3,)))
    for task in env.tasks:
        env.reset(options={"task": task})
        for turn in range(env.max_turns - 1):
            sweep = "\n".join(tool_call_text("calculate", a=0, op="+", b=16 * turn + i) for i in range(1, 17))
            assert env.step(sweep)[4]["rewards"]["progress"] == 0.0


def test_progress_pays_gold_steps_in_one_action_in_either_order_and_a_stray_call_cancels_one():
    task = next(t for t in make_tasks(40, seed=0, difficulties=(3,)) if t.payload["steps"][0][1] in "+*")
    (a, op, b, _), second = task.payload["steps"][0], task.payload["steps"][1]
    env = ArithmeticEnv([task])
    env.reset(options={"task": task})
    both = tool_call_text("calculate", a=b, op=op, b=a) + tool_call_text(
        "calculate", a=second[0], op=second[1], b=second[2]
    )
    assert env.step(both)[4]["rewards"]["progress"] == pytest.approx(0.2)
    third = task.payload["steps"][2]
    stray = tool_call_text("calculate", a=third[0], op=third[1], b=third[2]) + tool_call_text(
        "calculate", a=1, op="-", b=10**12
    )
    assert env.step(stray)[4]["rewards"]["progress"] == 0.0
    assert env.state.done_steps == [0, 1, 2]


def test_progress_matches_the_validated_operands():
    env = ArithmeticEnv(make_tasks(4, seed=0, difficulties=(1,)))
    env.reset(options={"task": env.tasks[0]})
    a, op, b, _ = env.task.payload["steps"][0]
    call = {"name": "calculate", "arguments": {"a": str(a), "op": op, "b": float(b)}}  # lax JSON: "3", 3.0
    assert env.step(f"<tool_call>{json.dumps(call)}</tool_call>")[4]["rewards"]["progress"] == 0.1


@pytest.mark.parametrize("difficulties", [2, "12", [1.5], [True], [99], []])
def test_a_bad_curriculum_slice_is_one_line_naming_difficulties(difficulties):
    with pytest.raises(agentenv.EnvArgumentError, match=r"^ArithmeticEnv: difficulties (must be a list|.* match no)"):
        agentenv.make("arithmetic-v0", difficulties=difficulties)
    assert {t.metadata.difficulty for t in ArithmeticEnv(difficulties=[2]).tasks} == {2}


def test_count_generates_more_tasks_that_extend_the_default_ones():
    import agentenv

    default, more = agentenv.make("arithmetic-v0"), agentenv.make("arithmetic-v0", count=1000, difficulties=[1, 2])
    assert len(more.tasks) == 500 and {t.metadata.difficulty for t in more.tasks} == {1, 2}
    assert all(more.tasks.get(t.id) == t for t in default.tasks if t.metadata.difficulty in (1, 2))
    for bad in (0, 10**6, True, "9"):
        with pytest.raises(agentenv.EnvArgumentError, match="count must be an int"):
            agentenv.make("arithmetic-v0", count=bad)
