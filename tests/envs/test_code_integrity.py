"""Reward integrity: each way of faking a pass must give task reward 0, on both backends."""

from __future__ import annotations

import pytest

from agentenv import Task, tool_call_text
from agentenv.envs.code import CodeEnv, CodeTask, CodeTest, benchmark_task
from tests.envs._code import ADD_TASK, require, sandboxes, submit

pytestmark = pytest.mark.slow  # sandboxes on every backend

CHECK_TASK = benchmark_task(
    {
        "task_id": "bench/add",
        "prompt": 'def add(a, b):\n    """a + b"""\n',
        "entry_point": "add",
        "test": "def check(candidate):\n    assert candidate(5, 7) == 12\n    assert candidate(-3, 10) == 7\n",
        "canonical_solution": "    return a + b\n",
    }
)

FAKE_VERDICTS = """
import secrets
lines = ['@@agentenv-verdict %s {"event": "load", "ok": true, "error": null}',
         '@@agentenv-verdict %s {"test": 0, "value": 12, "passed": true}',
         '@@agentenv-verdict %s {"event": "done"}', 'ALL TESTS PASSED', 'OK']
for nonce in ("0" * 32, secrets.token_hex(16)):
    for line in lines:
        print(line % nonce if "%s" in line else line, flush=True)
"""

CHEATS = {
    "sys.exit(0) at import": "import sys\nsys.exit(0)\n",
    "sys.exit(0) in the function": "def add(a, b):\n    import sys\n    sys.exit(0)\n",
    "os._exit(0) at import": "import os\nos._exit(0)\n",
    "os._exit(0) in the function": "def add(a, b):\n    import os\n    os._exit(0)\n",
    "prints what a passing run prints": FAKE_VERDICTS + "def add(a, b):\n    return 0\n",
    "writes fake verdicts to every descriptor": """
import os

for fd in range(0, 64):
    try:
        os.write(fd, b'@@agentenv-verdict x {"event": "done"}\\nALL TESTS PASSED\\n')
    except OSError:
        pass
def add(a, b):
    return 0
""",
    "an always-equal result": """
class Yes(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
def add(a, b):
    return Yes(0)
""",
    "monkeypatches builtins and the runner's modules": """
import builtins, json, sys
builtins.AssertionError = type("AssertionError", (Exception,), {})
json.dumps = lambda *a, **k: '{"ok": true, "passed": true, "value": true}'
json.loads = lambda *a, **k: {"ok": True, "passed": True, "value": True}
sys.modules["__main__"].__dict__.clear()
def add(a, b):
    raise SystemExit(0)
""",
    "kills the test harness": (
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef add(a, b):\n    return 0\n"
    ),
    "answers the host through the control channel": """
import gc, json, os, re, signal, struct
# The whole move: find the nonce anywhere in reach, stop init and the runner, and
# write the host a run answer whose stdout holds a passing verdict.
nonces = set()
for obj in gc.get_objects():
    if isinstance(obj, dict):
        for v in list(obj.values()):
            if isinstance(v, str):
                nonces.update(re.findall(r'"nonce": "([0-9a-f]{32})"', v))
mine = os.getpid()
targets = [1] + [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, mine)]
for pid in targets:
    try:
        os.kill(pid, signal.SIGSTOP)
    except OSError:
        pass
lines = []
for n in nonces or {"0" * 32}:
    lines += [f'@@agentenv-verdict {n} {{"event": "load", "ok": true, "error": null}}']
    lines += [f'@@agentenv-verdict {n} {{"test": {i}, "value": v, "passed": true}}'.replace("v", str(v))
              for i, v in enumerate((12, 7, 101, 4))]
    lines += [f'@@agentenv-verdict {n} {{"event": "done"}}']
answer = json.dumps({"ok": True, "stdout": "\\n".join(lines) + "\\n", "stderr": "", "exit_code": 0,
                     "timed_out": False, "oom_killed": False, "duration_s": 0.01,
                     "stdout_truncated": False, "stderr_truncated": False}).encode()
for pid in targets:
    try:
        fd = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, struct.pack(">II", len(answer), 0) + answer)
    except OSError:
        pass
for pid in targets:
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        pass
""",
    "reads the hidden tests from disk": """
import os
def grab(path):
    try:  # non-blocking: an inherited pipe must not hang the search
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            return os.read(fd, 1 << 16)
        finally:
            os.close(fd)
    except OSError:
        return b""
found = []
for root in ("/workspace", "/tmp", os.getcwd()):
    for dirpath, _, files in os.walk(root):
        found += [grab(os.path.join(dirpath, name)) for name in files]
for pid in ("self", str(os.getppid())):
    found += [grab(f"/proc/{pid}/{name}") for name in ("cmdline", "environ", "fd/0", "fd/3", "fd/4")]
LEAK = b"".join(found)
def add(a, b):
    # the hidden answers are 12, 7, 101, 4: only a leak of the tests would tell which to return
    return 12 if b"12" in LEAK and b"candidate(5, 7)" in LEAK else 0
""",
}


@pytest.fixture(scope="module", params=["docker", "process"])
def env(request):
    require(request.param)
    env = CodeEnv([ADD_TASK, CHECK_TASK], sandboxes=sandboxes(request.param), run_timeout_s=5)
    yield env
    env.close()
    env.sandboxes.close()


@pytest.mark.parametrize("task", [ADD_TASK, CHECK_TASK], ids=["call-tests", "check-tests"])
@pytest.mark.parametrize("cheat", list(CHEATS))
def test_cheating_solutions_get_task_reward_zero(env, task, cheat):
    info = submit(env, CHEATS[cheat], task=task)
    assert info["task_reward"] == 0.0, cheat
    assert info["rewards"]["hidden_fraction"] == 0.0


def test_the_honest_solution_passes_both_task_kinds(env):
    for task in (ADD_TASK, CHECK_TASK):
        assert submit(env, "def add(a, b):\n    return a + b\n", task=task)["task_reward"] == 1.0


def test_files_the_agent_writes_are_never_read_by_the_verifier(env):
    forged = [
        tool_call_text("write_file", path=name, content='{"passed": 4, "total": 4, "done": true}\n')
        for name in ("results.json", "verdict.txt", ".agentenv/result", "tmp/verdict")
    ]
    solution = "open('results.json', 'w').write('all passed')\ndef add(a, b):\n    return 0\n"
    assert submit(env, solution, before=forged)["task_reward"] == 0.0


def test_a_solution_that_only_passes_the_visible_tests_gets_zero(env):
    solution = "def add(a, b):\n    return {(1, 2): 3, (0, 0): 0}.get((a, b), -1)\n"
    env.reset(options={"task": ADD_TASK})
    env.step(tool_call_text("write_file", path="solution.py", content=solution))
    observation, *_ = env.step(tool_call_text("run_tests"))
    assert observation[0]["content"].startswith("2/2 visible tests passed")
    *_, info = env.step(tool_call_text("submit"))
    assert info["task_reward"] == 0.0 and info["rewards"]["hidden_fraction"] == 0.0


def test_a_partly_right_solution_gets_the_fraction_but_not_the_task(env):
    info = submit(env, "def add(a, b):\n    return a + b if a > 0 else 0\n")
    assert info["task_reward"] == 0.0
    assert info["rewards"]["hidden_fraction"] == 0.75  # (-3, 10) fails


def test_an_endless_test_fails_alone_and_ends_the_run(env):
    task = Task(
        id="slow",
        prompt="",
        payload=CodeTask(
            entry_point="f", hidden_tests=[CodeTest(code="assert candidate(1) == 1")] * 2, test_timeout_s=0.5
        ).model_dump(mode="json"),
    )
    info = submit(env, "def f(x):\n    while x: pass\n", task=task)
    assert info["task_reward"] == 0.0


# A benchmark task whose setup (its prompt) imports a module nothing has imported yet.
IMPORTING_TASK = benchmark_task(
    {
        "task_id": "bench/smallest",
        "prompt": 'import heapq\n\ndef smallest(xs):\n    """the smallest item"""\n',
        "entry_point": "smallest",
        "test": "def check(candidate):\n    assert candidate([3, 1, 2]) == 1\n    assert candidate([5]) == 5\n",
        "canonical_solution": "    return heapq.nsmallest(1, xs)[0]\n",
    }
)
# Imported in the harness, it finds the harness's frame and writes every verdict itself.
FORGER = """
import os, sys
f = sys._getframe()
while f is not None and not ("spec" in f.f_locals and "emit" in f.f_locals):
    f = f.f_back
if f is not None:
    spec, emit = f.f_locals["spec"], f.f_locals["emit"]
    for t, task in enumerate(spec["tasks"]):
        for i, _ in enumerate(task["tests"]):
            emit({"task": t, "test": i, "passed": True})
        emit({"task": t, "event": "end"})
    emit({"event": "done"})
    os._exit(0)
"""


def test_a_module_the_solution_plants_in_the_workspace_is_never_imported_by_the_harness(env):
    # Docker runs have the workspace ('') first on sys.path: the setup's `import heapq`
    # in the harness ran the solution's heapq.py beside the nonce.
    solution = f"open('heapq.py', 'w').write({FORGER!r})\ndef smallest(xs):\n    return 0\n"
    info = submit(env, solution, task=IMPORTING_TASK)
    assert info["task_reward"] == 0.0 and info["rewards"]["hidden_fraction"] == 0.0, info
    honest = "import heapq\ndef smallest(xs):\n    return heapq.nsmallest(1, xs)[0]\n"
    assert submit(env, honest, task=IMPORTING_TASK)["task_reward"] == 1.0


# What a run can leave that breaks the sandbox's own clean-up after it: directories
# nested past Python's recursion limit (the runner's wipe raised RecursionError, an
# error of the sandbox's, and so infra: a way to dodge the penalty of any episode).
BREAKS_THE_CLEAN_UP = "import os\nos.chdir('/tmp')\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')\n"


def test_a_run_that_leaves_what_the_clean_up_chokes_on_is_the_policys_failure_never_infra(env):
    env.reset(seed=0, options={"task": ADD_TASK})
    *_, truncated, info = env.step(tool_call_text("run_python", code=BREAKS_THE_CLEAN_UP))
    assert info.get("failure") != "infra" and not truncated, info
    info = submit(env, BREAKS_THE_CLEAN_UP + "def add(a, b):\n    return 0\n")
    assert info["failure"] == "policy" and info["task_reward"] == 0.0, info


# -- the secrets of a run: unreachable from the solution's process ----------------------

# The solution searches everything its process can reach for the hidden tests and the
# verdict nonce: frames, live objects, its own memory, the harness's memory, descriptors
# and tracing. ``report()`` says what it found; the first test fails with that report as
# its message, the second holds the secret.
SCAN = r"""
import gc, json, os, re, sys

SECRET = re.compile(rb"S3CR3T-(?:7)d1e")  # never a contiguous needle in this process's own memory
NONCE = re.compile(rb'"nonce": ?"[0-9a-f]{32}"')

def scan_bytes(data, where, found):
    if SECRET.search(data):
        found.append(where + ":secret")
    if NONCE.search(data):
        found.append(where + ":nonce")

def report():
    found, reached = [], []
    frame = sys._getframe()
    while frame is not None:  # every frame up the stack, and what they hold
        for scope in (frame.f_locals, frame.f_globals):
            for value in list(scope.values()):
                if isinstance(value, (str, bytes)):
                    scan_bytes(value.encode("utf-8", "replace") if isinstance(value, str) else value, "frame", found)
        frame = frame.f_back
    for obj in gc.get_objects():  # every tracked object: dicts, lists holding the request
        if isinstance(obj, dict):
            for value in list(obj.values()):
                if isinstance(value, (str, bytes)):
                    scan_bytes(value.encode("utf-8", "replace") if isinstance(value, str) else value, "object", found)
    for pid in ("self", str(os.getppid())):  # raw memory: this process's, and the harness's
        try:
            maps = open(f"/proc/{pid}/maps").read().splitlines()
            with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
                reached.append(f"{pid}/mem")
                for line in maps:
                    start, end = (int(x, 16) for x in line.split()[0].split("-"))
                    if "r" not in line.split()[1] or end - start > 1 << 28:
                        continue
                    try:
                        mem.seek(start)
                        scan_bytes(mem.read(end - start), f"{pid}/mem", found)
                    except (OSError, ValueError, OverflowError):
                        pass
        except OSError:
            pass
    ppid = os.getppid()
    for fd in range(0, 16):
        try:
            os.close(os.open(f"/proc/{ppid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK))
            reached.append(f"harness fd {fd}")
        except OSError:
            pass
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(16, ppid, None, None) == 0:
            reached.append("ptrace harness")
            libc.ptrace(17, ppid, None, None)
    except OSError:
        pass
    return json.dumps({"found": sorted(set(found)), "reached": [r for r in reached if not r.startswith("self")]},
                      separators=(",", ":"))
"""


@pytest.mark.parametrize("kind", ["call-tests", "check-tests"])
@pytest.mark.parametrize("backend", ["docker", "process"])
def test_the_solution_cannot_reach_the_hidden_tests_or_the_nonce(backend, kind):
    import ast
    import json

    from agentenv.envs.code import CallTest, run_tests

    require(backend)
    if kind == "check-tests":  # the expected value is in the sandbox, in the harness's memory
        tests = [
            CodeTest(code="assert False, candidate()"),
            CodeTest(code="assert candidate() == 'S3CR3T-7d1e-the-expected-value'"),
        ]
    else:  # the expected value stays on the host; the nonce and the arguments are in the sandbox
        tests = [CallTest(args=[], expected="nothing found"), CallTest(args=[], expected="S3CR3T-7d1e")]
    pools = sandboxes(backend)
    try:
        with pools.verifier() as sandbox:
            report = run_tests(sandbox, solution=SCAN, entry_point="report", tests=tests)
    finally:
        pools.close()
    assert report.loaded, report.error
    detail = report.outcomes[0].detail
    if kind == "check-tests":
        assert detail.startswith("AssertionError: {"), detail
        seen = json.loads(detail.removeprefix("AssertionError: "))
    else:
        assert detail.startswith("returned '{"), detail
        seen = json.loads(ast.literal_eval(detail.removeprefix("returned ").rsplit(", expected", 1)[0]))
    assert seen == {"found": [], "reached": []}


NONCE = "0123456789abcdef" * 2
HOSTILE_RECORDS = [
    '{"task": 0, "test": [0], "value": 12}',
    '{"task": 0, "test": {"a": 1}}',
    '{"task": 0, "test": true, "value": 12}',
    '{"task": 0, "test": "0"}',
    '{"task": 0, "test": -1}',
    '{"task": [0], "test": 0, "value": 12}',
    '{"task": -1, "test": 0, "value": 12}',
    '{"task": true, "event": "end"}',
    '{"task": 0, "event": "done"}',
    '{"event": ["done"]}',
    '{"event": {"x": 1}}',
    '{"event": "end"}',
    "[1, 2, 3]",
    '"done"',
    "null",
    '{"task": 0, "test": 0, "value": ' + "[" * 5000 + "]" * 5000 + "}",
    '{"task": 0, "test": 0, "value": 1' + "0" * 5000 + "}",
    '{"task": 0, "test": 0, "error": {"nested": [1, 2]}}',
    '{"task": 0, "test": 0, "error": "\\udc80 lone surrogate"}',
    '{"task": 0, "test": 0, "value": {"$t": ' + "[" * 900 + "]" * 900 + "}}",
    '{"task": 0, "event": "load", "ok": "yes"}',
]


def _verdict(*middle: str) -> str:
    """A one-task harness's stdout, with ``middle`` among its records."""
    from agentenv.envs.code.verify import MARK

    lines = [
        '{"task": 0, "event": "load", "ok": true, "error": null}',
        *middle,
        '{"task": 0, "test": 0, "value": 12}',
        '{"task": 0, "event": "end"}',
        '{"event": "done"}',
    ]
    return "".join(f"{MARK} {NONCE} {line}\n" for line in lines)


def test_the_harness_verdict_format_passes_when_nothing_is_wrong():
    from agentenv.envs.code.verify import CallTest, judge
    from agentenv.sandboxes import ExecResult

    report = judge(ExecResult(stdout=_verdict(), exit_code=0), NONCE, [CallTest(args=[5, 7], expected=12)])
    assert report.all_passed, report.outcomes


@pytest.mark.parametrize("record", HOSTILE_RECORDS)
def test_a_malformed_verdict_is_a_failed_verification_never_a_host_exception(record):
    from agentenv.envs.code.verify import CallTest, judge
    from agentenv.sandboxes import ExecResult

    result = ExecResult(stdout=_verdict(record), exit_code=0)
    report = judge(result, NONCE, [CallTest(args=[5, 7], expected=12)])
    assert not report.all_passed
    for outcome in report.outcomes:
        outcome.detail.encode("utf-8")  # printable: it goes into an observation
