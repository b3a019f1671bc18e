"""The episodes of a report: an index of all of them, a bounded sample embedded in the
page, the rest in paged sidecar scripts, and the per-step counts the charts draw.

A browser refuses ``fetch()`` of a ``file://`` URL, so a report cannot read the run's
JSONL when it is opened from disk. It reads ``<script>`` files next to it instead:
every episode goes, in order, into ``<report>_files/episodes-NNNNN.js`` pages of
`PAGE_EPISODES` (each calls ``AgentenvReport.page(n, [...])``), and the viewer loads
a page when an episode on it is opened. The page embeds the index of every episode
(step, env, task, success, failure kind, turns, reward: a few dozen bytes each, so
100k episodes fit) and the full record of a sample: every episode when they fit in
the budget (then no sidecar is written), otherwise a sample stratified by failure
kind, deterministic for a given run.

Trajectory text was written by a policy and is untrusted: every string is capped
(`MAX_TEXT` characters; the record names the JSONL file and line with the whole
text), every value made plain JSON (non-finite floats become null, deep nesting a
note), and `embed_json` escapes what could end a ``<script>`` element or break a
JavaScript string. The viewer renders with ``textContent`` only.
"""

from __future__ import annotations

import heapq
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from agentenv.core.types import Failure
from agentenv.report.rundir import EpisodeFile, Skipped, validation_reason

__all__ = [
    "MAX_TEXT",
    "PAGE_EPISODES",
    "EpisodeIndex",
    "EpisodeRecord",
    "embed_json",
    "read_episodes",
]

MAX_TEXT = 20_000
"""Characters kept of any one string of an episode (an action, an observation, a prompt)."""
MAX_ITEMS = 500
"""Items kept of any one list (state-diff operations, messages, steps)."""
MAX_DEPTH = 24
MAX_EPISODE_CHARS = 1_000_000
"""An episode longer than this after the cuts is cut again, to a twentieth of `MAX_TEXT` a string."""
PAGE_EPISODES = 200
MAX_LINE_BYTES = 64 << 20
"""A longer JSONL line is skipped unread: no episode the trainer writes is this big."""


# -- the boundary: what the report reads of a trajectory line --------------------------
# Looser than `agentenv.Trajectory` on purpose: a report renders runs written by older or
# newer versions, so unknown keys are ignored and only the fields it reads are checked.


class _Meta(BaseModel):
    model_config = ConfigDict(extra="ignore")
    family: str = "default"
    difficulty: int = 0


class _Task(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str
    prompt: str = ""
    metadata: _Meta = _Meta()


class _Step(BaseModel):
    model_config = ConfigDict(extra="ignore")
    turn: int = 0
    action: Any = None
    calls: list[Any] = []
    rewards: dict[str, float | None] = {}
    task_rewards: dict[str, float | None] = {}
    state_diff: list[Any] = []
    duration_s: float | None = None
    error: str | None = None
    error_kind: str | None = None


class _Generation(BaseModel):
    model_config = ConfigDict(extra="ignore")
    token_ids: list[int] = []
    finish_reason: str | None = None


class EpisodeRecord(BaseModel):
    """One trajectory line as the report reads it."""

    model_config = ConfigDict(extra="ignore")

    env_id: str | None = None
    task: _Task
    seed: int | None = None
    messages: list[dict[str, Any]] = []
    transitions: list[_Step] = []
    generations: list[_Generation | None] = []
    rewards: list[float | None] = []
    task_reward: float | None = None
    success: bool = False
    failure: Failure
    duration_s: float | None = None
    error: str | None = None

    @property
    def total_reward(self) -> float | None:
        """The sum of the finite step rewards; None when that sum is past a float's range
        (two rewards of 1e308): no number to show, and no reason to fail the page."""
        try:
            return math.fsum(r for r in self.rewards if r is not None and math.isfinite(r))
        except OverflowError:
            return None


def read_episodes(file: EpisodeFile, skipped: Skipped) -> Iterator[tuple[int, EpisodeRecord]]:
    """(line number, record) for each readable line of ``file``, streamed; the rest is noted in ``skipped``."""
    try:
        handle = file.path.open("rb")
    except OSError as e:
        skipped.note(f"{file.name}: unreadable ({e.strerror or e})")
        return
    with handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            if len(raw) > MAX_LINE_BYTES:
                skipped.line(file.name, number, f"longer than {MAX_LINE_BYTES >> 20} MiB")
                continue
            try:
                yield number, parse_record(raw)
            except ValidationError as e:
                skipped.line(file.name, number, validation_reason(e))
            except ValueError as e:
                skipped.line(file.name, number, str(e))


def parse_record(raw: bytes) -> EpisodeRecord:
    """One JSONL line as an `EpisodeRecord`. pydantic's JSON parser refuses a lone
    surrogate escape (``"\\udc80"``), which a policy's text can hold and `json` reads:
    such a line is read by `json` and then validated, rather than lost."""
    try:
        return EpisodeRecord.model_validate_json(raw)
    except ValidationError as e:
        if e.errors()[0]["type"] != "json_invalid" or b"\\ud" not in raw.lower():
            raise
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError("not JSON (cut short?)") from None
    return EpisodeRecord.model_validate(data)


# -- safe JSON for a page ------------------------------------------------------------------

_RARE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def embed_json(value: Any) -> str:
    """``value`` as JSON that is safe inside ``<script>`` and as a JavaScript literal: no
    ``<``, ``>`` or ``&`` (so no ``</script>`` or ``<!--``), no line separators, no C1
    controls, and lone surrogates written as ``\\uXXXX`` escapes (the file stays valid
    UTF-8; the string keeps its value). These characters only occur inside JSON strings,
    where the escapes mean the same. ``value`` must be plain JSON data (see `plain`)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return _RARE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _embed_episode(data: dict[str, Any], where: str) -> str:
    """An episode's detail as safe JSON. Most episodes are small plain JSON already: taken
    as they are. A large one (some string or list may need cutting), or one holding a
    value JSON cannot write (NaN, nesting past the encoder), goes through `plain`."""
    try:
        text = embed_json(data)
        if len(text) <= MAX_TEXT:
            return text
    except (ValueError, RecursionError):
        pass
    text = embed_json(plain(data, where))
    if len(text) > MAX_EPISODE_CHARS:  # many long strings: keep less of each
        text = embed_json(plain(data, where, max_text=MAX_TEXT // 20))
    return text


def plain(value: Any, where: str, depth: int = 0, *, max_text: int = MAX_TEXT) -> Any:
    """``value`` as capped, plain JSON data: strings past ``max_text`` characters and
    lists past `MAX_ITEMS` cut with a note naming ``where`` the whole is, non-finite
    floats as None, nesting past `MAX_DEPTH` and odd types as text."""
    if isinstance(value, str):
        if len(value) <= max_text:
            return value
        return value[:max_text] + f"\n… [{len(value) - max_text:,} more characters in {where}]"
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= MAX_DEPTH:
        return f"[nested deeper than {MAX_DEPTH} levels; see {where}]"
    if isinstance(value, dict):
        return {str(k)[:max_text]: plain(v, where, depth + 1, max_text=max_text) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [plain(v, where, depth + 1, max_text=max_text) for v in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append(f"… [{len(value) - MAX_ITEMS:,} more items in {where}]")
        return items
    return plain(repr(value), where, depth, max_text=max_text)


def detail(record: EpisodeRecord, *, source: str, step: int, where: str) -> dict[str, Any]:
    """What the viewer shows of an episode. Observations are the messages after each
    action (a transition's own copy is left out); of a generation, its length and why it
    stopped (token ids and log-probs are the trainer's, not a reader's)."""
    steps = []
    for i, tr in enumerate(record.transitions[:MAX_ITEMS]):
        gen = record.generations[i] if i < len(record.generations) else None
        steps.append(
            {
                "turn": tr.turn,
                "action": tr.action,
                "calls": tr.calls,
                "rewards": tr.rewards,
                "task_rewards": tr.task_rewards,
                "state_diff": tr.state_diff,
                "duration_s": tr.duration_s,
                "error": tr.error,
                "error_kind": tr.error_kind,
                "tokens": None if gen is None else len(gen.token_ids),
                "finish_reason": None if gen is None else gen.finish_reason,
            }
        )
    data = {
        "where": where,
        "source": source,
        "step": step,
        "env": record.env_id,
        "task": {
            "id": record.task.id,
            "prompt": record.task.prompt,
            "family": record.task.metadata.family,
            "difficulty": record.task.metadata.difficulty,
        },
        "seed": record.seed,
        "success": record.success,
        "failure": record.failure.value,
        "task_reward": record.task_reward,
        "total_reward": record.total_reward,
        "duration_s": record.duration_s,
        "error": record.error,
        "messages": record.messages,
        "steps": steps,
        "more_steps": max(len(record.transitions) - MAX_ITEMS, 0),
    }
    return data


# -- the index -----------------------------------------------------------------------------


@dataclass
class StepCounts:
    """Per step of one source: episodes, and valid episodes and successes by env, family and difficulty."""

    episodes: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    groups: dict[str, dict[str, list[int]]] = field(default_factory=lambda: {"env": {}, "family": {}, "difficulty": {}})

    def add(self, record: EpisodeRecord) -> None:
        self.episodes += 1
        self.failures[record.failure.value] += 1
        if record.failure is Failure.INFRA:
            return  # never the policy's doing: left out of success
        meta = record.task.metadata
        for grouping, key in (
            ("env", record.env_id or "(unnamed)"),
            ("family", meta.family),
            ("difficulty", str(meta.difficulty)),
        ):
            cell = self.groups[grouping].setdefault(key, [0, 0])
            cell[0] += 1
            cell[1] += record.success


class _Strings:
    """A column of strings stored as indices into a table of the distinct values."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self.ids: dict[str, int] = {}

    def id(self, value: str) -> int:
        found = self.ids.get(value)
        if found is None:
            found = self.ids[value] = len(self.values)
            self.values.append(value)
        return found


@dataclass
class BuiltEpisodes:
    """The index and the embedded sample as safe JSON, and what went to sidecar pages."""

    index_json: str
    sample_json: str
    episodes: int
    embedded: int
    pages: int
    sidecar_bytes: int
    counts: dict[str, dict[int, StepCounts]]


class EpisodeIndex:
    """Fed every episode in order (`add`); `finish` returns the index and the sample and
    completes the sidecar pages in ``sidecar_dir`` (``sidecar_href`` is its URL from the
    page). Memory stays bounded by the sample budget, whatever the number of episodes."""

    def __init__(
        self,
        sidecar_dir: Path,
        sidecar_href: str,
        *,
        max_embedded: int,
        embed_bytes: int,
        page_size: int,
        pages: bool = True,
    ) -> None:
        if max_embedded < 0 or embed_bytes < 0 or page_size < 1:
            raise ValueError("max_embedded and embed_bytes must be >= 0 and page_size >= 1")
        self.sidecar_dir, self.sidecar_href = sidecar_dir, sidecar_href
        self.max_embedded, self.embed_bytes, self.page_size = max_embedded, embed_bytes, page_size
        self.write_pages = pages
        self.strings = {name: _Strings() for name in ("source", "env", "task", "family", "failure", "file")}
        self.cols: dict[str, list[Any]] = {
            name: []
            for name in (
                "step",
                "source",
                "env",
                "task",
                "family",
                "difficulty",
                "success",
                "failure",
                "turns",
                "reward",
                "file",
                "line",
            )
        }
        self.everything: list[str] | None = []  # every detail, while all still fit in the page
        self.everything_bytes = 0
        self.page: list[str] = []
        self.pages = 0
        self.sidecar_bytes = 0
        self.sample: dict[str, list[tuple[int, int, str]]] = defaultdict(list)  # kind -> heap of (-key, row, detail)
        self.counts: dict[str, dict[int, StepCounts]] = defaultdict(dict)
        self._clear_old_pages()

    def add(self, record: EpisodeRecord, *, source: str, step: int, file: str, line: int) -> None:
        """Index ``record``, line ``line`` of ``file`` (as the page names it), and keep its detail."""
        where = f"{file} line {line}"
        row = len(self.cols["step"])
        meta = record.task.metadata
        for name, value in (
            ("step", step),
            ("source", self.strings["source"].id(source)),
            ("env", self.strings["env"].id(record.env_id or "(unnamed)")),
            ("task", self.strings["task"].id(record.task.id)),
            ("family", self.strings["family"].id(meta.family)),
            ("difficulty", meta.difficulty),
            ("success", int(record.success)),
            ("failure", self.strings["failure"].id(record.failure.value)),
            ("turns", len(record.transitions)),
            ("reward", None if record.total_reward is None else round(record.total_reward, 4)),
            ("file", self.strings["file"].id(file)),
            ("line", line),
        ):
            self.cols[name].append(value)
        self.counts[source].setdefault(step, StepCounts()).add(record)
        text = _embed_episode(detail(record, source=source, step=step, where=where), where)
        self._keep_for_sample(row, record.failure.value, text)
        if self.everything is not None:
            self.everything.append(text)
            self.everything_bytes += len(text)
            if len(self.everything) > self.max_embedded or self.everything_bytes > self.embed_bytes:
                for kept in self.everything:  # too many to embed all: from now on, pages
                    self._to_page(kept)
                self.everything = None
        else:
            self._to_page(text)

    def _keep_for_sample(self, row: int, kind: str, text: str) -> None:
        """Bottom-k by a hash of the row, per failure kind: a deterministic, stratified sample."""
        if self.max_embedded == 0:
            return
        key = (row * 2654435761) % 2**32
        heap = self.sample[kind]
        item = (-key, row, text)
        if len(heap) < self.max_embedded:
            heapq.heappush(heap, item)
        elif item > heap[0]:
            heapq.heapreplace(heap, item)

    def _to_page(self, text: str) -> None:
        if not self.write_pages:
            return
        self.page.append(text)
        if len(self.page) == self.page_size:
            self._write_page()

    def _write_page(self) -> None:
        if not self.page:
            return
        self.sidecar_dir.mkdir(parents=True, exist_ok=True)
        body = f"AgentenvReport.page({self.pages},[{','.join(self.page)}]);\n"
        path = self.sidecar_dir / f"episodes-{self.pages:05d}.js"
        path.write_text(body, encoding="utf-8")
        self.sidecar_bytes += len(body.encode("utf-8"))
        self.pages += 1
        self.page = []

    def _clear_old_pages(self) -> None:
        """Pages of an earlier build of this report (only files this module names): stale
        once this build's index is written, whether or not it writes pages."""
        if self.sidecar_dir.is_dir():
            for old in self.sidecar_dir.glob("episodes-*.js"):
                if re.fullmatch(r"episodes-\d{5}\.js", old.name):
                    old.unlink()

    def _chosen(self) -> list[tuple[int, str]]:
        """The sample: round robin over the failure kinds, each in hash order, within the budgets."""
        if self.everything is not None:
            return list(enumerate(self.everything))
        queues = [sorted(heap, key=lambda item: -item[0]) for _, heap in sorted(self.sample.items())]
        chosen: list[tuple[int, str]] = []
        size = 0
        while any(queues) and len(chosen) < self.max_embedded:
            for queue in queues:
                if not queue or len(chosen) >= self.max_embedded:
                    continue
                _, row, text = queue.pop(0)
                if size + len(text) > self.embed_bytes:
                    continue
                chosen.append((row, text))
                size += len(text)
        return sorted(chosen)

    def finish(self) -> BuiltEpisodes:
        if self.everything is None:
            self._write_page()
        chosen = self._chosen()
        n = len(self.cols["step"])
        index = {
            "episodes": n,
            "page_size": self.page_size,
            "sidecar": self.sidecar_href if self.everything is None and self.write_pages else None,
            "strings": {name: s.values for name, s in self.strings.items()},
            "cols": self.cols,
        }
        sample = "{" + ",".join(f'"{row}":{text}' for row, text in chosen) + "}"
        return BuiltEpisodes(
            index_json=embed_json(index),
            sample_json=sample,
            episodes=n,
            embedded=len(chosen),
            pages=self.pages,
            sidecar_bytes=self.sidecar_bytes,
            counts=dict(self.counts),
        )
