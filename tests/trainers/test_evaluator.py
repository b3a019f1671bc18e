"""Held-out evaluation on its own (`agentenv.trainers.evaluator`): the split of an env's
tasks, the held-out episodes a policy plays, and the figures made of them."""

from __future__ import annotations

import pytest

from agentenv import Task, TaskSet, Trajectory
from agentenv.core.types import Failure
from agentenv.trainers import GRPOConfig
from agentenv.trainers.distributed import DataParallel
from agentenv.trainers.evaluator import Evaluator, HeldOutSplit, success_rate
from agentenv.trainers.policy import TransformersPolicy
from agentenv.trainers.task_sampler import EnvSource
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer


def _copies(contents: int, ids_each: int) -> TaskSet:
    return TaskSet(Task(id=f"t{i}-{k}", prompt=f"Task {i}.") for i in range(contents) for k in range(ids_each))


def test_the_split_holds_out_whole_contents_and_says_so(capsys):
    split = HeldOutSplit(GRPOConfig(test_fraction=0.25))
    train, test = split("copies", _copies(12, 5))
    assert test and len(train) + len(test) == 60 and test.shared_content(train) == 0
    assert split.twins == {"copies": 0}
    assert f"copies: {len(test)} of 60 tasks held out, split by content" in capsys.readouterr().out


def test_an_env_of_one_content_is_split_by_id_and_its_twins_are_counted(capsys):
    split = HeldOutSplit(GRPOConfig())
    train, test = split("one", _copies(1, 20))
    assert train and test and split.twins == {"one": len(test)}
    out = capsys.readouterr().out
    assert "split by id (its 1 distinct contents cannot fill both sides)" in out
    assert f"{len(test)} held-out tasks share content with training" in out


def test_the_split_is_a_function_of_the_split_seed():
    tasks = _copies(12, 5)
    first = HeldOutSplit(GRPOConfig(seed=1, split_seed=7), announce=False)("e", tasks)[1]
    second = HeldOutSplit(GRPOConfig(seed=2, split_seed=7), announce=False)("e", tasks)[1]
    other = HeldOutSplit(GRPOConfig(seed=1, split_seed=8), announce=False)("e", tasks)[1]
    assert [t.id for t in first] == [t.id for t in second] != [t.id for t in other]


def test_without_evaluation_nothing_is_held_out(capsys):
    train, test = HeldOutSplit(GRPOConfig(eval_episodes=0))("e", _copies(4, 2))
    assert len(train) == 8 and not test and capsys.readouterr().out == ""


def _episode(task_id: str, failure: Failure, error: str | None = None) -> Trajectory:
    task = Task(id=task_id, prompt="p")
    success = failure is Failure.NONE
    return Trajectory(task=task, seed=0, messages=[], transitions=[], success=success, failure=failure, error=error)


def test_the_figures_leave_the_envs_infra_out_but_count_a_policy_that_did_not_answer():
    trajs = [
        _episode("solved", Failure.NONE),
        _episode("unanswered", Failure.INFRA, "policy: the server answered 500"),
        _episode("broken", Failure.INFRA, "the sandbox died"),
    ]
    evaluator = Evaluator(GRPOConfig(), [], None, DataParallel(), "thread", {"a": 2, "b": 1})  # type: ignore[arg-type]
    metrics = evaluator.metrics(trajs)
    assert metrics["eval/success_rate"] == success_rate(trajs) == 0.5
    assert (metrics["eval/episodes"], metrics["eval/infra"], metrics["eval/content_twins"]) == (2, 1, 3)
    assert metrics["eval/success_low"] <= 0.5 <= metrics["eval/success_high"]


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _evaluator(tokenizer, weights: tuple[float, float], episodes: int) -> Evaluator:
    config = GRPOConfig(eval_episodes=episodes, max_new_tokens=6, seed=3)
    tasks = SayEnv().tasks
    sources = [
        EnvSource(f"say{i}", SayEnv, w, tasks, tasks.filter(lambda t: t.id.startswith("t")), {})
        for i, w in enumerate(weights)
    ]
    policy = TransformersPolicy(
        tiny_model(tokenizer), tokenizer, max_new_tokens=6, max_context_tokens=256, temperature=1.0, seed=3
    )
    return Evaluator(config, sources, policy, DataParallel(), "thread", {})


def test_every_evaluation_plays_the_same_held_out_episodes_each_envs_share_by_weight(tokenizer):
    evaluator = _evaluator(tokenizer, (3.0, 1.0), episodes=8)
    first, second = evaluator.episodes(), evaluator.episodes()
    assert [t.task.id for t in first][:6] == ["t0", "t1", "t2", "t3", "t4", "t5"]
    assert [t.seed for t in first] == [0, 1, 2, 3, 4, 5, 0, 1]  # 6 of the first env's, 2 of the second's

    def tokens(trajs):
        return [[g.token_ids for g in t.generations if g is not None] for t in trajs]

    assert tokens(first) == tokens(second)  # the held-out policy is seeded alike each time
    assert len(evaluator.episodes(4)) == 4
