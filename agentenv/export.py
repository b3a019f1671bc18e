"""Trajectories as datasets: the episodes of a training run or of an evaluation, as a
Hugging Face `datasets.Dataset` in the shapes trainers take.

    from agentenv.export import export, to_dataset
    sft = to_dataset("runs/tiny", "sft")                  # the solved episodes, for TRL's SFTTrainer
    pairs = to_dataset("runs/a.jsonl", "dpo")             # agentenv eval --out trajectories
    export("runs/tiny", "turns", "runs/tiny-turns")       # saved: datasets.load_from_disk reads it

A source is a run directory (its training episodes, trajectories/step-*.jsonl;
``split="held-out"`` takes the evaluations' episodes, evals/, and ``"all"`` both), a JSONL
file of trajectories (``agentenv eval --out``), or any iterable of `Trajectory`.

The formats (`FORMATS`), one row each:

- ``sft``: an episode, ``{"messages": [...], "tools": [...]}``: TRL's conversational
  language-modelling rows. Only episodes the env counted as solved (`Trajectory.success`),
  or with ``min_reward`` those whose task reward is at least that.
- ``dpo``: a preference pair, ``{"prompt": [...], "chosen": [...], "rejected": [...]}``:
  TRL's conversational preference rows, from the groups of episodes that share the env,
  the task and the reset seed within one file (a training step's GRPO group; the k
  samples of an evaluation's draw), so only the policy differs. See `dpo_pair`.
- ``turns``: an assistant turn, with the messages before it (``context``), the turn
  (``reply``), its named step-reward components (``step_rewards``), its scalar reward
  (``reward``: the weighted sum the env gave, the task reward included on the last step,
  so an episode's rewards sum to `Trajectory.total_reward`) and the episode's task reward.

Every row also names its episode (``episode_id``: ``trajectories/step-000002.jsonl:3``
is the third episode, its line, of that file; ``3`` the third of an iterable), the env,
the task and the seed.

How a conversation is written (`conversation`): the trajectory's messages in order, the
system prompt first as the env wrote it. An assistant turn whose tool calls the env read
carries them as OpenAI-style ``tool_calls`` (``{"id", "type": "function", "function":
{"name", "arguments": {...}}}``, the arguments an object, as chat templates take them),
with only the text outside the call markup as its content, since a template renders the
calls itself; the ``role: tool`` results follow as the env gave them. A turn the env could
not read (a format error) stays as the model wrote it. ``tools`` holds the schemas the
system prompt lists (the default prompt's ``<tools>`` block; the trajectory keeps no other
record of them), empty when it lists none or in another form (``tool_prompt="compact"``).
The system prompt shows them already: a template that also renders ``tools`` shows them
twice.

Message and schema columns have the `datasets.Json` type (datasets >= 4.7): each message
reads back as the dict it was. As Arrow structs every message would get every key, None
where it had none, which chat templates that test ``'tool_calls' in message`` misread.

Left out: infra failures, in every format (the infrastructure's doing, not the
policy's); token ids, log-probs, state diffs and snapshots. The rows are built in memory
(``turns`` repeats each turn's context); nothing is tokenised: the trainer's chat
template does that.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from agentenv.core.parsers import AutoParser, ParseError
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure, ToolCall
from agentenv.eval.evaluation import load_trajectories
from agentenv.report.rundir import RunDir

if TYPE_CHECKING:
    import datasets

__all__ = [
    "FORMATS",
    "SPLITS",
    "Format",
    "NothingToExport",
    "PreferencePair",
    "Split",
    "conversation",
    "dpo_pair",
    "export",
    "to_dataset",
    "tools_of",
]

Format = Literal["sft", "dpo", "turns"]
FORMATS: tuple[str, ...] = get_args(Format)
Split = Literal["train", "held-out", "all"]
SPLITS: tuple[str, ...] = get_args(Split)
Message = dict[str, Any]
Source = str | os.PathLike[str] | Iterable[Trajectory]
INSTALL_HINT = "pip install 'agentenv[datasets]'"


class NothingToExport(ValueError):
    """The source gave no row in the format asked for; the message says what it held."""


# -- conversations ------------------------------------------------------------------


def conversation(trajectory: Trajectory) -> list[Message]:
    """The trajectory's messages with each assistant turn's tool calls as OpenAI-style
    ``tool_calls`` (see the module docstring). The turns of a resumed episode before its
    first step (the failure miner's, from a snapshot) have no transition to say what the
    env read: their calls are read again with the default parser."""
    calls = {t.turn: t.calls for t in trajectory.transitions}
    messages = trajectory.messages
    out: list[Message] = []
    turn = 0
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            out.append(message)
            continue
        found = calls[turn] if turn in calls else _read_calls(message)
        out.append(_with_tool_calls(message, found, _answers(messages, i + 1)) if found else message)
        turn += 1
    return out


def _read_calls(message: Message) -> list[ToolCall]:
    try:
        return AutoParser().parse(message)
    except ParseError:
        return []


def _answers(messages: Sequence[Message], start: int) -> list[Message]:
    """The messages from ``start`` up to the next assistant turn: what the env answered."""
    answers = []
    for reply in itertools.islice(messages, start, None):
        if reply.get("role") == "assistant":
            break
        answers.append(reply)
    return answers


def _with_tool_calls(message: Message, calls: Sequence[ToolCall], answers: Sequence[Message]) -> Message:
    """``message`` with ``calls`` as its ``tool_calls``. A call's id is its own (an API's),
    else that of the tool message answering it: the env answers the calls in order."""
    tool_calls = []
    for j, call in enumerate(calls):
        answer = answers[j] if j < len(answers) and answers[j].get("role") == "tool" else {}
        call_id = call.id or answer.get("tool_call_id")
        entry = {"id": call_id} if call_id else {}
        tool_calls.append({**entry, "type": "function", "function": {"name": call.name, "arguments": call.arguments}})
    content = message.get("content")
    if not message.get("tool_calls") and isinstance(content, str):
        content = _outside_calls(content)
    return {**message, "content": content, "tool_calls": tool_calls}


def _outside_calls(text: str) -> str:
    """The text of a reply without its ``<tool_call>`` blocks (one cut at the stop string
    runs to the end); "" for a reply that was a bare JSON call."""
    if "<tool_call>" not in text:
        return ""
    kept, start = [], 0
    while (opened := text.find("<tool_call>", start)) >= 0:
        kept.append(text[start:opened])
        closed = text.find("</tool_call>", opened)
        start = len(text) if closed < 0 else closed + len("</tool_call>")
    kept.append(text[start:])
    return "".join(kept).strip()


def tools_of(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The tool schemas the system prompt lists, one JSON object a line between ``<tools>``
    and ``</tools>`` (`agentenv.core.env.Env.system_prompt`'s default); [] otherwise."""
    if not messages or messages[0].get("role") != "system" or not isinstance(messages[0].get("content"), str):
        return []
    return list(_schemas(messages[0]["content"]))


@functools.lru_cache(maxsize=64)  # the episodes of an env share their system prompt
def _schemas(prompt: str) -> tuple[dict[str, Any], ...]:
    start = prompt.find("<tools>\n")
    end = prompt.find("\n</tools>", start)
    if start < 0 or end < 0:
        return ()
    schemas = []
    for line in prompt[start + len("<tools>\n") : end].split("\n"):
        try:
            schema = json.loads(line)
        except (ValueError, RecursionError):
            return ()
        if not (isinstance(schema, dict) and isinstance(schema.get("function"), dict)):
            return ()
        schemas.append(schema)
    return tuple(schemas)


# -- reading the source ----------------------------------------------------------------


@dataclass(frozen=True)
class _Episode:
    id: str
    trajectory: Trajectory

    @property
    def kept(self) -> bool:
        """Not lost to infra (which also leaves no task reward)."""
        t = self.trajectory
        return t.failure is not Failure.INFRA and t.task_reward is not None

    def meta(self) -> dict[str, Any]:
        t = self.trajectory
        return {"episode_id": self.id, "env_id": t.env_id, "task_id": t.task.id, "seed": t.seed}


def _files(source: Source, split: Split) -> Iterator[list[_Episode]]:
    """The source's episodes, one file at a time (a GRPO group never spans two files)."""
    if not isinstance(source, str | os.PathLike):
        episodes = []
        for i, t in enumerate(source, 1):
            if not isinstance(t, Trajectory):
                raise TypeError(f"expected Trajectory objects, got {type(t).__name__} (item {i})")
            episodes.append(_Episode(str(i), t))
        yield episodes
        return
    path = Path(source)
    if path.is_dir():
        for name, file in _run_files(path, split):
            yield [_Episode(f"{name}:{i}", t) for i, t in enumerate(load_trajectories(file), 1)]
    elif path.exists():
        yield [_Episode(f"{path.name}:{i}", t) for i, t in enumerate(load_trajectories(path), 1)]
    else:
        raise FileNotFoundError(f"no such file or directory: {path}")


def _run_files(path: Path, split: Split) -> list[tuple[str, Path]]:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    files = RunDir(path).files
    if not files:
        raise ValueError(
            f"{path} is neither a run directory (it has no trajectories/ or evals/ step-*.jsonl files) "
            "nor a JSONL file of trajectories"
        )
    chosen = [f for f in files if split == "all" or f.source == split]
    if not chosen:
        other = "held-out" if split == "train" else "train"
        raise ValueError(f"{path} has no {split} episodes, only {other} ones: ask for split={other!r} (--split)")
    return [(f.name, f.path) for f in chosen]


# -- the formats -------------------------------------------------------------------


@dataclass
class _Counts:
    """What the source held, to say why it gave no row."""

    episodes: int = 0
    infra: int = 0
    groups: int = 0
    singles: int = 0
    ties: int = 0


def _sft_rows(episodes: list[_Episode], min_reward: float | None) -> Iterator[dict[str, Any]]:
    for ep in episodes:
        t = ep.trajectory
        solved = t.success if min_reward is None else t.task_reward is not None and t.task_reward >= min_reward
        if ep.kept and solved:
            messages = conversation(t)
            yield {"messages": messages, "tools": tools_of(messages), **ep.meta(), "task_reward": t.task_reward}


def _dpo_rows(episodes: list[_Episode], counts: _Counts) -> Iterator[dict[str, Any]]:
    groups: dict[tuple[str | None, str, int | None], list[_Episode]] = {}
    for ep in episodes:
        if ep.kept:
            t = ep.trajectory
            groups.setdefault((t.env_id, t.task.id, t.seed), []).append(ep)
    for members in groups.values():
        counts.groups += 1
        if len(members) < 2:
            counts.singles += 1
            continue
        pair = dpo_pair([ep.trajectory for ep in members])
        if pair is None:
            counts.ties += 1
            continue
        best, worst = members[pair.chosen_index], members[pair.rejected_index]
        yield {
            "prompt": pair.prompt,
            "chosen": pair.chosen,
            "rejected": pair.rejected,
            "tools": tools_of(pair.prompt),
            "chosen_reward": best.trajectory.task_reward,
            "rejected_reward": worst.trajectory.task_reward,
            "chosen_episode": best.id,
            "rejected_episode": worst.id,
            **{k: v for k, v in best.meta().items() if k != "episode_id"},
        }


@dataclass(frozen=True)
class PreferencePair:
    """A `dpo` row's conversations, and which episodes of the group they came from."""

    prompt: list[Message]
    chosen: list[Message]
    rejected: list[Message]
    chosen_index: int
    """The chosen episode's place in the group."""
    rejected_index: int


def dpo_pair(group: Sequence[Trajectory]) -> PreferencePair | None:
    """The preference pair of one group of episodes (same env, task and seed, none lost
    to infra), or None.

    The rule: the episode with the highest task reward is chosen and the one with the
    lowest rejected (the first in the group's order among equals), and only when the two
    rewards differ: a group whose episodes tie says nothing about which is better. One
    pair per group, best against worst, so no episode is counted twice and the pair is the
    clearest the group holds. The prompt is the messages the two conversations share, up
    to the first assistant turn where they part; chosen and rejected are the rest of each,
    from that turn to the end, the env's tool results included (a DPO loss scores those
    tokens as part of the completion). Two episodes with the same conversation give no
    pair either.
    """
    if len(group) < 2:
        return None
    rewards = [t.task_reward if t.task_reward is not None else 0.0 for t in group]
    best = max(range(len(group)), key=rewards.__getitem__)
    worst = min(range(len(group)), key=rewards.__getitem__)
    if rewards[best] == rewards[worst]:
        return None
    a, b = conversation(group[best]), conversation(group[worst])
    split = 0
    while split < min(len(a), len(b)) and a[split] == b[split]:
        split += 1
    # Both completions start at an assistant turn: where the env answered the same turn
    # differently, the pair parts at the turn before.
    while split >= 0 and not (
        split < min(len(a), len(b)) and a[split].get("role") == b[split].get("role") == "assistant"
    ):
        split -= 1
    if split < 0 or a[split:] == b[split:]:
        return None
    return PreferencePair(a[:split], a[split:], b[split:], best, worst)


def _turn_rows(episodes: list[_Episode]) -> Iterator[dict[str, Any]]:
    for ep in episodes:
        if not ep.kept:
            continue
        t = ep.trajectory
        messages = conversation(t)
        replies = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
        if len(t.rewards) != len(t.transitions):
            raise ValueError(f"episode {ep.id}: {len(t.rewards)} step rewards for {len(t.transitions)} steps")
        tools = tools_of(messages)
        for step, transition in enumerate(t.transitions):
            if not 0 <= transition.turn < len(replies):
                raise ValueError(
                    f"episode {ep.id}: step {step} is turn {transition.turn}, but the conversation holds "
                    f"{len(replies)} assistant messages"
                )
            at = replies[transition.turn]
            yield {
                "context": messages[:at],
                "reply": messages[at],
                "step_rewards": dict(transition.rewards),
                "reward": t.rewards[step],
                "task_reward": t.task_reward,
                "success": t.success,
                "failure": t.failure.value,
                **ep.meta(),
                "turn": transition.turn,
                "tools": tools,
            }


def _rows(
    source: Source, format: Format, min_reward: float | None, split: Split
) -> tuple[list[dict[str, Any]], _Counts]:
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    counts = _Counts()
    rows: list[dict[str, Any]] = []
    for episodes in _files(source, split):
        counts.episodes += len(episodes)
        counts.infra += sum(not ep.kept for ep in episodes)
        if format == "sft":
            rows += _sft_rows(episodes, min_reward)
        elif format == "dpo":
            rows += _dpo_rows(episodes, counts)
        else:
            rows += _turn_rows(episodes)
    return rows, counts


def _why_empty(source: Source, format: Format, counts: _Counts, min_reward: float | None) -> str:
    where = str(source) if isinstance(source, str | os.PathLike) else "the trajectories given"
    if counts.episodes == 0:
        return f"no {format} rows: {where} holds no episodes"
    read = f"{counts.episodes} episodes read, {counts.infra} of them lost to infra (left out)"
    if format == "sft":
        bar = "solved (the env's success threshold)" if min_reward is None else f"with a task reward >= {min_reward}"
        return (
            f"no sft rows in {where}: {read}, and none of the rest {bar}; lower the bar with min_reward (--min-reward)"
        )
    if format == "dpo":
        return (
            f"no dpo pairs in {where}: {read}; of {counts.groups} groups (same env, task and seed), {counts.singles} "
            f"have one episode and {counts.ties} tie on the task reward"
        )
    return f"no turns in {where}: {read}, and the rest took no step"


# -- datasets ----------------------------------------------------------------------


def _datasets() -> Any:
    """The datasets library, imported on first use (``import agentenv`` stays light)."""
    try:
        import datasets
    except ModuleNotFoundError as e:
        if e.name != "datasets":
            raise
        raise ModuleNotFoundError(f"agentenv.export needs the datasets library: {INSTALL_HINT}", name="datasets") from e
    if not hasattr(datasets, "Json"):
        raise ImportError(
            f"agentenv.export needs datasets >= 4.7 (its Json type), found {datasets.__version__}: {INSTALL_HINT}"
        )
    return datasets


def _features(format: Format) -> datasets.Features:
    ds = _datasets()
    Json, List, Value = ds.Json, ds.List, ds.Value
    messages, number = List(Json()), Value("float64")
    meta = {"env_id": Value("string"), "task_id": Value("string"), "seed": Value("int64")}
    if format == "sft":
        columns = {
            "messages": messages,
            "tools": messages,
            "episode_id": Value("string"),
            **meta,
            "task_reward": number,
        }
    elif format == "dpo":
        columns = {
            "prompt": messages,
            "chosen": messages,
            "rejected": messages,
            "tools": messages,
            "chosen_reward": number,
            "rejected_reward": number,
            "chosen_episode": Value("string"),
            "rejected_episode": Value("string"),
            **meta,
        }
    else:
        columns = {
            "context": messages,
            "reply": Json(),
            "step_rewards": Json(),
            "reward": number,
            "task_reward": number,
            "success": Value("bool"),
            "failure": Value("string"),
            "episode_id": Value("string"),
            **meta,
            "turn": Value("int64"),
            "tools": messages,
        }
    return ds.Features(columns)


def to_dataset(
    source: Source, format: Format = "sft", *, min_reward: float | None = None, split: Split = "train"
) -> datasets.Dataset:
    """The episodes of ``source`` as a `datasets.Dataset` in ``format`` (see the module
    docstring).

    Args:
        source: A run directory, a JSONL file of trajectories, or an iterable of `Trajectory`.
        format: "sft", "dpo" or "turns".
        min_reward: For "sft": keep the episodes whose task reward is at least this,
            instead of those the env counted as solved.
        split: For a run directory: "train" (trajectories/), "held-out" (evals/) or "all".

    Raises:
        NothingToExport: The source gave no row (none solved, no group with differing
            rewards, ...); the message says what it held.
        ValueError: The source is not a run directory or a file of trajectories, or a line
            of it is not a trajectory (the message names the file and line).
        FileNotFoundError: No such source.
    """
    rows, counts = _rows(source, format, min_reward, split)
    if not rows:
        raise NothingToExport(_why_empty(source, format, counts, min_reward))
    return _datasets().Dataset.from_list(rows, features=_features(format))


def export(
    source: Source,
    format: Format,
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    min_reward: float | None = None,
    split: Split = "train",
) -> datasets.Dataset:
    """`to_dataset`, saved to the folder ``out`` (`datasets.Dataset.save_to_disk`; read it
    back with `datasets.load_from_disk`); returns the dataset.

    ``out`` must be new or empty; with ``overwrite`` it may hold a saved dataset, which is
    replaced, never other files. The dataset is written beside ``out`` first and moved into
    place whole, so a failed export leaves ``out`` as it was.

    Raises:
        FileExistsError: ``out`` is a file, or holds files and ``overwrite`` is off, or
            holds files that are not a saved dataset.
        and what `to_dataset` raises.
    """
    target = Path(out)
    _check_out(target, overwrite)  # before reading anything: a bad folder fails at once
    dataset = to_dataset(source, format, min_reward=min_reward, split=split)
    target.parent.mkdir(parents=True, exist_ok=True)
    # A new name that save_to_disk creates (a mkdtemp folder would keep its 0700 mode)
    staging = target.parent / f".{target.name}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        dataset.save_to_disk(str(staging))
        if target.exists():  # empty, or a saved dataset overwrite may replace (_check_out)
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return dataset


def _check_out(target: Path, overwrite: bool) -> None:
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{target} is a file: give a folder for the dataset")
    if not target.is_dir() or not any(target.iterdir()):
        return
    if not overwrite:
        raise FileExistsError(f"{target} is not empty: give a new folder, or overwrite (--overwrite) the dataset in it")
    if not ((target / "dataset_info.json").is_file() and (target / "state.json").is_file()):
        raise FileExistsError(
            f"{target} holds files that are not a saved dataset: overwriting replaces only a dataset; "
            "give another folder"
        )
