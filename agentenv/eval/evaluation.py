"""Evaluation that separates skill from luck: k samples per task, the unbiased pass@k,
pass^k and mean@k, bootstrap intervals over tasks, and paired comparisons.

A *task* is an (env id, task id) pair. Each is sampled k times (`evaluate` runs the
k samples of a draw with the same task and seed, so only the policy varies). Per
task, with n valid samples of which c succeeded:

    pass@j   1 - C(n-c, j) / C(n, j)   the chance that at least one of j samples
                                       succeeds (Chen et al. 2021), unbiased for any j <= n
    pass^j   C(c, j) / C(n, j)         the chance that all j succeed (tau-bench)
    mean@k   the task reward averaged over the samples (pass@1 when rewards are 0/1)
    disagreement  1 when the samples disagree (0 < c < n): a group GRPO learns from

Each figure is the mean over tasks, with a percentile bootstrap interval from
resampling tasks (the unit that varies between benchmarks; samples of one task are
correlated) with `scipy.stats.bootstrap`. Infra failures are not the policy's doing:
they are left out of n, so a task hit by one has n < k; a figure at j counts only
tasks with n >= j, says how many it counted, and resamples those. A sample the
policy itself failed to give (its server refused, it raised: ``infra`` labelled
``policy: ...`` by the rollout) is the policy's doing and counts as a failed sample,
reward 0: left out, it would let a policy that fails on the tasks it cannot solve
score only on those it can. The result counts them apart (``policy_failures``).
`compare` pairs two evaluations task by task and bootstraps the mean difference over
the tasks both ran: the figure to quote when two models or two checkpoints differ by
a few points.

Left out: other interval methods (Wilson; BCa, see `_estimate`), multiple-comparison corrections,
and any figure that weighs tasks by how often they were drawn.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentenv.core.env import Env
from agentenv.core.policy import Policy
from agentenv.core.task import Task
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.rollout import rollout

__all__ = [
    "Comparison",
    "Estimate",
    "EvalResult",
    "TaskOutcome",
    "compare",
    "default_concurrency",
    "evaluate",
    "load",
    "load_trajectories",
    "pass_at_k",
    "pass_hat_k",
    "score",
    "success_interval",
]

POLICY_ERROR_PREFIX = "policy: "
"""How the rollout engine labels an episode the policy's backend failed (see `agentenv.rollout`)."""
_MAX_CELLS = 4_000_000  # resampled values held at once (scipy's batch): resamples x tasks
MAX_BOOTSTRAP = 100_000
"""Resamples at most: percentile intervals settle long before, and a result file read
back (``compare``) cannot ask for terabytes of them."""


def default_concurrency() -> int:
    """Episodes live at once when none is asked for: two per CPU this process may use
    (at least 4). Env steps run in threads, and sandboxes, browsers and services take
    CPU: starting every episode at once makes them fight for it (code-v0, 40 episodes
    on 2 cores: 45.6 s all at once, 5.3 s four at a time)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    return max(4, 2 * cpus)


# -- the estimators --------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task from n samples with c successes: 1 - C(n-c, k)/C(n, k),
    computed as 1 - prod_{i=n-c+1..n} (1 - k/i), which never forms the binomials (they
    overflow a float from n ~ 1,000)."""
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k of one task: C(c, k)/C(n, k), the chance that k samples drawn
    from the n all succeed, as prod_{i<k} (c-i)/(n-i)."""
    _check_counts(n, c, k)
    if c < k:
        return 0.0
    return math.prod((c - i) / (n - i) for i in range(k))


def _check_counts(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"successes must be in [0, n={n}], got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}] (at least k samples are needed), got {k}")


# -- results ------------------------------------------------------------------------------

_Figure = Annotated[float, Field(allow_inf_nan=False)]
_Count = Annotated[int, Field(ge=0)]
_KINDS = {kind.value for kind in Failure}


def _check_failures(failures: dict[str, int], episodes: int, what: str) -> None:
    """``failures`` (episodes by how they ended) names only `Failure` kinds and, when given
    at all, adds up to ``episodes``: a result file read back is checked here."""
    unknown = sorted(set(failures) - _KINDS)
    if unknown:
        raise ValueError(f"unknown failure kind {unknown[0]!r}; expected one of {sorted(_KINDS)}")
    if failures and sum(failures.values()) != episodes:
        raise ValueError(f"failures add up to {sum(failures.values())} episodes, but {what} is {episodes}")


class Estimate(BaseModel):
    """A mean over tasks with its bootstrap interval; None where no task qualified."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: _Figure | None
    low: _Figure | None
    high: _Figure | None
    tasks: int = Field(ge=0)
    """Tasks the figure averages over (those with enough valid samples)."""


class TaskOutcome(BaseModel):
    """What the samples of one task did."""

    model_config = ConfigDict(extra="forbid")

    env_id: str | None
    task_id: str
    family: str = "default"
    difficulty: int = 0
    samples: int = Field(ge=0)
    """Episodes run, infra failures included."""
    n: int = Field(ge=0)
    """Valid samples: the episodes that did not end in the env's infra (a policy's failure to
    answer is a valid, failed sample)."""
    successes: int = Field(ge=0)
    reward_mean: float = 0.0
    """The task reward averaged over the valid samples (0 when there are none)."""
    failures: dict[str, _Count] = Field(default_factory=dict)
    """Episodes by how they ended (`Failure` values), infra included."""

    @model_validator(mode="after")
    def _counts_nest(self) -> TaskOutcome:
        # A result file read back (``compare``) is validated here, not deep in the estimators.
        if not self.successes <= self.n <= self.samples:
            raise ValueError(
                f"expected 0 <= successes <= n <= samples, got successes={self.successes}, n={self.n}, "
                f"samples={self.samples}"
            )
        _check_failures(self.failures, self.samples, "samples")
        # Every episode but an infra one is valid: an n below that hides failed samples.
        if self.failures and self.n < self.samples - self.failures.get(Failure.INFRA.value, 0):
            infra = self.failures.get(Failure.INFRA.value, 0)
            raise ValueError(f"n={self.n} is fewer than the {self.samples - infra} episodes not failed by infra")
        return self

    @property
    def key(self) -> tuple[str, str]:
        return (self.env_id or "", self.task_id)


class Comparison(BaseModel):
    """B minus A on the tasks both evaluations ran, with paired bootstrap intervals."""

    model_config = ConfigDict(extra="forbid")

    a: str
    b: str
    k: int = Field(ge=1)
    confidence: float
    matched: int = Field(ge=0)
    """Tasks in both evaluations."""
    only_a: int = Field(ge=0)
    only_b: int = Field(ge=0)
    a_values: dict[str, float | None]
    """A's figures over the tasks of ``differences[figure].tasks``."""
    b_values: dict[str, float | None]
    differences: dict[str, Estimate]
    """Per figure, the mean of B's value minus A's over the matched tasks where both
    define it, and how many those are (``tasks``): pass@j needs j valid samples on both
    sides, mean@k a finite reward, so a figure may count fewer than ``matched``."""


class EvalResult(BaseModel):
    """An evaluation's figures. JSON round trip: `model_dump_json` / `model_validate_json`
    (what ``agentenv eval --json`` writes and ``agentenv compare`` reads)."""

    model_config = ConfigDict(extra="forbid")

    label: str = ""
    """What was evaluated (``eval`` writes the env and the policy)."""
    k: int = Field(ge=1)
    confidence: float = Field(gt=0, lt=1)
    n_bootstrap: int = Field(ge=1, le=MAX_BOOTSTRAP)
    seed: int
    episodes: int = Field(ge=0)
    overall: dict[str, Estimate]
    """Figure name (pass@1, pass@k, pass^k, mean@k, disagreement) -> estimate."""
    by_env: dict[str, dict[str, Estimate]]
    by_family: dict[str, dict[str, Estimate]]
    by_difficulty: dict[str, dict[str, Estimate]]
    failures: dict[str, _Count]
    """Episodes by how they ended; every kind present, zeros included."""
    policy_failures: int = Field(0, ge=0)
    """Episodes the policy's backend failed (an unreachable server, errors after retries):
    counted in the figures as failed samples."""
    tasks: list[TaskOutcome]
    comparison: Comparison | None = None
    """Against a baseline, when one was given (``eval --compare-to``)."""

    @model_validator(mode="after")
    def _counts_add_up(self) -> EvalResult:
        # An edited file is refused here, not compared: its tasks are what `compare` pairs.
        seen: set[tuple[str, str]] = set()
        for t in self.tasks:
            if t.key in seen:
                raise ValueError(f"task {t.task_id!r} of env {t.env_id or '(unnamed)'!r} is listed twice")
            seen.add(t.key)
        samples = sum(t.samples for t in self.tasks)
        if samples != self.episodes:
            raise ValueError(f"the tasks ran {samples} episodes, but episodes is {self.episodes}")
        _check_failures(self.failures, self.episodes, "episodes")
        if self.policy_failures > self.failures.get(Failure.INFRA.value, 0):
            raise ValueError(
                f"policy_failures={self.policy_failures} is more than the "
                f"{self.failures.get(Failure.INFRA.value, 0)} infra episodes it is counted among"
            )
        return self


# -- scoring ---------------------------------------------------------------------------------


def _policy_failed(t: Trajectory) -> bool:
    """Whether ``t`` ended because the policy gave no action (see the module docstring)."""
    return t.failure is Failure.INFRA and (t.error or "").startswith(POLICY_ERROR_PREFIX)


def outcomes(trajectories: Iterable[Trajectory]) -> list[TaskOutcome]:
    """One `TaskOutcome` per (env id, task id), in order of first appearance."""
    groups: dict[tuple[str | None, str], list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault((t.env_id, t.task.id), []).append(t)
    result = []
    for (env_id, task_id), group in groups.items():
        valid = [t for t in group if t.failure is not Failure.INFRA or _policy_failed(t)]
        failures: dict[str, int] = defaultdict(int)
        for t in group:
            failures[t.failure.value] += 1
        meta = group[0].task.metadata
        result.append(
            TaskOutcome(
                env_id=env_id,
                task_id=task_id,
                family=meta.family,
                difficulty=meta.difficulty,
                samples=len(group),
                n=len(valid),
                successes=sum(t.success and t.failure is not Failure.INFRA for t in valid),
                # Each reward's share summed: no overflow where every reward is a float (1e308 twice).
                reward_mean=math.fsum(
                    (t.task_reward or 0.0) / len(valid) for t in valid if t.failure is not Failure.INFRA
                )
                if valid
                else 0.0,
                failures=dict(failures),
            )
        )
    return result


def figure_names(k: int) -> list[str]:
    """The figures of an evaluation with k samples per task: pass@1, pass@2, pass@4, ...
    pass@k, then pass^k, mean@k and disagreement (k = 1: pass@1 and mean@1)."""
    js = sorted({1, k, *(2**i for i in range(1, k.bit_length()) if 2**i < k)})
    if k == 1:  # pass^1 is pass@1, and one sample cannot disagree with itself
        return ["pass@1", "mean@1"]
    return [*(f"pass@{j}" for j in js), f"pass^{k}", f"mean@{k}", "disagreement"]


def _per_task(tasks: Sequence[TaskOutcome], k: int) -> dict[str, np.ndarray]:
    """Each figure's value per task; NaN where a task has too few valid samples for it."""
    columns: dict[str, np.ndarray] = {}
    for name in figure_names(k):
        values = np.full(len(tasks), np.nan)
        for i, t in enumerate(tasks):
            values[i] = _task_figure(name, t)
        columns[name] = values
    return columns


def _task_figure(name: str, t: TaskOutcome) -> float:
    n, c = t.n, t.successes
    if name == "disagreement":
        return float(0 < c < n) if n >= 2 else math.nan
    if name.startswith("mean@"):
        return t.reward_mean if n >= 1 else math.nan
    j = int(name[5:])
    if n < j:
        return math.nan
    return pass_at_k(n, c, j) if name.startswith("pass@") else pass_hat_k(n, c, j)


def score(
    trajectories: Iterable[Trajectory],
    k: int | None = None,
    *,
    label: str = "",
    confidence: float = 0.95,
    n_bootstrap: int = 2000,
    seed: int = 0,
) -> EvalResult:
    """The figures of finished episodes, grouped by task.

    Args:
        trajectories: Every episode, infra failures included (they are counted apart).
        k: Samples per task; default: the fewest any task got.
        label: What was evaluated, for tables and comparisons.
        confidence: Of the bootstrap intervals.
        n_bootstrap: Resamples of the tasks.
        seed: Of the resampling: the same inputs give the same intervals.
    """
    _check_bootstrap(confidence, n_bootstrap)
    trajs = list(trajectories)
    tasks = outcomes(trajs)
    if k is None:
        k = min((t.samples for t in tasks), default=1) or 1
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    columns = _per_task(tasks, k)
    rng = np.random.default_rng(seed)
    overall = _bootstrap(columns, n_bootstrap, confidence, rng)

    def grouped(key: Callable[[TaskOutcome], str]) -> dict[str, dict[str, Estimate]]:
        members: dict[str, list[int]] = defaultdict(list)
        for i, t in enumerate(tasks):
            members[key(t)].append(i)
        return {
            # A group of every task (one env, one family) is the overall figure: not drawn again.
            name: overall
            if len(idx) == len(tasks)
            else _bootstrap({f: v[idx] for f, v in columns.items()}, n_bootstrap, confidence, rng)
            for name, idx in sorted(members.items(), key=lambda kv: _natural(kv[0]))
        }

    failures = {kind.value: 0 for kind in Failure}
    for t in trajs:
        failures[t.failure.value] += 1
    return EvalResult(
        label=label,
        k=k,
        confidence=confidence,
        n_bootstrap=n_bootstrap,
        seed=seed,
        episodes=len(trajs),
        overall=overall,
        by_env=grouped(lambda t: t.env_id or "(unnamed)"),
        by_family=grouped(lambda t: t.family),
        by_difficulty=grouped(lambda t: str(t.difficulty)),
        failures=failures,
        policy_failures=sum(_policy_failed(t) for t in trajs),
        tasks=tasks,
    )


def compare(
    a: EvalResult,
    b: EvalResult,
    *,
    k: int | None = None,
    confidence: float | None = None,
    n_bootstrap: int | None = None,
    seed: int = 0,
) -> Comparison:
    """B minus A on the tasks both ran (matched by env id and task id, or by task id alone
    when each side ran one env), each figure's mean
    difference with a paired bootstrap interval: the tasks are resampled together, so
    what the two share (a task's difficulty) cancels out and what differs (the models)
    remains. ``k`` defaults to the smaller of the two evaluations' k."""
    k = k or min(a.k, b.k)
    confidence = confidence or a.confidence
    n_bootstrap = n_bootstrap or a.n_bootstrap
    _check_bootstrap(confidence, n_bootstrap)
    # One env on each side: match by task id alone (the same tasks under two env names,
    # a registered id and module:Class); several: by env and task id.
    single_env = len({t.env_id for t in a.tasks}) <= 1 and len({t.env_id for t in b.tasks}) <= 1
    by_key_a = {t.task_id if single_env else t.key: t for t in a.tasks}
    by_key_b = {t.task_id if single_env else t.key: t for t in b.tasks}
    keys = [key for key in by_key_a if key in by_key_b]
    cols_a = _per_task([by_key_a[key] for key in keys], k)
    cols_b = _per_task([by_key_b[key] for key in keys], k)
    # Resampling each task's difference B - A is the paired bootstrap: the pairs (A, B) drawn together.
    differences = _bootstrap(
        {f: cols_b[f] - cols_a[f] for f in cols_a}, n_bootstrap, confidence, np.random.default_rng(seed)
    )
    return Comparison(
        a=a.label or "A",
        b=b.label or "B",
        k=k,
        confidence=confidence,
        matched=len(keys),
        only_a=len(by_key_a) - len(keys),
        only_b=len(by_key_b) - len(keys),
        a_values={f: _nanmean(cols_a[f][~np.isnan(cols_b[f])]) for f in cols_a},
        b_values={f: _nanmean(cols_b[f][~np.isnan(cols_a[f])]) for f in cols_b},
        differences=differences,
    )


def success_interval(
    trajectories: Iterable[Trajectory], *, confidence: float = 0.95, n_bootstrap: int = 2000, seed: int = 0
) -> Estimate:
    """The share of valid episodes solved (infra left out), with a bootstrap interval that
    resamples tasks, not episodes: the episodes of one task are not independent draws.
    For a success rate over episodes that repeat tasks unevenly (the trainer's held-out
    evaluation); `score` gives the per-task figures."""
    _check_bootstrap(confidence, n_bootstrap)
    tasks = [t for t in outcomes(trajectories) if t.n]
    rates = np.array([t.successes / t.n for t in tasks])
    weights = np.array([t.n for t in tasks], dtype=float)
    rng = np.random.default_rng(seed)
    return _bootstrap({"success": rates}, n_bootstrap, confidence, rng, weights=weights)["success"]


def _bootstrap(
    columns: dict[str, np.ndarray],
    n_bootstrap: int,
    confidence: float,
    rng: np.random.Generator,
    *,
    weights: np.ndarray | None = None,
) -> dict[str, Estimate]:
    """Each column's mean over the tasks that define it (its NaN entries left out;
    weighted by ``weights`` when given), with a percentile interval from resampling
    those tasks (`scipy.stats.bootstrap`)."""
    out: dict[str, Estimate] = {}
    for name, values in columns.items():
        kept = ~np.isnan(values)
        out[name] = _estimate(values[kept], None if weights is None else weights[kept], n_bootstrap, confidence, rng)
    return out


def _estimate(
    values: np.ndarray, weights: np.ndarray | None, n_bootstrap: int, confidence: float, rng: np.random.Generator
) -> Estimate:
    """The (weighted) mean of ``values`` and its percentile bootstrap interval.

    Percentile, not BCa: an evaluation whose tasks all score alike (every task solved,
    or two identical checkpoints compared) has a degenerate bootstrap distribution,
    where BCa is undefined (NaN) and the percentile interval is the value itself. On
    simulated evaluations the two covered the truth alike from 30 tasks; at 10 both fell
    short of 95%, the percentile interval a little more (0.87-0.91 against 0.87-0.94,
    bench/numerics.py)."""
    if values.size == 0:
        return Estimate(value=None, low=None, high=None, tasks=0)
    data: tuple[np.ndarray, ...] = (values,) if weights is None else (values, weights)
    statistic: Callable[..., Any] = np.mean if weights is None else _weighted_mean
    value = float(statistic(*data, axis=-1))
    if values.size == 1:  # every resample of one task is that task (scipy asks for two)
        return Estimate(value=_clean(value), low=_clean(value), high=_clean(value), tasks=1)
    from scipy.stats import bootstrap

    interval = bootstrap(
        data,
        statistic,
        n_resamples=n_bootstrap,
        batch=max(1, _MAX_CELLS // values.size),
        vectorized=True,
        paired=weights is not None,  # a task's value and weight are drawn together
        confidence_level=confidence,
        method="percentile",
        rng=rng,
    ).confidence_interval
    return Estimate(
        value=_clean(value), low=_clean(float(interval.low)), high=_clean(float(interval.high)), tasks=values.size
    )


def _weighted_mean(values: np.ndarray, weights: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(values * weights, axis=axis) / np.sum(weights, axis=axis)


def _nanmean(values: np.ndarray) -> float | None:
    kept = values[~np.isnan(values)]
    return _clean(float(kept.mean())) if kept.size else None


def _clean(value: float) -> float | None:
    """JSON has no NaN; rounding noise below 1e-12 is cut (a difference of -0.0 prints as -0)."""
    if not math.isfinite(value):
        return None
    return round(float(value), 12) + 0.0


def _natural(key: str) -> tuple[int, int | str]:
    """Sort numeric keys (difficulties) as numbers, after them the rest by name."""
    return (0, int(key)) if key.isdigit() else (1, key)


def _check_bootstrap(confidence: float, n_bootstrap: int) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not 1 <= n_bootstrap <= MAX_BOOTSTRAP:
        raise ValueError(f"n_bootstrap must be in [1, {MAX_BOOTSTRAP}], got {n_bootstrap}")


# -- running ------------------------------------------------------------------------------


def evaluate(
    env: str | Callable[[], Env],
    policy: Policy,
    *,
    n: int = 10,
    k: int = 1,
    tasks: Sequence[Task | str] | None = None,
    seed: int = 0,
    concurrency: int | None = None,
    out: str | Path | None = None,
    on_episode: Callable[[Trajectory], None] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    label: str = "",
    confidence: float = 0.95,
    n_bootstrap: int = 2000,
) -> EvalResult:
    """Run ``policy`` k times on each of n task draws and score the episodes.

    Draw i resets with seed ``seed + i`` and the env picks its task from that seed (as
    ``agentenv eval -n`` always has); its k samples share the task and the seed, so only
    the policy varies between them. ``tasks`` names the tasks instead (draw i is
    ``tasks[i]``, n is ignored). Two draws may pick the same task: its samples add up.

    Args:
        env: A registered id (or ``module:Class``), or a factory returning a fresh `Env`.
        policy: Any `Policy`.
        n: Task draws.
        k: Samples per draw.
        tasks: Explicit tasks (or task ids) instead of seeded draws.
        seed: Base reset seed; also seeds the bootstrap.
        concurrency: Episodes live at once (default: `default_concurrency`).
        out: A JSONL file the trajectories are appended to as they finish.
        on_episode: Called with each trajectory as it finishes.
        env_kwargs: Keyword arguments for `agentenv.make` when ``env`` is an id.
        label: What is evaluated, for tables and comparisons.
        confidence: Of the bootstrap intervals.
        n_bootstrap: Resamples of the tasks.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    draws: list[Task | str | None] = list(tasks) if tasks is not None else [None] * n
    if not draws:
        raise ValueError("nothing to evaluate: give n >= 1 or a non-empty tasks")
    trajectories = rollout(
        env,
        policy,
        tasks=[task for task in draws for _ in range(k)],
        seeds=[seed + i for i in range(len(draws)) for _ in range(k)],
        concurrency=concurrency or default_concurrency(),
        out=out,
        on_episode=on_episode,
        env_kwargs=env_kwargs,
    )
    return score(trajectories, k, label=label, confidence=confidence, n_bootstrap=n_bootstrap, seed=seed)


def load(path: str | Path, *, k: int | None = None, label: str | None = None) -> EvalResult:
    """An `EvalResult` read from what ``agentenv eval --json`` wrote, or scored from a JSONL
    file of trajectories (``agentenv eval --out``), with ``k`` samples per task (default:
    the fewest any task got). ``label`` defaults to the result's own, or the file's name.
    A file that is neither fails with `ValueError` naming the file and the line."""
    file = Path(path)
    text = _read(file)
    result = _result(file, text)
    if result is not None:
        if label is not None:
            result.label = label
        return result
    return score(_trajectories(file, text), k, label=file.name if label is None else label)


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """The trajectories of a JSONL file (``agentenv eval --out``). A file that holds an
    evaluation result instead (``agentenv eval --json``: figures, no episodes) or a line
    that is not a trajectory fails with a one-line `ValueError` naming the file."""
    file = Path(path)
    text = _read(file)
    if _result(file, text) is not None:
        raise ValueError(
            f"{file} is an evaluation result (agentenv eval --json), not trajectories: it holds figures, no "
            "episodes; give the trajectories that evaluation wrote (agentenv eval --out), or compare two "
            "results with agentenv compare A B"
        )
    return _trajectories(file, text)


def _read(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {file}: {e}") from None


def _result(file: Path, text: str) -> EvalResult | None:
    """The evaluation result ``text`` holds, or None where it is not one JSON object with figures."""
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:  # several lines of JSON: trajectories
        return None
    except RecursionError:
        raise ValueError(f"{file}: JSON nested too deeply") from None
    if not (isinstance(whole, dict) and "overall" in whole):
        return None
    try:
        return EvalResult.model_validate(whole)
    except ValidationError as e:
        raise ValueError(f"{file} is not an evaluation result: {_first_error(e)}") from None


def _trajectories(file: Path, text: str) -> list[Trajectory]:
    trajectories = []
    # "\n" only, as JSONL is written: str.splitlines() also breaks at U+2028 and U+0085,
    # which a policy's text may hold and json.dumps leaves unescaped.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            trajectories.append(Trajectory.model_validate_json(line))
        except ValidationError as e:
            raise ValueError(
                f"{file}:{number} is neither an evaluation result (agentenv eval --json) nor a trajectory "
                f"(agentenv eval --out): {_first_error(e)}"
            ) from None
    if not trajectories:
        raise ValueError(f"{file} holds no trajectories")
    return trajectories


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])
