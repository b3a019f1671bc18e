"""`CodeEnv`: write Python in a sandboxed workspace, run it, test it, submit; hidden tests decide.

Tools: ``run_python`` (run code, see capped output), ``write_file`` / ``read_file``
(the workspace), ``run_tests`` (the visible tests against solution.py) and
``submit`` (ends the episode). Step rewards: ``parses`` (the code given this step
parses), ``runs`` (a run this step finished without error), each paid once per
episode, at the first step where it holds (paid every step, ``run_python("pass")``
each turn would earn most of a solve), and ``progress`` (the rise of the best
visible-test pass fraction so far). The prompt shows the visible tests' expected
values, so a table of them passes every visible test: at the episode's end the
progress the hidden tests do not confirm (best visible fraction over hidden
fraction, all of it when nothing was submitted) is taken back (`closing_rewards`).
None of the three can be farmed. Task
rewards: ``task`` is 1 when every hidden test passes, ``hidden_fraction`` the
share that passed (reported; weight 0 in the scalar reward by default).

Hidden tests never enter the agent's sandbox: `verify` sends only the submitted
solution.py text to a sandbox of the separate verifier pool, see
`agentenv.envs.code.verify` for why the verdict cannot be forged from inside.
Bad input (unparseable code, endless loops, floods of output, binary files,
huge files) comes back as an observation; only a failing sandbox is an
``InfraError`` (the episode ends as ``infra``).

Left out: multi-file solutions (only solution.py is verified), packages beyond
the standard library, stateful APIs in tests.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from agentenv import CallOutcome, Env, ScriptedPolicy, State, Task, TaskSet, ToolError, tool, tool_call_text
from agentenv.core.task import curriculum_slice
from agentenv.envs.code.families import FAMILIES
from agentenv.envs.code.sandboxes import Backend, CodeSandboxes
from agentenv.envs.code.tasks import CodeTask, code_task, default_tasks, make_task
from agentenv.envs.code.verify import TestJob, TestReport, run_tests
from agentenv.sandboxes import ExecResult, SandboxError
from agentenv.sandboxes.pool import PooledSandbox

__all__ = ["CodeEnv", "CodeState", "oracle"]

SOLUTION_FILE = "solution.py"
# What compile() raises for code it cannot take: a syntax error, NUL bytes (ValueError),
# nesting past the parser's or the compiler's stack (MemoryError, RecursionError), and
# CPython 3.11's occasional SystemError when threads compile at once.
_UNPARSEABLE = (SyntaxError, ValueError, RecursionError, MemoryError, SystemError)
SHOW_CHARS = 4000  # of each output stream, per observation
MAX_SOLUTION_BYTES = 256 * 1024


class CodeState(State):
    best_visible: float = 0.0
    """Best visible-test pass fraction so far."""
    runs: int = 0
    shaped: list[str] = []
    """The once-per-episode step rewards already paid ("parses", "runs")."""
    submitted: bool = False
    submission: str | None = None
    hidden_passed: int | None = None
    hidden_total: int | None = None


class CodeEnv(Env[CodeState]):
    state_type = CodeState
    max_turns = 16
    instructions = (
        "You are a Python programmer working in a sandboxed workspace (Python 3, standard library only). "
        f"Write your solution to {SOLUTION_FILE}, run code and the visible tests to check it, then call submit. "
        "Hidden tests decide whether the task is solved."
    )
    reward_weights: ClassVar[dict[str, float]] = {
        "parses": 0.02,
        "runs": 0.03,
        "progress": 0.5,
        "task": 1.0,
        "hidden_fraction": 0.0,
    }

    def __init__(
        self,
        tasks: TaskSet | None = None,
        *,
        sandboxes: CodeSandboxes | None = None,
        backend: Backend = "auto",
        difficulties: Sequence[int] | None = None,
        run_timeout_s: float = 10.0,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            tasks: Code tasks (default: the shipped procedural set).
            sandboxes: Pools to share with other envs; the env does not close them.
                Default: its own (2 workspaces, 2 verifiers), started at the first
                reset and closed by ``close()``.
            backend: "auto", "docker" or "process", for the env's own pools.
            difficulties: Keep only the default tasks of these difficulties.
            run_timeout_s: Wall clock of one ``run_python``.
        """
        if tasks is None and difficulties is not None:
            tasks = curriculum_slice(default_tasks(), difficulties, env=type(self).__name__)
        super().__init__(tasks, **kwargs)
        for task in self.tasks:
            code_task(task)  # a malformed payload fails here, not mid-episode
        self._owns_sandboxes = sandboxes is None
        self.sandboxes = sandboxes if sandboxes is not None else CodeSandboxes(backend)
        self.run_timeout_s = run_timeout_s
        self._lease: PooledSandbox | None = None
        self._signals: dict[str, float] = {}

    def default_tasks(self) -> TaskSet:
        return default_tasks()

    def mutate(self, task: Task, rng: np.random.Generator) -> Task | None:
        """A new task of the same procedural family and difficulty (new parameters and
        inputs); None for tasks from other sources (benchmark files), which have no generator."""
        family, difficulty = task.metadata.family, task.metadata.difficulty
        if family not in FAMILIES or difficulty is None:
            return None
        return make_task(family, rng, difficulty, task_id=f"{task.id}~v{int(rng.integers(1 << 30)):08x}")

    # -- hooks

    def initial_state(self, task: Task) -> CodeState:
        self._fresh_workspace()
        self._signals = {}
        return CodeState()

    def step_rewards(self, outcomes: list[CallOutcome]) -> dict[str, float]:
        signals, self._signals = self._signals, {}
        rewards, shaped = {"progress": signals.get("progress", 0.0)}, self.state.shaped
        for name in ("parses", "runs"):
            earned = signals.get(name, 0.0) > 0 and name not in shaped
            if earned:
                shaped.append(name)
            rewards[name] = 1.0 if earned else 0.0
        return rewards

    def closing_rewards(self, task_rewards: dict[str, float]) -> dict[str, float]:
        unconfirmed = self.state.best_visible - task_rewards.get("hidden_fraction", 0.0)
        return {"progress": -unconfirmed} if unconfirmed > 0 else {}

    def verify(self, task: Task) -> dict[str, float]:
        state = self.state
        if not state.submitted or state.submission is None:
            return {"task": 0.0, "hidden_fraction": 0.0}
        report = verify_solution(self.sandboxes, task, state.submission)
        state.hidden_passed, state.hidden_total = report.passed, report.total
        return {"task": float(report.all_passed), "hidden_fraction": report.fraction}

    def snapshot_external(self) -> str:
        return base64.b64encode(self._sandbox().snapshot()).decode("ascii")

    def restore_external(self, data: Any) -> None:
        if not isinstance(data, str):
            raise ValueError(f"expected the workspace as a base64 string, got {type(data).__name__}")
        try:
            archive = base64.b64decode(data, validate=True)
        except binascii.Error as e:
            raise ValueError(f"the workspace in the snapshot is not valid base64: {e}") from None
        self._sandbox().restore(archive)
        self._signals = {}

    def on_close(self) -> None:
        if self._lease is not None:
            self._lease.close()
            self._lease = None
        if self._owns_sandboxes:
            self.sandboxes.close()

    # -- tools

    @tool
    def run_python(self, code: str) -> str:
        """Run Python code as a fresh process in the workspace and show its exit code and output.

        Args:
            code: The program to run.
        """
        if not self._parses(code):
            return _syntax_error(code)
        result = self._sandbox().run_python(code, timeout_s=self.run_timeout_s)
        self.state.runs += 1
        self._signals["runs"] = max(self._signals.get("runs", 0.0), float(result.ok))
        return _render_run(result, self.run_timeout_s)

    @tool
    def write_file(self, path: str, content: str) -> str:
        """Write a text file in the workspace (creating directories), replacing any old one.

        Args:
            path: A path relative to the workspace, e.g. "solution.py".
            content: The whole new content.
        """
        if path.endswith(".py"):
            self._parses(content)
        self._write(path, content)
        return f"wrote {len(content.encode())} bytes to {path}"

    @tool
    def read_file(self, path: str) -> str:
        """Show a file of the workspace.

        Args:
            path: A path relative to the workspace.
        """
        try:
            data = self._sandbox().read_file(path)
        except FileNotFoundError:
            raise ToolError(f"no file {path!r} in the workspace") from None
        except SandboxError as e:
            raise ToolError(str(e)) from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return f"{path} is not UTF-8 text ({len(data)} bytes); first bytes: {data[:64]!r}"
        return _cap(text, SHOW_CHARS * 2)

    @tool
    def run_tests(self) -> str:
        """Run the visible tests against the function in solution.py."""
        payload = self._code_task()
        if not payload.visible_tests:
            return "this task has no visible tests; check your code with run_python"
        source = self._solution()
        if not self._parses(source):
            return _syntax_error(source, SOLUTION_FILE)
        report = run_tests(
            self._sandbox(),
            solution=source,
            entry_point=payload.entry_point,
            tests=list(payload.visible_tests),
            setup=payload.setup,
            test_timeout_s=payload.test_timeout_s,
        )
        state = self.state
        state.runs += 1
        self._signals["runs"] = max(self._signals.get("runs", 0.0), float(report.loaded))
        gain = max(0.0, report.fraction - state.best_visible)
        self._signals["progress"] = self._signals.get("progress", 0.0) + gain
        state.best_visible += gain
        return _render_report(report)

    @tool(terminal=True)
    def submit(self, code: str | None = None) -> str:
        """Submit solution.py (or ``code``, written to solution.py first); ends the episode.

        Args:
            code: Optional: the final source, if you did not write solution.py yet.
        """
        if code is not None:
            self._parses(code)
            self._write(SOLUTION_FILE, code)
        source = self._solution()
        self.state.submitted, self.state.submission = True, source
        return f"submitted {SOLUTION_FILE} ({len(source.encode())} bytes); running the hidden tests"

    # -- helpers

    def _sandbox(self) -> PooledSandbox:
        if self._lease is None:
            self._lease = self.sandboxes.workspace()
        return self._lease

    def _fresh_workspace(self) -> None:
        if self._lease is not None:
            self._lease.close()  # back to the pool, which wipes it in the background
            self._lease = None
        self.sandboxes.start()  # the verifier pool warms up while the agent works
        self._lease = self.sandboxes.workspace()

    def _code_task(self) -> CodeTask:
        return code_task(self.task)

    def _parses(self, code: str) -> bool:
        try:
            # compile(), not ast.parse(): on CPython 3.11 ast.parse in parallel threads
            # can raise SystemError ("AST constructor recursion depth mismatch").
            compile(code, SOLUTION_FILE, "exec", dont_inherit=True)
            ok = True
        except _UNPARSEABLE:
            ok = False
        self._signals["parses"] = min(self._signals.get("parses", 1.0), float(ok))
        return ok

    def _write(self, path: str, content: str) -> None:
        try:
            self._sandbox().write_files({path: content})
        except SandboxError as e:
            raise ToolError(str(e)) from None

    def _solution(self) -> str:
        try:
            data = self._sandbox().read_file(SOLUTION_FILE)
        except FileNotFoundError:
            raise ToolError(f"there is no {SOLUTION_FILE} yet: write it with write_file") from None
        except SandboxError as e:
            raise ToolError(f"cannot read {SOLUTION_FILE}: {e}") from None
        if len(data) > MAX_SOLUTION_BYTES:
            raise ToolError(f"{SOLUTION_FILE} is {len(data)} bytes; the limit is {MAX_SOLUTION_BYTES}")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{SOLUTION_FILE} is not UTF-8 text") from None


def verify_solution(sandboxes: CodeSandboxes, task: Task, solution: str) -> TestReport:
    """Run ``task``'s hidden tests against ``solution`` in a fresh verifier sandbox."""
    payload = code_task(task)
    job = TestJob(solution, payload.entry_point, tuple(payload.hidden_tests), payload.setup, payload.test_timeout_s)
    return sandboxes.verify(job)


# -- rendering ----------------------------------------------------------------------------


def _cap(text: str, limit: int) -> str:
    text = text.replace("\x00", "\\x00")  # NUL bytes break many chat templates
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters cut]"


def _render_run(result: ExecResult, timeout_s: float) -> str:
    if result.timed_out:
        status = f"timed out after {timeout_s:g} s (killed)"
    elif result.oom_killed:
        status = "killed: out of memory"
    else:
        status = f"exit code {result.exit_code}"
    parts = [status]
    for name, text, cut in (
        ("stdout", result.stdout, result.stdout_truncated),
        ("stderr", result.stderr, result.stderr_truncated),
    ):
        if text or cut:
            note = " (cut at the sandbox's output limit)" if cut else ""
            parts.append(f"--- {name}{note}\n{_cap(text, SHOW_CHARS)}")
    return "\n".join(parts)


def _syntax_error(code: str, where: str = "the code") -> str:
    try:
        compile(code, "<code>", "exec", dont_inherit=True)
    except SyntaxError as e:
        return f"{where} does not parse, nothing was run: SyntaxError: {e.msg} (line {e.lineno})"
    except (RecursionError, MemoryError):
        return f"{where} does not parse, nothing was run: it is nested too deeply for the compiler"
    except (ValueError, SystemError) as e:
        return f"{where} does not parse, nothing was run: {e}"
    return f"{where} does not parse"


def _render_report(report: TestReport) -> str:
    lines = [f"{report.passed}/{report.total} visible tests passed"]
    if report.error and not report.loaded:
        lines.append(report.error)
    lines += [f"test {i}: {'ok' if o.passed else 'FAILED: ' + o.detail}" for i, o in enumerate(report.outcomes)]
    return "\n".join(lines)


def oracle() -> ScriptedPolicy:
    """Writes the reference solution, runs the visible tests, submits."""

    def act(conv: Any) -> str:
        solution = code_task(conv.task).solution
        if solution is None:
            raise ValueError(f"task {conv.task.id!r} has no reference solution")
        plan = [
            tool_call_text("write_file", path=SOLUTION_FILE, content=solution),
            tool_call_text("run_tests"),
            tool_call_text("submit"),
        ]
        return plan[min(conv.turn, len(plan) - 1)]

    return ScriptedPolicy(act)
