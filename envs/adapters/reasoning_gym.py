"""reasoning-gym's procedural datasets as answer-mode envs: ``reasoning-gym/<name>-v0``.

Every dataset in reasoning-gym's registry becomes an env whose tasks are its
entries, generated deterministically from ``seed``; the reply is the answer, scored
by the dataset's own ``score_answer``. Single-turn by default; ``multi_turn=True``
answers a wrong reply with "incorrect" (never the reference answer) and lets the
agent try again, up to ``max_attempts``.

What the reply must contain: the final answer inside ``<answer>...</answer>``, once,
read by the rule of `agentenv.envs.answers` (``extract_answer``): the text after the
last ``</think>``; the tag's name in any case; a ``\boxed{}`` counts as a marker too and
may sit inside the tag. A reply without a marker is taken whole (stripped). A reply
holding more than one answer (two tags, two boxes, a tag left open beside a closed one,
a tag inside a tag) is a format error, whichever answer is right: an error observation,
the format penalty, nothing scored, no attempt used (it still takes a turn). The task
reward is the dataset's score of the answer, in [0, 1] (some datasets give partial
credit); success is 1.0.

What the policy cannot do to the reward (each has a test):

- hedge: a reply that scores above 0 is also scored against ``decoys`` other
  entries of the dataset whose reference answers differ; if it scores as well on
  one of them, its credit says nothing about this task and it scores 0. A reply
  listing many candidates is such a hedge. (This also exposes scorers that accept
  anything: reasoning-gym 0.1.25's game_of_life_halting gives 1.0 to every
  non-empty answer, so nothing scores there.)
- list candidates in one answer: many scorers read part of an answer (0.1.25's
  gsm_symbolic, fraction_simplification and time_intervals its first number or line,
  quantum_lock any sequence in it), so ``<answer>R, W</answer>`` scored 1 when R was
  right, and the decoys, holding other answers, never saw it. An answer that scores
  above 0 is cut at the list separators (`LIST_SEPARATOR`: ``,`` ``;`` a line break, a
  blank line, `` or ``, spaces) of kinds its reference does not hold (anywhere, or outside
  brackets: ``(1, 2), (3, 4)`` against ``(1, 2)``), and its parts are scored alone (the
  first and last `MAX_PARTS` / 2 of them); if one scores as well as the whole, the
  answer is a list of candidates and scores 0 (and so does a bare number's answer with
  words after it: ``42 apples`` against ``42``). Tasks without a reference answer (their
  scorer checks a solution) are not cut. Not caught: separators the reference holds too
  (two roots against a list of roots), and scorers whose partial credit for a longer
  answer is their rule (quantum_lock's 0.5 for a sequence that works but is not the shortest).
- crash, hang or outlive the scorer: scoring runs in a child process with a time
  limit and a memory cap (`agentenv.envs.adapters._reasoning_gym_scorer`); an answer that
  makes the scorer raise, hang or die scores 0 with the reason, never infra.
- send oversized or non-Unicode text: the base class refuses an action past
  ``max_action_chars`` (131,072 here: room for a long chain of thought) or holding a
  lone surrogate (a format error); an answer past ``max_answer_chars`` scores 0 unscored.

Ids: ``reasoning-gym/<name>-v0`` with ``name`` the dataset's registry name; a name
with a character an id cannot hold (anything but letters, digits, ``_ . -``) has it
replaced by ``-`` (`env_name`; none of 0.1.25's 106 names needs it).

Difficulty: a dataset with a curriculum has, for each curriculum attribute, the
level whose value the config reaches (the upper end of a range); the task's
``difficulty`` is the highest of them (the curriculum's global level at which this
config fits), and its tags name each level and each difficulty field's value
(``level:num_animals=9``, ``max_animals=10``). A dataset without a curriculum has
difficulty 0 and tags from its ``min_*`` / ``max_*`` fields.

The composite dataset mixes others: ``config={"datasets": [{"name": "leg_counting",
"weight": 1, "config": {}}, ...]}`` (it has no default, so ``agentenv list`` shows its id
as needing that: `COMPOSITE_NEEDS`). An env generates its ``size`` tasks when it is made:
a few datasets take seconds an entry (`SLOW_TO_MAKE`, said in their ids' descriptions).
Left out: the curricula's automatic level changes (the failure miner does that job here),
and generating tasks lazily (a `TaskSet` holds made tasks).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentenv.core.env import Env
from agentenv.core.errors import EnvArgumentError
from agentenv.core.state import State
from agentenv.core.task import Task, TaskMeta, TaskSet, did_you_mean
from agentenv.envs.adapters._reasoning_gym_scorer import shared_scorer
from agentenv.envs.answers import extract_answer
from agentenv.policies import ScriptedPolicy
from agentenv.registry import register

__all__ = [
    "ReasoningGymEnv",
    "ReasoningGymPayload",
    "ReasoningGymState",
    "env_name",
    "list_parts",
    "oracle",
    "register_all",
]

NAMESPACE = "reasoning-gym"
INSTRUCTIONS = (
    "Solve the problem. Think it through as you like, then give only the final answer inside "
    "<answer></answer> tags, once, in the format the problem asks for."
)
_NOT_IN_ID = re.compile(r"[^A-Za-z0-9_.-]")
LIST_SEPARATOR = re.compile(r",|;|\n[ \t]*\n|\n|[ \t]+or[ \t]+|[ \t]+", re.IGNORECASE)
"""Where an answer that scores is cut into parts, each scored alone (the list-of-candidates
check): a comma, a semicolon, a blank line, a line break, `` or ``, spaces; each only where
the reference holds none of its kind (so not spaces in ``5 days`` against ``3 days``)."""
_DEPTH_STEP = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}
COMPOSITE_NEEDS = (
    "config={'datasets': [{'name': 'leg_counting', 'weight': 1, 'config': {}}, ...]}: "
    "the datasets composite mixes (it has none by default)"
)
"""What the composite dataset's env needs to be made (its registry entry's `EnvSpec.needs`)."""
SLOW_TO_MAKE = {
    name: f"its 64 default tasks take about {seconds} s to generate; size= makes fewer"
    for name, seconds in (("knight_swap", 20), ("zebra_puzzles", 10), ("futoshiki", 10), ("puzzle24", 4))
}
"""Datasets (0.1.25) whose entries take long to generate, measured on an idle 2-core machine
(twice as long or more on a loaded one): the env generates its ``size`` tasks when made."""
MAX_PARTS = 8
"""Parts of an answer scored alone at most: the first and last half of this."""
_RESERVED = ("seed", "size")


class ReasoningGymPayload(BaseModel):
    """What regenerates a task's entry: its dataset, config, seed, size and index."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str
    config: dict[str, Any]
    seed: int
    size: int
    index: int
    answer: str | None
    """The dataset's reference answer (None where the dataset has none; its scorer checks)."""


class ReasoningGymState(State):
    attempts: int = 0
    score: float = 0.0
    """The score of the latest answer (after the hedge check)."""
    note: str | None = None
    """Why the latest answer scored 0 without its scorer's say (a hedge, a list of candidates, a scorer failure)."""


class _Options(BaseModel):
    """The env's own arguments, checked in one place."""

    model_config = ConfigDict(extra="forbid", strict=True)

    size: int = Field(ge=1)
    seed: int = Field(ge=0)
    multi_turn: bool
    max_attempts: int | None = Field(ge=1)
    decoys: int = Field(ge=0)
    max_answer_chars: int = Field(ge=1)
    score_timeout_s: float = Field(gt=0)

    @model_validator(mode="after")
    def _attempts_need_multi_turn(self) -> _Options:
        if (self.max_attempts or 1) > 1 and not self.multi_turn:
            raise ValueError(f"max_attempts={self.max_attempts} needs multi_turn=True")
        return self


class _Scored(NamedTuple):
    score: float
    note: str | None
    shown: bool
    """Whether the note may be shown to the agent (in multi-turn feedback)."""


class ReasoningGymEnv(Env[ReasoningGymState]):
    """One reasoning-gym dataset: each task an entry, the reply its answer."""

    answer_mode = True
    payload_type = ReasoningGymPayload
    instructions = INSTRUCTIONS
    max_action_chars = 131_072
    """Room for a long chain of thought before the answer (the base class's 32,000 is ~8k tokens)."""

    def __init__(
        self,
        dataset: str,
        config: Mapping[str, Any] | None = None,
        *,
        size: int = 64,
        seed: int = 0,
        multi_turn: bool = False,
        max_attempts: int | None = None,
        decoys: int = 2,
        max_answer_chars: int = 4096,
        score_timeout_s: float = 5.0,
        tasks: TaskSet | None = None,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            dataset: A name in reasoning-gym's registry (``reasoning_gym.factory.DATASETS``).
            config: Fields of the dataset's config dataclass (``seed`` and ``size`` excepted).
            size: How many tasks (entries) to generate, when the env is made.
            seed: The dataset's seed: the same seed, config and size give the same tasks.
            multi_turn: Answer a wrong reply with feedback and let the agent try again.
            max_attempts: Answers per episode with ``multi_turn`` (default 3); 1 without.
            decoys: Other entries each scoring answer is also scored against (the hedge
                check); 0 turns the check off.
            max_answer_chars: A longer answer scores 0 without being scored.
            score_timeout_s: Scoring one answer (decoys included) longer than this scores it 0.
            tasks: Tasks made by another env of the same dataset (e.g. reloaded from JSONL).
        """
        try:
            options = _Options(
                size=size,
                seed=seed,
                multi_turn=multi_turn,
                max_attempts=max_attempts,
                decoys=decoys,
                max_answer_chars=max_answer_chars,
                score_timeout_s=score_timeout_s,
            )
        except pydantic.ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "arguments"
            raise EnvArgumentError(f"ReasoningGymEnv: {where}: {err['msg']}") from None
        self.dataset = _known_dataset(dataset)
        if self.dataset == "composite" and not (isinstance(config, Mapping) and config.get("datasets")):
            raise EnvArgumentError(f"reasoning-gym's composite needs {COMPOSITE_NEEDS}")
        self.config = _checked_config(self.dataset, config or {}, seed=seed, size=size)
        max_attempts = options.max_attempts or (3 if multi_turn else 1)
        self.seed, self.size, self.multi_turn, self.max_attempts = seed, size, multi_turn, max_attempts
        self.decoys, self.max_answer_chars, self.score_timeout_s = decoys, max_answer_chars, float(score_timeout_s)
        kwargs.setdefault("max_turns", max_attempts)
        self._references: list[tuple[str, int, int, str | None]] | None = None
        super().__init__(tasks, **kwargs)
        if tasks is not None:
            for task in self.tasks:
                if self._typed_payload(task).dataset != self.dataset:  # type: ignore[attr-defined]
                    raise EnvArgumentError(f"task {task.id!r} is not of dataset {self.dataset!r}")

    # -- hooks ----------------------------------------------------------------------

    def default_tasks(self) -> TaskSet:
        return _generated_tasks(self.dataset, _config_key(self.config), self.seed, self.size)

    def system_prompt(self, task: Task) -> str:
        return self.instructions

    def on_answer(self, answer: str) -> str | None:
        text = extract_answer(answer).strip()  # AmbiguousAnswer: a format error, no attempt used
        state = self.state
        state.attempts += 1
        scored = self._score(text)
        state.score, state.note = scored.score, scored.note
        if state.score >= 1.0 or state.attempts >= self.max_attempts:
            return None
        left = self.max_attempts - state.attempts
        why = f" ({scored.note})" if scored.note and scored.shown else ""
        return f"Incorrect{why}. Try again: {left} attempt{'s' if left > 1 else ''} left."

    def verify(self, task: Task) -> float:
        return self.state.score

    def mutate(self, task: Task, rng: np.random.Generator) -> Task | None:
        """The same dataset and config's entry 0 under a new seed: a new problem of the same difficulty."""
        payload: ReasoningGymPayload = self._typed_payload(task)  # type: ignore[assignment]
        new_seed = int(rng.integers(1 << 31))
        request = {**payload.model_dump(include={"dataset", "config", "size"}), "seed": new_seed, "indices": [0]}
        entry = shared_scorer().entries(request)[0]
        return _task(payload.dataset, payload.config, new_seed, payload.size, 0, entry, task.metadata)

    # -- scoring --------------------------------------------------------------------

    def _score(self, answer: str) -> _Scored:
        """The score of ``answer`` (read out of the reply) and, when it is 0 for a reason of ours, the reason."""
        if len(answer) > self.max_answer_chars:
            note = f"the answer is {len(answer)} characters long; the limit is {self.max_answer_chars}"
            return _Scored(0.0, note, shown=True)
        payload: ReasoningGymPayload = self.payload
        request = {
            **payload.model_dump(exclude={"answer"}),
            "answer": answer,
            "decoys": self._decoys(payload),
            "parts": list_parts(answer, payload.answer),
        }
        reply_ = shared_scorer().score(request, timeout_s=self.score_timeout_s)
        # A scorer's own message may quote the reference answer: kept in the state, never shown.
        if reply_.error is not None:
            return _Scored(0.0, f"the dataset's scorer failed on this answer: {reply_.error}", shown=False)
        score = reply_.score
        if not isinstance(score, (int, float)) or not math.isfinite(score):
            return _Scored(0.0, f"the dataset's scorer returned {score!r}, not a number in [0, 1]", shown=False)
        score = min(max(float(score), 0.0), 1.0)
        if score > 0 and reply_.decoys and max(reply_.decoys) >= score:
            return _Scored(0.0, "the answer scores as well on other problems of this dataset (a hedge)", shown=True)
        if score > 0 and reply_.parts and max(reply_.parts) >= score:
            # Not shown: it would tell the agent that one of its candidates is right.
            return _Scored(
                0.0, "the answer is a list of candidates: one of its parts scores as well alone", shown=False
            )
        return _Scored(score, None, shown=False)

    def _decoys(self, payload: ReasoningGymPayload) -> list[list[int]]:
        """Up to ``decoys`` tasks of this env after the current one whose reference answers differ."""
        if not self.decoys:
            return []
        if self._references is None:  # (id, seed, index, answer) of each task: read once, not per step
            self._references = [(t.id, t.payload["seed"], t.payload["index"], t.payload["answer"]) for t in self.tasks]
        refs, own, n = self._references, self.task.id, len(self._references)
        start = payload.index if payload.seed == self.seed else 0
        picked: list[list[int]] = []
        for k in range(1, n + 1):
            task_id, seed, index, answer = refs[(start + k) % n]
            if task_id != own and (payload.answer is None or answer != payload.answer):
                picked.append([seed, index])
                if len(picked) == self.decoys:
                    break
        return picked


# -- tasks ------------------------------------------------------------------------------


def env_name(dataset: str) -> str:
    """The id part for a dataset name: characters an id cannot hold become ``-``."""
    return _NOT_IN_ID.sub("-", dataset)


def _datasets() -> dict[str, tuple[type, type]]:
    from reasoning_gym.factory import DATASETS

    return DATASETS


def _known_dataset(name: Any) -> str:
    datasets = _datasets()
    if not isinstance(name, str) or name not in datasets:
        hint = did_you_mean(str(name), datasets) or f" It has {len(datasets)}: `agentenv list {NAMESPACE}` shows them."
        raise EnvArgumentError(f"reasoning-gym has no dataset {name!r}.{hint}")
    return name


def _checked_config(dataset: str, config: Any, *, seed: Any, size: Any) -> dict[str, Any]:
    """``config`` validated against the dataset's config dataclass (names, types, its
    ``validate()``), as plain JSON data: what the tasks' payloads carry."""
    if not isinstance(config, Mapping):
        raise EnvArgumentError(f"config must be a mapping of field names to values, got {type(config).__name__}")
    config_cls = _datasets()[dataset][1]
    fields = [f.name for f in dataclasses.fields(config_cls) if f.name not in _RESERVED]
    for key in config:
        if key in _RESERVED:
            raise EnvArgumentError(f"pass {key}=... to the env itself, not in the config of {dataset!r}")
        if key not in fields:
            hint = did_you_mean(str(key), fields) or f" Its fields: {', '.join(fields)}."
            raise EnvArgumentError(f"the config of {dataset!r} has no field {key!r}.{hint}")
    where = f"{dataset!r} config"
    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(config_cls)
    try:
        checked: Any = adapter.validate_python({**config, "seed": seed, "size": size})
        if callable(getattr(checked, "validate", None)):  # some configs have none
            checked.validate()
        plain = adapter.dump_python(checked, mode="json", warnings=False)  # some defaults break their own types
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise EnvArgumentError(f"{where}: field {field!r}: {err['msg']}") from None
    except Exception as e:  # noqa: BLE001 - validate() asserts, raises ValueError or compares bad types
        raise EnvArgumentError(f"{where}: {type(e).__name__}: {e}".rstrip(": ")) from None
    try:
        return json.loads(json.dumps({key: plain[key] for key in config}, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise EnvArgumentError(f"{where}: values must be JSON data (numbers, strings, lists, objects): {e}") from None


def _config_key(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


@functools.lru_cache(maxsize=32)
def _generated_tasks(dataset: str, config_key: str, seed: int, size: int) -> TaskSet:
    """The env's tasks, made once per process for each (dataset, config, seed, size): a TaskSet is immutable."""
    config = json.loads(config_key)
    request = {"dataset": dataset, "config": config, "seed": seed, "size": size, "indices": list(range(size))}
    try:
        entries = shared_scorer().entries(request)
    except ValueError as e:
        raise EnvArgumentError(f"{dataset!r} with config {config}: {e}") from None
    meta = task_meta(dataset, config)
    return TaskSet(_task(dataset, config, seed, size, i, entry, meta) for i, entry in enumerate(entries))


def list_parts(answer: str, reference: str | None) -> list[str]:
    """The parts of ``answer`` to score alone (the list-of-candidates check): ``answer`` cut
    at each list separator (`LIST_SEPARATOR`) of a kind ``reference`` does not hold, and
    again at those outside brackets of a kind ``reference`` does not hold outside brackets
    (``(1, 2), (3, 4)`` against ``(1, 2)``); the first and last ``MAX_PARTS // 2`` of them.
    None when neither cut gives two parts, or without a reference (the scorer checks a
    solution, whatever its form)."""
    if reference is None:
        return []
    in_reference = _separators(reference)
    in_answer = _separators(answer)
    found: dict[str, None] = {}
    for outside_only in (False, True):
        kinds = {kind for kind, depth, _, _ in in_reference if not outside_only or depth <= 0}
        cuts = [
            (start, end)
            for kind, depth, start, end in in_answer
            if kind not in kinds and (not outside_only or depth <= 0)
        ]
        parts = [part.strip() for part in _cut(answer, cuts)]
        parts = [part for part in parts if part]
        if len(parts) > 1:
            found.update(dict.fromkeys(parts))
    parts = list(found)
    half = MAX_PARTS // 2
    return parts if len(parts) <= MAX_PARTS else parts[:half] + parts[-half:]


def _separators(text: str) -> list[tuple[str, int, int, int]]:
    """(kind, bracket depth, start, end) of each list separator in ``text``: one pass."""
    depth_after = list(itertools.accumulate(_DEPTH_STEP.get(ch, 0) for ch in text))
    found = []
    for match in LIST_SEPARATOR.finditer(text):
        token = match.group()
        kind = token if token in ",;" else "blank line" if token.count("\n") > 1 else "line" if "\n" in token else "or"
        kind = "space" if not token.strip() and "\n" not in token else kind
        depth = depth_after[match.start() - 1] if match.start() else 0
        found.append((kind, depth, match.start(), match.end()))
    return found


def _cut(text: str, cuts: list[tuple[int, int]]) -> list[str]:
    parts, start = [], 0
    for cut_start, cut_end in cuts:
        parts.append(text[start:cut_start])
        start = cut_end
    parts.append(text[start:])
    return parts


def _task(dataset: str, config: Any, seed: int, size: int, index: int, entry: Any, meta: TaskMeta) -> Task:
    answer = entry.get("answer")
    payload = ReasoningGymPayload(
        dataset=dataset,
        config=config,
        seed=seed,
        size=size,
        index=index,
        answer=None if answer is None else str(answer),
    )
    return Task(
        id=f"{dataset}-s{seed}-{index}", prompt=str(entry["question"]), payload=payload.model_dump(), metadata=meta
    )


def task_meta(dataset: str, config: Mapping[str, Any]) -> TaskMeta:
    """The family (the dataset), difficulty and tags of ``dataset``'s tasks under ``config``."""
    config_cls = _datasets()[dataset][1]
    values: dict[str, Any] = {}
    for f in dataclasses.fields(config_cls):
        if f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
    values.update(config)
    levels, fields = _levels(dataset, values)
    fields |= {name for name in values if name.startswith(("min_", "max_"))}
    tags = [f"level:{name}={level}" for name, level in sorted(levels.items())]
    tags += [f"{name}={_short(values[name])}" for name in sorted(fields) if name in values]
    return TaskMeta(family=dataset, difficulty=max(levels.values(), default=0), tags=tuple(tags))


def _levels(dataset: str, values: Mapping[str, Any]) -> tuple[dict[str, int], set[str]]:
    """Each curriculum attribute's level under ``values``, and the config fields they read."""
    from reasoning_gym.coaching.attributes import RangeAttributeDefinition, ScalarAttributeDefinition
    from reasoning_gym.factory import CURRICULA

    if dataset not in CURRICULA:
        return {}, set()
    levels: dict[str, int] = {}
    fields: set[str] = set()
    for name, attr in CURRICULA[dataset]().attributes.items():
        if isinstance(attr, RangeAttributeDefinition):
            field = attr.upper_field_name
        elif isinstance(attr, ScalarAttributeDefinition):
            field = attr.field_name
        else:
            continue
        fields.add(field)
        level = _level_of(values.get(field), attr.levels)
        if level is not None:
            levels[name] = level
    return levels, fields


def _level_of(value: Any, levels: list[Any]) -> int | None:
    """The index of ``value`` in ``levels`` or, for numbers, of the highest level it reaches."""
    for i, level in enumerate(levels):
        if level == value:
            return i
    numbers = [v for v in levels if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or len(numbers) != len(levels):
        return None
    reached = [i for i, level in enumerate(levels) if level <= value]
    return max(reached, default=0)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


# -- registry and oracle -------------------------------------------------------------------


def register_all() -> None:
    """Register ``reasoning-gym/<name>-v0`` for every dataset in reasoning-gym's registry:
    composite with what it needs (`COMPOSITE_NEEDS`), the datasets slow to make
    (`SLOW_TO_MAKE`) saying so in their description."""
    for dataset, (dataset_cls, _) in sorted(_datasets().items()):
        doc = (dataset_cls.__doc__ or "").strip().splitlines()
        description = f"reasoning-gym's {dataset}: {doc[0] if doc else 'procedural tasks'}"
        if dataset in SLOW_TO_MAKE:
            description += f" (slow to make: {SLOW_TO_MAKE[dataset]})"
        register(
            f"{NAMESPACE}/{env_name(dataset)}-v0",
            "agentenv.envs.adapters.reasoning_gym:ReasoningGymEnv",
            description=description,
            oracle="agentenv.envs.adapters.reasoning_gym:oracle",
            override=True,
            needs=COMPOSITE_NEEDS if dataset == "composite" else None,
            dataset=dataset,
        )


def oracle() -> ScriptedPolicy:
    """Answers with the dataset's reference answer, in the tag (an empty answer where
    the dataset has none: those datasets check answers without one)."""

    def act(conv: Any) -> str:
        return f"<answer>{conv.task.payload.get('answer') or ''}</answer>"

    return ScriptedPolicy(act)
