"""MinerSampler: unseen first, exits, retests, re-queue, mining, and exact resumption."""

import json

import pytest

import agentenv
from agentenv import ScriptedPolicy, TaskSet, rollout, tool_call_text
from agentenv.envs.guess_number import GuessNumberEnv, make_tasks
from agentenv.miner import MinerConfig, MinerSampler, break_point
from tests.miner.helpers import Src, traj

TASKS = make_tasks(12, seed=3, difficulties=(0, 3))


def _sampler(**cfg):
    src = Src("guess", TASKS, lambda: GuessNumberEnv(max_turns=5), env_id="guess-number-v0")
    return MinerSampler([src], seed=7, config=MinerConfig(**cfg))


def _play(sampler, step, n=4, policy=None):
    """Roll out the step's draws (G=2) with a policy that solves only difficulty 0."""
    draws = sampler.sample(step, 0, n)
    policy = policy or agentenv.spec("guess-number-v0").make_oracle()
    trajs = []
    for d in draws:
        trajs += rollout(
            lambda: GuessNumberEnv(max_turns=5),
            policy,
            tasks=[d.task] * 2,
            seeds=[d.seed] * 2,
            keep_snapshots=True,
            resume_from=[d.snapshot] * 2 if d.snapshot else None,
        )
    sampler.update(step, trajs)
    return draws, trajs


def test_unseen_tasks_are_drawn_first_without_repeats():
    sampler = _sampler(mined_share=0.0)
    ids = [d.task.id for s in range(3) for d in _play(sampler, s)[0]]
    assert len(set(ids)) == 12  # every train task once before any replay
    later = [d.task.id for d in sampler.sample(3, 0, 4)]
    assert len(set(later)) == 4
    weights = [d.weight for d in sampler.sample(3, 0, 4)]
    assert all(w > 0 for w in weights)


def test_env_weights_that_sum_to_infinity_still_give_draws():
    factory = lambda: GuessNumberEnv(max_turns=5)  # noqa: E731
    sampler = MinerSampler([Src("a", TASKS, factory, 1e308), Src("b", TASKS, factory, 1e308)], seed=0)
    assert list(sampler.p_source) == [0.5, 0.5]
    assert len(sampler.sample(0, 0, 4)) == 4


def test_hard_tasks_are_quarantined_and_retested_and_easy_ones_retire():
    sampler = _sampler(quarantine_after=1, retest_every=3, solved_window=2, mined_share=0.0, variants=False)
    for s in range(3):
        _play(sampler, s)
    status = {tid: r.status for tid, r in sampler.ledger.records.items()}
    hard = [t.id for t in TASKS if t.metadata.difficulty == 3]
    easy = [t.id for t in TASKS if t.metadata.difficulty == 0]
    assert all(status[t] == "quarantined" for t in hard)  # 5 turns cannot find a secret in 1..1024
    assert all(status[t] == "solved" for t in easy)
    retests = [d.task.id for d in sampler.sample(5, 0, 4)]
    assert set(retests) <= set(hard) and len(retests) == 4
    metrics = sampler.metrics()
    assert metrics["miner/pool/quarantined"] == 6 and metrics["miner/pool/solved"] == 6
    assert metrics["miner/failures/truncated"] > 0 and metrics["miner/top_failing_families"][0][0] == "guess-number"


def test_failures_become_resume_tasks_and_variants_and_infra_is_requeued():
    # Two tries per variant: a new secret in 1..16 is often a train task's (a copy, refused).
    sampler = _sampler(mined_share=0.5, max_resume_tasks=3, variants_per_failure=2)
    # An out-of-range guess at turn 1 breaks there, with turns left to finish from.
    guesses = [2, 10_000, 3, 4, 5]
    _draws, trajs = _play(
        sampler, 0, policy=ScriptedPolicy.replay([tool_call_text("guess", number=k) for k in guesses])
    )
    kinds = {m.origin for m in sampler.mined.values()}
    assert kinds == {"resume", "variant"}
    assert sum(m.origin == "resume" for m in sampler.mined.values()) <= 3  # bounded
    mined = [d for d in sampler.sample(1, 0, 4) if d.task.id in sampler.mined]
    assert len(mined) == 2
    resumed = [d for d in mined if d.snapshot is not None]
    for d in resumed:
        assert d.task.id.startswith(d.snapshot.task.id.split("@")[0]) and d.snapshot.turn > 0
    sampler.update(1, [traj(trajs[0].task, infra=True, seed=1)] * 2)
    assert sampler.requeue == [trajs[0].task.id]
    assert sampler.sample(2, 0, 4)[0].task.id == trajs[0].task.id


def test_mined_tasks_evicted_past_their_bound_leave_the_ledger_too():
    # A policy that fails every episode makes a variant of every task it is given; past
    # max_variants the oldest leave the pool, and their records must go with them, or the
    # ledger (checkpointed, walked every step) grows with every failure.
    sampler = MinerSampler(
        [Src("guess", TASKS, lambda: GuessNumberEnv(max_turns=5))],
        seed=7,
        config=MinerConfig(resume=False, max_variants=4),
        validators=[lambda task: None],
    )
    for step in range(30):
        draws = sampler.sample(step, 0, 4)
        sampler.update(step, [traj(d.task, success=False, seed=d.seed) for d in draws for _ in range(2)])
    assert len(sampler.mined) == 4
    assert set(sampler.ledger.records) == {t.id for t in TASKS} | set(sampler.mined)
    assert set(sampler.requeue) <= set(sampler.ledger.records)


def test_a_reloaded_sampler_draws_exactly_what_the_original_would():
    straight = _sampler()
    for s in range(3):
        _play(straight, s)
    state = json.loads(json.dumps(straight.state_dict()))  # through JSON, as in a checkpoint
    fresh = _sampler()
    fresh.load_state_dict(state)
    for s in range(3, 6):
        a, b = straight.sample(s, 0, 4), fresh.sample(s, 0, 4)
        assert [(d.task, d.seed, d.snapshot, d.weight) for d in a] == [
            (d.task, d.seed, d.snapshot, d.weight) for d in b
        ]
        _play(straight, s)
        _play(fresh, s)
    assert straight.state_dict() == fresh.state_dict()


def _edit(path, value):
    """Set ``path`` in a miner state to ``value``; "SEEN" is a task played at least once."""

    def edit(state):
        seen = next(tid for tid, r in state["ledger"].items() if r["ema"] is not None)
        *keys, last = [seen if key == "SEEN" else key for key in path]
        for key in keys:
            state = state[int(key)] if isinstance(state, list) else state[key]
        state[last] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_edit(["ledger", "SEEN", "ema"], float("nan")), r"'ledger\.[^.]+\.ema'"),
        (_edit(["ledger", "SEEN", "attempts"], -3), r"'ledger\.[^.]+\.attempts'"),
        (_edit(["ledger", "SEEN", "last_step"], None), r"'ledger\.[^.]+\.last_step': None, but the task was seen"),
        (_edit(["ledger", "SEEN", "source"], 5), r"'ledger\.[^.]+\.source': 5, but the run has 1 env"),
        (_edit(["mined", "0", "source"], -1), r"'mined\.0\.source'"),
        (_edit(["ledger"], []), r"'ledger': Input should be a valid dictionary"),
        (_edit(["requeue"], None), r"'requeue'"),
    ],
)
def test_an_edited_state_is_one_error_naming_the_field_and_restores_nothing(edit, message):
    """A checkpoint's miner state is read back as it was saved or not at all: an edited one
    failed deep in a later step (a mined task of source 5 drawn for an env the run does not
    have, a negative source drawing from the last env), or trained on a wrong ledger."""
    played = _sampler()
    guesses = [tool_call_text("guess", number=k) for k in (2, 10_000, 3, 4, 5)]  # breaks at turn 1
    _play(played, 0, policy=ScriptedPolicy.replay(guesses))
    state = json.loads(json.dumps(played.state_dict()))
    assert state["mined"], "nothing was mined: the test needs a mined task"
    edit(state)
    fresh = _sampler()
    before = fresh.state_dict()
    with pytest.raises(ValueError, match=message) as caught:
        fresh.load_state_dict(state)
    assert "\n" not in str(caught.value)
    assert fresh.state_dict() == before


def test_validated_proposals_from_the_llm_enter_the_pool():
    from tests.openai_server import OpenAIServer, chat_reply

    def script(request):
        like = request.messages[-1]["content"].split('"id": "')[1].split('"')[0]
        tasks = [
            {"like": like, "prompt": "Find it (1..16).", "payload": {"high": 16, "secret": 5}},
            {"like": like, "prompt": "Find it.", "payload": {"high": 16, "secret": 99}},
        ]  # unsolvable
        return chat_reply(json.dumps({"tasks": tasks}))

    server = OpenAIServer(script).start()
    try:
        sampler = _sampler(
            variants=False, resume=False, proposer={"base_url": server.base_url, "model": "m", "every_steps": 1}
        )
        lowball = ScriptedPolicy.replay([tool_call_text("guess", number=k) for k in range(2, 7)])
        _play(sampler, 0, policy=lowball)
        sampler.close()
    finally:
        server.stop()
    proposed = [m for m in sampler.mined.values() if m.origin == "proposed"]
    assert len(proposed) == 1 and proposed[0].task.payload == {"high": 16, "secret": 5}
    assert sampler.metrics()["miner/new/rejected"] == 1 and len(server.requests) == 1


def test_importance_weights_undo_the_prioritisation():
    # Every task seen, with different success averages: PLR draws the learnable ones
    # (p near 0.5) far more often. Weighting each draw by (1/|pool|) / P(draw) must
    # recover the uniform average over the pool of any function of the task.
    sampler = _sampler(mined_share=0.0, unseen_prob=0.0, staleness_coef=0.0)
    emas = [0.5, 0.1, 0.9, 0.3, 0.7, 0.02, 0.98, 0.4, 0.6, 0.2, 0.8, 0.05]
    for task, ema in zip(TASKS, emas, strict=True):
        record = sampler.ledger.add(task, 0)
        record.ema, record.last_step = ema, 0
    learnable = {t.id for t, e in zip(TASKS, emas, strict=True) if 0.3 <= e <= 0.7}  # 5 of the 12
    draws = [sampler.sample(step, 0, 1)[0] for step in range(1, 3001)]
    plain = sum(d.task.id in learnable for d in draws) / len(draws)
    weighted = sum(d.weight * (d.task.id in learnable) for d in draws) / len(draws)
    assert plain > 0.6, plain  # the miner favours them...
    assert abs(weighted - 5 / 12) < 0.05, weighted  # ...and the weights give back the uniform average


def _proposing_sampler(sources, replies):
    """A miner whose proposer answers each call with the next of ``replies`` (lists of proposals)."""
    from tests.openai_server import OpenAIServer, chat_reply

    answers = iter(replies)
    server = OpenAIServer(lambda request: chat_reply(json.dumps({"tasks": next(answers)}))).start()
    proposer = {"base_url": server.base_url, "model": "m", "every_steps": 1}
    return server, MinerSampler(sources, 0, MinerConfig(resume=False, variants=False, proposer=proposer))


def test_a_proposal_whose_id_is_taken_is_refused():
    # Evicting it later would forget the record of the task that holds the id.
    from agentenv import Task, TaskSet
    from agentenv.envs.arithmetic import ArithmeticEnv
    from agentenv.miner.variants import stable_hash

    base = ArithmeticEnv().tasks[0]
    five = {"prompt": "Compute 2 + 3.", "payload": {"steps": [[2, "+", 3, 5]], "intermediates": [5], "answer": 5}}
    eight = {"prompt": "Compute 4 + 4.", "payload": {"steps": [[4, "+", 4, 8]], "intermediates": [8], "answer": 8}}
    digest = f"{json.dumps(five['payload'], sort_keys=True)}|{five['prompt']}"
    promoted = Task(id=f"{base.id}~p{stable_hash(digest):08x}", metadata=base.metadata, **five)  # in the train file
    server, sampler = _proposing_sampler(
        [Src("arith", TaskSet([base, promoted]), ArithmeticEnv, env_id="arithmetic-v0")],
        [[{"like": base.id, **five}, {"like": base.id, **eight}], [{"like": base.id, **eight}]],
    )
    try:
        sampler.update(0, [traj(base)])
        assert (sampler.metrics()["miner/new/proposed"], sampler.metrics()["miner/new/rejected"]) == (1, 1)
        sampler.update(1, [traj(base)])  # the same proposal again: already mined
        assert (sampler.metrics()["miner/new/proposed"], sampler.metrics()["miner/new/rejected"]) == (0, 1)
    finally:
        sampler.close()
        server.stop()
    assert promoted.id not in sampler.mined and len(sampler.mined) == 1


def test_a_proposal_runs_in_the_env_of_the_example_it_names():
    # Its id is LIKE~pHASH, but an id may hold '~p' itself: the example is carried, not parsed back.
    from agentenv import TaskSet
    from agentenv.envs.arithmetic import ArithmeticEnv

    arith = ArithmeticEnv().tasks[0].model_copy(update={"id": "q~p1"})
    guess = TASKS[0].model_copy(update={"id": "q"})
    sum_ = {"steps": [[2, "+", 3, 5]], "intermediates": [5], "answer": 5}
    server, sampler = _proposing_sampler(
        [
            Src("arith", TaskSet([arith]), ArithmeticEnv, env_id="arithmetic-v0"),
            Src("guess", TaskSet([guess]), GuessNumberEnv, env_id="guess-number-v0"),
        ],
        [
            [
                {"like": "q~p1", "prompt": "Compute 2 + 3.", "payload": sum_},
                {"like": "q~p1", "prompt": "Find it (1..16).", "payload": {"high": 16, "secret": 3}},
            ]
        ],
    )
    try:
        sampler.update(0, [traj(arith), traj(guess)])
    finally:
        sampler.close()
        server.stop()
    [mined] = sampler.mined.values()
    assert mined.source == 0 and mined.task.payload == sum_ and mined.task.metadata == arith.metadata
    assert sampler.metrics()["miner/new/rejected"] == 1  # a guessing task is no arithmetic task


def _fail_from(task, first, max_turns=6):
    """G=2 failed episodes of ``task``: a guess of ``first``, then an out-of-range one (the break point)."""
    policy = ScriptedPolicy.replay([tool_call_text("guess", number=first), tool_call_text("guess", number=99999)])
    factory = lambda: GuessNumberEnv(max_turns=max_turns)  # noqa: E731
    return rollout(factory, policy, tasks=[task] * 2, seeds=[1] * 2, keep_snapshots=True)


def test_a_different_state_at_the_same_turn_is_another_resume_task_with_its_own_record():
    # Keyed by (task, turn) alone, state B took over state A's id and its record: B was
    # "solved" because A was, and never served. (The failed task's own secret is kept:
    # a redrawn one would make each step's resume task another state.)
    task = TASKS[0]
    factory = lambda: GuessNumberEnv(max_turns=6)  # noqa: E731
    sampler = MinerSampler(
        [Src("guess", TASKS, factory, env_id="guess-number-v0")],
        seed=0,
        config=MinerConfig(variants=False, solved_window=2, mined_share=1.0, resume_redraws=0),
    )
    secret = task.payload["secret"]
    sampler.update(0, _fail_from(task, secret - 1 if secret > 1 else secret + 1))  # state A: one guess away
    [a] = sampler.mined.values()
    oracle = agentenv.spec("guess-number-v0").make_oracle()
    for step in (1, 2):
        solved = rollout(factory, oracle, tasks=[a.task] * 2, seeds=[2] * 2, resume_from=[a.snapshot] * 2)
        sampler.update(step, solved)
    assert sampler.ledger.records[a.task.id].status == "solved"
    sampler.update(3, _fail_from(task, 16 if secret != 16 else 1))  # state B: the same turn, far away
    [b] = [m for m in sampler.mined.values() if m.task.id != a.task.id]
    assert b.snapshot.turn == a.snapshot.turn and b.snapshot.state != a.snapshot.state
    assert sampler.mined[a.task.id].snapshot == a.snapshot  # A is still A
    assert sampler.ledger.records[b.task.id].status == "active" and not sampler.ledger.records[b.task.id].seen
    assert b.task.id in {d.task.id for d in sampler.sample(4, 0, 4)}
    sampler.update(4, _fail_from(task, 16 if secret != 16 else 1))  # B again: the same task, not a third
    assert len(sampler.mined) == 2


def test_a_resume_point_the_agent_cannot_finish_from_never_enters_the_pool():
    easy = next(t for t in TASKS if t.payload["high"] == 16)
    hard = next(t for t in TASKS if t.payload["high"] == 1024)
    sampler = _sampler(variants=False)
    lowball = ScriptedPolicy.replay([tool_call_text("guess", number=k) for k in range(2, 7)])
    truncated = rollout(lambda: GuessNumberEnv(max_turns=5), lowball, tasks=[easy], keep_snapshots=True)
    assert break_point(truncated[0]).rule == "last_turn"  # one turn left from there: nothing to learn
    sampler.update(0, truncated)
    assert not sampler.mined and sampler.metrics()["miner/new/rejected"] == 1
    # Four turns left, but 1..1024 takes the oracle ten: it cannot finish from the snapshot.
    sampler.update(1, _fail_from(hard, 2, max_turns=5))
    assert not sampler.mined and sampler.metrics()["miner/new/rejected"] == 2
    sampler.update(2, _fail_from(easy, 2, max_turns=5))  # 1..16 in four: it can
    assert [m.origin for m in sampler.mined.values()] == ["resume"]
    assert sampler.metrics()["miner/new/resume"] == 2


def test_copies_of_train_or_mined_tasks_are_refused_as_variants():
    from agentenv import Task
    from agentenv.envs.adapters.qa import QAEnv

    train = QAEnv().tasks
    first, copied, *rest = train

    class Copying(QAEnv):
        """Mutates the first task into a copy of the second, every other into one new question."""

        def mutate(self, task, rng):
            new_id = f"{task.id}~v{int(rng.integers(1 << 30)):08x}"
            if task.id == first.id:
                return copied.model_copy(update={"id": new_id})
            return Task(id=new_id, prompt="What is 1 + 1?", payload={"reference": "2"}, metadata=task.metadata)

    sampler = MinerSampler([Src("qa", train, Copying, env_id="qa-v0")], seed=0, config=MinerConfig(resume=False))
    sampler.update(0, [traj(first), traj(copied, success=True), traj(rest[0]), traj(rest[1])])
    [variant] = sampler.mined.values()
    assert variant.task.prompt == "What is 1 + 1?"
    assert sampler.metrics()["miner/new/variants"] == 1 and sampler.metrics()["miner/new/rejected"] == 2
    # The index of contents is state: a reloaded sampler refuses the same copies.
    fresh = MinerSampler([Src("qa", train, Copying, env_id="qa-v0")], seed=0, config=MinerConfig(resume=False))
    fresh.load_state_dict(json.loads(json.dumps(sampler.state_dict())))
    fresh.update(1, [traj(rest[2])])
    assert fresh.metrics()["miner/new/rejected"] == 1 and len(fresh.mined) == 1


def test_variants_and_proposals_never_copy_a_held_out_task():
    # Trained on under another id, a held-out task would no longer measure generalisation.
    from agentenv import Task
    from agentenv.envs.adapters.qa import QAEnv

    train, test = QAEnv().tasks.split(0.3, seed=0)
    held = test[0]

    class Leaking(QAEnv):
        """Mutates the first task into the held-out one, under a new id, then under its own."""

        def mutate(self, task, rng):
            copy = held.model_copy(update={"id": f"{task.id}~v{int(rng.integers(1 << 30)):08x}"})
            return copy if task.id == train[0].id else held

    sampler = MinerSampler(
        [Src("qa", train, Leaking, env_id="qa-v0", test=test)], seed=0, config=MinerConfig(resume=False)
    )
    sampler.update(0, [traj(train[0]), traj(train[1])])
    assert not sampler.mined and sampler.metrics()["miner/new/rejected"] == 2
    assert sampler._refusal(0, Task(id="new", prompt=held.prompt, payload=held.payload)) == (
        f"a copy of the held-out task {held.id!r}"
    )


def _no_sandbox():
    raise RuntimeError("the sandbox will not start")


def _validator_bug(task):
    raise RuntimeError("validator bug")


@pytest.mark.parametrize(
    "factory, validate",
    [(_no_sandbox, lambda task: None), (lambda: GuessNumberEnv(max_turns=5), _validator_bug)],
    ids=["factory", "validator"],
)
def test_an_env_factory_or_validator_that_fails_rejects_variants_and_never_fails_the_step(factory, validate):
    sampler = MinerSampler(
        [Src("guess", TASKS, factory)],
        seed=0,
        config=MinerConfig(resume=False, variants_per_failure=2),
        validators=[validate],
    )
    sampler.update(0, [traj(TASKS[0]), traj(TASKS[1])])
    assert not sampler.mined and sampler.metrics()["miner/new/rejected"] == 4


def _sixteen():
    """Guess-number tasks under one prompt, one per secret of 1..16."""
    [like] = make_tasks(1, difficulties=(0,))
    return TaskSet(
        [like.model_copy(update={"id": f"g{s}", "payload": {"high": 16, "secret": s}}) for s in range(1, 17)]
    )


def _resumed_secrets(guesses, *, steps=40, **cfg):
    """The secret of the resume task each step's failure (on the secret 12: ``guesses``,
    then an out-of-range guess) makes, with the failure's snapshot and the resume tasks."""
    tasks = _sixteen()
    factory = lambda: GuessNumberEnv(max_turns=8)  # noqa: E731
    sampler = MinerSampler(
        [Src("guess", tasks, factory, env_id="guess-number-v0")],
        seed=0,
        config=MinerConfig(variants=False, **cfg),
    )
    policy = ScriptedPolicy.replay(
        [*(tool_call_text("guess", number=g) for g in guesses), tool_call_text("guess", number=99999)]
    )
    failed = rollout(factory, policy, tasks=[tasks.get("g12")] * 2, seeds=[1] * 2, keep_snapshots=True)
    secrets, made = [], []
    for step in range(steps):
        sampler.update(step, failed)
        last = list(sampler.mined.values())[-1]  # the one this step made (or refreshed)
        secrets.append(last.task.payload["secret"])
        made.append(last)
    return secrets, failed[0].snapshots[len(guesses)], made


def test_a_resume_task_redraws_its_secret_from_what_the_conversation_allows():
    # Kept, the failed episode's secret made every resumed group practise the secret the
    # policy missed: GRPO then rewarded the moves that find those secrets, at states
    # where the feedback allows eight.
    secrets, snap, made = _resumed_secrets([8])  # "higher": 9..16
    assert set(secrets) <= set(range(9, 17)) and len(set(secrets)) >= 6
    assert secrets.count(12) <= 12  # about 5 of 40, not all of them
    for m in made:  # the same conversation, and a task that fits it: its secret ends it
        assert m.snapshot.messages == snap.messages and m.snapshot.turn == snap.turn == 1
        assert m.task.id.startswith(f"g{m.task.payload['secret']}@t1.")
        env = GuessNumberEnv(max_turns=8)
        env.reset(seed=1, options={"task": m.task, "snapshot": m.snapshot})
        env.step(tool_call_text("guess", number=m.task.payload["secret"]))
        assert env.snapshot().ended and env.snapshot().state["solved"]


def test_a_conversation_only_the_failed_secret_fits_keeps_it():
    secrets, _, _ = _resumed_secrets([11, 13], steps=5)  # higher than 11, lower than 13: 12
    assert secrets == [12] * 5


def test_no_redraws_keeps_the_failed_secret():
    secrets, _, _ = _resumed_secrets([8], steps=5, resume_redraws=0)
    assert secrets == [12] * 5


def test_an_env_that_fails_the_replay_never_fails_the_step():
    tasks = _sixteen()
    calls = []

    def flaky():
        calls.append(1)
        raise RuntimeError("no sandbox")

    sampler = MinerSampler(
        [Src("guess", tasks, flaky, env_id="guess-number-v0")], seed=0, config=MinerConfig(variants=False)
    )
    policy = ScriptedPolicy.replay([tool_call_text("guess", number=8), tool_call_text("guess", number=99999)])
    failed = rollout(
        lambda: GuessNumberEnv(max_turns=8), policy, tasks=[tasks.get("g12")] * 2, seeds=[1] * 2, keep_snapshots=True
    )
    sampler.update(0, failed)  # the replays and the oracle's validation both need the env
    assert calls and not sampler.mined and sampler.metrics()["miner/new/rejected"] == 2
