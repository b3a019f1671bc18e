"""`MinerSampler`: the trainer's task sampler when the failure miner is on.

Each step it draws, in order: tasks re-queued after infra failures, quarantined
tasks due for a retest, then fresh groups. A fresh group picks an env by its
weight, then a task from that env's active pool: an unseen task first (with
probability ``unseen_prob`` while any remain), otherwise by Prioritized Level
Replay over the learnability p(1-p) (see `agentenv.miner.priority`). Up to
``mined_share`` of the fresh groups come from mined tasks (resume tasks,
variants, proposals), the rest from the env's train split. Tasks solved at
least ``solved_threshold`` of the time over the window leave the pool; tasks
every rollout failed K visits in a row are quarantined and retested every
``retest_every`` steps. If an env's pool is empty, its whole train split is
drawn uniformly, so training never stalls.

A mined task enters the pool only once validated (`agentenv.miner.variants`): a
resume task only if its truncated episode left it ``resume_min_turns_left`` turns
and the env's oracle, restarted from its snapshot, finishes it (envs without an
oracle: the turns only), its hidden part first drawn anew among the train tasks
that fit the conversation (`MinerSampler._redraw`); a variant or proposal only if
its id and its content (prompt and payload) are new to the train split and the
mined tasks, neither is a held-out task's (of any env: the trainer's evaluation
would measure a task trained on), and the oracle solves it. Refused ones count
under ``miner/new/rejected``. An env factory or validator that fails refuses the
task; it never fails the step.

Each draw carries an importance weight, (1/|pool|) / P(task | env, pool): the
uniform probability over the pool it was drawn from divided by the probability
the miner drew it with. Re-queued and retest draws have weight 1. The split
between train and mined pools and the retired tasks are not corrected for.

Sampling is a pure function of (seed, step, round, state): the state (ledger,
mined tasks and their snapshots, the re-queue) is saved in each checkpoint, so a
resumed run draws exactly what the uninterrupted one would have.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentenv.core.env import Env, Snapshot
from agentenv.core.task import Task
from agentenv.core.task_sampler import Draw, Source, TaskSampler
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.miner.breakpoints import break_point, resume_from, resume_task, turns_left
from agentenv.miner.config import MinerConfig
from agentenv.miner.ledger import Ledger, Origin, TaskRecord, Visit
from agentenv.miner.priority import replay_distribution
from agentenv.miner.proposer import OpenAIProposer, cluster_failures
from agentenv.miner.variants import OracleValidator, Validator, check, content_key, make_variant, stable_hash

__all__ = ["MinedTask", "MinerSampler"]


class MinedTask(BaseModel):
    """A task the miner made, with where it runs and (for resume tasks) its snapshot."""

    model_config = ConfigDict(extra="forbid")

    task: Task
    source: int = Field(ge=0)
    origin: Origin
    snapshot: Snapshot | None = None


class _State(BaseModel):
    """`MinerSampler.state_dict`, validated when a run resumes from it: a checkpoint may be edited."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1]
    ledger: dict[str, TaskRecord]
    mined: list[MinedTask]
    requeue: list[str]


class MinerSampler(TaskSampler):
    """The failure miner as a `TaskSampler` (`agentenv.core.task_sampler`). See the module docstring."""

    def __init__(
        self,
        sources: Sequence[Source],
        seed: int,
        config: MinerConfig | None = None,
        *,
        validators: Sequence[Validator | None] | None = None,
        proposer: OpenAIProposer | None = None,
    ) -> None:
        self.sources = list(sources)
        self.seed = seed
        self.config = config = config or MinerConfig()
        self.ledger = Ledger(config)
        self.mined: dict[str, MinedTask] = {}
        self.requeue: list[str] = []
        self.validators = list(validators) if validators is not None else [_oracle_validator(s) for s in self.sources]
        if proposer is None and config.proposer is not None:
            p = config.proposer
            proposer = OpenAIProposer(
                p.base_url, p.model, timeout_s=p.timeout_s, max_tasks=p.max_tasks, temperature=p.temperature
            )
        self.proposer = proposer
        self.train_tasks: dict[str, tuple[int, Task]] = {}
        for i, source in enumerate(self.sources):
            for task in source.train:
                self.train_tasks[task.id] = (i, task)
        self.contents: dict[tuple[int, str], str] = {}
        """(source, `content_key`) -> the id of the train or mined task with that content
        (resume tasks are left out: they share their root's content by design)."""
        self._index_contents()
        self.same_prompt: dict[tuple[int, str], list[tuple[str, Task]]] = {}
        """(source, prompt) -> its train tasks, one per content, with their `content_key`:
        where a resume task's hidden part is redrawn from (`_redraw`)."""
        for tid, (i, task) in self.train_tasks.items():
            key = content_key(task)
            if self.contents[(i, key)] == tid:
                self.same_prompt.setdefault((i, task.prompt), []).append((key, task))
        self.held_out: dict[str, str] = {content_key(t): t.id for s in self.sources for t in s.test}
        """`content_key` -> the id of the held-out task with that content."""
        self.held_out_ids = {t.id for s in self.sources for t in s.test}
        # Scaled by the largest first, as the uniform sampler does: weights that are each
        # finite can sum to infinity (1e308 twice), which made every probability 0.
        weights = np.array([s.weight for s in self.sources], dtype=float)
        weights /= weights.max()
        self.p_source = weights / weights.sum()
        self.last_metrics: dict[str, Any] = {}

    @property
    def keep_snapshots(self) -> bool:
        """Whether rollouts must keep a snapshot before every turn (for resume tasks)."""
        return self.config.resume and self.config.max_resume_tasks > 0

    # -- drawing --------------------------------------------------------------------

    def sample(self, step: int, round_: int, n_groups: int) -> list[Draw]:
        rng = np.random.default_rng([self.seed, step, round_])
        taken: set[str] = set()
        draws: list[Draw] = []
        if round_ == 0:
            for task_id in self._due(step):
                if len(draws) < n_groups and task_id not in taken:
                    draws.append(self._fixed_draw(task_id, rng))
                    taken.add(task_id)
        fresh = n_groups - len(draws)
        n_mined = min(math.floor(fresh * self.config.mined_share), len(self._active(mined=True, taken=taken)))
        for k in range(fresh):
            draws.append(self._fresh_draw(step, rng, taken, mined=k < n_mined))
        return draws

    def _due(self, step: int) -> list[str]:
        """Re-queued tasks, then quarantined tasks due for a retest."""
        retests = [
            tid
            for tid, r in self.ledger.records.items()
            if r.status == "quarantined"
            and step - r.status_step >= self.config.retest_every
            and self._lookup(tid) is not None
        ]
        return [tid for tid in self.requeue if self._lookup(tid) is not None] + retests

    def _fixed_draw(self, task_id: str, rng: np.random.Generator) -> Draw:
        source, task, snapshot = self._lookup(task_id)  # type: ignore[misc]
        return Draw(source, task, int(rng.integers(2**31)), snapshot)

    def _fresh_draw(self, step: int, rng: np.random.Generator, taken: set[str], *, mined: bool) -> Draw:
        pools = [self._active(mined=mined, taken=taken, source=i) for i in range(len(self.sources))]
        p = np.array([w if pool else 0.0 for w, pool in zip(self.p_source, pools, strict=True)])
        if p.sum() == 0:  # every pool is empty or spent: fall back to the train splits, uniformly
            i = int(rng.choice(len(self.sources), p=self.p_source))
            task = self.sources[i].train.sample(rng)
            return Draw(i, task, int(rng.integers(2**31)))
        i = int(rng.choice(len(self.sources), p=p / p.sum()))
        task_id, prob = self._pick(pools[i], step, rng)
        taken.add(task_id)
        _, task, snapshot = self._lookup(task_id)  # type: ignore[misc]
        weight = (1.0 / len(pools[i])) / prob
        return Draw(i, task, int(rng.integers(2**31)), snapshot, weight)

    def _pick(self, pool: list[str], step: int, rng: np.random.Generator) -> tuple[str, float]:
        """A task id from ``pool`` and the probability it had."""
        unseen = [tid for tid in pool if not self._seen(tid)]
        seen = [tid for tid in pool if self._seen(tid)]
        explore = self.config.unseen_prob if seen else 1.0
        if unseen and rng.random() < explore:
            return unseen[int(rng.integers(len(unseen)))], explore / len(unseen)
        records = [self.ledger.records[tid] for tid in seen]
        dist = replay_distribution(
            np.array([r.ema for r in records]),
            np.array([r.last_step for r in records]),
            step,
            temperature=self.config.temperature,
            staleness_coef=self.config.staleness_coef,
        )
        j = int(rng.choice(len(seen), p=dist))
        return seen[j], (1.0 - explore if unseen else 1.0) * float(dist[j])

    def _seen(self, task_id: str) -> bool:
        record = self.ledger.get(task_id)
        return record is not None and record.seen

    def _active(self, *, mined: bool, taken: set[str], source: int | None = None) -> list[str]:
        items = (
            [(tid, m.source) for tid, m in self.mined.items()]
            if mined
            else [(tid, s) for tid, (s, _) in self.train_tasks.items()]
        )
        out = []
        for tid, s in items:
            if (source is None or s == source) and tid not in taken:
                record = self.ledger.get(tid)
                if record is None or record.status == "active":
                    out.append(tid)
        return out

    def _lookup(self, task_id: str) -> tuple[int, Task, Snapshot | None] | None:
        if task_id in self.train_tasks:
            source, task = self.train_tasks[task_id]
            return source, task, None
        mined = self.mined.get(task_id)
        return None if mined is None else (mined.source, mined.task, mined.snapshot)

    # -- learning from outcomes -------------------------------------------------------

    def update(self, step: int, trajectories: Sequence[Trajectory]) -> None:
        """Count each group's outcomes, re-queue infra losses, mine the failures."""
        groups: dict[tuple[str, int | None], list[Trajectory]] = {}
        for traj in trajectories:
            groups.setdefault((traj.task.id, traj.seed), []).append(traj)
        visits: list[Visit] = []
        requeue: list[str] = []
        failures: list[tuple[int, Trajectory]] = []
        for (task_id, _), group in groups.items():
            found = self._lookup(task_id)
            if found is None:
                continue
            source = found[0]
            visit = self.ledger.record_visit(found[1], source, step, group)
            visits.append(visit)
            if visit.requeue:
                requeue.append(task_id)
            failures += [(source, t) for t in group if not t.success and t.failure is not Failure.INFRA]
        self.requeue = requeue
        mined = self._mine(step, failures)
        self.last_metrics = self._metrics(visits, [t for t in trajectories if not t.success], mined)

    def _mine(self, step: int, failures: list[tuple[int, Trajectory]]) -> Counter[str]:
        counts: Counter[str] = Counter()
        cfg = self.config
        if cfg.resume and cfg.max_resume_tasks > 0:
            counts.update(self._resumes(step, failures))
        if cfg.variants and cfg.variants_per_failure > 0 and cfg.max_variants > 0:
            counts.update(self._variants(step, failures))
        if self.proposer is not None and cfg.proposer is not None and (step + 1) % cfg.proposer.every_steps == 0:
            counts.update(self._propose(failures))
        return counts

    def _resumes(self, step: int, failures: list[tuple[int, Trajectory]]) -> Counter[str]:
        counts: Counter[str] = Counter()
        refused: set[str] = set()  # a group's G failures often reach one state: validate it once
        redrawn: dict[tuple[int, int | None, str], tuple[Task, Snapshot] | None] = {}
        envs: dict[int, Env | None] = {}  # None: the factory failed this step
        try:
            for source, traj in failures:
                point = break_point(traj)
                if point is None:
                    continue
                left = turns_left(traj, point)
                if left is not None and left < self.config.resume_min_turns_left:
                    counts["rejected"] += 1  # e.g. a last-turn break point: one turn left, nothing to learn
                    continue
                made = resume_task(traj, point)
                if made is None:
                    continue
                if self.config.resume_redraws > 0:
                    # One draw per conversation the policy saw (whatever hidden part each
                    # failure had), made once a step.
                    seen = json.dumps([made[1].turn, made[1].messages], sort_keys=True, default=str)
                    key = (source, traj.seed, seen)
                    if key not in redrawn:
                        redrawn[key] = self._redraw(step, source, traj.seed, made, stable_hash(seen), envs)
                    if (drawn := redrawn[key]) is None:
                        counts["rejected"] += 1
                        continue
                    made = drawn
                task, snapshot = made
                validate = self.validators[source]
                if task.id in refused:
                    counts["rejected"] += 1
                    continue
                # An id already mined is this very state, validated when it came in.
                if task.id not in self.mined and validate is not None and check(validate, task, snapshot) is not None:
                    refused.add(task.id)
                    counts["rejected"] += 1
                    continue
                self._add(MinedTask(task=task, source=source, origin="resume", snapshot=snapshot))
                counts["resume"] += 1
        finally:
            for env in envs.values():
                if env is not None:
                    env.close()
        return counts

    def _redraw(
        self,
        step: int,
        source: int,
        seed: int | None,
        made: tuple[Task, Snapshot],
        state_hash: int,
        envs: dict[int, Env | None],
    ) -> tuple[Task, Snapshot] | None:
        """The resume task of ``made``'s conversation with its hidden part drawn anew:
        uniformly among the train tasks of its env with its prompt (and the failed task)
        that give that same conversation when its actions are replayed. The failed
        episode's own task is the one least likely to be solved from there: a resume
        task that kept it would train every group on the states the policy gets wrong
        (guess-number: on the secrets it missed). At most ``resume_redraws`` of them,
        picked at random, are tried; None when none of those fits."""
        snap = made[1]
        own = content_key(snap.task)
        pool = self.same_prompt.get((source, snap.task.prompt), [])
        if self.contents.get((source, own)) not in self.train_tasks:
            pool = [*pool, (own, snap.task)]  # a variant or proposal: not in the train split
        if len(pool) < 2:
            return made
        rng = np.random.default_rng([self.seed, step, state_hash])
        fits: list[tuple[Task, Snapshot]] = []
        for i in rng.permutation(len(pool))[: self.config.resume_redraws]:
            key, cand = pool[int(i)]
            if key == own:
                fits.append(made)
            elif (replayed := self._replay(source, cand, seed, snap, envs)) is not None:
                fits.append((resume_from(cand.id, replayed), replayed))
        return fits[int(rng.integers(len(fits)))] if fits else None

    def _replay(
        self, source: int, task: Task, seed: int | None, snap: Snapshot, envs: dict[int, Env | None]
    ) -> Snapshot | None:
        """``task`` played with the actions in ``snap``'s conversation: its snapshot at
        ``snap``'s turn if every message came out the same, else None (an env that
        fails counts as a mismatch)."""
        if source not in envs:
            envs[source] = self._make_env(source)
        env = envs[source]
        if env is None:
            return None
        try:
            env.reset(seed=seed, options={"task": task})
            for m in snap.messages:
                if m.get("role") != "assistant":
                    continue
                plain = m.keys() == {"role", "content"} and isinstance(m["content"], str)
                _, _, terminated, truncated, _ = env.step(m["content"] if plain else dict(m))
                if terminated or truncated:
                    return None
            replayed = env.snapshot()
        except Exception:  # noqa: BLE001 - a candidate the env will not play is one that does not fit
            return None
        same = (replayed.turn, replayed.format_streak, replayed.messages) == (
            snap.turn,
            snap.format_streak,
            snap.messages,
        )
        return replayed if same else None

    def _refusal(self, source: int, task: Task) -> str | None:
        """Why a new task (a variant or proposal) cannot enter the pool before validation:
        its id is taken (evicting it later would forget that task's record) or its
        content is a train or mined task's (a second record and weight for one task, and
        a copy of a retired task back in the pool as unseen) or a held-out task's."""
        if task.id in self.train_tasks or task.id in self.mined or task.id in self.held_out_ids:
            return f"the id {task.id!r} is taken"
        if (held := self.held_out.get(content_key(task))) is not None:
            return f"a copy of the held-out task {held!r}"
        holder = self.contents.get((source, content_key(task)))
        return None if holder is None else f"a copy of {holder!r}"

    def _variants(self, step: int, failures: list[tuple[int, Trajectory]]) -> Counter[str]:
        counts: Counter[str] = Counter()
        seen: set[str] = set()
        envs: dict[int, Env | None] = {}  # None: the factory failed this step
        try:
            for source, traj in failures:
                task = traj.task
                origin = self.ledger.records[task.id].origin if task.id in self.ledger else "train"
                validate = self.validators[source]
                if task.id in seen or origin not in ("train", "proposed") or validate is None:
                    continue
                seen.add(task.id)
                if source not in envs:
                    envs[source] = self._make_env(source)
                env = envs[source]
                if env is None:  # like a mutate that raised: no variants, not a failed step
                    counts["rejected"] += self.config.variants_per_failure
                    continue
                for j in range(self.config.variants_per_failure):
                    rng = np.random.default_rng([self.seed, step, stable_hash(task.id), j])
                    variant, _why = make_variant(env, task, rng, _Admission(self, source, validate))
                    if variant is None:
                        counts["rejected"] += 1
                    else:
                        self._add(MinedTask(task=variant, source=source, origin="variant"))
                        counts["variant"] += 1
        finally:
            for made in envs.values():
                if made is not None:
                    made.close()
        return counts

    def _make_env(self, source: int) -> Env | None:
        try:
            return self.sources[source].factory()
        except Exception:  # noqa: BLE001 - a sandbox that will not start costs the variants, not the step
            return None

    def _propose(self, failures: list[tuple[int, Trajectory]]) -> Counter[str]:
        if self.proposer is None or self.config.proposer is None:
            return Counter()
        counts: Counter[str] = Counter()
        where = {t.task.id: s for s, t in failures}
        triples = []
        for _, traj in failures:
            point = break_point(traj)
            triples.append((traj.task, traj.failure.value, None if point is None else point.turn))
        clusters = cluster_failures(triples)[: self.config.proposer.max_clusters]
        result = self.proposer.propose(clusters)
        counts["proposal_errors"] += len(result.errors)
        for proposed in result.proposed:
            task = proposed.task
            source = where.get(proposed.like.id)
            validate = self.validators[source] if source is not None else None
            if source is None or validate is None or _Admission(self, source, validate)(task) is not None:
                counts["rejected"] += 1
            else:
                self._add(MinedTask(task=task, source=source, origin="proposed"))
                counts["proposed"] += 1
        return counts

    def _add(self, item: MinedTask) -> None:
        """Add (or refresh) a mined task, dropping the oldest of its kind past the bound."""
        self.mined.pop(item.task.id, None)
        self.mined[item.task.id] = item
        self.ledger.add(item.task, item.source, item.origin)
        if item.origin != "resume":
            self.contents.setdefault((item.source, content_key(item.task)), item.task.id)
        # Proposed tasks share the variants' bound: both are new tasks, not restarts.
        limit = self.config.max_resume_tasks if item.origin == "resume" else self.config.max_variants
        same = [tid for tid, m in self.mined.items() if (m.origin == "resume") == (item.origin == "resume")]
        for tid in same[: max(len(same) - limit, 0)]:
            # Its record and requeue entry go too: kept, they grew with every failure the
            # policy made (a record per variant ever mined, in every checkpoint and walked
            # every step).
            evicted = self.mined.pop(tid)
            self.ledger.forget(tid)
            key = (evicted.source, content_key(evicted.task))
            if self.contents.get(key) == tid:
                del self.contents[key]
            if tid in self.requeue:
                self.requeue.remove(tid)

    # -- metrics and state ---------------------------------------------------------------

    def _metrics(self, visits: list[Visit], failed: list[Trajectory], mined: Counter[str]) -> dict[str, Any]:
        status = Counter(r.status for tid, r in self.ledger.records.items() if self._lookup(tid) is not None)
        unseen = sum(1 for tid in [*self.train_tasks, *self.mined] if not self._seen(tid))
        counted = [v for v in visits if v.counted]
        m: dict[str, Any] = {
            "miner/pool/active": len(self._active(mined=False, taken=set()))
            + len(self._active(mined=True, taken=set())),
            "miner/pool/solved": status["solved"],
            "miner/pool/quarantined": status["quarantined"],
            "miner/pool/unseen": unseen,
            "miner/pool/resume": sum(m.origin == "resume" for m in self.mined.values()),
            "miner/pool/variants": sum(m.origin == "variant" for m in self.mined.values()),
            "miner/pool/proposed": sum(m.origin == "proposed" for m in self.mined.values()),
            "miner/informative_frac": sum(v.informative for v in counted) / len(counted) if counted else 0.0,
            "miner/requeued": len(self.requeue),
            "miner/new/resume": mined["resume"],
            "miner/new/variants": mined["variant"],
            "miner/new/proposed": mined["proposed"],
            "miner/new/rejected": mined["rejected"],
        }
        kinds = Counter(t.failure.value for t in failed)
        for kind in Failure:
            if kind is not Failure.NONE:
                m[f"miner/failures/{kind.value}"] = kinds[kind.value]
        m["miner/top_failing_families"] = self.top_failing_families()
        return m

    def top_failing_families(self, n: int = 3) -> list[list[Any]]:
        """[[family, failed episodes, failure rate], ...], most failures first."""
        failed: Counter[str] = Counter()
        attempts: Counter[str] = Counter()
        for r in self.ledger.records.values():
            failed[r.family] += r.attempts - r.successes
            attempts[r.family] += r.attempts
        top = sorted((f for f in failed if failed[f]), key=lambda f: (-failed[f], f))[:n]
        return [[f, failed[f], round(failed[f] / attempts[f], 4)] for f in top]

    def metrics(self) -> dict[str, Any]:
        """The metrics of the last `update` (logged under ``miner/``)."""
        return dict(self.last_metrics)

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "ledger": self.ledger.state_dict(),
            "mined": [m.model_dump(mode="json") for m in self.mined.values()],
            "requeue": list(self.requeue),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict`'s output; anything else (an edited checkpoint) is one
        ValueError naming the field, and nothing is restored."""
        if not state:
            return
        if isinstance(state, dict) and state.get("version") != 1:
            raise ValueError(f"unknown miner state version {state.get('version')!r}; expected 1")
        try:
            checked = _State.model_validate(state)
        except ValidationError as e:
            err = e.errors()[0]
            raise ValueError(f"field {'.'.join(map(str, err['loc']))!r}: {err['msg']}") from None
        for tid, record in checked.ledger.items():  # drawn by PLR, a seen task needs both
            if record.ema is not None and record.last_step is None:
                raise ValueError(f"field 'ledger.{tid}.last_step': None, but the task was seen (its ema is set)")
        sources = len(self.sources)
        for where, source in [
            *((f"ledger.{tid}", r.source) for tid, r in checked.ledger.items()),
            *((f"mined.{i}", m.source) for i, m in enumerate(checked.mined)),
        ]:
            if source >= sources:
                raise ValueError(f"field '{where}.source': {source}, but the run has {sources} env(s)")
        self.ledger.records = checked.ledger
        self.mined = {m.task.id: m for m in checked.mined}
        self.requeue = checked.requeue
        self._index_contents()

    def _index_contents(self) -> None:
        self.contents = {}
        for tid, (source, task) in self.train_tasks.items():
            self.contents.setdefault((source, content_key(task)), tid)
        for tid, m in self.mined.items():
            if m.origin != "resume":
                self.contents.setdefault((m.source, content_key(m.task)), tid)

    def close(self) -> None:
        if self.proposer is not None:
            self.proposer.close()


class _Admission:
    """A new task's check: `MinerSampler._refusal` first (cheap), then the validator."""

    def __init__(self, sampler: MinerSampler, source: int, validate: Validator) -> None:
        self.sampler, self.source, self.validate = sampler, source, validate

    def __call__(self, task: Task, snapshot: Snapshot | None = None, /) -> str | None:
        return self.sampler._refusal(self.source, task) or check(self.validate, task, snapshot)


def _oracle_validator(source: Source) -> Validator | None:
    """Validation by the env's registered oracle; None (no variants) for envs without one."""
    if source.env_id is None:
        return None
    from agentenv.registry import spec

    env_spec = spec(source.env_id)
    if env_spec.oracle is None:
        return None
    return OracleValidator(source.factory, env_spec.make_oracle)
