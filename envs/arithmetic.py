"""Arithmetic: evaluate an integer expression one operation at a time.

The reference env for authoring: a `State`, two typed tools, a sub-goal step
reward, a verifier and a seeded task generator with difficulty levels.

Step reward ``progress``: 0.1 for each step of the gold evaluation (its operands and
operator; either order for ``+`` and ``*``) computed for the first time, less 0.1
for each other calculation in the same action, never below 0. Paying for any
result that equals a gold value paid ``calculate(0, "+", k)`` for k = 1, 2, ...
without reading the task.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from agentenv import CallOutcome, Env, EnvArgumentError, ScriptedPolicy, State, Task, TaskSet, tool, tool_call_text
from agentenv.core.task import curriculum_slice

OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
Operand = Annotated[int, Field(ge=-(10**12), le=10**12)]


class ArithmeticState(State):
    results: list[int] = []
    answer: int | None = None
    done_steps: list[int] = []
    """Indices of the gold steps computed so far (each pays once)."""


class ArithmeticEnv(Env[ArithmeticState]):
    max_turns = 8
    instructions = "Compute the expression. The calculator does one operation per call. Submit the final value."

    def __init__(
        self,
        tasks: TaskSet | None = None,
        *,
        difficulties: Sequence[int] | None = None,
        count: int | None = None,
        **kwargs,
    ) -> None:
        """``difficulties``: only the default tasks of these levels; ``count``: that many
        generated tasks instead of the default 400 (seed 0, levels in turn; a set of
        ``count`` tasks holds the smaller sets' tasks, with the same ids)."""
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 100_000):
            raise EnvArgumentError(f"{type(self).__name__}: count must be an int from 1 to 100000, got {count!r}")
        if tasks is None and (difficulties is not None or count is not None):
            tasks = _default_tasks() if count is None else _tasks_of(count)
            if difficulties is not None:  # a curriculum slice
                tasks = curriculum_slice(tasks, difficulties, env=type(self).__name__)
        super().__init__(tasks, **kwargs)
        self._gold_calls: list[bool] = []  # this step's calculations: was each a new gold step?

    def default_tasks(self) -> TaskSet:
        return _default_tasks()

    def initial_state(self, task: Task) -> ArithmeticState:
        self._gold_calls = []
        return ArithmeticState()

    @tool
    def calculate(self, a: Operand, op: Literal["+", "-", "*"], b: Operand) -> int:
        """Apply one operation to two integers.

        Args:
            a: The left operand.
            op: The operator.
            b: The right operand.
        """
        state, steps = self.state, self.task.payload["steps"]
        state.results.append(OPS[op](a, b))
        # Matched on the validated operands ("3" and 3.0 are 3 by then).
        index = next((i for i, s in enumerate(steps) if i not in state.done_steps and _same_step(s, a, op, b)), None)
        if index is not None:
            state.done_steps.append(index)
        self._gold_calls.append(index is not None)
        return state.results[-1]

    @tool(terminal=True)
    def submit(self, answer: int) -> str:
        """Submit the value of the whole expression; ends the episode.

        Args:
            answer: The final value.
        """
        self.state.answer = answer
        return "submitted"

    def step_rewards(self, outcomes: list[CallOutcome]) -> dict[str, float]:
        # Sub-goal: a step of the gold evaluation, done for the first time; any other
        # calculation in the action cancels one, so enumerating cannot pay.
        gold, self._gold_calls = self._gold_calls, []
        fresh = sum(gold)
        return {"progress": 0.1 * max(0, fresh - (len(gold) - fresh))}

    def verify(self, task: Task) -> float:
        return float(self.state.answer == task.payload["answer"])

    def mutate(self, task: Task, rng: np.random.Generator) -> Task | None:
        """A new expression with the same number of operations and operand range."""
        difficulty = task.metadata.difficulty
        return _task(f"{task.id}~v{int(rng.integers(1 << 30)):08x}", rng, difficulty)


def _same_step(step: list, a: int, op: str, b: int) -> bool:
    x, step_op, y = step[0], step[1], step[2]
    return op == step_op and ((a, b) == (x, y) or (op != "-" and (a, b) == (y, x)))


@functools.cache
def _default_tasks() -> TaskSet:
    return make_tasks(400, seed=0)  # made once per process: a TaskSet is immutable


@functools.cache
def _tasks_of(count: int) -> TaskSet:
    return make_tasks(count, seed=0)


def make_tasks(n: int, *, seed: int = 0, difficulties: tuple[int, ...] = (0, 1, 2, 3)) -> TaskSet:
    """``n`` expressions; difficulty d has d + 1 operations, operands up to 9 (20 from d = 2)."""
    rng = np.random.default_rng(seed)
    tasks = []
    for i in range(n):
        tasks.append(_task(f"arith-{seed}-{i}", rng, difficulties[i % len(difficulties)]))
    return TaskSet(tasks)


def _task(task_id: str, rng: np.random.Generator, d: int) -> Task:
    steps: list[list[int | str]] = []
    expr, value = _expression(rng, d + 1, 9 if d < 2 else 20, steps)
    return Task(
        id=task_id,
        prompt=f"Compute {expr}.",
        payload={"steps": steps, "intermediates": [s[-1] for s in steps], "answer": value},
        metadata={"family": "arithmetic", "difficulty": d, "tags": (f"ops:{d + 1}",)},
    )


def _expression(rng: np.random.Generator, n_ops: int, top: int, steps: list) -> tuple[str, int]:
    if n_ops == 0:
        value = int(rng.integers(1, top + 1))
        return str(value), value
    left_ops = int(rng.integers(0, n_ops))
    left, a = _expression(rng, left_ops, top, steps)
    right, b = _expression(rng, n_ops - 1 - left_ops, top, steps)
    op = str(rng.choice(list(OPS)))
    steps.append([a, op, b, OPS[op](a, b)])
    wrap = lambda s, k: f"({s})" if k else s  # noqa: E731
    return f"{wrap(left, left_ops)} {op} {wrap(right, n_ops - 1 - left_ops)}", OPS[op](a, b)


def oracle() -> ScriptedPolicy:
    """Follows the gold evaluation order, then submits what the calculator returned
    last: replaying it checks a task's steps and answer against the real calculator,
    so a task whose payload disagrees with itself is not solved (the failure miner
    validates variants this way)."""

    def act(conv) -> str:
        steps, k = conv.task.payload["steps"], conv.turn
        if k < len(steps):
            a, op, b, _ = steps[k]
            return tool_call_text("calculate", a=a, op=op, b=b)
        results = [m["content"] for m in conv.messages if m["role"] == "tool"]
        last = results[-1] if results else ""
        answer = int(last) if last.lstrip("-").isdigit() else conv.task.payload["answer"]
        return tool_call_text("submit", answer=answer)

    return ScriptedPolicy(act)
