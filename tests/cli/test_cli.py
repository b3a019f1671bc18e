"""The `agentenv` command line, through typer's runner and the installed script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from typer.testing import CliRunner

import agentenv
from agentenv.cli import EvalSummary, app
from agentenv.core.types import Failure
from agentenv.envs import arithmetic, guess_number
from agentenv.eval.evaluation import EvalResult, default_concurrency

runner = CliRunner()


def invoke(*args: str, input: str | None = None) -> Any:
    return runner.invoke(app, list(args), input=input)


def agentenv_script() -> str:
    """The console script installed next to this interpreter (or on PATH)."""
    script = shutil.which("agentenv", path=str(Path(sys.executable).parent)) or shutil.which("agentenv")
    if script is None:
        pytest.fail("the agentenv console script is not installed: run `pip install -e .[dev]`")
    return script


def run_script(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [agentenv_script(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        stdin=subprocess.DEVNULL if stdin is None else None,
    )


# -- list --------------------------------------------------------------------------


def test_list_shows_builtin_envs_with_oracles() -> None:
    result = invoke("list")
    assert result.exit_code == 0, result.output
    for line_start in ("arithmetic-v0", "guess-number-v0"):
        row = next(line for line in result.output.splitlines() if line_start in line)
        assert "yes" in row  # both ship a scripted oracle


@pytest.mark.slow  # runs the installed script in a new process
def test_installed_script_lists_envs(tmp_path: Path) -> None:
    proc = run_script("list", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "arithmetic-v0" in proc.stdout and "guess-number-v0" in proc.stdout


def test_no_arguments_prints_help() -> None:
    result = invoke()
    assert "eval" in result.output and "play" in result.output and "list" in result.output


# -- eval --------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["arithmetic-v0", "guess-number-v0"])
def test_eval_scripted_solves_everything_and_writes_trajectories(env_id: str, tmp_path: Path) -> None:
    out = tmp_path / "runs" / "out.jsonl"  # parent created on demand
    result = invoke("eval", env_id, "--policy", "scripted", "--episodes", "24", "--out", str(out), "--concurrency", "5")
    assert result.exit_code == 0, result.output
    trajectories = list(agentenv.Trajectory.read_jsonl(out))
    assert len(trajectories) == 24
    assert all(t.env_id == env_id and t.success and t.failure is Failure.NONE for t in trajectories)
    assert len({t.seed for t in trajectories}) == 24
    assert "100.0%" in result.output
    assert "failure: none" in result.output and "24" in result.output
    assert "difficulty" in result.output
    assert f"wrote 24 trajectories to {out}" in result.output


@pytest.mark.slow  # runs the installed script in a new process
def test_eval_through_installed_script(tmp_path: Path) -> None:
    out = tmp_path / "guess.jsonl"
    proc = run_script("eval", "guess-number-v0", "--policy", "scripted", "-n", "5", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 5
    assert all(agentenv.Trajectory.from_json(line).success for line in lines)


def test_eval_overwrites_out_unless_append(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    for _ in range(2):
        assert invoke("eval", "arithmetic-v0", "-n", "3", "--out", str(out)).exit_code == 0
    assert len(out.read_text().splitlines()) == 3
    assert invoke("eval", "arithmetic-v0", "-n", "2", "--out", str(out), "--append").exit_code == 0
    assert len(out.read_text().splitlines()) == 5


def test_eval_seed_picks_the_episodes(tmp_path: Path) -> None:
    def task_ids(seed: str) -> list[str]:
        out = tmp_path / f"{seed}.jsonl"
        assert invoke("eval", "arithmetic-v0", "-n", "6", "--seed", seed, "--out", str(out)).exit_code == 0
        return [t.task.id for t in agentenv.Trajectory.read_jsonl(out)]

    assert task_ids("7") == task_ids("7")
    assert task_ids("7") != task_ids("8")


def test_eval_max_turns_reaches_the_env(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    result = invoke("eval", "guess-number-v0", "-n", "8", "--max-turns", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    trajectories = list(agentenv.Trajectory.read_jsonl(out))
    assert all(t.turns == 1 for t in trajectories)
    assert sum(t.failure is Failure.TRUNCATED for t in trajectories) >= 6  # binary search needs more guesses
    assert "failure: truncated" in result.output


def test_summary_counts_failures_and_difficulties() -> None:
    wrong = agentenv.ScriptedPolicy(lambda conv: agentenv.tool_call_text("submit", answer=-1))
    trajectories = agentenv.rollout("arithmetic-v0", wrong, n=8) + agentenv.rollout(
        "arithmetic-v0", arithmetic.oracle(), n=4
    )
    summary = EvalSummary.of(trajectories)
    assert summary.episodes == 12
    assert summary.success_rate == pytest.approx(4 / 12)
    assert summary.failures == {
        Failure.NONE: 4,
        Failure.POLICY: 8,
        Failure.FORMAT: 0,
        Failure.INFRA: 0,
        Failure.TRUNCATED: 0,
    }
    assert sum(n for n, _ in summary.by_difficulty.values()) == 12
    assert summary.mean_turns == pytest.approx(sum(t.turns for t in trajectories) / 12)
    assert summary.mean_reward == pytest.approx(sum(t.total_reward for t in trajectories) / 12)


# -- errors: one line, no traceback --------------------------------------------------


def test_unknown_env_gives_did_you_mean_without_traceback(tmp_path: Path) -> None:
    for command in (["eval", "arithmetc-v0"], ["play", "guess-numbr-v0"]):
        proc = run_script(*command, cwd=tmp_path)
        assert proc.returncode == 2
        assert "Did you mean" in proc.stderr and "-v0'" in proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "0"], "--episodes must be >= 1, got 0"),
        (["--concurrency", "0"], "--concurrency must be >= 1"),
        (["--max-turns", "0"], "--max-turns must be >= 1"),
        (["--policy", "openai"], "--policy openai needs --base-url and --model"),
    ],
)
def test_bad_options_are_usage_errors(args: list[str], message: str) -> None:
    result = invoke("eval", "arithmetic-v0", *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_env_without_oracle_is_a_usage_error() -> None:
    agentenv.register("cli-no-oracle-v0", "agentenv.envs.arithmetic:ArithmeticEnv", override=True)
    result = invoke("eval", "cli-no-oracle-v0", "--policy", "scripted")
    assert result.exit_code == 2
    assert "has no scripted oracle" in result.stderr


def test_unwritable_out_fails_before_running(tmp_path: Path) -> None:
    a_file = tmp_path / "file.txt"
    a_file.write_text("")
    for out in (tmp_path, a_file / "out.jsonl"):  # a directory; a path under a regular file
        result = invoke("eval", "arithmetic-v0", "-n", "2", "--out", str(out))
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("error: cannot write --out")
        assert result.exception is None or isinstance(result.exception, SystemExit)


def test_openai_policy_gets_endpoint_model_and_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    built: list[dict[str, Any]] = []
    closed: list[bool] = []

    class FakeOpenAIPolicy:
        def __init__(self, **kwargs: Any) -> None:
            built.append(kwargs)
            self._oracle = guess_number.oracle()

        def act(self, conversations: Any) -> list[Any]:
            return self._oracle.act(conversations)

        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr("agentenv.policies.openai.OpenAIPolicy", FakeOpenAIPolicy)
    monkeypatch.setenv("MY_TEST_KEY", "sk-test")
    result = invoke(
        "eval",
        "guess-number-v0",
        "--policy",
        "openai",
        "-n",
        "3",
        "--base-url",
        "http://127.0.0.1:1/v1",
        "--model",
        "tiny",
        "--api-key-env",
        "MY_TEST_KEY",
    )
    assert result.exit_code == 0, result.output
    assert built == [{"base_url": "http://127.0.0.1:1/v1", "model": "tiny", "api_key": "sk-test"}]
    assert closed == [True]
    assert "100.0%" in result.output


# -- play --------------------------------------------------------------------------


def test_play_guess_number_with_a_known_task() -> None:
    task = guess_number.make_tasks(400, seed=0)[0]
    secret, high = task.payload["secret"], task.payload["high"]
    wrong = 1 if secret != 1 else high
    lines = [
        agentenv.tool_call_text("guess", number=wrong),
        json.dumps({"name": "guess", "arguments": {"number": secret}}),
    ]
    result = invoke("play", "guess-number-v0", "--task", task.id, input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    assert task.prompt in result.output
    assert "higher" in result.output or "lower" in result.output
    assert "correct" in result.output  # the last observation is shown too
    assert "solved" in result.output and "not solved" not in result.output
    assert "failure none" in result.output and "turns 2" in result.output


def test_play_arithmetic_by_typing_the_gold_calls() -> None:
    task = arithmetic.make_tasks(400, seed=0)[3]
    calls = [agentenv.tool_call_text("calculate", a=a, op=op, b=b) for a, op, b, _ in task.payload["steps"]]
    calls.append(agentenv.tool_call_text("submit", answer=task.payload["answer"]))
    result = invoke("play", "arithmetic-v0", "--task", task.id, input="\n".join(calls) + "\n")
    assert result.exit_code == 0, result.output
    assert "task reward 1" in result.output and "failure none" in result.output
    assert f"turns {len(calls)}" in result.output


def test_play_ends_cleanly_on_end_of_input() -> None:
    result = invoke("play", "arithmetic-v0", input="")
    assert result.exit_code == 0, result.output
    assert "End of input" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.slow  # runs the installed script in a new process
def test_play_end_of_input_through_installed_script(tmp_path: Path) -> None:
    proc = run_script("play", "guess-number-v0", "--seed", "3", stdin='{"name": "guess", "arguments": {"number": 0}}\n')
    assert proc.returncode == 0, proc.stderr
    assert "End of input" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_play_unknown_task_gives_did_you_mean() -> None:
    result = invoke("play", "guess-number-v0", "--task", "guess-0-0x", input="")
    assert result.exit_code == 2
    assert "no task with id 'guess-0-0x'" in result.stderr and "Did you mean" in result.stderr


@pytest.mark.slow  # runs the installed script in a new process
def test_eval_openai_policy_end_to_end_through_installed_script(tmp_path: Path) -> None:
    from tests.openai_server import OpenAIServer, Request, chat_reply, tool_call

    def model(request: Request) -> Any:
        # A "model" that reads the task and submits the value at once.
        expression = request.messages[1]["content"].removeprefix("Compute ").removesuffix(".")
        assert set(expression) <= set("0123456789+-*() ")
        return chat_reply(None, tool_calls=[tool_call("submit", {"answer": eval(expression)})])

    server = OpenAIServer(model).start()
    try:
        out = tmp_path / "openai.jsonl"
        proc = subprocess.run(
            [
                agentenv_script(),
                "eval",
                "arithmetic-v0",
                "--policy",
                "openai",
                "-n",
                "6",
                "--out",
                str(out),
                "--base-url",
                server.base_url,
                "--model",
                "tiny",
                "--api-key-env",
                "AGENTENV_TEST_KEY",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "AGENTENV_TEST_KEY": "sk-test"},
        )
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not server.errors, server.errors[0]
    assert {r.headers.get("authorization") for r in server.requests} == {"Bearer sk-test"}
    assert {r.body["model"] for r in server.requests} == {"tiny"}
    trajectories = list(agentenv.Trajectory.read_jsonl(out))
    assert len(trajectories) == 6 and all(t.success and t.turns == 1 for t in trajectories)


# -- envs that are code, help, small print -------------------------------------------

CUSTOM_ENVS = '''
import agentenv
from agentenv import ScriptedPolicy, tool_call_text
from agentenv.sandboxes.factory import auto_backend
from tests.toy_envs import CounterEnv


def oracle():
    return ScriptedPolicy(
        lambda c: tool_call_text("add", amount=c.task.payload["target"]) if c.turn == 0 else tool_call_text("submit")
    )


def register():
    agentenv.register("cli-team/counter-v0", CounterEnv, oracle=oracle)


class SandboxedCounter(CounterEnv):
    """Picks its sandbox backend the way the code env does."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.backend = auto_backend()


def register_sandboxed():
    agentenv.register("cli-team/sandboxed-v0", SandboxedCounter, oracle=oracle)


def fixed_turns():
    return CounterEnv(max_turns=2)


def register_fixed():
    agentenv.register("cli-team/fixed-v0", fixed_turns)
'''


@pytest.fixture
def custom_envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "cli_custom_envs.py").write_text(CUSTOM_ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "cli_custom_envs"
    sys.modules.pop("cli_custom_envs", None)
    registry = agentenv.registry
    for key in [k for k in registry._registry if k.startswith(("cli-team/", "cli_custom_envs:"))]:
        del registry._registry[key]
        if key in registry._gym_ids:
            registry._gym_ids.discard(key)
            gymnasium.registry.pop(key, None)
    registry._called.clear()


def test_eval_and_play_take_code_as_the_env(custom_envs: str, tmp_path: Path) -> None:
    out = tmp_path / "custom.jsonl"
    result = invoke("eval", "cli_custom_envs:register", "-n", "4", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "cli-team/counter-v0 · scripted policy" in result.output and "100.0%" in result.output
    assert {t.env_id for t in agentenv.Trajectory.load_jsonl(out)} == {"cli-team/counter-v0"}
    result = invoke("play", "cli_custom_envs:SandboxedCounter", "--task", "t0", input=agentenv.tool_call_text("submit"))
    assert result.exit_code == 0, result.output
    assert "Playing cli_custom_envs:SandboxedCounter" in result.output and "failure policy" in result.output


def test_eval_prints_the_sandbox_backend_an_env_picked(custom_envs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentenv.sandboxes import factory

    monkeypatch.setattr(factory, "docker_available", lambda: "no engine in this test")
    result = invoke("eval", "cli_custom_envs:register_sandboxed", "-n", "3", "--concurrency", "3")
    assert result.exit_code == 0, result.output
    # Three envs picked a backend; the choice is printed once.
    assert result.stderr.count("sandbox backend: process, because no Docker engine (no engine in this test)") == 1


def test_code_that_names_no_env_is_a_usage_error(custom_envs: str) -> None:
    for env, message in [
        ("cli_custom_envs:registr", "has no attribute 'registr'. Did you mean 'register'"),
        ("no_such_module_abc:Env", "no module 'no_such_module_abc' to import"),
    ]:
        result = invoke("eval", env)
        assert result.exit_code == 2 and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_max_turns_for_an_env_that_takes_no_max_turns_is_a_usage_error(custom_envs: str) -> None:
    result = invoke("eval", "cli_custom_envs:register_fixed", "--max-turns", "3")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --max-turns: env 'cli-team/fixed-v0' (fixed_turns) takes no argument")


CWD_ENVS = """
import agentenv


def register():
    arithmetic = agentenv.spec("arithmetic-v0")
    agentenv.register("cwd-team/sums-v0", arithmetic.entry_point, oracle=arithmetic.oracle)
"""

LAUNCHERS = {
    "agentenv": [],  # the console script
    "python -m agentenv": [sys.executable, "-m", "agentenv"],
    "python -m agentenv.cli": [sys.executable, "-m", "agentenv.cli"],
}


def _launch(launcher: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = LAUNCHERS[launcher] or [agentenv_script()]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env, stdin=subprocess.DEVNULL
    )


@pytest.mark.slow  # three new processes
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_code_in_the_current_directory_is_found_without_pythonpath(launcher: str, tmp_path: Path) -> None:
    (tmp_path / "my_envs.py").write_text(CWD_ENVS)
    proc = _launch(launcher, "eval", "my_envs:register", "-n", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "cwd-team/sums-v0 · scripted policy" in proc.stdout and "100.0%" in proc.stdout
    assert _launch(launcher, "--version", cwd=tmp_path).stdout.strip() == f"agentenv {agentenv.__version__}"


@pytest.mark.slow  # runs the installed script in a new process
def test_a_stray_file_in_the_current_directory_shadows_no_installed_module(tmp_path: Path) -> None:
    # The script finds the current directory's code after everything installed: the
    # standard library's wave, not the wave.py beside my_envs.py.
    (tmp_path / "my_envs.py").write_text("import wave\nwave.open\n" + CWD_ENVS)
    (tmp_path / "wave.py").write_text("raise ImportError('the stray wave.py shadowed the standard library')\n")
    proc = _launch("agentenv", "eval", "my_envs:register", "-n", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "cwd-team/sums-v0" in proc.stdout


def test_help_shows_no_type_after_flags() -> None:
    for command in ([], ["eval"], ["play"], ["list"], ["miner", "show"], ["sandbox"], ["sandbox", "build"]):
        result = invoke(*command, "--help")
        assert result.exit_code == 0, result.output
        assert "<bool>" not in result.output, command
    assert "<int>" in invoke("eval", "--help").output  # options that take a value keep theirs


def test_tables_never_show_a_negative_zero() -> None:
    from rich.console import Console

    summary = EvalSummary(
        episodes=2,
        success_rate=0.0,
        mean_reward=-0.0,
        mean_turns=1.0,
        failures={kind: 0 for kind in Failure},
        by_difficulty={0: (2, 0.0)},
        errors=[],
    )
    console = Console(record=True, width=100)
    for table in summary.tables():
        console.print(table)
    text = console.export_text()
    assert "0.000" in text and "-0.0" not in text


# -- eval: k samples, JSON, comparisons, reports, a policy that fails ----------------------


def test_eval_k_samples_prints_pass_at_k_with_intervals_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = invoke("eval", "arithmetic-v0", "-n", "4", "-k", "3", "--json", str(out))
    assert result.exit_code == 0, result.output
    for text in ("pass@1", "pass@3", "pass^3", "mean@3", "disagreement", "95% interval", "by difficulty"):
        assert text in result.output, text
    saved = EvalResult.model_validate_json(out.read_text())
    assert saved.k == 3 and saved.episodes == 12 and saved.overall["pass@3"].value == 1.0
    assert f"wrote the results to {out}" in result.output


def test_eval_json_to_stdout_prints_nothing_else_there() -> None:
    result = invoke("eval", "arithmetic-v0", "-n", "2", "-k", "2", "--json", "-")
    assert result.exit_code == 0, result.stderr
    parsed = EvalResult.model_validate_json(result.stdout)
    assert parsed.episodes == 4 and "pass@2" in result.stderr  # the tables went to stderr


def _results(tmp_path: Path, name: str, rate: float, seed: int) -> Path:
    import random

    from agentenv.eval.evaluation import score

    rng = random.Random(seed)
    trajs = [
        agentenv.Trajectory(
            env_id="x-v0",
            task=agentenv.Task(id=f"t{i}", prompt=""),
            messages=[],
            transitions=[],
            success=(ok := rng.random() < rate),
            task_reward=float(ok),
            failure=Failure.NONE if ok else Failure.POLICY,
        )
        for i in range(40)
        for _ in range(4)
    ]
    path = tmp_path / f"{name}.json"
    path.write_text(score(trajs, 4, label=name).model_dump_json())
    return path


def test_compare_calls_no_winner_from_one_coin_flip(tmp_path: Path) -> None:
    # One task, one sample each: the bootstrap interval is [+100, +100], which is no evidence.
    from agentenv.eval.evaluation import score

    def result(name: str, ok: bool) -> Path:
        task = agentenv.Task(id="t0", prompt="")
        failure = Failure.NONE if ok else Failure.POLICY
        trajectory = agentenv.Trajectory(task=task, messages=[], transitions=[], success=ok, failure=failure)
        path = tmp_path / f"{name}.json"
        path.write_text(score([trajectory], 1, label=name).model_dump_json())
        return path

    outcome = invoke("compare", str(result("a", False)), str(result("b", True)))
    assert outcome.exit_code == 0, outcome.output
    row = next(line for line in outcome.output.splitlines() if line.startswith("│ pass@1 "))
    assert "+100.0" in row and "B > A" not in row and "too few" in row
    assert "too few: under 6 tasks" in outcome.output


def test_compare_prints_the_difference_with_its_paired_interval(tmp_path: Path) -> None:
    weak, strong = _results(tmp_path, "weak", 0.2, 0), _results(tmp_path, "strong", 0.9, 1)
    out = tmp_path / "cmp.json"
    result = invoke("compare", str(weak), str(strong), "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "B - A on 40 shared tasks" in result.output and "A: weak" in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("│ pass@1 "))
    assert "B > A" in row
    from agentenv.eval.evaluation import Comparison

    saved = Comparison.model_validate_json(out.read_text())
    assert saved.differences["pass@1"].low is not None and saved.differences["pass@1"].low > 0.5


def test_compare_of_evaluations_without_a_shared_task_is_a_usage_error(tmp_path: Path) -> None:
    a = _results(tmp_path, "a", 0.5, 0)
    b = tmp_path / "b.jsonl"
    b.write_text(
        agentenv.Trajectory(
            env_id="x-v0",
            task=agentenv.Task(id="other", prompt=""),
            messages=[],
            transitions=[],
            failure=Failure.POLICY,
        ).to_json()
        + "\n"
    )
    result = invoke("compare", str(a), str(b))
    assert result.exit_code == 2 and "share no task" in result.stderr
    result = invoke("compare", str(a), str(tmp_path / "missing.json"))
    assert result.exit_code == 2 and "cannot read" in result.stderr


def _outcomes(path: Path, infra: tuple[str, ...] = ()) -> Path:
    """Two samples of t0..t3, t0 and t1 solved; a task in ``infra`` loses its second sample to infra."""
    trajs = [
        agentenv.Trajectory(
            env_id="x-v0",
            task=agentenv.Task(id=task, prompt=""),
            messages=[],
            transitions=[],
            success=task in ("t0", "t1"),
            task_reward=None if lost else float(task in ("t0", "t1")),
            failure=Failure.INFRA if lost else Failure.NONE if task in ("t0", "t1") else Failure.POLICY,
        )
        for task in ("t0", "t1", "t2", "t3")
        for lost in (False, task in infra)
    ]
    path.write_text("".join(t.to_json() + "\n" for t in trajs))
    return path


def test_compare_says_over_how_many_tasks_each_figure_was_computed(tmp_path: Path) -> None:
    # pass@2 is defined on t0 and t1 alone once B lost a sample of t2 and t3: A's 100% there is
    # over those 2 tasks (its pass@2 over all 4 is 50%), and the table must say so.
    a, b = _outcomes(tmp_path / "a.jsonl"), _outcomes(tmp_path / "b.jsonl", infra=("t2", "t3"))
    result = invoke("compare", str(a), str(b))
    assert result.exit_code == 0, result.output
    assert "B - A on 4 shared tasks" in result.output
    header = next(line for line in result.output.splitlines() if "figure" in line)
    assert [cell.strip() for cell in header.strip("┃ ").split("┃")][:4] == ["figure", "tasks", "A", "B"]
    cells = {
        row[0]: row[1:]
        for line in result.output.splitlines()
        if line.startswith("│ ") and (row := [cell.strip() for cell in line.strip("│ ").split("│")])
    }
    assert cells["pass@1"][:3] == ["4", "50.0%", "50.0%"]
    assert cells["pass@2"][:3] == ["2", "100.0%", "100.0%"]
    assert "pass@2, pass^2, disagreement: over fewer than the 4 shared tasks" in " ".join(result.output.split())


def test_compare_of_a_hostile_result_file_is_one_line(tmp_path: Path) -> None:
    good = _results(tmp_path, "good", 0.5, 0)
    for name, change in (
        ("counts", lambda d: d["tasks"][0].update(successes=d["tasks"][0]["n"] + 5)),
        ("bootstrap", lambda d: d.update(n_bootstrap=10**12)),  # was 7 TiB of resamples
    ):
        data = json.loads(good.read_text())
        change(data)
        bad = tmp_path / f"{name}.json"
        bad.write_text(json.dumps(data))
        result = invoke("compare", str(bad), str(good))
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"error: A: {bad} is not an evaluation result")
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_eval_compare_to_a_baseline_and_report(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    assert invoke("eval", "arithmetic-v0", "-n", "3", "-k", "2", "--json", str(base)).exit_code == 0
    report = tmp_path / "eval.html"
    result = invoke("eval", "arithmetic-v0", "-n", "3", "-k", "2", "--compare-to", str(base), "--report", str(report))
    assert result.exit_code == 0, result.output
    assert "B - A on 3 shared tasks" in result.output
    assert f"wrote {report}" in result.output
    page = report.read_text()
    assert 'id="ae-index"' in page and "Comparison" in page and "pass@2" in page


def test_eval_with_a_bad_baseline_fails_before_running(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = invoke("eval", "arithmetic-v0", "--compare-to", str(bad))
    assert result.exit_code == 2 and result.stderr.startswith("error: --compare-to:")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # the policy retries with backoff (about 2-3 s) before it gives up
def test_eval_stops_with_code_1_when_the_policy_cannot_be_reached(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    result = invoke("eval", "arithmetic-v0", "--policy", "openai", "--base-url", url, "--model", "m", "-n", "40",
                    "--out", str(out))  # fmt: skip
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: the policy could not be reached, so nothing was evaluated")
    assert "Connection refused" in result.stderr
    assert "pass@1" not in result.output  # no table of infra failures
    # It stopped after the first episodes instead of running all 40 into the same wall.
    assert 0 < len(out.read_text().splitlines()) <= default_concurrency()


def test_eval_exits_1_when_the_policy_failed_in_some_episodes() -> None:
    from tests.openai_server import OpenAIServer, Reply, Request, chat_reply, tool_call

    answered = [0]

    def model(request: Request) -> Reply:
        answered[0] += 1
        if answered[0] > 4:
            return Reply({"error": {"message": "model overloaded"}}, status=400)
        return chat_reply(None, tool_calls=[tool_call("submit", {"answer": 0})])

    server = OpenAIServer(model).start()
    try:
        result = invoke("eval", "arithmetic-v0", "--policy", "openai", "--base-url", server.base_url, "--model", "m",
                        "-n", "12", "--concurrency", "4")  # fmt: skip
    finally:
        server.stop()
    assert result.exit_code == 1, result.output
    assert "pass@1" in result.output  # the figures of what ran are printed
    assert "error: the policy failed in 8 of 12 episodes" in result.stderr and "model overloaded" in result.stderr


def test_report_of_a_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    result = invoke("report", str(tmp_path / "nope"))
    assert result.exit_code == 2 and "no such directory" in result.stderr
    result = invoke("report", str(tmp_path), "--embed", "-1")
    assert result.exit_code == 2 and "--embed must be >= 0" in result.stderr


def test_report_of_an_evaluation_result_says_it_holds_no_episodes_in_one_line(tmp_path: Path) -> None:
    result_file = _results(tmp_path, "r", 0.5, 0)
    result = invoke("report", str(result_file))
    assert result.exit_code == 2, result.output
    error = result.stderr.strip()
    assert len(error.splitlines()) == 1 and "Traceback" not in result.output
    assert error.startswith(f"error: {result_file} is an evaluation result (agentenv eval --json), not trajectories")
    assert "agentenv eval --out" in error and "agentenv compare" in error
    assert not (tmp_path / "r.html").exists()


# -- files: no output replaces an input or another output -----------------------------------


def _lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_eval_refuses_an_out_that_is_its_baseline_and_keeps_the_baseline(tmp_path: Path) -> None:
    base = tmp_path / "base.jsonl"
    assert invoke("eval", "arithmetic-v0", "-n", "3", "--seed", "100", "--out", str(base)).exit_code == 0
    before = base.read_bytes()
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(base)
    for out in (base, alias, tmp_path / "sub" / ".." / "base.jsonl"):  # the same file by any name
        for extra in ([], ["--append"]):
            result = invoke("eval", "arithmetic-v0", "-n", "3", "--compare-to", str(base), "--out", str(out), *extra)
            assert result.exit_code == 2, result.output
            assert result.stderr.startswith("error: --out and --compare-to name the same file")
            assert "give --out another path" in result.stderr and "Traceback" not in result.output
            assert "trajectories" not in result.output  # refused before any episode ran
    assert base.read_bytes() == before


@pytest.mark.parametrize(("first", "second"), [("--out", "--json"), ("--out", "--report"), ("--json", "--report")])
def test_eval_refuses_two_outputs_naming_one_file_before_writing_either(
    tmp_path: Path, first: str, second: str
) -> None:
    target = tmp_path / "same.jsonl"
    target.write_text("what was here\n")
    result = invoke("eval", "arithmetic-v0", "-n", "3", first, str(target), second, str(target))
    assert result.exit_code == 2, result.output
    assert f"error: {second} and {first} name the same file" in result.stderr
    assert target.read_text() == "what was here\n"  # nothing written, not even truncated


def test_compare_refuses_to_write_its_json_over_an_input(tmp_path: Path) -> None:
    a, b = _results(tmp_path, "a", 0.2, 0), _results(tmp_path, "b", 0.9, 1)
    before = b.read_bytes()
    result = invoke("compare", str(a), str(b), "--json", str(b))
    assert result.exit_code == 2 and "error: --json and B name the same file" in result.stderr
    assert b.read_bytes() == before


def test_report_refuses_to_write_over_the_trajectories_it_reads(tmp_path: Path) -> None:
    out = tmp_path / "eval.jsonl"
    assert invoke("eval", "arithmetic-v0", "-n", "2", "--out", str(out)).exit_code == 0
    before = out.read_bytes()
    result = invoke("report", str(out), "--out", str(out))
    assert result.exit_code == 2 and "error: --out and RUN_DIR name the same file" in result.stderr
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward/task": 0.5}\n')
    result = invoke("report", str(run), "--out", str(run / "metrics.jsonl"))
    assert result.exit_code == 2 and "is a file of the run" in result.stderr
    assert out.read_bytes() == before and (run / "metrics.jsonl").read_text() == '{"step": 1, "reward/task": 0.5}\n'
    assert invoke("report", str(run), "--out", str(run / "report.html")).exit_code == 0  # a report replaces a report


@pytest.mark.parametrize("command", [["eval", "arithmetic-v0"], ["play", "arithmetic-v0"], ["forecast", "."]])
def test_a_negative_seed_is_a_usage_error_before_anything_runs(command: list[str], tmp_path: Path) -> None:
    # Gymnasium and numpy refuse negative seeds: eval ran 3 of 4 episodes as infra, then died.
    out = tmp_path / "neg.jsonl"
    extra = ["--out", str(out)] if command[0] == "eval" else []
    result = invoke(*command, "--seed", "-3", *extra)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--seed'" in result.output and "Traceback" not in result.output
    assert not out.exists()


# -- train: errors name the file, never a traceback ----------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("dir.toml", None, "is a directory"),
        ("big.toml", b"seed = " + b"9" * 5000 + b"\n", "invalid TOML: an integer of more than 4300 digits"),
        ("bad.toml", b"seed = 1\n# \xff\n", "not UTF-8 text: byte 0xff"),
        ("deep.toml", b"a = " + b"[" * 3000 + b"]" * 3000 + b"\n", "invalid TOML: nested too deeply"),
        ("deep.yaml", b"a: " + b"[" * 3000 + b"]" * 3000 + b"\n", "invalid YAML: nested too deeply"),
    ],
)
def test_train_with_an_unreadable_config_names_the_file_in_one_line(
    tmp_path: Path, name: str, content: bytes | None, expected: str
) -> None:
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    result = invoke("train", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and str(path) in result.stderr and expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_train_refuses_an_output_dir_holding_another_run_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"seed": 1, "steps": 2}))
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    config = tmp_path / "b.toml"
    config.write_text(f'output_dir = "{run}"\nsteps = 1\nresume = false\nreport_to = []\n')
    result = invoke("train", str(config))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: output_dir {run} holds a run of another config")
    assert "choose another output_dir" in result.stderr and f"delete {run} first" in result.stderr
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "metrics.jsonl"]
    assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'


def test_an_error_the_training_run_stops_on_is_one_line_with_code_1(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch")
    from agentenv.trainers import GRPOTrainer

    def diverged(self: GRPOTrainer) -> list[dict[str, Any]]:
        raise ValueError("the next-token probabilities hold NaN or inf, or a row is all zero: check the logits")

    monkeypatch.setattr(GRPOTrainer, "train", diverged)
    config = tmp_path / "run.toml"
    config.write_text(f'output_dir = "{tmp_path / "run"}"\nsteps = 1\nreport_to = []\n')
    result = invoke("train", str(config))
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: training stopped: the next-token probabilities hold NaN or inf")
    assert len(result.stderr.splitlines()) == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_the_curve_train_prints_shows_a_resumed_runs_rows_whatever_their_values(tmp_path: Path, monkeypatch) -> None:
    """A resumed run's earlier rows are read back from metrics.jsonl; an edited value (a
    string, a list) failed the printing with a traceback once the run had finished."""
    pytest.importorskip("torch")
    from agentenv.trainers import GRPOTrainer

    rows = [
        {"step": 5, "success_rate": "x", "reward/task": [1], "eval/success_rate": "y"},
        {"step": 6, "success_rate": 0.5, "reward/task": True, "eval/success_rate": None},
    ]
    monkeypatch.setattr(GRPOTrainer, "train", lambda self: rows)
    config = tmp_path / "run.toml"
    config.write_text(f'output_dir = "{tmp_path / "run"}"\nsteps = 1\nreport_to = []\n')
    result = invoke("train", str(config))
    assert result.exit_code == 0, result.output
    assert "learning curve" in result.stdout and "50%" in result.stdout
