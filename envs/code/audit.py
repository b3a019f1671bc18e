"""Checking a code task set before training on it: each task's reference passes its
hidden tests, and no trivial solution does.

    from agentenv.envs.code import audit_tasks, from_dataset
    report = audit_tasks(from_dataset(split))   # one verifier run per task (Docker: batched)
    print(report)                                # the tasks that fail a check, and why
    tasks = report.sound_tasks()                 # the same TaskSet without them

RL finds every task it can pass without solving it. Hidden tests that a function
returning a constant (None, 0, True, "", [] ...) or its first argument passes reward
nothing but that function, and a policy learns to write it; public benchmarks hold
such tests (a ``check`` that asserts only an empty input, or nothing). A task whose
reference fails is unsolvable as verified (a wrong expected value, a missing import)
and every group on it is wasted. `audit_tasks` runs, per task, the reference and each
of `DECOYS` (``def <entry point>(*args, **kwargs): return <decoy>``) against the
hidden tests, in the verifier sandboxes the env uses.

Left out: decoys that depend on the task (the visible tests' expected values, the
identity of a mutating function), and tests that pass on some decoy only in part
(the task reward is all or nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from agentenv import Task, TaskSet
from agentenv.envs.code.sandboxes import Backend, CodeSandboxes
from agentenv.envs.code.tasks import code_task
from agentenv.envs.code.verify import TestJob, TestReport

__all__ = ["DECOYS", "AuditReport", "TaskAudit", "audit_tasks"]

logger = logging.getLogger("agentenv.envs.code")

DECOYS = ("None", "0", "1", "-1", "True", "False", "''", "[]", "{}", "()", "args[0] if args else None")
"""What the trivial solutions return: constants of each common type, and the first argument."""


@dataclass(frozen=True)
class TaskAudit:
    """One task's checks."""

    task_id: str
    reference: Literal["passed", "failed", "none"]
    """How the task's reference solution fared on its hidden tests ("none": it has none)."""
    reference_error: str = ""
    """Why the reference failed: its first failing test, or why it did not load."""
    decoys_passed: tuple[str, ...] = ()
    """The `DECOYS` whose trivial solution passes every hidden test."""

    @property
    def sound(self) -> bool:
        return self.reference != "failed" and not self.decoys_passed

    def problems(self) -> list[str]:
        out = []
        if self.reference == "failed":
            out.append(f"its reference fails the hidden tests ({self.reference_error})")
        if self.decoys_passed:
            out.append("a trivial solution passes every hidden test: return " + ", return ".join(self.decoys_passed))
        return out


@dataclass
class AuditReport:
    tasks: TaskSet
    audits: list[TaskAudit] = field(default_factory=list)
    """One per task, in the task set's order."""

    def unsound(self) -> list[TaskAudit]:
        return [a for a in self.audits if not a.sound]

    def sound_tasks(self) -> TaskSet:
        """The task set without the tasks that failed a check."""
        bad = {a.task_id for a in self.unsound()}
        return TaskSet([t for t in self.tasks if t.id not in bad])

    def __str__(self) -> str:
        unsound, unreferenced = self.unsound(), sum(a.reference == "none" for a in self.audits)
        lines = [
            f"{len(self.audits)} tasks audited: {len(self.audits) - len(unsound)} sound, {len(unsound)} not"
            + (f" ({unreferenced} without a reference, checked against the decoys only)" if unreferenced else "")
        ]
        lines += [f"  {a.task_id}: " + "; ".join(a.problems()) for a in unsound]
        return "\n".join(lines)


def audit_tasks(
    tasks: TaskSet | Sequence[Task],
    *,
    sandboxes: CodeSandboxes | None = None,
    backend: Backend = "auto",
    progress: Callable[[int, int], None] | None = None,
) -> AuditReport:
    """Run each task's reference and `DECOYS` against its hidden tests (see the module
    docstring). ``sandboxes``: the pools to verify in (default: made for this call, on
    ``backend``, and closed after). ``progress(done, total)`` is called after each task;
    without it, progress is logged every 10 %."""
    task_set = tasks if isinstance(tasks, TaskSet) else TaskSet(list(tasks))
    owned = sandboxes is None
    pools = sandboxes if sandboxes is not None else CodeSandboxes(backend)
    report = AuditReport(task_set)
    total = len(task_set)
    try:
        for done, task in enumerate(task_set, start=1):
            report.audits.append(_audit(pools, task))
            if progress is not None:
                progress(done, total)
            elif done == total or done % max(1, total // 10) == 0:
                logger.info("audited %d of %d code tasks", done, total)
    finally:
        if owned:
            pools.close()
    return report


def _audit(sandboxes: CodeSandboxes, task: Task) -> TaskAudit:
    payload = code_task(task)

    def job(solution: str) -> TestJob:
        tests = tuple(payload.hidden_tests)
        return TestJob(solution, payload.entry_point, tests, payload.setup, payload.test_timeout_s)

    decoys = [f"def {payload.entry_point}(*args, **kwargs):\n    return {d}\n" for d in DECOYS]
    references = [payload.solution] if payload.solution is not None else []
    reports = sandboxes.verify_many([job(s) for s in references + decoys])
    reference: Literal["passed", "failed", "none"] = "none"
    error = ""
    if references:
        first = reports.pop(0)
        reference = "passed" if first.all_passed else "failed"
        error = "" if first.all_passed else _why(first)
    passed = tuple(d for d, r in zip(DECOYS, reports, strict=True) if r.all_passed)
    return TaskAudit(task.id, reference, error, passed)


def _why(report: TestReport) -> str:
    if report.error:
        return report.error[:300]
    failing = next(((i, o) for i, o in enumerate(report.outcomes) if not o.passed), None)
    return "no test ran" if failing is None else f"hidden test {failing[0] + 1}: {failing[1].detail}"[:300]
