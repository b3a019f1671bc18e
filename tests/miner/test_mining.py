"""Break points, resume tasks (snapshot restore in Env.reset), variants and their validation."""

import numpy as np
import pytest

import agentenv
from agentenv import ScriptedPolicy, Task, rollout, tool_call_text
from agentenv.core.task import MAX_ID_CHARS
from agentenv.envs.arithmetic import ArithmeticEnv
from agentenv.envs.guess_number import GuessNumberEnv
from agentenv.miner import OracleValidator, break_point, make_variant, resume_task
from agentenv.miner.breakpoints import state_digest
from tests.miner.helpers import step, traj

T = Task(id="t", prompt="p")


def test_break_point_first_error_then_first_negative_reward_then_last_turn():
    err = traj(T, transitions=[step(0, reward=-1), step(1, error="bad"), step(2, error="worse")])
    assert (break_point(err).turn, break_point(err).rule) == (1, "error")
    neg = traj(T, transitions=[step(0), step(1, reward=-0.1), step(2, reward=-1)])
    assert (break_point(neg).turn, break_point(neg).rule) == (1, "negative_reward")
    last = traj(T, transitions=[step(0), step(1, reward=0.5), step(2)])
    assert (break_point(last).turn, break_point(last).rule) == (2, "last_turn")
    assert break_point(traj(T, True, transitions=[step(0)])) is None
    assert break_point(traj(T, infra=True, transitions=[step(0, error="x")])) is None


def _wrong_then_guess():
    """Guesses 1 first (an error-free but useless turn), then an out-of-range guess (a tool error)."""
    return ScriptedPolicy.replay([tool_call_text("guess", number=1), tool_call_text("guess", number=10_000)])


def test_a_resume_task_restores_the_snapshot_and_the_episode_continues():
    task = GuessNumberEnv().tasks[1]
    [failed] = rollout(lambda: GuessNumberEnv(max_turns=3), _wrong_then_guess(), tasks=[task], keep_snapshots=True)
    point = break_point(failed)
    assert point.turn == 1 and point.rule == "error"
    resume, snap = resume_task(failed, point)
    assert (
        resume.id == f"{task.id}@t1.{state_digest(snap)}"
        and resume.payload == task.payload
        and "resume:1" in resume.metadata.tags
    )
    env = GuessNumberEnv(max_turns=3)
    obs, info = env.reset(seed=5, options={"task": resume, "snapshot": snap})
    assert info == {"task_id": resume.id, "turn": 1, "resumed_from_turn": 1}
    assert obs == failed.messages[: len(obs)] and [m["role"] for m in obs][-2:] == ["assistant", "tool"]
    assert env.state.widths == snap.state["widths"]
    # The oracle reads the conversation so far and finishes the search from there.
    [again] = rollout(
        lambda: GuessNumberEnv(max_turns=12),
        agentenv.spec("guess-number-v0").make_oracle(),
        tasks=[resume],
        resume_from=[snap],
    )
    assert again.success and again.task.id == resume.id and again.transitions[0].turn == 1
    assert again.messages[: len(obs)] == obs


def test_reset_from_a_snapshot_is_validated():
    env = GuessNumberEnv()
    env.reset(seed=0)
    snap = env.snapshot()
    other = Task(id="x", prompt="different", payload=snap.task.payload)
    with pytest.raises(ValueError, match="must keep its prompt and payload"):
        env.reset(options={"task": other, "snapshot": snap})
    with pytest.raises(ValueError, match="snapshot is of env"):
        ArithmeticEnv().reset(options={"snapshot": snap})
    with pytest.raises(TypeError, match="expected a Snapshot"):
        env.reset(options={"snapshot": 3})
    with pytest.raises(ValueError, match="supported: 'task', 'snapshot'"):
        env.reset(options={"snap": snap})


@pytest.mark.parametrize("env_cls, env_id", [(ArithmeticEnv, "arithmetic-v0"), (GuessNumberEnv, "guess-number-v0")])
def test_mutate_makes_valid_variants_of_the_same_difficulty(env_cls, env_id):
    env = env_cls()
    validate = OracleValidator(env_cls, agentenv.spec(env_id).make_oracle)
    for task in env.tasks[:8]:
        variant, why = make_variant(env, task, np.random.default_rng(1), validate)
        assert why is None and variant.id != task.id
        assert variant.metadata == task.metadata and variant.payload != task.payload


def test_validation_rejects_a_broken_variant():
    validate = OracleValidator(ArithmeticEnv, agentenv.spec("arithmetic-v0").make_oracle)
    task = ArithmeticEnv().tasks[5]
    assert validate(task) is None
    wrong_answer = task.model_copy(
        update={"id": "bad", "payload": {**task.payload, "answer": task.payload["answer"] + 1}}
    )
    assert "did not solve" in validate(wrong_answer)
    missing = task.model_copy(update={"id": "bad2", "payload": {"answer": 3}})
    assert validate(missing) is not None

    class Broken(GuessNumberEnv):
        def mutate(self, task, rng):
            return task.model_copy(update={"id": task.id + "~v", "payload": {"high": 16, "secret": 99}})

    guess = OracleValidator(GuessNumberEnv, agentenv.spec("guess-number-v0").make_oracle)
    variant, why = make_variant(Broken(), GuessNumberEnv().tasks[0], np.random.default_rng(0), guess)
    assert variant is None and "expected a secret in 1..16, got 99" in why  # its payload model refuses it

    class Same(GuessNumberEnv):  # a new id, the same task (a redrawn secret that came out the same)
        def mutate(self, task, rng):
            return task.model_copy(update={"id": task.id + "~v"})

    variant, why = make_variant(Same(), GuessNumberEnv().tasks[0], np.random.default_rng(0), guess)
    assert variant is None and "again under a new id" in why


def test_tasks_mined_from_a_task_with_the_longest_id_still_read_back():
    # Suffixed past 256 characters (ID@tK.HASH, ID~vN), they saved in a checkpoint that no
    # longer loaded, and their trajectories did not read back from their file.
    task = GuessNumberEnv().tasks[1].model_copy(update={"id": "x" * MAX_ID_CHARS})
    [failed] = rollout(lambda: GuessNumberEnv(max_turns=3), _wrong_then_guess(), tasks=[task], keep_snapshots=True)
    resume, _ = resume_task(failed, break_point(failed))
    assert Task.model_validate(resume.model_dump()) == resume and len(resume.id) == MAX_ID_CHARS
    longer = failed.model_copy(update={"task": task.model_copy(update={"id": "x" * 255 + "y"})})
    other, _ = resume_task(longer, break_point(longer))
    assert other.id != resume.id  # two long roots that share their start stay apart
    guess = OracleValidator(GuessNumberEnv, agentenv.spec("guess-number-v0").make_oracle)
    variant, why = make_variant(GuessNumberEnv(), task, np.random.default_rng(0), guess)
    assert variant is None and "invalid task" in why
