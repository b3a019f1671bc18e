"""agentenv.eval.evaluation: the estimators, the bootstrap over tasks, grouping, infra, paired comparisons."""

from __future__ import annotations

import itertools
import json
import random
from math import comb
from pathlib import Path

import pytest

import agentenv
from agentenv.core.task import Task, TaskMeta
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.envs.arithmetic import oracle
from agentenv.eval.evaluation import (
    EvalResult,
    TaskOutcome,
    compare,
    default_concurrency,
    evaluate,
    load,
    load_trajectories,
    pass_at_k,
    pass_hat_k,
    score,
    success_interval,
)


def test_pass_at_k_is_one_minus_the_binomial_ratio_for_every_small_case() -> None:
    for n in range(1, 13):
        for c, k in itertools.product(range(n + 1), range(1, n + 1)):
            assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=1e-12)
            assert pass_hat_k(n, c, k) == pytest.approx(comb(c, k) / comb(n, k), abs=1e-12)


def test_pass_at_k_stays_finite_and_exact_where_the_binomials_overflow_a_float() -> None:
    n, c, k = 5000, 7, 1000
    assert comb(n, k) > 2**1024  # past the largest float
    exact = 1 - comb(n - c, k) / comb(n, k)  # Python's integers divide exactly (correctly rounded)
    assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-9)
    assert pass_at_k(n, 0, k) == 0.0 and pass_at_k(n, n - k + 1, k) == 1.0


def test_pass_at_1_is_the_success_rate_and_bad_counts_are_refused() -> None:
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    for n, c, k in [(4, 5, 1), (4, -1, 1), (4, 2, 5), (4, 2, 0)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def _traj(
    task_id: str,
    success: bool,
    *,
    env: str = "e-v0",
    family: str = "f",
    difficulty: int = 0,
    failure: Failure | None = None,
    error: str | None = None,
    reward: float | None = None,
) -> Trajectory:
    kind = failure or (Failure.NONE if success else Failure.POLICY)
    return Trajectory(
        env_id=env,
        task=Task(id=task_id, prompt="p", metadata=TaskMeta(family=family, difficulty=difficulty)),
        messages=[],
        transitions=[],
        task_reward=None if kind is Failure.INFRA else (float(success) if reward is None else reward),
        success=success,
        failure=kind,
        error=error,
    )


def test_score_per_task_figures_and_disagreement() -> None:
    # t0: 4/4, t1: 0/4, t2: 2/4 -> pass@1 = (1 + 0 + .5) / 3; only t2 disagrees.
    outcomes = {"t0": [1, 1, 1, 1], "t1": [0, 0, 0, 0], "t2": [1, 0, 1, 0]}
    trajs = [_traj(t, bool(s)) for t, wins in outcomes.items() for s in wins]
    result = score(trajs, 4)
    assert result.overall["pass@1"].value == pytest.approx(0.5)
    assert result.overall["pass@2"].value == pytest.approx((1 + 0 + pass_at_k(4, 2, 2)) / 3)
    assert result.overall["pass@4"].value == pytest.approx(2 / 3)
    assert result.overall["pass^4"].value == pytest.approx(1 / 3)
    assert result.overall["mean@4"].value == pytest.approx(0.5)
    assert result.overall["disagreement"].value == pytest.approx(1 / 3)
    assert all(e.tasks == 3 for e in result.overall.values())
    assert result.failures == {"none": 6, "policy": 6, "format": 0, "infra": 0, "truncated": 0}


def test_intervals_cover_the_estimate_narrow_with_more_tasks_and_repeat_with_the_seed() -> None:
    rng = random.Random(0)
    trajs = [_traj(f"t{i}", rng.random() < 0.6) for i in range(400) for _ in range(2)]
    small, large = score(trajs[:40], 2), score(trajs, 2)
    for result in (small, large):
        e = result.overall["pass@1"]
        assert e.low is not None and e.high is not None and e.value is not None
        assert e.low < e.value < e.high
    width = lambda r: r.overall["pass@1"].high - r.overall["pass@1"].low  # noqa: E731
    assert width(large) < width(small) / 2  # 10x the tasks: about 1/sqrt(10) the width
    assert score(trajs, 2, seed=3) == score(trajs, 2, seed=3)


def test_the_95_percent_interval_covers_the_true_success_rate_at_about_its_level() -> None:
    """Tasks whose success rates are drawn from Beta(2, 2) (true pass@1 0.5), one sample
    each, 30 tasks an evaluation: over 120 evaluations the intervals must hold 0.5 in at
    least 0.88 of them (measured: 0.967 on these, 0.965 on 600 more)."""
    rng = random.Random(5)
    hits = 0
    for trial in range(120):
        rates = [rng.betavariate(2, 2) for _ in range(30)]
        e = score([_traj(f"t{i}", rng.random() < p) for i, p in enumerate(rates)], 1, seed=trial).overall["pass@1"]
        assert e.low is not None and e.high is not None
        hits += e.low <= 0.5 <= e.high
    assert 0.88 <= hits / 120 <= 1.0, hits


def test_a_figure_without_spread_has_the_value_as_its_interval() -> None:
    # Every task solved (a degenerate bootstrap, where a BCa interval is undefined), and
    # a figure one task defines (every resample of it is that task).
    solved = score([_traj(f"t{i}", True) for i in range(20) for _ in range(2)], 2).overall
    assert all((e.value, e.low, e.high) == (1.0, 1.0, 1.0) for n, e in solved.items() if n.startswith("pass"))
    one = score([_traj("a", True), _traj("a", False), _traj("b", True)], 2).overall["pass@2"]
    assert (one.tasks, one.value, one.low, one.high) == (1, 1.0, 1.0, 1.0)


def test_infra_is_left_out_and_a_task_short_of_samples_counts_only_where_it_can() -> None:
    trajs = [
        *(_traj("a", True) for _ in range(3)),
        _traj("b", True),
        _traj("b", False, failure=Failure.INFRA, error="policy: gave up after 4 attempts"),
        _traj("b", False, failure=Failure.INFRA, error="sandbox died"),
    ]
    result = score(trajs, 3)
    # The env's infra failure is left out; the policy's failure to answer is a failed sample.
    assert [(t.task_id, t.samples, t.n, t.successes) for t in result.tasks] == [("a", 3, 3, 3), ("b", 3, 2, 1)]
    assert result.overall["pass@1"].tasks == 2 and result.overall["pass@1"].value == 0.75
    assert result.overall["pass@3"].tasks == 1  # b has two valid samples: no pass@3 for it
    assert result.failures["infra"] == 2 and result.policy_failures == 1


def test_a_policy_that_fails_on_the_tasks_it_cannot_solve_scores_as_if_it_answered_wrong() -> None:
    # Left out of n, such failures made a policy whose server errs on hard tasks score 1.0.
    honest = [_traj(f"t{i}", i < 2) for i in range(4)]
    dodging = [
        _traj(f"t{i}", True) if i < 2 else _traj(f"t{i}", False, failure=Failure.INFRA, error="policy: HTTP 500")
        for i in range(4)
    ]
    for trajs in (honest, dodging):
        result = score(trajs, 1)
        assert result.overall["pass@1"].value == 0.5 and result.overall["mean@1"].value == 0.5
    assert score(dodging, 1).policy_failures == 2


def test_figures_are_grouped_by_env_family_and_difficulty() -> None:
    trajs = [
        _traj("x1", True, env="a-v0", family="easy", difficulty=0),
        _traj("x2", True, env="a-v0", family="easy", difficulty=0),
        _traj("y1", False, env="b-v0", family="hard", difficulty=10),
        _traj("y2", True, env="b-v0", family="hard", difficulty=2),
    ]
    result = score(trajs, 1)
    assert set(result.overall) == {"pass@1", "mean@1"}  # k = 1: no pass^1 or disagreement
    assert result.by_env["a-v0"]["pass@1"].value == 1.0 and result.by_env["b-v0"]["pass@1"].value == 0.5
    assert result.by_family["hard"]["pass@1"].tasks == 2
    assert list(result.by_difficulty) == ["0", "2", "10"]  # in numeric order


def test_mean_at_k_averages_partial_credit() -> None:
    trajs = [_traj("t", False, reward=r) for r in (0.25, 0.75)]
    assert score(trajs, 2).overall["mean@2"].value == pytest.approx(0.5)


def test_paired_comparison_of_identical_runs_is_zero_and_of_a_better_one_excludes_zero() -> None:
    rng = random.Random(1)
    tasks = [f"t{i}" for i in range(60)]
    weak = score([_traj(t, rng.random() < 0.3) for t in tasks for _ in range(4)], 4, label="weak")
    strong = score([_traj(t, rng.random() < 0.8) for t in tasks for _ in range(4)], 4, label="strong")
    same = compare(weak, weak)
    assert same.differences["pass@1"].value == 0 and same.differences["pass@1"].low == 0
    c = compare(weak, strong)
    d = c.differences["pass@1"]
    assert c.matched == 60 and c.a == "weak" and c.b == "strong"
    assert (
        d.low is not None
        and d.value is not None
        and d.low > 0.3
        and d.value == pytest.approx((strong.overall["pass@1"].value or 0) - (weak.overall["pass@1"].value or 0))
    )


def test_comparison_pairs_only_shared_tasks() -> None:
    a = score([_traj("t1", True), _traj("t2", False)], 1)
    b = score([_traj("t2", True), _traj("t3", True)], 1)
    c = compare(a, b)
    assert (c.matched, c.only_a, c.only_b) == (1, 1, 1)
    assert c.differences["pass@1"].value == 1.0


def test_paired_intervals_are_narrower_than_unpaired_when_tasks_vary_in_difficulty() -> None:
    # Tasks are easy or hard for both models; B is slightly better on every task.
    rng = random.Random(2)
    a, b = [], []
    for i in range(80):
        p = 0.9 if i % 2 else 0.1
        a += [_traj(f"t{i}", rng.random() < p) for _ in range(8)]
        b += [_traj(f"t{i}", rng.random() < min(p + 0.08, 1)) for _ in range(8)]
    ra, rb = score(a, 8), score(b, 8)
    paired = compare(ra, rb).differences["pass@1"]
    assert paired.low is not None and paired.high is not None
    unpaired = (ra.overall["pass@1"].high or 0) - (ra.overall["pass@1"].low or 0)
    assert paired.high - paired.low < unpaired


def test_success_interval_is_the_episode_rate_with_tasks_resampled() -> None:
    trajs = [_traj("a", True)] * 3 + [_traj("b", False)] + [_traj("c", False, failure=Failure.INFRA)]
    e = success_interval(trajs)
    assert e.value == pytest.approx(3 / 4) and e.tasks == 2
    assert e.low == 0.0 and e.high == 1.0  # two tasks: a resample holds a only, b only, or both


def test_evaluate_runs_k_samples_of_each_draw_on_the_same_task_and_seed() -> None:
    rng = random.Random(0)
    inner = oracle()

    def act(conversation: agentenv.Conversation) -> str:
        if conversation.turn == 0 and rng.random() < 0.5:
            return agentenv.tool_call_text("submit", answer=-1)
        return inner.act([conversation])[0]

    seen: list[Trajectory] = []
    result = evaluate("arithmetic-v0", agentenv.ScriptedPolicy(act), n=6, k=3, on_episode=seen.append, label="x")
    assert len(seen) == 18 and result.episodes == 18 and result.label == "x"
    by_task: dict[str, set[int | None]] = {}
    for t in seen:
        by_task.setdefault(t.task.id, set()).add(t.seed)
    assert all(len(seeds) == 1 for seeds in by_task.values())  # a draw's samples share the seed
    assert sum(t.samples for t in result.tasks) == 18 and all(t.samples % 3 == 0 for t in result.tasks)
    assert 0 < (result.overall["pass@1"].value or 0) < (result.overall["pass@3"].value or 0)


def test_evaluate_runs_episodes_a_few_per_cpu_at_a_time_by_default() -> None:
    batches: list[int] = []
    inner = oracle()

    class Counting:
        def act(self, conversations):  # type: ignore[no-untyped-def]
            batches.append(len(conversations))
            return inner.act(conversations)

    n = default_concurrency() + 3
    evaluate("arithmetic-v0", Counting(), n=n)
    assert max(batches) == default_concurrency() >= 4


def test_results_round_trip_through_json_and_load_reads_results_and_trajectories(tmp_path: Path) -> None:
    trajs = [_traj(f"t{i % 3}", i % 2 == 0) for i in range(6)]
    result = score(trajs, 2, label="mine")
    (tmp_path / "r.json").write_text(result.model_dump_json(indent=1))
    assert load(tmp_path / "r.json") == result
    (tmp_path / "t.jsonl").write_text("".join(t.to_json() + "\n" for t in trajs))
    from_trajs = load(tmp_path / "t.jsonl", k=2)
    assert from_trajs.overall == result.overall and from_trajs.label == "t.jsonl"
    assert EvalResult.model_validate_json(result.model_dump_json()).tasks[0] == TaskOutcome(
        env_id="e-v0",
        task_id="t0",
        family="f",
        samples=2,
        n=2,
        successes=1,
        reward_mean=0.5,
        failures={"none": 1, "policy": 1},
    )


def test_load_names_the_file_and_line_of_what_it_cannot_read(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_traj("t", True).to_json() + "\n{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2 is neither an evaluation result"):
        load(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no trajectories"):
        load(empty)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"overall": 3}')
    with pytest.raises(ValueError, match="is not an evaluation result"):
        load(wrong)


def test_load_reads_trajectories_whose_text_holds_unicode_line_separators(tmp_path: Path) -> None:
    # JSON leaves U+2028, U+2029 and U+0085 unescaped; str.splitlines() broke the line at them.
    trajs = [_traj("t0", True), _traj("t1", False)]
    trajs[0].messages.append({"role": "assistant", "content": "a\u2028b\u2029c\x85d\x1ce"})
    path = tmp_path / "sep.jsonl"
    path.write_text("".join(t.to_json() + "\n" for t in trajs), encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")
    assert load(path).overall["pass@1"].value == 0.5
    assert load_trajectories(path)[0].messages[-1]["content"] == "a\u2028b\u2029c\x85d\x1ce"


def test_a_comparison_says_over_how_many_tasks_each_figure_was_computed() -> None:
    # B lost a sample of t2 and of t3 to infra: pass@2 is defined on t0 and t1 alone, on both sides.
    a = score([_traj(t, t in ("t0", "t1")) for t in ("t0", "t1", "t2", "t3") for _ in range(2)], 2)
    b = score(
        [_traj(t, t in ("t0", "t1")) for t in ("t0", "t1") for _ in range(2)]
        + [_traj(t, False) for t in ("t2", "t3")]
        + [_traj(t, False, failure=Failure.INFRA) for t in ("t2", "t3")],
        2,
    )
    c = compare(a, b)
    assert c.matched == 4 and c.differences["pass@1"].tasks == 4
    assert c.differences["pass@2"].tasks == 2 and c.a_values["pass@2"] == 1.0  # t0 and t1 only, A's too
    assert a.overall["pass@2"].value == 0.5 and a.overall["pass@2"].tasks == 4


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("successes", 5, "expected 0 <= successes <= n <= samples"),
        ("n", 3, "expected 0 <= successes <= n <= samples"),
        ("n_bootstrap", 10**12, "n_bootstrap: Input should be less than or equal to 100000"),
    ],
)
def test_a_result_file_with_impossible_counts_or_a_huge_bootstrap_is_refused_in_one_line(
    tmp_path: Path, field: str, value: int, message: str
) -> None:
    data = score([_traj("t0", True), _traj("t0", False)], 2).model_dump(mode="json")
    if field == "n_bootstrap":
        data[field] = value  # compare() would allocate n_bootstrap floats per figure
    else:
        data["tasks"][0][field] = value
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"hostile\.json is not an evaluation result") as caught:
        load(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="n_bootstrap must be in"):
        score([_traj("t0", True)], n_bootstrap=10**12)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["overall"]["pass@1"].update(value=float("nan")), "overall.pass@1.value: Input should be a finite"),
        (lambda d: d["tasks"][0]["failures"].update(none=-1, policy=3), "greater than or equal to 0"),
        (lambda d: d["tasks"][0]["failures"].update(bogus=1), "unknown failure kind 'bogus'"),
        (lambda d: d["tasks"][0].update(failures={"none": 2}), "failures add up to 2 episodes, but samples is 3"),
        (lambda d: d["tasks"][0].update(n=1), "n=1 is fewer than the 2 episodes not failed by infra"),
        (lambda d: d.update(episodes=30), "the tasks ran 3 episodes, but episodes is 30"),
        (lambda d: d["failures"].update(none=5), "failures add up to 7 episodes, but episodes is 3"),
        (lambda d: d.update(policy_failures=2), "policy_failures=2 is more than the 1 infra episodes"),
        (lambda d: (d["tasks"].append(d["tasks"][0]), d.update(episodes=6)), "task 't0' of env 'e-v0' is listed twice"),
    ],
)
def test_a_result_file_whose_counts_do_not_add_up_is_refused_in_one_line(tmp_path: Path, edit, message) -> None:
    # compare() pairs the tasks a file lists: an edited one must not reach it.
    data = score([_traj("t0", True), _traj("t0", False), _traj("t0", False, failure=Failure.INFRA)], 2)
    data = data.model_dump(mode="json")
    edit(data)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"edited\.json is not an evaluation result") as caught:
        load(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_load_trajectories_refuses_an_evaluation_result_and_says_what_it_is(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(score([_traj("t0", True)]).model_dump_json(indent=1))
    with pytest.raises(ValueError, match=r"r.json is an evaluation result \(agentenv eval --json\), not trajectories"):
        load_trajectories(path)
