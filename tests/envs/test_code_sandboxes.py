"""`CodeSandboxes`' verification queue: every verification waits its turn, however long,
and a task's own code shares a run only with jobs of that very task."""

from __future__ import annotations

import contextlib
import threading

import pytest

from agentenv.envs.code import CallTest, CodeSandboxes, CodeTest
from agentenv.envs.code import sandboxes as module
from agentenv.envs.code.verify import TestJob as Job  # aliases: not collected as test classes
from agentenv.envs.code.verify import TestOutcome as Outcome
from agentenv.envs.code.verify import TestReport as Report
from agentenv.sandboxes.pool import SandboxPool

ADD_TESTS = (CallTest(args=[2, 3], expected=5),)
FORGER = (CodeTest(code="emit = 'a hostile task could write any verdict from here'"),)


def job(name: str, tests: tuple[CallTest | CodeTest, ...] = ADD_TESTS, setup: str = "") -> Job:
    return Job(name, "add", tests, setup)


class FakeEngine:
    """`run_batch` and `run_job` that record which jobs share each run (named by their solution)."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = []

    def batch(self, sandbox: object, jobs: list[Job], *, scratch: list[str]) -> list[Report | None]:
        self.runs.append([j.solution for j in jobs])
        return [Report([Outcome(True)], loaded=True) for _ in jobs]

    def alone(self, sandbox: object, job: Job) -> Report:
        self.runs.append([job.solution])
        return Report([Outcome(True)], loaded=True)


def test_a_job_with_code_tests_or_setup_shares_a_run_only_with_jobs_of_the_same_tests_and_setup(monkeypatch):
    engine = FakeEngine()
    monkeypatch.setattr(module, "run_batch", engine.batch)
    monkeypatch.setattr(module, "run_job", engine.alone)
    monkeypatch.setattr(CodeSandboxes, "verifier", lambda self, timeout_s=None: contextlib.nullcontext())
    pools = CodeSandboxes("docker", verifiers=1)  # starts nothing: the runs are the fake's
    jobs = [
        job("call-1"),
        job("forger-1", FORGER),
        job("call-2"),
        job("forger-2", FORGER),
        job("other-code-task", (CodeTest(code="assert candidate(2, 3) == 5"),)),
        job("call-tests-with-setup", setup="import os"),
        job("call-3", (CallTest(args=[1, 1], expected=2),)),  # call tests of another task: no code of it runs
    ]
    pools.verify_many(jobs)
    assert engine.runs == [
        ["call-1", "call-2", "call-3"],
        ["forger-1", "forger-2"],
        ["other-code-task"],
        ["call-tests-with-setup"],
    ]


@pytest.mark.slow  # process sandboxes, and a solution that takes seconds
def test_a_verification_queued_past_the_pools_acquire_timeout_is_still_judged(monkeypatch):
    # One verifier, held by a slow solution for longer than a pool acquire may wait: the
    # verification queued behind it waits its turn and is judged, it is not an infra failure.
    acquire, cap_s = SandboxPool.acquire, 1.5
    monkeypatch.setattr(SandboxPool, "acquire", lambda pool, timeout_s=None: acquire(pool, cap_s))
    slow = Job("import time\n\ndef add(a, b):\n    time.sleep(4)\n    return a + b\n", "add", ADD_TESTS, "", 10.0)
    fast = Job("def add(a, b):\n    return a + b\n", "add", ADD_TESTS)
    reports: dict[str, Report] = {}
    with CodeSandboxes("process", workspaces=1, verifiers=1) as pools:
        pools.warm()
        first = threading.Thread(target=lambda: reports.update(slow=pools.verify(slow)))
        first.start()
        for _ in range(1000):  # until the slow one holds the only verifier
            if pools.verifier_runs:
                break
            threading.Event().wait(0.01)
        assert pools.verifier_runs == 1
        reports["queued"] = pools.verify(fast)
        first.join()
    assert reports["slow"].all_passed, reports["slow"]
    assert reports["queued"].all_passed, reports["queued"]
