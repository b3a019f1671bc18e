"""Env workers on Ray (`agentenv.rollout.ray`), on a local Ray started once for the module."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import sys
import threading

import pytest

from agentenv import Env, ScriptedPolicy, State, Task, TaskSet, Trajectory, rollout, tool, tool_call_text
from agentenv.rollout import Executor
from agentenv.rollout.ray import RayClusterError, RayConfig, RayExecutor
from tests.toy_envs import CounterEnv

COUNTER = "tests.toy_envs:CounterEnv"


def reach_two(conversation):
    """Solves task t0 (reach 2) in three turns."""
    return tool_call_text("add", amount=1) if conversation.turn < 2 else tool_call_text("submit")


class SeededPolicy:
    """Random but seeded: adds 1, 2 or 13 (a tool error), or submits; each conversation's
    action depends on the batch it came in, so the two executors must batch alike."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def act(self, conversations):
        actions = []
        for _ in conversations:
            roll = self.rng.random()
            if roll < 0.25:
                actions.append(tool_call_text("submit"))
            else:
                actions.append(tool_call_text("add", amount=self.rng.choice([1, 2, 13])))
        return actions


class KillsAnActor:
    """On its second call, kills the actor in slot 0 of ``executor`` (as a lost node would)."""

    def __init__(self, executor: RayExecutor) -> None:
        self.executor, self.calls = executor, 0

    def act(self, conversations):
        import ray

        self.calls += 1
        if self.calls == 2:
            ray.kill(self.executor.actors[0], no_restart=True)
        return [reach_two(c) for c in conversations]


def _comparable(traj) -> dict:
    """The trajectory less its timings (``duration_s`` of the episode and of each turn)."""
    data = traj.model_dump(mode="json")
    data.pop("duration_s")
    for transition in data["transitions"]:
        transition.pop("duration_s")
    return data


def test_config_errors_name_the_field_and_the_fix():
    with pytest.raises(ValueError, match="address must be None, 'auto', 'local', 'HOST:PORT'"):
        RayConfig(address="not an address")
    with pytest.raises(ValueError, match="actors"):
        RayConfig(actors=0)
    for field in ("actor_cpus", "start_timeout_s", "step_timeout_s"):  # infinite CPUs fit no node; no endless waits
        with pytest.raises(ValueError, match=field):
            RayConfig(**{field: float("inf")})


def test_a_ray_executor_is_an_executor_and_starts_nothing_until_used():
    executor = RayExecutor(actors=3)
    assert isinstance(executor, Executor) and executor.actors == []


def test_without_ray_installed_the_message_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails
    with pytest.raises(ImportError, match=r"pip install 'agentenv\[ray\]'"):
        rollout(COUNTER, ScriptedPolicy(lambda c: ""), n=1, executor="ray")


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a cluster left running
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def executor(local_ray):
    with RayExecutor(actors=2, actor_cpus=0.5) as ex:
        yield ex


@pytest.mark.slow
@pytest.mark.parametrize("env", [COUNTER, CounterEnv], ids=["id", "factory"])
def test_the_same_trajectories_as_the_thread_executor(executor, tmp_path, env):
    kwargs = {"tasks": ["t0", "t1", "t2", "t3", "t4", "t0", "t1"], "seed": 7, "concurrency": 5}
    local = rollout(env, SeededPolicy(3), **kwargs)
    out = tmp_path / "ray.jsonl"
    on_ray = rollout(env, SeededPolicy(3), executor=executor, out=out, **kwargs)
    assert [_comparable(t) for t in on_ray] == [_comparable(t) for t in local]
    assert {t.failure for t in local} > {"none"}  # tool errors and wrong answers, not only successes
    # Every finished trajectory reached the file (in the order they finished).
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((d["task"]["id"], d["seed"]) for d in written) == sorted((t.task.id, t.seed) for t in local)


def _cannot_unpickle():
    raise RuntimeError("fails when unpickled")


class _FailsOnTheActor:
    def __reduce__(self):
        return (_cannot_unpickle, ())


@pytest.mark.slow
@pytest.mark.parametrize("bad", [threading.Lock, _FailsOnTheActor], ids=["unpicklable", "fails-when-unpickled"])
def test_an_output_ray_cannot_send_is_that_episodes_format_error_as_with_threads(executor, bad):
    # Before, the first lost the whole rollout and the second every episode of its actor (as infra).
    def act(c):
        if c.task.id == "t1" and c.turn == 0:
            return bad()
        return reach_two(c)

    tasks = ["t0", "t1", "t0", "t1"]
    local = rollout(COUNTER, ScriptedPolicy(act), tasks=tasks)
    on_ray = rollout(COUNTER, ScriptedPolicy(act), tasks=tasks, executor=executor)

    def outcome(t):  # the refused object's repr, recorded as the action, holds its address
        return t.task.id, t.failure, t.rewards, [(tr.error_kind, tr.error) for tr in t.transitions]

    assert [outcome(t) for t in on_ray] == [outcome(t) for t in local]
    assert [t.transitions[0].error_kind for t in on_ray] == [None, "format", None, "format"]


@pytest.mark.slow
def test_a_lost_actor_fails_its_episodes_as_infra_and_is_replaced(executor):
    policy = KillsAnActor(executor)
    lost = executor.actors[0]
    trajs = rollout(COUNTER, policy, tasks=["t0"] * 6, executor=executor)
    # Episodes go to the actor with the fewest live ones: 0, 2, 4 ran on slot 0.
    assert [t.failure for t in trajs] == ["infra", "none", "infra", "none", "infra", "none"]
    assert all("Ray actor running this episode was lost" in t.error for t in trajs[::2])
    assert trajs[0].task.id == "t0" and trajs[0].messages  # what was seen of it is kept
    assert executor.actors[0] is not lost
    again = rollout(COUNTER, ScriptedPolicy(reach_two), tasks=["t0"] * 4, executor=executor)
    assert [t.success for t in again] == [True] * 4


class HandlesEnv(Env[State]):
    """An env that puts objects of its own where Ray must pickle them, by task: in the task
    itself, in an observation, in its snapshots, or (``on-caller``) a snapshot that pickles
    on the actor but fails when the caller reads it."""

    max_turns = 2

    def default_tasks(self) -> TaskSet:
        handle = {"in-task": {"handle": threading.Lock()}}
        ids = ["plain", "in-task", "in-intro", "in-snapshot", "on-caller"]
        return TaskSet(Task(id=i, prompt="Finish.", payload=handle.get(i, {})) for i in ids)

    def render_intro(self, task: Task) -> list[dict[str, object]]:
        message: dict[str, object] = {"role": "user", "content": task.prompt}
        if task.id == "in-intro":
            message["handle"] = threading.Lock()
        return [message]

    def snapshot_external(self) -> object:
        return {"in-snapshot": threading.Lock, "on-caller": _FailsOnTheActor}.get(self.task.id, lambda: None)()

    @tool(terminal=True)
    def finish(self) -> str:
        """Finish."""
        return "done"

    def verify(self, task: Task) -> float:
        return 1.0


@pytest.mark.slow
def test_news_ray_cannot_carry_fails_its_episode_alone(executor, tmp_path):
    # Before, the whole actor's call failed: every episode on it ended as infra, the actor replaced.
    # Episodes alternate between the two actors: each has two plain ones beside two that fail.
    tasks = ["plain", "plain", "in-task", "in-intro", "plain", "plain", "in-snapshot", "on-caller"]
    policy = ScriptedPolicy(lambda c: tool_call_text("finish"))
    out = tmp_path / "ray.jsonl"
    actors = list(executor.actors)
    trajs = rollout(HandlesEnv, policy, tasks=tasks, executor=executor, keep_snapshots=True, out=out)
    assert [(t.task.id, t.failure) for t in trajs if t.task.id == "plain"] == [("plain", "none")] * 4
    assert all(t.success for t in trajs if t.task.id == "plain")
    sent = "the episode's data cannot be sent from its Ray actor: TypeError"
    said = {t.task.id: t.error for t in trajs if t.task.id != "plain"}
    assert [t.failure for t in trajs if t.task.id != "plain"] == ["infra"] * 4
    assert all(said[i].startswith(sent) for i in ("in-task", "in-intro", "in-snapshot")), said
    assert said["on-caller"].startswith("the episode's data from its Ray actor cannot be read here: RuntimeError")
    assert executor.actors == actors, "no actor was lost or replaced"
    assert len(out.read_text().splitlines()) == len(tasks)  # every trajectory, written out
    again = rollout(HandlesEnv, policy, tasks=["plain"] * 2, executor=executor)
    assert [t.success for t in again] == [True, True]


class StopsAnActor:
    """On its second call, stops (SIGSTOP) the process of the actor in slot 0: alive, and
    answering nothing."""

    def __init__(self, executor: RayExecutor) -> None:
        self.executor, self.calls, self.stopped = executor, 0, None

    def act(self, conversations):
        import ray

        self.calls += 1
        if self.calls == 2:
            self.stopped = int(ray.get(self.executor.actors[0].ready.remote()).rsplit(":", 1)[1])
            os.kill(self.stopped, signal.SIGSTOP)
        return [reach_two(c) for c in conversations]


def _resume_if_stopped(pid: int | None) -> None:
    """Ray kills a stopped actor it gives up on; should one still be stopped, let it go on
    (to its end). Only that Ray worker, never a process that took its pid since."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            ray_worker = b"ray" in f.read()
    except (OSError, TypeError, IndexError):
        return
    if state == "T" and ray_worker:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_stopped_actor_ends_its_episodes_as_infra_by_the_deadline_and_is_replaced(local_ray):
    from agentenv.core._deadline import run_within

    with RayExecutor(actors=2, actor_cpus=0.25, step_timeout_s=3) as executor:
        policy, stopped = StopsAnActor(executor), executor.actors[0]
        try:
            done = run_within(120, lambda: rollout(COUNTER, policy, tasks=["t0"] * 4, executor=executor), name="t")
        finally:
            _resume_if_stopped(policy.stopped)
        assert done is not None, "the batch stalled"
        trajs = done.result()
        # Episodes go to the actor with the fewest live ones: 0 and 2 ran on slot 0.
        assert [t.failure for t in trajs] == ["infra", "none", "infra", "none"]
        assert all("did not answer within step_timeout_s=3 s" in t.error for t in trajs[::2])
        assert trajs[0].messages and executor.actors[0] is not stopped
        again = rollout(COUNTER, ScriptedPolicy(reach_two), tasks=["t0"] * 4, executor=executor)
        assert [t.success for t in again] == [True] * 4


@pytest.mark.slow
def test_actors_the_cluster_has_no_room_for_are_one_clear_error(local_ray):
    with pytest.raises(RayClusterError, match=r"did not start within 1 s; each asks for 64 CPU .* lower ray.actors"):
        RayExecutor(actors=1, actor_cpus=64, start_timeout_s=1).start()


def _closed_port() -> int:
    with socket.socket() as s:  # bound, then closed: nobody listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_cluster_is_one_clear_error():
    pytest.importorskip("ray")
    port = _closed_port()
    with pytest.raises(RayClusterError, match=rf"no Ray cluster answers at 127.0.0.1:{port} .*ray start --head"):
        rollout(COUNTER, ScriptedPolicy(lambda c: ""), n=1, executor=RayExecutor(address=f"127.0.0.1:{port}"))


def test_agentenv_train_says_the_cluster_is_unreachable_in_one_line(tmp_path):
    pytest.importorskip("ray")
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from agentenv.cli import app

    port = _closed_port()
    config = tmp_path / "config.toml"
    config.write_text(f'envs = ["arithmetic-v0"]\nsteps = 1\n\n[ray]\naddress = "127.0.0.1:{port}"\n')
    result = CliRunner().invoke(app, ["train", str(config), "--output-dir", str(tmp_path / "run")])
    assert result.exit_code != 0
    assert f"error: no Ray cluster answers at 127.0.0.1:{port}" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_trainer_with_ray_takes_the_same_step_as_with_threads(local_ray, tmp_path):
    """The trainer's ``ray`` option: the same episodes (so the same update) as threads."""
    torch = pytest.importorskip("torch")
    from agentenv.trainers import GRPOConfig, GRPOTrainer
    from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    models, episodes = [], []
    for name, ray_config in [("threads", None), ("ray", {"actors": 1, "actor_cpus": 0.5})]:
        cfg = GRPOConfig(
            output_dir=str(tmp_path / name),
            steps=1,
            group_size=2,
            batch_size=4,
            max_new_tokens=8,
            max_seq_len=128,
            eval_episodes=0,
            report_to=[],
            resume=False,
            ray=ray_config,
        )
        trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg)
        trainer.train()
        models.append(trainer.model)
        lines = (tmp_path / name / "trajectories" / "step-000001.jsonl").read_text().splitlines()
        episodes.append([_comparable(Trajectory.model_validate_json(line)) for line in lines])
    assert len(episodes[0]) == 4 and episodes[0] == episodes[1]
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert torch.equal(a, b)
