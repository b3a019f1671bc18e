"""Answer mode: a reply without a tool call is the final answer, scored by the verifier."""

from __future__ import annotations

import pytest

from agentenv import (
    Env,
    ParseError,
    ScriptedPolicy,
    State,
    Task,
    TaskSet,
    ToolCall,
    check_env,
    rollout,
    tool,
    tool_call_text,
)


class Sum(Env[State]):
    """Single-turn, text answers, no tools."""

    answer_mode = True
    max_turns = 1
    instructions = "Answer with the number only."

    def default_tasks(self) -> TaskSet:
        return TaskSet(
            Task(id=f"s{a}-{b}", prompt=f"What is {a} + {b}?", payload={"answer": a + b})
            for a in range(3)
            for b in range(3)
        )

    def verify(self, task: Task) -> float:
        return float((self.answer or "").strip() == str(task.payload["answer"]))


class SumWithScratchpad(Sum):
    """Multi-turn: a tool to call first, then a text answer."""

    max_turns = 3

    @tool
    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: One.
            b: The other.
        """
        return a + b


def test_a_text_reply_is_the_answer_and_the_verifier_scores_it():
    env = Sum()
    env.reset(seed=0, options={"task": "s1-2"})
    obs, reward, terminated, truncated, info = env.step("3")
    assert (obs, terminated, truncated, info["success"], info["error_kind"]) == ([], True, False, True, None)
    assert env.answer == "3" and reward == 1.0
    env.reset(seed=0, options={"task": "s1-2"})
    *_, info = env.step({"role": "assistant", "content": " 4 "})  # an OpenAI message's content too
    assert info["success"] is False and info["failure"] == "policy" and env.answer == " 4 "


def test_json_text_is_an_answer_but_tool_call_markup_is_still_parsed():
    env = SumWithScratchpad()
    env.reset(seed=0, options={"task": "s2-2"})
    obs, *_, info = env.step(tool_call_text("add", a=2, b=2))
    assert obs[0]["content"] == "4" and env.answer is None
    obs, *_, info = env.step("<tool_call>{broken</tool_call>")
    assert info["error_kind"] == "format"  # malformed markup is not an answer
    *_, terminated, _, info = env.step('{"answer": 4}')
    assert terminated and env.answer == '{"answer": 4}' and not info["success"]


@pytest.mark.parametrize("action", [ToolCall(name="add", arguments={"a": 1, "b": 1}), "3"])
def test_without_answer_mode_a_text_reply_is_a_format_error(action):
    env = SumWithScratchpad()
    env.answer_mode = False
    env.reset(seed=0, options={"task": "s1-1"})
    *_, info = env.step(action)
    assert info["error_kind"] == ("format" if action == "3" else None)


def test_a_restored_ended_episode_keeps_its_answer():
    env = Sum()
    env.reset(seed=0, options={"task": "s0-2"})
    env.step("2")
    snapshot = env.snapshot()
    env.reset(seed=0, options={"task": "s0-1"})
    assert env.answer is None
    env.restore(snapshot)
    assert env.answer == "2"


@pytest.mark.parametrize("env_type", [Sum, SumWithScratchpad])
def test_check_env_accepts_a_text_answer_env(env_type):
    check_env(env_type(), actions=lambda env: [str(env.task.payload["answer"])])


class SumWithRetries(Sum):
    """Multi-turn answers: a wrong one gets feedback (never the answer) and another try."""

    max_turns = 3

    def on_answer(self, answer: str) -> str | None:
        if self.verify(self.task) == 1.0 or self.turn + 1 >= self.max_turns:
            return None
        return "Incorrect, try again."


def test_on_answer_feedback_keeps_the_episode_going_until_an_answer_ends_it():
    env = SumWithRetries()
    env.reset(seed=0, options={"task": "s1-2"})
    obs, reward, terminated, truncated, info = env.step("4")
    assert obs == [{"role": "user", "content": "Incorrect, try again."}]
    assert (terminated, truncated, info["failure"], info["error_kind"], env.answer) == (False, False, None, None, "4")
    obs, reward, terminated, truncated, info = env.step("3")
    assert (obs, terminated, info["success"], reward) == ([], True, True, 1.0)
    env.reset(seed=0, options={"task": "s1-2"})
    results = [env.step("5") for _ in range(3)]
    assert [r[2] for r in results] == [False, False, True] and results[-1][4]["failure"] == "policy"


def test_a_snapshot_keeps_an_answer_that_got_feedback():
    # Restore read the answer from the last message of an ended episode only: mid-episode it
    # was lost, and a resumed episode that then ran out of turns was verified on no answer.
    env = SumWithRetries()
    env.reset(seed=0, options={"task": "s1-2"})
    env.step("4")
    restored = SumWithRetries()
    restored.restore(env.snapshot().model_dump_json())
    assert restored.answer == "4"


class BrokenFeedback(Sum):
    max_turns = 3

    def on_answer(self, answer: str) -> str | None:
        return {"no": "t a str"}[answer]  # a KeyError on anything but "no"


def test_an_answer_that_makes_on_answer_raise_ends_the_episode_scored_by_the_verifier_not_infra():
    env = BrokenFeedback()
    env.reset(seed=0, options={"task": "s1-2"})
    *_, terminated, truncated, info = env.step("3")
    assert terminated and not truncated and info["success"] is True and info["failure"] == "none"
    assert "on_answer failed: KeyError" in info["error"] and info["error_kind"] is None


class FalseFeedback(Sum):
    max_turns = 3

    def on_answer(self, answer: str) -> str | None:
        return answer == "4" and "Incorrect, try again."  # False, not None, for any other answer


def test_an_answer_that_makes_on_answer_return_no_str_ends_the_episode_scored_by_the_verifier_not_infra():
    # The TypeError left step, and the rollout counted the episode as infra: never scored.
    [traj] = rollout(FalseFeedback, ScriptedPolicy.replay(["5"]), tasks=["s1-2"])
    assert traj.failure.value == "policy" and traj.task_reward == 0.0
    env = FalseFeedback()
    env.reset(seed=0, options={"task": "s1-2"})
    *_, terminated, _, info = env.step("3")
    assert terminated and info["success"] is True and "must return a str or None, got bool" in info["error"]


def test_check_env_accepts_an_env_with_answer_feedback():
    check_env(SumWithRetries(), actions=["0", "1", "2"])


class OneAnswerOnly(Sum):
    """Refuses a reply holding two answers, as the adapters do (`agentenv.envs.answers`)."""

    max_turns = 2

    def on_answer(self, answer: str) -> str | None:
        if len(answer.split()) > 1:
            raise ParseError("more than one answer: give exactly one")
        return None


def test_on_answer_may_refuse_a_reply_as_a_format_error_and_the_agent_answers_again():
    env = OneAnswerOnly()
    env.reset(seed=0, options={"task": "s1-2"})
    obs, reward, terminated, truncated, info = env.step("3 4")
    assert obs == [{"role": "user", "content": "Error: more than one answer: give exactly one"}]
    assert (terminated, truncated, info["error_kind"], reward) == (False, False, "format", -env.format_penalty)
    assert env.answer is None  # a refused reply is no answer
    *_, terminated, _, info = env.step("3")
    assert terminated and info["success"] is True and env.answer == "3"
    env.reset(seed=0, options={"task": "s1-2"})
    results = [env.step("3 3") for _ in range(2)]  # refused until the turns run out: unsolved
    assert results[-1][3] and results[-1][4]["failure"] == "truncated" and results[-1][4]["task_reward"] == 0.0
