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


def test_progress_rewards_new_gold_intermediates_once():
    env = ArithmeticEnv(make_tasks(4, seed=0, difficulties=(1,)))
    env.reset(options={"task": env.tasks[0]})
    a, op, b, _value = env.task.payload["steps"][0]
    assert env.step(tool_call_text("calculate", a=a, op=op, b=b))[4]["rewards"]["progress"] == 0.1
    assert env.step(tool_call_text("calculate", a=a, op=op, b=b))[4]["rewards"]["progress"] == 0.0
    assert env.step(tool_call_text("calculate", a=10**13, op="+", b=1))[4]["error_kind"] == "format"
