"""Batched verification (Docker): the same verdicts as one run per job, and no job can
reach a later job's verdict or secrets. Each attack comes from a solution in the batch,
but for the last ones: a hostile task's own code, and a task the host cannot judge."""

from __future__ import annotations

import threading

import pytest

from agentenv.envs.code import CallTest, CodeTest
from agentenv.envs.code.sandboxes import DOCKER_SCRATCH
from agentenv.envs.code.verify import TestJob as Job  # aliases: not collected as test classes
from agentenv.envs.code.verify import TestReport as Report
from agentenv.envs.code.verify import run_batch, run_job
from tests.envs._code import require, sandboxes
from tests.envs.test_code_integrity import SCAN

pytestmark = [pytest.mark.slow, pytest.mark.docker]

ADD = Job("def add(a, b):\n    return a + b\n", "add", (CallTest(args=[2, 3], expected=5),))
WRONG = Job("def add(a, b):\n    return a - b\n", "add", (CallTest(args=[2, 3], expected=5),))
BROKEN = Job("def add(a, b) return a\n", "add", (CallTest(args=[2, 3], expected=5),))
RAISES = Job("def add(a, b):\n    raise KeyError(a)\n", "add", (CodeTest(code="assert candidate(1, 2) == 3"),))
CHECK = Job("def add(a, b):\n    return a + b\n", "add", (CodeTest(code="assert candidate(1, 2) == 3\n" * 3),))
# Passes only in a clean sandbox: scratch directories empty and writable, no SysV IPC object, no other
# process of its uid but its harness and forker, its limits and priority as a fresh run has them.
CLEAN = Job(
    """
import os, resource
def clean():
    seen = [sorted(os.listdir(d)) for d in ("/workspace", "/tmp", "/dev/shm")]
    ipc = [open(f"/proc/sysvipc/{kind}").read().splitlines()[1:] for kind in ("shm", "msg", "sem")]
    open("/workspace/probe", "w").close()
    return [seen, ipc, os.getpriority(os.PRIO_PROCESS, 0), resource.getrlimit(resource.RLIMIT_AS)[0]]
""",
    "clean",
    (CallTest(args=[], expected=[[[], [], []], [[], [], []], 0, -1]),),
)


@pytest.fixture(scope="module")
def pools():
    require("docker")
    pools = sandboxes("docker")
    yield pools
    pools.close()


def batch(pools, jobs):
    with pools.verifier() as sandbox:
        return run_batch(sandbox, jobs, scratch=DOCKER_SCRATCH)


def alone(pools, job):
    with pools.verifier() as sandbox:
        return run_job(sandbox, job)


def test_a_batch_gives_each_job_the_verdict_a_run_of_its_own_gives(pools):
    jobs = [ADD, WRONG, BROKEN, RAISES, CHECK, CLEAN]
    together = batch(pools, jobs)
    for job, report in zip(jobs, together, strict=True):
        assert report is not None
        single = alone(pools, job)
        assert (report.loaded, [o.passed for o in report.outcomes]) == (
            single.loaded,
            [o.passed for o in single.outcomes],
        ), (report, single)
    assert [r.all_passed for r in together] == [True, False, False, False, True, True]


ATTACKS = {
    # left behind: a process that keeps killing every process of its uid
    "a process left behind": """
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(0.05)
        while True:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            time.sleep(0.001)
    os._exit(0)
""",
    "files in every scratch directory, and /workspace made unreadable": """
import os
for d in ("/workspace", "/tmp", "/dev/shm"):
    os.makedirs(f"{d}/deep/er", exist_ok=True)
    open(f"{d}/deep/er/x", "w").write("x")
    os.chmod(f"{d}/deep", 0)
os.chmod("/workspace", 0)
""",
    "catchable signals to every process of its uid": """
import os, signal
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP, signal.SIGALRM, signal.SIGPIPE):
    try:
        os.kill(-1, sig)
    except OSError:
        pass
""",
    "the forker stopped": "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n",
    # a channel to later jobs, and memory they would lack: SysV objects outlive their maker
    "SysV segments, a message queue and a semaphore set": """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
for i in range(8):
    sid = libc.shmget(0x5EED0000 + i, ctypes.c_size_t(1 << 20), 0o1666)
    address = libc.shmat(sid, None, 0)
    ctypes.memset(address, 1, 1 << 20)
    libc.shmdt(ctypes.c_void_p(address))
libc.msgget(0x5EED1000, 0o1666)
libc.semget(0x5EED2000, 1, 0o1666)
""",
    "soft limits of every process of its uid lowered": """
import os, resource
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) != os.getpid():
        for limit in (resource.RLIMIT_AS, resource.RLIMIT_NOFILE, resource.RLIMIT_CPU):
            try:
                hard = resource.prlimit(int(p), limit)[1]
                resource.prlimit(int(p), limit, (64 if limit != resource.RLIMIT_AS else 1 << 24, hard))
            except OSError:
                pass
""",
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_what_a_job_leaves_behind_is_cleared_before_the_next_job(pools, attack):
    saboteur = Job(ATTACKS[attack] + "\ndef clean():\n    return 1\n", "clean", (CallTest(args=[], expected=1),))
    reports = batch(pools, [saboteur, CLEAN, CLEAN])
    assert reports[1] is not None and reports[2] is not None, "the batch stopped"
    for report in reports[1:]:
        assert report.all_passed, report.outcomes


# Marks the scratch directories themselves, which emptying them leaves: a channel to later jobs.
MARK_SCRATCH = """
import os
for d in ("/workspace", "/tmp"):
    os.setxattr(d, "user.mark", b"secret")
    os.utime(d, (123456789, 987654321))
def mark():
    return [[n for n in os.listxattr(d) if n.startswith("user.")] for d in ("/workspace", "/tmp")]
"""
UNMARKED = Job(
    """
import os
def unmarked():
    return [
        [[n for n in os.listxattr(d) if n.startswith("user.")], int(os.stat(d).st_atime), int(os.stat(d).st_mtime)]
        for d in ("/workspace", "/tmp")
    ]
""",
    "unmarked",
    (CallTest(args=[], expected=[[[], 0, 0], [[], 0, 0]]),),
)


def test_extended_attributes_and_times_of_the_scratch_directories_do_not_reach_the_next_job(pools):
    marker = Job(MARK_SCRATCH, "mark", (CallTest(args=[], expected=[["user.mark"], ["user.mark"]]),))
    reports = batch(pools, [marker, UNMARKED])
    assert reports[0] is not None and reports[0].all_passed, reports[0]  # the marks were made
    assert reports[1] is not None and reports[1].all_passed, reports[1].outcomes


UNRESTORABLE = {
    # a later job would run out of memory or time: the batch must stop, not judge it so
    "hard limits lowered": """
import os, resource
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) != os.getpid():
        try:
            resource.prlimit(int(p), resource.RLIMIT_AS, (1 << 24, 1 << 24))
        except OSError:
            pass
""",
    "priority lowered": "import os\nos.setpriority(os.PRIO_USER, os.getuid(), 19)\n",
    "everything of its uid killed": "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
}


@pytest.mark.parametrize("attack", UNRESTORABLE)
def test_a_batch_that_cannot_be_made_clean_again_leaves_the_rest_unjudged(pools, attack):
    saboteur = Job(UNRESTORABLE[attack] + "\ndef clean():\n    return 1\n", "clean", (CallTest(args=[], expected=1),))
    reports = batch(pools, [ADD, saboteur, CLEAN])
    assert reports[0] is not None and reports[0].all_passed  # judged before the attack: it stands
    assert reports[2] is None  # not judged in a tainted batch: the caller judges it alone
    assert pools.verify(CLEAN).all_passed


def test_no_job_can_reach_the_tests_of_the_jobs_after_it(pools):
    scan_all = SCAN.replace('for pid in ("self", str(os.getppid())):', 'for pid in os.listdir("/proc"):')
    assert scan_all != SCAN
    scanner = Job(scan_all, "report", (CallTest(args=[], expected="nothing"),))
    holder = Job(
        "def f():\n    return 1\n", "f", (CodeTest(code="assert candidate() != 'S3CR3T-7d1e-the-expected-value'"),)
    )
    reports = batch(pools, [scanner, holder, holder])
    assert reports[0] is not None and reports[0].loaded, reports[0]
    import ast
    import json

    detail = reports[0].outcomes[0].detail
    seen = json.loads(ast.literal_eval(detail.removeprefix("returned ").rsplit(", expected", 1)[0]))
    assert seen["found"] == [], seen


def test_verifications_waiting_together_share_runs_and_each_gets_its_own_verdict(pools):
    jobs = [ADD, WRONG, CHECK, BROKEN] * 6
    reports: list = [None] * len(jobs)
    runs_before = pools.verifier_runs

    def verify(i):
        reports[i] = pools.verify(jobs[i])

    threads = [threading.Thread(target=verify, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.all_passed for r in reports] == [True, False, True, False] * 6
    assert pools.verifier_runs - runs_before < len(jobs)  # batched: fewer runs than jobs


def test_a_batch_whose_sandbox_fails_is_judged_job_by_job(pools, monkeypatch):
    from agentenv.envs.code import sandboxes as module
    from agentenv.sandboxes import SandboxInfraError

    def dead_container(*args, **kwargs):
        raise SandboxInfraError("the container died")  # what a run raises when its container dies

    monkeypatch.setattr(module, "run_batch", dead_container)
    reports = pools._judge([ADD, WRONG, CHECK])  # one job's doing must not make the others infra failures
    assert [r.all_passed for r in reports] == [True, False, True]


# A hostile task file's code test: it runs in the batch's harness, finds the harness's `emit` and
# spec up the stack, writes passing verdicts for every later task and a `done` line, and exits 0.
FORGE = """
import os, sys
f = sys._getframe()
while f is not None and "spec" not in f.f_locals:
    f = f.f_back
emit, spec, me = f.f_locals["emit"], f.f_locals["spec"], f.f_locals["t"]
for t, task in enumerate(spec["tasks"]):
    if t > me:
        emit({"task": t, "event": "load", "ok": True, "error": None})
    if t >= me:
        for i, test in enumerate(task["tests"]):
            emit({"task": t, "test": i, "passed": True})
        emit({"task": t, "event": "end"})
emit({"event": "done"})
os._exit(0)
"""


def test_a_hostile_tasks_code_test_cannot_forge_the_verdicts_of_other_tasks_jobs(pools):
    hostile = Job("def f():\n    return 0\n", "f", (CodeTest(code=FORGE),))
    victim = Job("def add(a, b):\n    return 42\n", "add", (CodeTest(code="assert candidate(2, 3) == 5"),))
    reports = pools.verify_many([hostile, victim, WRONG])
    assert not reports[1].all_passed, reports[1].outcomes
    assert not reports[2].all_passed, reports[2].outcomes


def test_jobs_of_one_code_test_task_still_share_one_run(pools):
    wrong_check = Job(WRONG.solution, "add", CHECK.tests)
    runs_before = pools.verifier_runs
    reports = pools.verify_many([CHECK, wrong_check, CHECK, ADD, WRONG])
    assert [r.all_passed for r in reports] == [True, False, True, True, False]
    assert pools.verifier_runs - runs_before == 2  # the code-test task's three jobs, then the two call-test jobs


def test_a_job_the_host_cannot_judge_fails_alone_never_its_batch_mates(pools):
    # Task validation refuses such a value now; made past it, as by a bug, it must stay one job's failure.
    bad = Job("def f():\n    return 1\n", "f", (CallTest.model_construct(args=[], expected={"a": 1, "b": 2}),))
    judged = pools._judge([ADD, bad, WRONG])
    assert isinstance(judged[1], ValueError), judged[1]
    assert isinstance(judged[0], Report) and judged[0].all_passed
    assert isinstance(judged[2], Report) and not judged[2].all_passed
