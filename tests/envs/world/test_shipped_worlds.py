"""The shipped worlds: world-fs-v0 (hybrid) and world-bank-v0 (a spec, all emulated).

Each has at least 30 tasks over four difficulty levels; the oracle replays every
task's golden actions through the scripted world model to reward 1; `check_env`
passes; the scripted model answers the golden runs and nothing else."""

from __future__ import annotations

import json
from collections import Counter

import pytest

import agentenv
from agentenv import check_env, tool_call_text
from agentenv.envs.world import Response, ScriptedWorldModel, WorldCache, WorldEnv, WorldMetrics, load_spec
from agentenv.envs.world.worlds import bank, fs

IDS = ["world-fs-v0", "world-bank-v0"]


@pytest.mark.parametrize("env_id", IDS)
def test_at_least_30_tasks_over_four_levels_with_golden_actions(env_id: str) -> None:
    env = agentenv.make(env_id)
    levels = Counter(t.metadata.difficulty for t in env.tasks)
    assert len(env.tasks) >= 30
    assert sorted(levels) == [0, 1, 2, 3] and min(levels.values()) >= 5
    assert all(t.payload["golden"] for t in env.tasks)
    env.close()


@pytest.mark.parametrize("env_id", IDS)
def test_the_oracle_solves_every_task_through_the_scripted_model(env_id: str) -> None:
    metrics = WorldMetrics()
    env_kwargs = {"cache": WorldCache(), "metrics": metrics}
    tasks = agentenv.make(env_id).tasks
    trajs = agentenv.rollout(env_id, agentenv.spec(env_id).make_oracle(), tasks=list(tasks), env_kwargs=env_kwargs)
    assert [t.task_reward for t in trajs] == [1.0] * len(tasks)
    assert all(t.success and t.failure.value == "none" for t in trajs)
    summary = metrics.summary()
    assert summary["world/rejected"] == 0 and summary["world/failures"] == 0
    assert summary["world/model_calls"] + summary["world/cache_hits"] == summary["world/requests"] > 0


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_passes_on_golden_actions_and_on_made_up_ones(env_id: str) -> None:
    env = agentenv.make(env_id, cache=WorldCache(), metrics=WorldMetrics())
    task = env.tasks[len(env.tasks) - 1]  # a level-3 task

    def golden(e: WorldEnv) -> list[str]:
        return [tool_call_text(s["tool"], **s["arguments"]) for s in e.task.payload["golden"]]

    env.reset(options={"task": task})
    seed = next(s for s in range(200) if env.reset(seed=s)[1]["task_id"] == task.id)
    report = check_env(env, seed=seed, actions=golden)
    assert report.passed == ("determinism", "snapshot", "bad actions", "episode end")
    # One call of each tool with made-up arguments: invalid ones are format errors, valid calls
    # of emulated tools are misses of the scripted model (tool errors), deterministically.
    assert check_env(env).passed == report.passed
    env.close()


def test_the_scripted_model_answers_golden_states_only_and_refuses_the_rest_to_the_agent() -> None:
    """An off-script call is the agent's tool error, never infra: otherwise one such call
    would leave any episode it was failing unscored."""
    model = ScriptedWorldModel.from_world(fs.WORLD)
    env = WorldEnv(fs.WORLD, model=model, cache=WorldCache(), metrics=(metrics := WorldMetrics()))
    env.reset(options={"task": "fs-mkdir-projects"})
    before = env.state.world
    obs, _, terminated, truncated, info = env.step(tool_call_text("mkdir", path="/home/user/elsewhere"))
    assert not (terminated or truncated) and info["error_kind"] == "tool" and info["failure"] is None
    assert obs[0]["content"] == "Error: mkdir cannot be carried out here: this world has no outcome for it"
    assert env.state.world == before
    assert metrics.model_errors["no_entry"] == 1 and metrics.failures == 0 and not metrics.by_task
    # The episode goes on, and ends scored.
    _, _, terminated, _, info = env.step(tool_call_text("mkdir", path="/home/user/projects"))
    assert terminated and info["success"] is True
    env.reset(options={"task": "fs-mkdir-projects"})
    for _ in range(env.max_turns):
        _, _, terminated, truncated, info = env.step(tool_call_text("mkdir", path="/home/user/elsewhere"))
        if terminated or truncated:
            break
    assert info["failure"] in ("policy", "truncated") and info["success"] is False
    env.close()


def test_fs_ls_and_cat_are_code_and_never_call_the_model() -> None:
    model = ScriptedWorldModel()  # an empty table: any model call would fail
    env = WorldEnv(fs.WORLD, model=model, cache=WorldCache(), metrics=WorldMetrics())
    env.reset(options={"task": "fs-extract-errors"})
    obs, _, _, _, info = env.step(tool_call_text("cat", path="/home/user/logs/app.log"))
    assert info["error"] is None and "ERROR disk full" in obs[0]["content"]
    obs, _, _, _, info = env.step(tool_call_text("ls", path="/home/user//logs/"))
    assert obs[0]["content"] == "app.log\nold.log"
    obs, _, _, _, info = env.step(tool_call_text("cat", path="/nope"))
    assert info["error_kind"] == "tool" and "No such file" in obs[0]["content"]
    assert model.calls == 0
    env.close()


def test_the_bank_spec_loads_with_no_python_of_its_own() -> None:
    world = load_spec(bank.SPEC)
    assert world.name == "bank" and all(t.emulated for t in world.tools.values())
    assert {"no_negative_balance", "closed_accounts_are_empty"} <= {i.name for i in world.invariants}


def test_step_rewards_come_from_validated_progress_on_subgoals() -> None:
    env = agentenv.make("world-fs-v0", cache=WorldCache(), metrics=WorldMetrics())
    env.reset(options={"task": "fs-archive-logs"})  # 3 sub-goals, then the goal
    rewards = []
    for step in env.task.payload["golden"]:
        _, _, terminated, _, info = env.step(tool_call_text(step["tool"], **step["arguments"]))
        rewards.append(info["rewards"])
    assert [r["subgoals"] for r in rewards] == pytest.approx([0.5 / 3, 0.5 / 3, 0.5 / 3, 0.0])
    assert terminated and rewards[-1]["task"] == 1.0
    env.close()


def test_a_failed_episode_gives_back_what_its_sub_goals_earned() -> None:
    """A sub-goal that reads one field holds after a look-alike action: a withdrawal of 25
    EUR meets "A1 holds 2475 EUR", meant to come from the first of two transfers. The
    episode fails its goal and keeps nothing; a solve keeps its shaping."""
    world = load_spec(bank.SPEC)
    model = ScriptedWorldModel.from_world(world)
    withdrawn = {"kind": "withdrawal", "account": "A1", "amount_cents": 2500}
    patch = [
        {"op": "replace", "path": "/accounts/A1/balance_cents", "value": 247500},
        {"op": "add", "path": "/ledger/-", "value": withdrawn},
    ]
    model.add(
        "withdraw", {"account_id": "A1", "amount_cents": 2500}, Response(observation="Withdrew.", state_patch=patch)
    )
    env = WorldEnv(world, model=model, cache=WorldCache(), metrics=WorldMetrics())
    env.reset(options={"task": "bank-two-transfers"})
    *_, info = env.step(tool_call_text("withdraw", account_id="A1", amount_cents=2500))
    assert info["rewards"]["subgoals"] == 0.5  # the look-alike reached the sub-goal
    *_, info = env.step(tool_call_text("finish"))
    assert info["task_reward"] == 0.0 and info["rewards"]["subgoals"] == -0.5
    assert sum(t.rewards["subgoals"] for t in env.transitions) == 0.0
    env.reset(options={"task": "bank-two-transfers"})
    for step in env.task.payload["golden"]:
        *_, info = env.step(tool_call_text(step["tool"], **step["arguments"]))
    assert info["task_reward"] == 1.0 and sum(t.rewards["subgoals"] for t in env.transitions) == 0.5
    env.close()


def test_toggling_a_sub_goal_in_a_failed_episode_earns_the_trainer_nothing_at_any_turn() -> None:
    """Paid as the change in potential, unfreeze (+0.5) / freeze (-0.5) summed to 0, but the
    trainer discounts: each pair was worth 0.5 * (1 - 0.95) to the turns before it, so a
    failed episode that toggled had a discounted return of +0.12 at its first turn where
    one that reached the sub-goal and held it had 0 (and GiGPO's std scaling made that a
    full unit of step advantage). Only a new high pays; a failure gives it all back."""
    from agentenv.trainers.advantages import discounted_returns
    from agentenv.trainers.batch import step_rewards

    world = load_spec(bank.SPEC)
    model = ScriptedWorldModel.from_world(world)
    frozen = [
        {"op": "replace", "path": "/accounts/A5/status", "value": "frozen"},
        {"op": "add", "path": "/accounts/A5/freeze_reason", "value": "x"},
    ]
    opened = [
        {"op": "replace", "path": "/accounts/A5/status", "value": "open"},
        {"op": "remove", "path": "/accounts/A5/freeze_reason"},
    ]
    model.add(
        "freeze_account", {"account_id": "A5", "reason": "x"}, Response(observation="Frozen.", state_patch=frozen)
    )
    model.add("unfreeze_account", {"account_id": "A5"}, Response(observation="Open.", state_patch=opened))
    env = WorldEnv(world, model=model, cache=WorldCache(), metrics=WorldMetrics())
    unfreeze = tool_call_text("unfreeze_account", account_id="A5")
    freeze = tool_call_text("freeze_account", account_id="A5", reason="x")
    plans = {
        "toggle": [unfreeze, freeze] * 5 + [tool_call_text("finish")],
        "toggle-to-the-limit": [unfreeze, freeze] * env.max_turns,
        "toggle-ending-open": [unfreeze, freeze] * 4 + [unfreeze, tool_call_text("finish")],
    }
    for name, plan in plans.items():
        env.reset(options={"task": "bank-unfreeze-and-pay"})  # sub-goal: A5 open; goal: and paid
        for action in plan:
            *_, info = env.step(action)
            if info["failure"] is not None:
                break
        assert info["task_reward"] == 0.0 and sum(t.rewards["subgoals"] for t in env.transitions) == 0.0, name
        trajectory = agentenv.Trajectory(
            task=env.task, messages=[], transitions=list(env.transitions), failure=agentenv.Failure.POLICY
        )
        returns = discounted_returns(step_rewards(trajectory, env.reward_weights), 0.95)
        assert returns == pytest.approx([0.0] * len(returns)), name
    env.close()


@pytest.mark.parametrize(
    "reply, kind",
    [
        ({"observation": "error: no account A99", "state_patch": []}, None),  # a faithful refusal
        (
            {
                "observation": "Transferred.",
                "state_patch": [
                    {"op": "replace", "path": "/accounts/A1/balance_cents", "value": 249000},
                    {"op": "replace", "path": "/accounts/A3/balance_cents", "value": 121500},  # 500 too many
                    {
                        "op": "add",
                        "path": "/ledger/-",
                        "value": {"kind": "transfer", "account": "A1", "to": "A3", "amount_cents": 1000},
                    },
                ],
            },
            "postcondition",
        ),
        (
            {
                "observation": "Transferred.",
                "state_patch": [
                    {"op": "replace", "path": "/accounts/A1/balance_cents", "value": 249000},
                    {"op": "replace", "path": "/accounts/A3/balance_cents", "value": 121000},
                ],  # the ledger entry forgotten
            },
            "postcondition",
        ),
        (
            {"observation": "ok", "state_patch": [{"op": "replace", "path": "/ledger", "value": []}]},
            "forbidden_path",
        ),
    ],
    ids=["refusal", "wrong-amount", "no-ledger-entry", "ledger-rewrite"],
)
def test_bank_transfers_must_move_exactly_the_amount_and_record_it(reply: dict, kind: str | None) -> None:
    from agentenv.envs.world import Rejected
    from agentenv.envs.world.paths import bind_all
    from agentenv.envs.world.validate import validate

    world = bank.world()
    tool = world.tools["transfer"]
    for source in ("A99", "A1") if kind is None else ("A1",):
        args = {"from_account": source, "to_account": "A3", "amount_cents": 1000}
        if kind is None:
            assert validate(json.dumps(reply), world, tool, bind_all(tool.writes, args), world.initial_state, args)
            continue
        with pytest.raises(Rejected) as err:
            validate(json.dumps(reply), world, tool, bind_all(tool.writes, args), world.initial_state, args)
        assert err.value.kind == kind


def _fs_patch(*ops: tuple[str, str, object]) -> str:
    def pointer(path: str) -> str:
        return "/files/" + path.replace("~", "~0").replace("/", "~1")

    patch = [{"op": op, "path": pointer(path), **({"value": v} if op != "remove" else {})} for op, path, v in ops]
    return json.dumps({"observation": "", "state_patch": patch})


DIR, LOG = {"kind": "dir", "content": ""}, "/home/user/logs"


@pytest.mark.parametrize(
    "extra, kind",
    [
        ((), None),  # the faithful move of /home/user/logs and its two files
        ((("add", "/home/user/archive/b", DIR),), "postcondition"),  # and a new entry under dst
        ((("remove", "/home/user/archive/old.log", None),), "postcondition"),  # or one of src's dropped
        ((("replace", "/home/user/archive/app.log", {"kind": "file", "content": "x"}),), "postcondition"),
    ],
    ids=["faithful", "added-under-dst", "dropped", "rewritten"],
)
def test_fs_mv_moves_the_whole_subtree_exactly(extra: tuple, kind: str | None) -> None:
    # Every directory node equals every other: checked at dst alone, a model could add, drop
    # or rewrite anything under it (an injected "also create b/c/deep.txt" solved a level-3 task).
    from agentenv.envs.world import Rejected
    from agentenv.envs.world.paths import bind_all
    from agentenv.envs.world.validate import validate

    world, state = fs.WORLD, fs.WORLD.initial_state
    tool = world.tools["mv"]
    args = {"src": LOG, "dst": "/home/user/archive"}
    moved = [("remove", f"{LOG}/app.log", None), ("remove", f"{LOG}/old.log", None), ("remove", LOG, None)]
    moved += [("add", "/home/user/archive", DIR)]
    moved += [("add", f"/home/user/archive/{n}", state["files"][f"{LOG}/{n}"]) for n in ("app.log", "old.log")]
    reply = _fs_patch(*moved, *extra)
    writes = bind_all(tool.writes, args)
    if kind is None:
        assert validate(reply, world, tool, writes, state, args)
        return
    with pytest.raises(Rejected) as err:
        validate(reply, world, tool, writes, state, args)
    assert err.value.kind == kind


def test_bank_goals_need_the_work_the_prompt_asks_for_not_only_its_end_balances() -> None:
    # With a faithful model, four 1-cent operations netting to zero met the round trip's goal
    # (balances unchanged, four ledger entries), and freezing with any reason after a deposit
    # into A4 met the audit's (A4's balance and three statuses).
    import copy

    from agentenv.envs.world import rule_predicate
    from agentenv.envs.world.world import task_payload

    world = bank.world()
    tasks = {t.id: t for t in world.tasks}

    def met(task_id: str, state: dict) -> bool:
        return rule_predicate("goal", task_payload(tasks[task_id]).goal).test(state)

    start = world.initial_state
    noise = copy.deepcopy(start)
    noise["ledger"] = [{"kind": k, "account": "A6", "amount_cents": 1} for k in ("deposit", "withdrawal") * 2]
    assert not met("bank-round-trip", noise)
    loop = copy.deepcopy(start)
    pairs = [("A1", "A2"), ("A2", "A3"), ("A3", "A4"), ("A4", "A1")]
    loop["ledger"] = [{"kind": "transfer", "account": a, "to": b, "amount_cents": 1000} for a, b in pairs]
    assert met("bank-round-trip", loop)

    frozen = copy.deepcopy(start)
    frozen["accounts"]["A4"]["balance_cents"] = 4200  # a deposit, not a payment from A6
    for account in ("A1", "A3", "A6"):
        frozen["accounts"][account].update(status="frozen", freeze_reason="whatever")
    assert not met("bank-audit-freeze", frozen)
    frozen["accounts"]["A6"]["balance_cents"] = 1300
    for account in ("A1", "A3", "A6"):
        frozen["accounts"][account]["freeze_reason"] = "audit 2024"
    assert met("bank-audit-freeze", frozen)
