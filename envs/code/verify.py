"""Running a solution against tests in a sandbox, and the verdict the host draws from it.

    report = run_tests(sandbox, solution=code, entry_point="f", tests=task_tests)
    report.passed, report.total, report.outcomes[0].detail

One ``run_python`` per call of `run_tests`, whatever the number of tests: the
program is `_harness.py` (trusted, holds the tests) which forks `_worker.py`
(untrusted, runs the solution) as a separate process. With the pipe helpers
(`agentenv.sandboxes._pipes`), `_codec.py` and `_batch.py` pasted with them, they make one
stdlib-only program (`PARTS`, in order): a run can import nothing of agentenv.
What makes the verdict unforgeable by the solution:

- the tests, a fresh random nonce and the solution go in on stdin, read by the
  harness only after the worker is forked, from a memory that never held them
  (see `_harness.py`), and the harness is non-dumpable before the worker exists,
  so the worker cannot reach them through frames, memory, descriptors or /proc;
- a call test's expected value never enters the sandbox: the worker's return
  value comes back encoded as plain data and the *host* compares it (`same`);
- a verdict counts only if the run exited 0, printed a ``done`` line with the
  nonce, and gave each test exactly one well-formed line: a solution that exits,
  kills the harness or prints look-alike lines produces no verdict, or a
  conflicting one, and so a failure; a malformed or oversized line is a failed
  verification, never an exception on the host;
- the exit code of the solution's process means nothing; a missing answer is a failure.

`run_batch` judges many jobs in one run, each with a worker of its own and the
sandbox made clean again between them (`_batch.py` says how, and what stops a
batch); `CodeSandboxes.verify` uses it for verifications that wait together.

Code tests (a public benchmark's ``check(candidate)``) hold their expected values
in the harness process, which the worker cannot reach (above); so both kinds run
the same way, a fork of a warm process, not a fresh interpreter. Mutation of
arguments and stateful objects cannot be tested: only plain values cross.
"""

from __future__ import annotations

import json
import reprlib
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from agentenv.envs.code._codec import decode, same
from agentenv.sandboxes import ExecResult, Sandbox, _pipes

__all__ = [
    "CallTest",
    "CodeTest",
    "TestCase",
    "TestJob",
    "TestOutcome",
    "TestReport",
    "run_batch",
    "run_job",
    "run_tests",
]

MARK = "@@agentenv-verdict"
LOAD_TIMEOUT_S = 5.0
TEST_TIMEOUT_S = 3.0
RUN_SLACK_S = 5.0  # interpreter start + the harness's own work, beyond the tests' time limits
DETAIL_CHARS = 300


def _encoded(value: Any) -> Any:
    """``value`` if `_codec.decode` reads it: a payload the host cannot decode would
    otherwise pass the task's validation and fail only when a solution is judged."""
    try:
        decode(value)
    except (ValueError, TypeError, RecursionError):
        raise ValueError(
            f"expected a value in the _codec encoding (a dict is {{'$d': [[key, value], ...]}}, a tuple "
            f"{{'$t': [...]}}; agentenv.envs.code._codec.encode writes them), got {reprlib.repr(value)}"
        ) from None
    return value


Encoded = Annotated[Any, AfterValidator(_encoded)]


class CallTest(BaseModel):
    """``entry_point(*args)`` must return ``expected`` (both in `_codec` encoding, checked here)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["call"] = "call"
    args: list[Encoded]
    expected: Encoded


class CodeTest(BaseModel):
    """Python code run with ``candidate`` bound to the solution; it fails by raising."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["code"] = "code"
    code: str = Field(min_length=1)


TestCase = Annotated[CallTest | CodeTest, Field(discriminator="kind")]


@dataclass(frozen=True, slots=True)
class TestOutcome:
    passed: bool
    detail: str = ""


@dataclass(slots=True)
class TestReport:
    """The verdict on one solution: per-test outcomes and whether it loaded at all."""

    outcomes: list[TestOutcome] = field(default_factory=list)
    loaded: bool = False
    error: str | None = None  # why the solution did not load, or why there is no verdict
    run: ExecResult | None = None

    @property
    def total(self) -> int:
        return len(self.outcomes)

    @property
    def passed(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.outcomes else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.outcomes) and all(o.passed for o in self.outcomes)


# The harness program, in order: each part may use the names of the parts before it
# (and imports them only under TYPE_CHECKING, for the type checker).
PARTS = (
    Path(_pipes.__file__),
    Path(__file__).with_name("_codec.py"),
    Path(__file__).with_name("_worker.py"),
    Path(__file__).with_name("_batch.py"),
    Path(__file__).with_name("_harness.py"),
)


def _program() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in PARTS)


PROGRAM = _program()


@dataclass(frozen=True)
class TestJob:
    """One solution and the tests to judge it on: what `run_tests` takes, as one value."""

    solution: str
    entry_point: str
    tests: tuple[CallTest | CodeTest, ...]
    setup: str = ""
    test_timeout_s: float = TEST_TIMEOUT_S

    @property
    def timeout_s(self) -> float:
        return LOAD_TIMEOUT_S + self.test_timeout_s * len(self.tests) + RUN_SLACK_S

    def wire(self) -> dict[str, Any]:
        return {
            "solution": self.solution,
            "entry_point": self.entry_point,
            "tests": [
                {"kind": "call", "args": t.args} if isinstance(t, CallTest) else {"kind": "code", "code": t.code}
                for t in self.tests
            ],
            "setup": self.setup,
            "load_timeout_s": LOAD_TIMEOUT_S,
            "test_timeout_s": self.test_timeout_s,
        }


def run_tests(
    sandbox: Sandbox,
    *,
    solution: str,
    entry_point: str,
    tests: list[CallTest | CodeTest],
    setup: str = "",
    test_timeout_s: float = TEST_TIMEOUT_S,
) -> TestReport:
    """Run ``tests`` against ``solution`` in ``sandbox`` (one run) and judge them on the host.

    Raises the sandbox's `SandboxInfraError` when the sandbox itself fails; any
    misbehaviour of the solution is a failed test, never an exception.
    """
    return run_job(sandbox, TestJob(solution, entry_point, tuple(tests), setup, test_timeout_s))


def run_job(sandbox: Sandbox, job: TestJob) -> TestReport:
    """`run_tests` for a `TestJob`."""
    nonce = secrets.token_hex(16)
    spec = {"nonce": nonce, "tasks": [job.wire()]}
    result = sandbox.run_python(PROGRAM, stdin="1\n" + json.dumps(spec), timeout_s=job.timeout_s)
    return judge(result, nonce, list(job.tests))


def run_batch(sandbox: Sandbox, jobs: list[TestJob], *, scratch: list[str]) -> list[TestReport | None]:
    """Judge many jobs in one run of ``sandbox``: one report per job, or None for a job
    the run did not finish (the batch was cut short): judge that one alone.

    Only for a sandbox whose run uid is its own (a Docker container): between tasks
    the harness kills every other process of its uid and empties ``scratch`` (the
    directories a run can write), as `_batch.py` explains. A task's code tests and
    setup run in the harness itself: batch a job that has them only with jobs of the
    identical tests and setup (`CodeSandboxes.verify` does).
    """
    if len(jobs) < 2:
        raise ValueError("a batch needs two jobs or more; run_job judges one")
    nonce = secrets.token_hex(16)
    spec = {"nonce": nonce, "tasks": [job.wire() for job in jobs], "scratch": scratch}
    timeout_s = sum(job.timeout_s for job in jobs)
    result = sandbox.run_python(PROGRAM, stdin=f"{len(jobs)}\n" + json.dumps(spec), timeout_s=timeout_s)
    records, conflict = _records(result.stdout, nonce)
    if conflict:  # something besides the harness wrote verdict lines: trust none of them
        return [None] * len(jobs)
    return [
        _report(records, t, list(job.tests)) if (t, "end") in records and (t, "load") in records else None
        for t, job in enumerate(jobs)
    ]


def judge(result: ExecResult, nonce: str, tests: list[CallTest | CodeTest]) -> TestReport:
    """The report read from a one-task harness run's stdout; see the module docstring for the rules."""
    records, conflict = _records(result.stdout, nonce)
    problem = _no_verdict(result, records, conflict)
    if problem is None and ((0, "load") not in records or (0, "end") not in records):
        problem = "no verdict"
    if problem is not None:
        report = TestReport(run=result, error=problem)
        report.outcomes = [TestOutcome(False, f"no verdict: {problem}") for _ in tests]
        return report
    report = _report(records, 0, tests)
    report.run = result
    return report


def _report(records: dict[Any, dict[str, Any]], task: int, tests: list[CallTest | CodeTest]) -> TestReport:
    load = records[(task, "load")]
    report = TestReport(loaded=load.get("ok") is True)
    if not report.loaded:
        report.error = f"the solution did not load: {_text(load.get('error'))[:DETAIL_CHARS]}"
    for i, test in enumerate(tests):
        record = records.get((task, i))
        if record is None:
            report.outcomes.append(TestOutcome(False, report.error or "not run"))
        else:
            report.outcomes.append(_outcome(test, record))
    return report


def _records(stdout: str, nonce: str) -> tuple[dict[Any, dict[str, Any]], bool]:
    """The verdict lines by key (``(task, test index)``, ``(task, "load" | "end")``,
    ``"done"`` or ``"abort"``); ``conflict`` when a line is malformed, has no valid
    key, or repeats one. Never raises on odd input."""
    prefix = f"{MARK} {nonce} "
    records: dict[Any, dict[str, Any]] = {}
    conflict = False
    for line in stdout.splitlines():
        if not line.startswith(prefix):
            continue
        try:
            record = json.loads(line[len(prefix) :])
        except (ValueError, RecursionError):  # bad JSON, a number past the digit limit, nesting past the stack
            conflict = True
            continue
        key = _record_key(record)
        if key is None or key in records:
            conflict = True
        else:
            records[key] = record
    return records, conflict


def _record_key(record: Any) -> tuple[int, int | str] | str | None:
    if not isinstance(record, dict):
        return None
    task = record.get("task")
    if task is None:
        event = record.get("event")
        return event if event in ("done", "abort") else None
    if type(task) is not int or task < 0:
        return None
    if "test" in record:
        key = record["test"]
        return (task, key) if type(key) is int and key >= 0 else None
    event = record.get("event")
    return (task, event) if event in ("load", "end") else None


def _no_verdict(result: ExecResult, records: dict[Any, dict[str, Any]], conflict: bool) -> str | None:
    if result.timed_out:
        return f"the test run timed out after {result.duration_s:.1f} s"
    if result.oom_killed:
        return "the test run ran out of memory"
    if conflict:
        return "conflicting or malformed verdict lines (something besides the harness wrote them)"
    if result.exit_code != 0 or "done" not in records:
        tail = result.stderr.strip().splitlines()[-1:] if result.stderr.strip() else []
        why = f"exit code {result.exit_code}" + (f": {tail[0][:200]}" if tail else "")
        if result.stdout_truncated:
            why += "; the output was cut at the sandbox's cap"
        return f"the test run did not finish ({why})"
    return None


def _outcome(test: CallTest | CodeTest, record: dict[str, Any]) -> TestOutcome:
    if record.get("error"):
        return TestOutcome(False, _text(record["error"])[:DETAIL_CHARS])
    if isinstance(test, CodeTest):
        passed = record.get("passed") is True
        return TestOutcome(passed, "" if passed else "failed")
    try:
        got = decode(record.get("value"))
    except (ValueError, TypeError, RecursionError, MemoryError) as e:
        return TestOutcome(False, f"unreadable result: {type(e).__name__}: {str(e)[:100]}")
    expected = decode(test.expected)
    if same(expected, got):
        return TestOutcome(True)
    return TestOutcome(False, f"returned {_short(got)}, expected {_short(expected)}")


def _text(value: Any) -> str:
    """A record's field as printable text, whatever the (untrusted) line held."""
    if not isinstance(value, str):
        return f"<{type(value).__name__}>"
    return value[:DETAIL_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int past the digit limit, nesting past the stack
        return f"<{type(value).__name__} too large to show>"
    return text if len(text) <= DETAIL_CHARS // 2 else text[: DETAIL_CHARS // 2] + "..."
