"""A question-answer env with reference answers (answer mode, single turn) for the RLPR tests."""

from __future__ import annotations

from agentenv import Env, State, Task, TaskSet

CAPITALS = {"France": "Paris", "Italy": "Rome", "Spain": "Madrid", "Peru": "Lima", "Chad": "Ndjamena"}


class CapitalQA(Env[State]):
    """Free-form answers with a reference each; the verifier is an exact match on the
    text after the last <answer>, which RLPR never reads."""

    answer_mode = True
    max_turns = 1
    instructions = "Think, then give the answer as <answer>...</answer>."

    def default_tasks(self) -> TaskSet:
        return TaskSet(
            Task(id=f"capital-{c.lower()}", prompt=f"What is the capital of {c}?", payload={"reference": city})
            for c, city in CAPITALS.items()
        )

    def verify(self, task: Task) -> float:
        answer = (self.answer or "").rsplit("<answer>", 1)[-1].split("</answer>", 1)[0]
        return float(answer.strip() == task.payload["reference"])


def qa_corpus() -> list[str]:
    return [f"What is the capital of {c}? <answer>{city}</answer>" for c, city in CAPITALS.items()] * 4
