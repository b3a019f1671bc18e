"""`agentenv.export`: real episodes of the tool-API env (GRPO-style groups whose rewards
differ, a group that ties, infra failures), written as a run directory and as an
``eval --out`` JSONL, exported in each format and read back with `datasets.load_from_disk`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import agentenv
from agentenv import PolicyFailure, ScriptedPolicy, Trajectory, rollout, tool_call_text
from agentenv.core.types import Failure
from agentenv.export import NothingToExport, conversation, dpo_pair, export, to_dataset
from tests.toy_envs import CounterEnv

datasets = pytest.importorskip("datasets")

ENV = "calendar-v0"
GROUPS = [0, 1, 2]
"""The reset seeds of the mixed groups: 4 samples each, two solved, one not, one lost to infra."""
TIE = 3
"""The seed of a group of 2 whose samples both solve: no preference pair."""


def _policy() -> ScriptedPolicy:
    oracle = agentenv.spec(ENV).make_oracle()

    def act(c):  # conversation ids follow the episodes asked for: 4 per mixed group, then the tie
        if c.id >= 4 * len(GROUPS) or c.id % 2 == 0:
            return oracle.act([c])[0]
        if c.id % 4 == 3:
            return PolicyFailure(error="HTTP 503")
        return "Let me answer right away. " + tool_call_text("respond", message="I cannot help with that.")

    return ScriptedPolicy(act)


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Trajectory], Path]:
    """The episodes and the JSONL file ``rollout(out=...)`` wrote (what ``eval --out`` writes)."""
    out = tmp_path_factory.mktemp("eval") / "calendar.jsonl"
    seeds = [s for s in GROUPS for _ in range(4)] + [TIE, TIE]
    trajs = rollout(ENV, _policy(), seeds=seeds, out=out, concurrency=4)
    assert [t.failure for t in trajs[:4]] == [Failure.NONE, Failure.POLICY, Failure.NONE, Failure.INFRA]
    assert [t.task_reward for t in trajs[:3]] == [1.0, 0.0, 1.0]
    return trajs, out


@pytest.fixture(scope="module")
def run_dir(episodes: tuple[list[Trajectory], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory as the trainer lays it out: two steps of training episodes, one evaluation."""
    trajs, _ = episodes
    run = tmp_path_factory.mktemp("run") / "tiny"
    for folder, step, part in (("trajectories", 1, trajs[:8]), ("trajectories", 2, trajs[8:]), ("evals", 2, trajs[:4])):
        (run / folder).mkdir(parents=True, exist_ok=True)
        (run / folder / f"step-{step:06d}.jsonl").write_text("".join(t.to_json() + "\n" for t in part))
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    return run


def _tool_names() -> list[str]:
    env = agentenv.make(ENV)
    try:
        return [s["function"]["name"] for s in env.tool_schemas()]
    finally:
        env.close()


# -- sft ---------------------------------------------------------------------------


def test_sft_rows_are_the_solved_episodes_with_openai_tool_calls(episodes) -> None:
    trajs, _ = episodes
    ds = to_dataset(trajs, "sft")
    solved = [i for i, t in enumerate(trajs, 1) if t.success]
    assert [int(r) for r in ds["episode_id"]] == solved and set(ds["task_reward"]) == {1.0}
    assert set(ds["env_id"]) == {ENV}
    for row in ds:
        messages = row["messages"]
        assert [m["role"] for m in messages[:2]] == ["system", "user"]
        assert [m["role"] for m in messages[2:]] == ["assistant", "tool"] * ((len(messages) - 2) // 2)
        assert messages[0]["content"] == trajs[int(row["episode_id"]) - 1].messages[0]["content"]  # kept whole
        for reply, result in zip(messages[2::2], messages[3::2], strict=True):
            (call,) = reply["tool_calls"]
            assert call["type"] == "function" and isinstance(call["function"]["arguments"], dict)
            assert call["id"] == result["tool_call_id"] and call["function"]["name"] == result["name"]
            assert "<tool_call>" not in reply["content"]  # the calls are in tool_calls, not twice
        assert messages[-2]["tool_calls"][0]["function"]["name"] == "respond"
        assert [t["function"]["name"] for t in row["tools"]] == _tool_names()


def test_sft_min_reward_keeps_unsolved_episodes_and_never_infra(episodes) -> None:
    trajs, _ = episodes
    ds = to_dataset(trajs, "sft", min_reward=0.0)
    assert len(ds) == sum(t.failure is not Failure.INFRA for t in trajs)
    unsolved = next(row for row in ds if row["task_reward"] == 0.0)
    reply = unsolved["messages"][2]
    assert reply["content"] == "Let me answer right away."  # the text outside the call markup
    assert reply["tool_calls"][0]["function"] == {
        "name": "respond",
        "arguments": {"message": "I cannot help with that."},
    }
    with pytest.raises(NothingToExport, match=r"none of the rest with a task reward >= 2.0"):
        to_dataset(trajs, "sft", min_reward=2.0)


def test_sft_rows_render_once_through_a_tool_calling_chat_template(episodes) -> None:
    # A Hermes-style template as chat templates are written for tools (Qwen's shape): it
    # renders tool_calls and tools itself, so a call kept in the content would show twice.
    render = pytest.importorskip("transformers.utils.chat_template_utils").render_jinja_template
    template = (
        "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>{% endif %}"
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
        "{% for c in m.tool_calls or [] %}<tool_call>{{ {'name': c.function.name, 'arguments': c.function.arguments}"
        " | tojson }}</tool_call>{% endfor %}<|end|>{% endfor %}"
    )
    trajs, _ = episodes
    row = to_dataset(trajs, "sft")[0]
    text = render([row["messages"]], tools=row["tools"], chat_template=template)[0][0]
    conversation_text = text.split("<|user|>", 1)[1]  # after the system prompt, whose format hint shows a call
    assert conversation_text.count("<tool_call>") == 3 and '"name": "authenticate", "arguments": {"email": ' in text
    assert text.count("<tools>") == 2  # the env's system prompt lists them too: said in the docs


# -- dpo ---------------------------------------------------------------------------


def test_dpo_pairs_the_best_and_the_worst_of_each_group_and_skips_ties(episodes) -> None:
    trajs, _ = episodes
    ds = to_dataset(trajs, "dpo")
    assert sorted(ds["seed"]) == GROUPS  # one pair per mixed group; the tie and infra give none
    for row in ds:
        assert row["chosen_reward"] > row["rejected_reward"]
        chosen, rejected = (trajs[int(row[k]) - 1] for k in ("chosen_episode", "rejected_episode"))
        assert chosen.seed == rejected.seed == row["seed"] and chosen.task.id == rejected.task.id == row["task_id"]
        assert (chosen.task_reward, rejected.task_reward) == (row["chosen_reward"], row["rejected_reward"])
        assert row["prompt"] + row["chosen"] == conversation(chosen)
        assert row["prompt"] + row["rejected"] == conversation(rejected)
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert row["chosen"][0]["role"] == row["rejected"][0]["role"] == "assistant"
        assert row["chosen"][0] != row["rejected"][0]
        assert row["chosen_episode"] == str(trajs.index(chosen) + 1)  # the first solved sample, in order


def test_dpo_prompt_runs_to_the_first_assistant_turn_that_differs() -> None:
    def act(c):  # the same first turn, then one episode reaches the target and the other overshoots
        if c.turn == 0:
            return tool_call_text("add", amount=1)
        return tool_call_text("submit") if c.turn == 2 or c.id == 1 else tool_call_text("add", amount=1)

    a, b = rollout(CounterEnv, ScriptedPolicy(act), tasks=["t0", "t0"], seeds=[5, 5])
    pair = dpo_pair([b, a])
    assert pair is not None and (pair.chosen_index, pair.rejected_index) == (1, 0)
    assert [m["role"] for m in pair.prompt] == ["system", "user", "assistant", "tool"]
    assert pair.prompt[2]["tool_calls"][0]["function"] == {"name": "add", "arguments": {"amount": 1}}
    assert pair.chosen[0]["tool_calls"][0]["function"]["name"] == "add"
    assert pair.rejected[0]["tool_calls"][0]["function"]["name"] == "submit"
    assert pair.prompt + pair.chosen == conversation(a) and pair.prompt + pair.rejected == conversation(b)
    assert dpo_pair([a, a]) is None and dpo_pair([a]) is None


def test_dpo_with_no_differing_group_says_what_the_groups_held(episodes) -> None:
    trajs, _ = episodes
    with pytest.raises(NothingToExport, match=r"of 1 groups .*0 have one episode and 1 tie"):
        to_dataset(trajs[-2:], "dpo")


# -- turns -------------------------------------------------------------------------


def test_turn_rows_carry_each_turn_with_rewards_that_sum_to_the_episode(episodes) -> None:
    trajs, _ = episodes
    ds = to_dataset(trajs, "turns")
    kept = [t for t in trajs if t.failure is not Failure.INFRA]
    assert len(ds) == sum(t.turns for t in kept)
    by_episode: dict[str, list[dict]] = {}
    for row in ds:
        by_episode.setdefault(row["episode_id"], []).append(row)
    assert len(by_episode) == len(kept)
    for episode_id, rows in by_episode.items():
        t = trajs[int(episode_id) - 1]
        messages = conversation(t)
        assert [r["turn"] for r in rows] == list(range(t.turns))
        assert sum(r["reward"] for r in rows) == pytest.approx(t.total_reward)
        assert [r["step_rewards"] for r in rows] == [tr.rewards for tr in t.transitions]
        for r in rows:
            at = len(r["context"])
            assert messages[: at + 1] == [*r["context"], r["reply"]] and r["reply"]["role"] == "assistant"
            assert (r["task_reward"], r["success"], r["env_id"], r["task_id"]) == (
                t.task_reward,
                t.success,
                ENV,
                t.task.id,
            )


# -- conversations -----------------------------------------------------------------


def test_api_tool_calls_keep_their_ids_with_arguments_as_objects() -> None:
    def act(c):
        if c.turn == 2:
            return tool_call_text("submit")
        call = {"id": f"api-{c.turn}", "type": "function", "function": {"name": "add", "arguments": '{"amount": 1}'}}
        return {"role": "assistant", "content": "adding", "tool_calls": [call]}

    (t,) = rollout(CounterEnv, ScriptedPolicy(act), tasks=["t0"])
    messages = conversation(t)
    assert messages[2] == {
        "role": "assistant",
        "content": "adding",
        "tool_calls": [{"id": "api-0", "type": "function", "function": {"name": "add", "arguments": {"amount": 1}}}],
    }
    assert messages[3]["tool_call_id"] == "api-0"


def test_a_reply_the_env_could_not_read_stays_as_written() -> None:
    def act(c):
        if c.turn == 0:
            return "<tool_call>{not json</tool_call>"
        return tool_call_text("add", amount=2) if c.turn == 1 else tool_call_text("submit")

    (t,) = rollout(CounterEnv, ScriptedPolicy(act), tasks=["t0"])
    assert t.success
    (row,) = to_dataset([t], "sft")
    bad, error = row["messages"][2:4]
    assert bad == {"role": "assistant", "content": "<tool_call>{not json</tool_call>"}
    assert error["role"] == "user" and error["content"].startswith("Error:")
    assert row["messages"][4]["tool_calls"][0]["function"]["arguments"] == {"amount": 2}


def test_a_resumed_episode_has_tool_calls_on_the_turns_before_its_first_step() -> None:
    policy = ScriptedPolicy(lambda c: tool_call_text("add", amount=1) if c.turn < 2 else tool_call_text("submit"))
    (whole,) = rollout(CounterEnv, policy, tasks=["t0"], keep_snapshots=True)
    (resumed,) = rollout(CounterEnv, policy, tasks=[None], resume_from=[whole.snapshots[2]])
    assert [tr.turn for tr in resumed.transitions] == [2]
    assert conversation(resumed) == conversation(whole)
    (row,) = to_dataset([resumed], "turns")
    assert row["turn"] == 2 and len(row["context"]) == 6


def test_tools_is_empty_when_the_system_prompt_lists_no_schemas() -> None:
    policy = ScriptedPolicy(lambda c: tool_call_text("add", amount=2) if c.turn == 0 else tool_call_text("submit"))
    for shown in ("compact", "none"):
        (t,) = rollout(lambda shown=shown: CounterEnv(tool_prompt=shown), policy, tasks=["t0"])
        (row,) = to_dataset([t], "sft")
        assert row["tools"] == [] and row["messages"][2]["tool_calls"][0]["function"]["name"] == "add"


# -- sources and saving -----------------------------------------------------------------


def _without_ids(ds) -> list[str]:
    """The rows without the episode ids, in a fixed order: the JSONL holds the episodes in
    the order they finished."""
    ids = ("episode_id", "chosen_episode", "rejected_episode")
    return sorted(json.dumps({k: v for k, v in row.items() if k not in ids}, sort_keys=True) for row in ds)


@pytest.mark.parametrize("format", ["sft", "dpo", "turns"])
def test_a_run_directory_a_jsonl_and_trajectories_give_the_same_rows(episodes, run_dir, format) -> None:
    trajs, jsonl = episodes
    given = _without_ids(to_dataset(trajs, format))
    assert _without_ids(to_dataset(jsonl, format)) == given
    assert _without_ids(to_dataset(run_dir, format)) == given


def test_episode_ids_name_the_file_and_the_line(episodes, run_dir) -> None:
    _, jsonl = episodes
    lines = jsonl.read_text().splitlines()
    for row in to_dataset(jsonl, "sft"):
        name, line = row["episode_id"].rsplit(":", 1)
        assert name == jsonl.name and conversation(Trajectory.from_json(lines[int(line) - 1])) == row["messages"]
    run_ids = to_dataset(run_dir, "sft")["episode_id"]
    assert run_ids[:2] == ["trajectories/step-000001.jsonl:1", "trajectories/step-000001.jsonl:3"]
    assert run_ids[-1] == "trajectories/step-000002.jsonl:6"


def test_a_run_split_picks_training_or_held_out_episodes(run_dir) -> None:
    held_out = to_dataset(run_dir, "sft", split="held-out")
    assert held_out["episode_id"] == ["evals/step-000002.jsonl:1", "evals/step-000002.jsonl:3"]
    assert len(to_dataset(run_dir, "sft", split="all")) == len(to_dataset(run_dir, "sft")) + 2


@pytest.mark.parametrize("format", ["sft", "dpo", "turns"])
def test_export_saves_what_load_from_disk_reads_back(episodes, run_dir, tmp_path, format) -> None:
    out = tmp_path / "ds"
    saved = export(run_dir, format, out)
    loaded = datasets.load_from_disk(str(out))
    assert (
        loaded.features == saved.features
        and loaded.to_list() == saved.to_list() == to_dataset(run_dir, format).to_list()
    )
    assert len(loaded) > 0


def test_export_refuses_a_folder_in_use_unless_told_to_replace_a_dataset(run_dir, tmp_path) -> None:
    out = tmp_path / "ds"
    export(run_dir, "sft", out)
    with pytest.raises(FileExistsError, match="is not empty"):
        export(run_dir, "turns", out)
    export(run_dir, "turns", out, overwrite=True)
    assert "reward" in datasets.load_from_disk(str(out)).column_names
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a saved dataset"):
        export(run_dir, "sft", other, overwrite=True)
    assert (other / "keep.txt").read_text() == "mine" and [p.name for p in other.iterdir()] == ["keep.txt"]
    with pytest.raises(FileExistsError, match="is a file"):
        export(run_dir, "sft", other / "keep.txt")


def test_bad_sources_fail_in_one_line(tmp_path, episodes) -> None:
    with pytest.raises(ValueError, match=r"neither a run directory .* nor a JSONL file of trajectories"):
        to_dataset(tmp_path, "sft")
    with pytest.raises(FileNotFoundError, match="no such file"):
        to_dataset(tmp_path / "missing", "sft")
    result = tmp_path / "a.json"
    result.write_text(json.dumps({"overall": {}}))
    with pytest.raises(ValueError):
        to_dataset(result, "sft")
    with pytest.raises(ValueError, match="format must be one of sft, dpo, turns"):
        to_dataset(episodes[0], "kto")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected Trajectory objects, got dict"):
        to_dataset([{"messages": []}], "sft")  # type: ignore[list-item]


def test_importing_the_module_loads_no_heavy_library(tmp_path) -> None:
    heavy = "{'datasets', 'pyarrow', 'torch', 'httpx'}"
    code = f"import json, sys; import agentenv.export; print(json.dumps(sorted(set(sys.modules) & {heavy})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
