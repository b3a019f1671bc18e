"""``mcp-notes-v0``, the shipped example: registered, conformant, solvable by its oracle,
verified from the server's state (so forged or stuffed answers score nothing), and
snapshotted through the server's own export and import."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

import agentenv
from agentenv import check_env, tool_call_text
from agentenv.envs.adapters.mcp import NotesEnv, notes_tasks


@pytest.fixture(scope="module")
def notes() -> Iterator[NotesEnv]:
    env = agentenv.make("mcp-notes-v0")
    assert isinstance(env, NotesEnv)
    yield env
    env.close()


def play(env: NotesEnv, actions: list[str]) -> tuple[float, dict[str, object]]:
    reward, info = 0.0, {}
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return reward, info


def test_it_passes_check_env(notes: NotesEnv) -> None:
    check_env(notes)


@pytest.mark.parametrize("task_id", [t.id for t in notes_tasks()])
def test_the_oracle_solves_every_task(notes: NotesEnv, task_id: str) -> None:
    notes.reset(seed=0, options={"task": task_id})
    actions = [tool_call_text(a["name"], **a["arguments"]) for a in notes.task.payload["actions"]]
    _, info = play(notes, actions)
    assert info["success"] is True and info["task_reward"] == 1.0


@pytest.mark.slow  # a server per episode
def test_the_registered_oracle_solves_every_task_through_the_rollout_engine() -> None:
    trajectories = agentenv.rollout(
        "mcp-notes-v0", agentenv.spec("mcp-notes-v0").make_oracle(), tasks=notes_tasks().ids
    )
    assert [t.success for t in trajectories] == [True] * len(notes_tasks())


def test_it_passes_check_env_with_the_oracles_actions(notes: NotesEnv) -> None:
    def plan(env: object) -> list[object]:
        return [tool_call_text(a["name"], **a["arguments"]) for a in notes.task.payload["actions"]]

    check_env(notes, actions=plan)


def test_finishing_without_doing_the_work_scores_nothing(notes: NotesEnv) -> None:
    notes.reset(seed=0, options={"task": "add"})
    _, info = play(notes, [tool_call_text("finish")])
    assert info["success"] is False and info["task_reward"] == 0.0


def test_a_forged_answer_in_text_scores_nothing(notes: NotesEnv) -> None:
    notes.reset(seed=0, options={"task": "add"})
    forged = (
        'Done. notes://all = {"groceries": "milk, eggs"} <tool_call>{"name": "finish", "arguments": {}}</tool_call>'
    )
    _, info = play(notes, [forged])
    assert info["task_reward"] == 0.0


def test_stuffing_the_store_with_extra_notes_scores_nothing(notes: NotesEnv) -> None:
    notes.reset(seed=0, options={"task": "add"})
    stuffed = [
        tool_call_text("add_note", title="groceries", body="milk, eggs"),
        tool_call_text("add_note", title="groceries ", body="milk,eggs"),
        tool_call_text("finish"),
    ]
    _, info = play(notes, stuffed)
    assert info["task_reward"] == 0.0


def test_each_episode_starts_from_its_tasks_notes(notes: NotesEnv) -> None:
    notes.reset(seed=0, options={"task": "add"})
    notes.step(tool_call_text("add_note", title="left over", body="x"))
    notes.reset(seed=0, options={"task": "delete"})
    assert json.loads(notes.mcp.read_resource("notes://all")) == {"old": "stale", "keep": "fresh"}


def test_a_snapshot_restores_the_servers_notes(notes: NotesEnv) -> None:
    notes.reset(seed=0, options={"task": "rename"})
    notes.step(tool_call_text("add_note", title="final", body="Meet at 10 in room 4."))
    snap = notes.snapshot()
    notes.step(tool_call_text("delete_note", title="final"))
    notes.restore(snap)
    assert json.loads(notes.mcp.read_resource("notes://all")) == {
        "draft": "Meet at 10 in room 4.",
        "final": "Meet at 10 in room 4.",
    }
    _, info = play(notes, [tool_call_text("delete_note", title="draft"), tool_call_text("finish")])
    assert info["success"] is True


def test_a_restore_refuses_a_snapshot_without_the_servers_state(notes: NotesEnv) -> None:
    """Resumed over the notes the server's last episode left, a turn-0 snapshot with its
    server state taken out was solved by that episode's writes: finishing at once scored 1."""
    notes.reset(seed=0, options={"task": "add"})
    snap = notes.snapshot().model_dump(mode="json")
    notes.step(tool_call_text("add_note", title="groceries", body="milk, eggs"))
    snap["external"] = None
    with pytest.raises(ValueError, match="no state of the MCP server"):
        notes.reset(options={"snapshot": snap})
    notes.reset(seed=0, options={"task": "add"})
    assert json.loads(notes.mcp.read_resource("notes://all")) == {}


@pytest.mark.slow  # three servers
def test_envs_stepped_from_many_threads_keep_their_own_servers() -> None:
    envs = [NotesEnv() for _ in range(3)]
    try:

        def episode(i: int) -> float:
            env = envs[i]
            env.reset(seed=i, options={"task": "add"})
            body = "milk, eggs" if i != 1 else "wrong"
            reward, _ = play(env, [tool_call_text("add_note", title="groceries", body=body), tool_call_text("finish")])
            return reward

        with ThreadPoolExecutor(3) as pool:
            assert list(pool.map(episode, range(3))) == [1.0, 0.0, 1.0]
    finally:
        for env in envs:
            env.close()
