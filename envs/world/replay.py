"""Golden runs: a task's golden actions played on canonical state, without any model.

`golden_run` applies each golden step (a code tool's code, an emulated tool's golden
response) with the same validation the env uses, and `check_task` requires of a
task: its setup applies, the invariants hold at its start, its goal does not, every
golden step is accepted, the goal holds after the last one, and its ``may_change``
patterns parse. `task_frame` is the task's frame (`agentenv.envs.world.frame`): the
state the golden run ends in, and what it changed. `checked_tasks` is a
world's tasks, each checked once: the env and the scripted model read them through it,
and the proposer admits drafted worlds with it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agentenv import Task, TaskSet, ToolError
from agentenv.envs.world.frame import Frame, changed_paths, frame_patterns
from agentenv.envs.world.keys import state_hash
from agentenv.envs.world.paths import bind_all
from agentenv.envs.world.predicates import PredicateError, rule_predicate
from agentenv.envs.world.validate import Rejected, run_code, validate_change
from agentenv.envs.world.world import Response, World, task_payload

__all__ = ["GoldenRecord", "check_task", "checked_tasks", "golden_run", "task_frame"]

_checked: weakref.WeakKeyDictionary[World, TaskSet] = weakref.WeakKeyDictionary()
"""The task set of each world that passed `check_task` (a world's tasks change only by `add_task`)."""


@dataclass(frozen=True, slots=True)
class GoldenRecord:
    tool: str
    arguments: dict[str, Any]
    """Canonical (validated by the tool's argument model)."""
    response: Response | None
    state_hash: str
    """Of the state the step starts from."""
    after: dict[str, Any]


def golden_run(world: World, task: Task) -> list[GoldenRecord]:
    """Each golden step of ``task`` and the state it leads to; ValueError naming the step
    that does not apply."""
    payload = task_payload(task)
    state = world.task_start(task)
    records = []
    for i, step in enumerate(payload.golden):
        where = f"task {task.id!r}, golden step {i} ({step.tool})"
        tool = world.tools.get(step.tool)
        if tool is None:
            raise ValueError(f"{where}: the world has no tool {step.tool!r}")
        try:
            args_model = tool.args_model.model_validate(step.arguments)
        except ValidationError as e:
            raise ValueError(f"{where}: invalid arguments: {e.errors()[0]['msg']}") from None
        args = args_model.model_dump(mode="json")
        before = state
        try:
            if tool.emulated:
                if step.response is None:
                    raise ValueError(f"{where}: an emulated tool's golden step needs a response")
                writes = bind_all(tool.writes, args)
                accepted = validate_change(
                    step.response.observation, step.response.state_patch, world, tool, writes, before, args
                )
            else:
                if step.response is not None:
                    raise ValueError(f"{where}: a code tool's golden step has no response (the code answers)")
                accepted = run_code(world, tool, before, args_model)
        except Rejected as e:
            raise ValueError(f"{where}: the golden response is refused: {e}") from None
        except ToolError as e:
            raise ValueError(f"{where}: the code tool refused the call: {e}") from None
        state = accepted.state
        records.append(GoldenRecord(step.tool, args, step.response, state_hash(before), state))
    return records


def check_task(world: World, task: Task) -> None:
    """ValueError unless ``task`` is sound (see the module docstring)."""
    payload = task_payload(task)
    try:
        goal = rule_predicate(f"{task.id}:goal", payload.goal)
        subgoals = [rule_predicate(f"{task.id}:{s.name}", s.rule) for s in payload.subgoals]
    except PredicateError as e:
        raise ValueError(f"task {task.id!r}: {e}") from None
    start = world.task_start(task)
    broken = world.check_invariants(start)
    if broken is not None:
        raise ValueError(f"task {task.id!r}: at the start, {broken}")
    if goal.test(start):
        raise ValueError(f"task {task.id!r}: the goal already holds at the start")
    if not payload.golden:
        raise ValueError(f"task {task.id!r}: no golden actions")
    records = golden_run(world, task)
    task_frame(world, task, records)  # its may_change patterns parse
    end = records[-1].after
    if not goal.test(end):
        raise ValueError(f"task {task.id!r}: the golden actions do not reach the goal")
    for sub in subgoals:
        if not sub.test(end):
            raise ValueError(f"task {task.id!r}: sub-goal {sub.name!r} does not hold after the golden actions")


def task_frame(world: World, task: Task, records: list[GoldenRecord] | None = None) -> Frame:
    """The frame of ``task``: the end state of its golden run (``records``, or run now), the
    paths where it differs from the task's start, and the task's ``may_change`` patterns.
    ValueError for a task with no golden actions (nothing would say what it may change) or
    whose golden run does not apply."""
    payload = task_payload(task)
    if not payload.golden:
        raise ValueError(
            f"task {task.id!r}: no golden actions, and a world task's frame (what it may change) comes from them"
        )
    if records is None:
        records = golden_run(world, task)
    expected = records[-1].after
    touched = changed_paths(world.task_start(task), expected)
    extra = frame_patterns(payload.may_change, f"task {task.id!r}")
    return Frame(expected, tuple(p.shown for p in touched), (*touched, *extra))


def checked_tasks(world: World) -> TaskSet:
    """``world.tasks``, each checked by `check_task` the first time they are read here;
    ValueError naming the first unsound task."""
    tasks = world.tasks
    if _checked.get(world) is not tasks:
        for task in tasks:
            check_task(world, task)
        _checked[world] = tasks
    return tasks
