r"""`QAEnv`: answer a question in one reply, scored against a reference answer.

    import agentenv
    env = agentenv.make("qa-v0")                      # a small generated set (arithmetic, letters, words)
    env.reset(seed=0)
    env.step("The answer is \\boxed{42}.")            # terminated; reward 1.0 if 42 is the reference

    from agentenv.envs.adapters import qa
    tasks = qa.from_dataset(split, question="question", answer="answer")   # a Hugging Face datasets split
    env = agentenv.make("qa-v0", tasks=tasks)

The env is in answer mode: the first reply without a tool call is the answer and
ends the episode (``max_turns`` 1). The verifier reads the answer out of the reply
and compares it with the task's ``payload["reference"]`` (and ``payload["aliases"]``)
by the rule in `agentenv.envs.answers`: the one ``\boxed{}`` or ``<answer>`` (or the
whole reply without either), normalised exact match, exact numeric equality for
numbers ("1,000" == "1e3"). Tasks carry the reference under ``payload["reference"]``,
as a string: the RLPR reward (reference probability, for tasks with no checker) reads
the same key.

A reply holding more than one answer (``\boxed{1} \boxed{2}``, ``<answer>`` twice, in
any case, one left open beside a closed one) is a format error, whichever of them is
right: an error observation, the format penalty, no answer, task reward 0. So is a reply
longer than ``max_action_chars`` (128,000 characters, about 32k tokens) or one holding a
lone surrogate; none is scored as an answer.

Left out: multi-turn feedback and retries, partial credit, tools.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentenv import Conversation, Env, ScriptedPolicy, State, Task, TaskSet
from agentenv.core.errors import TaskFileError
from agentenv.envs.adapters import _dataset
from agentenv.envs.adapters._dataset import Source
from agentenv.envs.answers import AmbiguousAnswer, extract_answer, matches, normalize

__all__ = ["QAEnv", "QAPayload", "QAState", "default_tasks", "from_dataset", "make_task", "make_tasks", "oracle"]

SHOWN_ANSWER_CHARS = 1000
"""The answer kept in the state (for trajectories and the report) is cut at this length."""
FAMILIES = ("arithmetic", "count", "reverse")
DIFFICULTIES = (0, 1, 2, 3)
MUTATE_DRAWS = 8
"""Draws `QAEnv.mutate` makes for a question other than the one it was given."""


class QAPayload(BaseModel):
    """The ``payload`` of a question-answer task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reference: str = Field(min_length=1, description="the answer; its key is read by the RLPR reward too")
    aliases: tuple[str, ...] = Field((), description="other answers that count as correct")

    @field_validator("reference", "aliases")
    @classmethod
    def _answerable(cls, value: str | tuple[str, ...]) -> str | tuple[str, ...]:
        for text in (value,) if isinstance(value, str) else value:
            if _blank_answer(text):
                raise ValueError(f"{text!r} is no answer once normalised: an empty reply would equal it")
        return value


def _blank_answer(text: str) -> bool:
    """Whether ``text`` normalises to nothing (``"."``, ``"$$"``, a zero-width space): as a
    reference, it would give the reward to an empty reply."""
    return not normalize(text)


class QAState(State):
    answer: str | None = None
    """The answer read out of the final reply (cut at `SHOWN_ANSWER_CHARS`); None before one."""
    correct: bool | None = None


class QAEnv(Env[QAState]):
    """One question, one reply; the reply's one ``\\boxed{}`` or ``<answer>`` is matched to the reference."""

    answer_mode = True
    max_turns = 1
    max_action_chars = 128_000
    payload_type = QAPayload
    instructions = (
        "Answer the question. Reason as much as you need, then give the final answer alone in \\boxed{}, "
        "for example \\boxed{42}, once: a reply with more than one answer is not scored."
    )

    def __init__(self, tasks: TaskSet | Iterable[Task] | str | Path | None = None, **kwargs: Any) -> None:
        """
        Args:
            tasks: Question-answer tasks, e.g. from `from_dataset`, or the path of a JSONL
                file of them (``from_dataset(split).to_jsonl(path)`` writes one; a training
                config's ``env_kwargs`` can name it). Default: the small generated set.
            **kwargs: The base `Env`'s (max_turns, parser, lean, ...).
        """
        if isinstance(tasks, (str, Path)):
            tasks = TaskSet.from_jsonl(tasks)
        super().__init__(tasks, **kwargs)

    def default_tasks(self) -> TaskSet:
        return default_tasks()

    def system_prompt(self, task: Task) -> str:
        return self.instructions  # no tools to list

    def on_answer(self, answer: str) -> str | None:
        """Refuses a reply holding more than one answer: `AmbiguousAnswer` is a format error."""
        extract_answer(answer)
        return None

    def verify(self, task: Task) -> float:
        payload: QAPayload = self.payload
        reply = self.answer
        state = self.state
        try:
            answer = None if reply is None else extract_answer(reply)
        except AmbiguousAnswer:  # refused by on_answer; here only in a snapshot from before that
            answer = None
        if answer is None:  # no answer was given (an invalid reply, or out of turns)
            state.answer, state.correct = None, False
            return 0.0
        state.answer = answer[:SHOWN_ANSWER_CHARS]
        state.correct = matches(answer, payload.reference, payload.aliases)
        return float(state.correct)

    def mutate(self, task: Task, rng: np.random.Generator) -> Task | None:
        """A new question of the same generated family and difficulty, other than ``task``'s;
        None for tasks from a dataset, and when `MUTATE_DRAWS` draws all came out as
        ``task`` again (a family with few questions at that difficulty)."""
        family = task.metadata.family
        if family not in FAMILIES or "generated" not in task.metadata.tags:
            return None
        for _ in range(MUTATE_DRAWS):
            variant = make_task(
                family, rng, task.metadata.difficulty, task_id=f"{task.id}~v{int(rng.integers(1 << 30)):08x}"
            )
            if (variant.prompt, variant.payload) != (task.prompt, task.payload):
                return variant
        return None


def oracle() -> ScriptedPolicy:
    """Answers every task with its reference, boxed."""

    def act(conv: Conversation) -> str:
        assert conv.task is not None  # the rollout engine gives scripted policies the task
        return f"\\boxed{{{conv.task.payload['reference']}}}"

    return ScriptedPolicy(act)


# -- from a dataset -------------------------------------------------------------------------------


def from_dataset(
    split: Any,
    *,
    question: Source = "question",
    answer: Source = "answer",
    id: Source | None = None,
    metadata: Mapping[str, Source] | None = None,
    id_prefix: str | None = None,
) -> TaskSet:
    """Question-answer tasks from one split of a Hugging Face dataset (or any iterable of dicts).

    ``datasets`` itself is not imported: pass ``load_dataset("gsm8k", "main")["train"]``.

    Args:
        split: One split (a ``datasets.Dataset`` or ``IterableDataset``, or a list of dicts);
            a ``DatasetDict`` is refused with its split names.
        question: The column holding the question (the prompt), or a function of the row.
        answer: The column holding the reference answer, or a function of the row (GSM8K:
            ``lambda row: row["answer"].split("####")[-1]``). Text, or a number (written
            in decimal); a list gives the reference first and other accepted answers after.
        id: The column of task ids (an integer id is written in decimal). None: ids are
            ``PREFIX-INDEX-HASH``, the row's index and a hash of its question and answer,
            the same in every run on the same data.
        metadata: `TaskMeta` fields from columns: ``{"difficulty": "level", "family":
            "subject", "tags": "topics"}``; values may be functions of the row. The family
            defaults to the dataset's name.
        id_prefix: Put before every id (``PREFIX/ID``, or ``PREFIX-INDEX-HASH``). Default,
            for generated ids: ``DATASET-SPLIT`` when the split knows its name, else "qa".

    Raises:
        TaskFileError: naming the record index, the field and the column, for a missing
            column (with a did-you-mean), an empty or missing answer, a value of the wrong type.
        TypeError: for a ``DatasetDict`` rather than one of its splits.
    """
    source = _dataset.open_split(split, what="qa.from_dataset")
    readers = {"question": _dataset.Reader("question", question), "answer": _dataset.Reader("answer", answer)}
    id_reader = None if id is None else _dataset.Reader("id", id)
    meta_readers = _dataset.check_metadata(metadata)
    for reader in [*readers.values(), *([id_reader] if id_reader else []), *meta_readers]:
        reader.check_columns(source.columns)
    family = source.dataset or "qa"
    prefix = id_prefix or source.name or "qa"
    ids = _dataset.Ids()
    tasks = []
    for index, row in enumerate(source.rows):
        text = readers["question"].text(row, index)
        reference, aliases = _references(readers["answer"], row, index)
        if id_reader is None:
            task_id = _dataset.stable_id(prefix, index, text, reference)
        else:
            task_id = _dataset.read_id(id_reader, row, index, id_prefix)
        ids.add(task_id, index)
        tasks.append(
            _dataset.task_or_error(
                index,
                id=task_id,
                prompt=text,
                payload={"reference": reference, "aliases": list(aliases)},  # QAEnv validates it as a QAPayload
                metadata=_dataset.read_metadata(meta_readers, row, index, family),
            )
        )
    return TaskSet(tasks)


def _references(reader: _dataset.Reader, row: Mapping[str, Any], index: int) -> tuple[str, tuple[str, ...]]:
    value = reader.read(row, index)
    where = reader.where()
    if isinstance(value, (list, tuple)):
        if not value:
            raise TaskFileError(f"record {index}: {where} is an empty list")
        named = [
            (f"{where}[{i}]", _dataset.as_text(v, index, f"{where}[{i}]", numbers_ok=True)) for i, v in enumerate(value)
        ]
    else:
        named = [(where, _dataset.as_text(value, index, where, numbers_ok=True))]
    for name, text in named:
        if _blank_answer(text):
            raise TaskFileError(
                f"record {index}: {name} is {text!r}, which is no answer once normalised "
                "(an empty reply would equal it)"
            )
    answers = [text.strip() for _, text in named]
    return answers[0], tuple(answers[1:])


# -- the shipped set --------------------------------------------------------------------------------

_WORDS = (
    ("cat", "sun", "tree", "lamp", "book"),
    ("planet", "garden", "yellow", "bridge", "silver"),
    ("strawberry", "committee", "bookkeeper", "butterfly", "chocolate"),
    ("mississippi", "parallelogram", "onomatopoeia", "bureaucracy", "independence"),
)


@functools.cache
def default_tasks() -> TaskSet:
    """The shipped set: each family at each difficulty, three variants (36 tasks)."""
    return make_tasks(variants=3, seed=0)


def make_tasks(*, variants: int = 3, seed: int = 0) -> TaskSet:
    """``variants`` generated questions per family and difficulty, deterministic in ``seed``."""
    tasks = []
    for f, family in enumerate(FAMILIES):
        for d in DIFFICULTIES:
            for k in range(variants):
                rng = np.random.default_rng([seed, f, d, k])
                tasks.append(make_task(family, rng, d, task_id=f"qa-{family}-d{d}-{seed}-{k}"))
    return TaskSet(tasks)


def make_task(family: str, rng: np.random.Generator, difficulty: int, *, task_id: str | None = None) -> Task:
    """One generated question of ``family`` ("arithmetic", "count", "reverse") at ``difficulty`` (0-3)."""
    if family not in _GENERATORS:
        raise ValueError(f"no question family {family!r}; the families: {', '.join(FAMILIES)}")
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty}")
    question, reference = _GENERATORS[family](rng, difficulty)
    return Task(
        id=task_id or f"qa-{family}-d{difficulty}-{int(rng.integers(1 << 30)):08x}",
        prompt=question,
        payload={"reference": reference},
        metadata={"family": family, "difficulty": difficulty, "tags": ("generated",)},
    )


def _arithmetic(rng: np.random.Generator, d: int) -> tuple[str, str]:
    if d == 0:
        a, b = (int(x) for x in rng.integers(1, 10, size=2))
        return f"What is {a} + {b}?", str(a + b)
    if d == 1:
        a, b = (int(x) for x in rng.integers(10, 100, size=2))
        return f"What is {a} * {b}?", str(a * b)
    if d == 2:
        a, b, c = (int(x) for x in rng.integers(100, 1000, size=3))
        return f"What is {a} * {b} - {c}?", str(a * b - c)
    a, b = (int(x) for x in rng.integers(1000, 100_000, size=2))
    return f"What is {a:,} times {b:,}? Write the number in full.", str(a * b)


def _count(rng: np.random.Generator, d: int) -> tuple[str, str]:
    word = str(rng.choice(_WORDS[d]))
    repeated = sorted(c for c in set(word) if word.count(c) > 1)
    letter = str(rng.choice(repeated if d and repeated else sorted(set(word))))  # harder: a letter seen twice or more
    return f"How many times does the letter '{letter}' appear in the word '{word}'?", str(word.count(letter))


def _reverse(rng: np.random.Generator, d: int) -> tuple[str, str]:
    word = str(rng.choice(_WORDS[d]))
    return f"Write the word '{word}' backwards, letter by letter reversed, as one word.", word[::-1]


_GENERATORS: dict[str, Callable[[np.random.Generator, int], tuple[str, str]]] = {
    "arithmetic": _arithmetic,
    "count": _count,
    "reverse": _reverse,
}
