"""Run directories for the report tests: a real one from the trainer (a tiny model, two
steps, the failure miner and held-out evaluations on), and hand-made ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentenv import Task, TaskMeta, ToolCall, Trajectory
from agentenv.core.env import Transition
from agentenv.core.types import Failure


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory the trainer leaves after two steps on two registered envs."""
    torch = pytest.importorskip("torch")
    from agentenv.trainers import GRPOConfig, GRPOTrainer

    run = tmp_path_factory.mktemp("trained") / "run"
    config = GRPOConfig(
        output_dir=str(run),
        envs={"arithmetic-v0": 1.0, "guess-number-v0": 1.0},
        steps=2,
        group_size=2,
        batch_size=8,
        max_new_tokens=8,
        max_seq_len=512,
        tool_prompt="compact",
        eval_episodes=8,
        eval_every=1,
        save_every=1,
        report_to=[],
        resume=False,
        miner={"solved_threshold": 0.5, "solved_window": 2},
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        GRPOTrainer("tiny", config=config).train()
    finally:
        torch.set_num_threads(threads)
    return run


HOSTILE = {
    "script": "</script><script>window.__pwned = 1</script><!-- <script>",
    "markup": '<img src=x onerror="window.__pwned = 2"><b>bold?</b> &amp; &lt;',
    "controls": "nul\x00 bell\x07 esc\x1b[31m del\x7f c1\x85 sep\u2028\u2029 end",
    "surrogate": "lone \udc80 and \ud83d half",
    "huge": "x" * 300_000,
}
"""Text a policy could write, each aimed at a way of breaking out of the page."""


def hostile_trajectory(step_reward: float = 0.0) -> Trajectory:
    """One episode whose action, observation, task, state diff and reward names carry `HOSTILE` text."""
    actions = [HOSTILE["script"], HOSTILE["markup"], HOSTILE["controls"], HOSTILE["surrogate"], HOSTILE["huge"]]
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Do the thing </script>."},
    ]
    transitions = []
    for turn, action in enumerate(actions):
        observation = [{"role": "tool", "content": f"echo: {action[:200]}", "name": "echo"}]
        messages += [{"role": "assistant", "content": action}, *observation]
        transitions.append(
            Transition(
                turn=turn,
                action=action,
                calls=[ToolCall(name="echo", arguments={"text": action[:100]})],
                observation=observation,
                rewards={"</script>format": step_reward},
                task_rewards={},
                state_diff=[{"op": "add", "path": "/said/</script>", "value": {"<b>": action[:100]}}],
                duration_s=0.001,
            )
        )
    return Trajectory(
        env_id="evil</script>-v0",
        task=Task(id="<script>alert(1)</script>", prompt=HOSTILE["markup"], metadata=TaskMeta(family="<i>fam</i>")),
        seed=1,
        messages=messages,
        transitions=transitions,
        rewards=[step_reward] * len(actions),
        task_reward=0.0,
        success=False,
        failure=Failure.POLICY,
    )


def write_steps(run: Path, steps: dict[int, list[str]], folder: str = "trajectories") -> None:
    """JSONL files of the given lines, one per step, as the trainer names them."""
    (run / folder).mkdir(parents=True, exist_ok=True)
    for step, lines in steps.items():
        (run / folder / f"step-{step:06d}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


CORRUPT_STATES = {
    "a list": ("[1, 2]", "not a readable trainer state (Input should be an object)"),
    "a ledger that is a list": (
        json.dumps({"step": 1, "sampler": {"ledger": [1]}}),
        "not a readable miner state (sampler.ledger: Input should be a valid dictionary)",
    ),
    "nesting past recursion": (
        '{"step": 1, "sampler": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "not a readable trainer state (Invalid JSON: recursion limit exceeded",
    ),
    "no step": (json.dumps({"sampler": {"ledger": {}}}), "not a readable trainer state (step: Field required)"),
}
"""trainer_state.json files a crashed disk or another program could leave, and what is said of each."""


def write_checkpoint(run: Path, state: str) -> Path:
    """A run directory with miner metrics and ``state`` as its latest checkpoint's trainer_state.json."""
    (run / "checkpoints" / "step-000001").mkdir(parents=True)
    (run / "checkpoints" / "latest").write_text("step-000001")
    path = run / "checkpoints" / "step-000001" / "trainer_state.json"
    path.write_text(state)
    (run / "metrics.jsonl").write_text('{"step": 1, "miner/pool/active": 3}\n')
    return path
