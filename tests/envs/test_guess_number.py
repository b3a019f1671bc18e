import pytest

import agentenv
from agentenv import check_env, tool_call_text
from agentenv.envs.guess_number import GuessNumberEnv, make_tasks
from tests.envs._oracle import oracle_plan


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_passes_check_env_with_the_oracles_actions(seed):
    check_env(agentenv.make("guess-number-v0"), seed=seed, actions=oracle_plan("guess-number-v0", seed))


def test_passes_check_env_with_default_actions():
    check_env(GuessNumberEnv())


def test_oracle_solves_every_task_within_the_turn_budget():
    tasks = make_tasks(80, seed=3)
    trajs = agentenv.rollout(
        lambda: GuessNumberEnv(tasks), agentenv.spec("guess-number-v0").make_oracle(), tasks=tasks.ids
    )
    assert all(t.success for t in trajs)
    assert max(t.turns for t in trajs if t.task.metadata.difficulty == 3) <= 11


def test_feedback_progress_and_out_of_range_guesses():
    env = GuessNumberEnv(make_tasks(1, seed=0, difficulties=(0,)))
    env.reset(options={"task": env.tasks[0]})
    secret = env.task.payload["secret"]
    guess = 16 if secret != 16 else 1
    obs, _, _, _, info = env.step(tool_call_text("guess", number=guess))
    assert obs[0]["content"] == ("lower" if guess > secret else "higher")
    assert info["rewards"]["progress"] == pytest.approx(1 / 16)
    obs, _, _, _, info = env.step(tool_call_text("guess", number=99))
    assert "between 1 and 16" in obs[0]["content"] and info["error_kind"] == "tool"
    _, _, terminated, _, info = env.step(tool_call_text("guess", number=secret))
    assert terminated and info["success"] and info["task_reward"] == 1.0


def test_show_range_names_the_interval_left_in_the_feedback():
    env = GuessNumberEnv(make_tasks(4, difficulties=(0,)), show_range=True)
    task = next(t for t in env.tasks if t.payload["secret"] not in (8, 12))
    env.reset(seed=0, options={"task": task})
    obs, *_ = env.step(tool_call_text("guess", number=8))
    secret = task.payload["secret"]
    assert obs[0]["content"] == ("higher: 9..16" if secret > 8 else "lower: 1..7")


def test_the_opening_env_is_solved_by_binary_search_and_half_as_often_after_a_wasted_opening():
    from agentenv import rollout
    from agentenv.envs.guess_number import mixed_oracle, oracle

    tasks = list(agentenv.make("guess-number-opening-v0").tasks)
    make = lambda: agentenv.make("guess-number-opening-v0")  # noqa: E731
    clean = rollout(make, oracle(), tasks=tasks)
    mixed = rollout(make, mixed_oracle(), tasks=tasks)
    wasted = [t for t in mixed if '"number": 1}' in str(t.transitions[0].action)]
    assert sum(t.success for t in clean) / len(clean) > 0.9  # 15 of 16 secrets in 4 guesses
    assert 0.65 < len(wasted) / len(mixed) < 0.85  # the oracle's share of wasted openings
    assert 0.35 < sum(t.success for t in wasted) / len(wasted) < 0.65
    check_env(make())  # raises on any breach of the contract


@pytest.mark.parametrize("env_id", ["guess-number-v0", "guess-number-opening-v0"])
def test_one_action_cannot_sweep_the_range_with_many_guesses(env_id):
    # The budget is guesses: sixteen guess calls in one turn would find any secret of 1..16.
    env = agentenv.make(env_id)
    env.reset(seed=0, options={"task": next(t for t in env.tasks if t.payload["high"] == 16)})
    sweep = "\n".join(tool_call_text("guess", number=n) for n in range(1, 17))
    _, reward, terminated, _, info = env.step(sweep)
    assert not terminated and not info["success"]
    assert info["error_kind"] == "format" and "at most 1 tool call per turn" in info["error"]
    assert reward < 0 and env.state.widths == [16]  # no guess ran
    env.step(tool_call_text("guess", number=8))  # one guess a turn still works
    assert len(env.state.widths) == 2


@pytest.mark.parametrize("difficulties", [2, "12", [float("nan")], [99]])
def test_a_bad_curriculum_slice_is_one_line_naming_difficulties(difficulties):
    with pytest.raises(agentenv.EnvArgumentError, match=r"^GuessNumberEnv: difficulties (must be a list|.* match no)"):
        agentenv.make("guess-number-v0", difficulties=difficulties)
    assert {t.metadata.difficulty for t in GuessNumberEnv(difficulties=(0, 1)).tasks} == {0, 1}


def test_a_range_with_nothing_to_find_is_refused():
    from agentenv import Task
    from agentenv.miner import OracleValidator

    trivial = Task(id="t", prompt="I am thinking of an integer between 1 and 1.", payload={"high": 1, "secret": 1})
    with pytest.raises(ValueError, match="'high'"):
        GuessNumberEnv(tasks=[trivial])
    # A proposal is a task no env was made with: its first reset refuses it.
    validate = OracleValidator(GuessNumberEnv, agentenv.spec("guess-number-v0").make_oracle)
    assert "'high'" in validate(trivial)
    assert validate(trivial.model_copy(update={"payload": {"high": 2, "secret": 2}})) is None


def test_mutate_writes_the_prompt_of_its_new_payload():
    import numpy as np

    from agentenv import Task

    told = Task(id="p", prompt="The secret is 7. Guess a number from 1 to 16.", payload={"high": 16, "secret": 7})
    variant = GuessNumberEnv().mutate(told, np.random.default_rng(0))
    assert variant.payload["high"] == 16 and variant.prompt == make_tasks(1)[0].prompt
