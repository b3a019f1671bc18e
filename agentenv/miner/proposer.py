"""An LLM proposer of new tasks from clustered failures (optional).

Failures are clustered by (family, failure kind, break turn); the proposer sends
the largest clusters, each with example tasks, to an OpenAI-compatible chat
endpoint over httpx and asks for JSON task proposals. Nothing it returns is
trusted: the call has one deadline (``timeout_s`` for the whole reply, headers
included, not per read) and the reply a size cap (`MAX_REPLY_BYTES`, uncompressed);
it must parse as JSON without NaN or infinity (written back, the task would hold
null there);
each proposal is validated by a strict pydantic model (its payload at most
`MAX_PAYLOAD_CHARS` as JSON), must name one of the example tasks it imitates
(which fixes its env and metadata), and then passes the same validation as any
variant (the oracle solves it) before it enters the pool. A bad reply is logged
in the result, never raised into the training loop.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentenv.core import _safejson
from agentenv.core._deadline import run_within
from agentenv.core.task import MAX_DEPTH, Task
from agentenv.miner.variants import stable_hash

__all__ = [
    "MAX_PAYLOAD_CHARS",
    "MAX_REPLY_BYTES",
    "FailureCluster",
    "OpenAIProposer",
    "Proposal",
    "ProposalBatch",
    "ProposedTask",
    "ProposerResult",
    "cluster_failures",
]

MAX_PAYLOAD_CHARS = 64 * 1024
"""A proposal's payload as compact JSON, at most: 18x the largest bundled task's
(a code-v0 task, ~3.5k); a payload is kept in the pool and every checkpoint."""
MAX_REPLY_BYTES = 8 * 2**20
"""The reply, at most: 64 proposals of a 20k-character prompt and a full payload
are ~5.4 M characters; the rest is room for JSON escapes."""


@dataclass(frozen=True)
class FailureCluster:
    family: str
    kind: str
    break_turn: int | None
    count: int
    examples: list[Task] = field(default_factory=list)


def cluster_failures(
    failures: Iterable[tuple[Task, str, int | None]], *, max_examples: int = 2
) -> list[FailureCluster]:
    """(task, failure kind, break turn) triples grouped, largest cluster first."""
    counts: Counter[tuple[str, str, int | None]] = Counter()
    examples: dict[tuple[str, str, int | None], list[Task]] = {}
    for task, kind, turn in failures:
        key = (task.metadata.family, kind, turn)
        counts[key] += 1
        shown = examples.setdefault(key, [])
        if len(shown) < max_examples and all(t.id != task.id for t in shown):
            shown.append(task)
    ordered = sorted(counts, key=lambda k: (-counts[k], k[0], k[1], -1 if k[2] is None else k[2]))
    return [FailureCluster(k[0], k[1], k[2], counts[k], examples[k]) for k in ordered]


class Proposal(BaseModel):
    """One proposed task as the model must write it."""

    model_config = ConfigDict(extra="forbid")

    like: str = Field(min_length=1, description="the id of the example task it imitates")
    prompt: str = Field(min_length=1, max_length=20_000)
    payload: dict[str, Any]

    @field_validator("payload")
    @classmethod
    def _writable(cls, payload: dict[str, Any]) -> dict[str, Any]:
        """Refuses NaN and infinity (a checkpoint would write null there: another task
        after resuming) and a payload past `MAX_PAYLOAD_CHARS`."""
        try:
            size = len(json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False))
        except ValueError:
            raise ValueError("the payload holds NaN or infinity, which JSON cannot write back") from None
        if size > MAX_PAYLOAD_CHARS:
            raise ValueError(f"the payload is {size} characters as JSON; the limit is {MAX_PAYLOAD_CHARS}")
        return payload


class ProposalBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks: list[Proposal] = Field(max_length=64)


class _Message(BaseModel):
    content: Any = None


class _Choice(BaseModel):
    message: _Message


class _Completion(BaseModel):
    """The part of an OpenAI chat completion the proposer reads (other fields ignored)."""

    choices: list[_Choice] = Field(min_length=1)


@dataclass(frozen=True)
class ProposedTask:
    task: Task
    like: Task
    """The example it imitates, which fixes its env: carried, since ids may hold any text
    (an id parsed back out of ``task.id`` can name another task)."""


@dataclass
class ProposerResult:
    proposed: list[ProposedTask]
    """Well-formed proposals (still to be validated by the miner)."""
    errors: list[str]

    @property
    def tasks(self) -> list[Task]:
        return [p.task for p in self.proposed]


class _ReplyRefused(Exception):
    """The reply broke the deadline, the size cap or the encoding asked for."""


SYSTEM = (
    "You write new training tasks for an AI agent, like the tasks it failed. Answer with JSON only: "
    '{"tasks": [{"like": EXAMPLE_TASK_ID, "prompt": STRING, "payload": OBJECT}]}. '
    "Each task must have the same payload keys and meaning as the example it is like, be solvable, "
    "and be consistent (the prompt and the payload describe the same problem)."
)


class OpenAIProposer:
    """Asks ``model`` at ``base_url`` (an OpenAI-compatible ``/chat/completions``) for tasks."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_tasks: int = 4,
        temperature: float = 0.7,
        client: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self.max_tasks = max_tasks
        self.temperature = temperature
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(timeout=timeout_s, headers=headers)

    def close(self) -> None:
        self._client.close()

    def propose(self, clusters: Sequence[FailureCluster]) -> ProposerResult:
        examples = {t.id: t for c in clusters for t in c.examples}
        if not examples:
            return ProposerResult([], [])
        body = {
            "model": self.model,
            "temperature": self.temperature,
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": _describe(clusters, self.max_tasks)},
            ],
        }
        try:
            reply = self._post(body)
        except _ReplyRefused as e:
            return ProposerResult([], [f"request failed: {e}"])
        except httpx.HTTPError as e:
            return ProposerResult([], [f"request failed: {type(e).__name__}: {e}"])
        try:
            content = _Completion.model_validate_json(reply).choices[0].message.content
        except ValidationError as e:
            return ProposerResult([], [f"malformed completion: {e.errors()[0]['msg']}"])
        return parse_proposals(content, examples, self.max_tasks)

    def _post(self, body: dict[str, Any]) -> bytes:
        """The reply's body, within ``timeout_s`` in all and at most `MAX_REPLY_BYTES`.

        httpx's timeout bounds each read, not the reply: a server that trickles its status
        line and headers, or its body, a byte per read would hold the training step for
        hours. So the call runs in a worker thread waited on for ``timeout_s``; one still
        reading past the deadline is left to end on its own (at its next chunk, a read
        timeout, or `close`)."""
        deadline = time.monotonic() + self.timeout_s
        done = run_within(self.timeout_s, lambda: self._read(body, deadline), name="agentenv-proposer-request")
        if done is None:
            raise _ReplyRefused(f"no complete reply within timeout_s={self.timeout_s} s")
        return done.result()

    def _read(self, body: dict[str, Any], deadline: float) -> bytes:
        """The body is asked for uncompressed and read raw: a compressed one could inflate
        past any cap within a single read, so it is refused. It is checked against the
        deadline as it streams in, so a call given up on stops reading at its next chunk."""
        url = f"{self.base_url}/chat/completions"
        with self._client.stream("POST", url, json=body, headers={"Accept-Encoding": "identity"}) as response:
            response.raise_for_status()
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding != "identity":
                raise _ReplyRefused(f"a {encoding!r}-encoded reply; the proposer asks for and reads only identity")
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_raw():
                size += len(chunk)
                if size > MAX_REPLY_BYTES:
                    raise _ReplyRefused(f"the reply is over {MAX_REPLY_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise _ReplyRefused(f"no complete reply within timeout_s={self.timeout_s} s")
                chunks.append(chunk)
        return b"".join(chunks)


def parse_proposals(content: Any, examples: Mapping[str, Task], max_tasks: int) -> ProposerResult:
    """The well-formed proposals in a reply, each made a `Task` like its example."""
    if not isinstance(content, str):
        return ProposerResult([], [f"expected text content, got {type(content).__name__}"])
    try:
        batch = ProposalBatch.model_validate(_safejson.loads(_strip_fence(content), max_depth=MAX_DEPTH))
    except _safejson.UnsafeJSON as e:
        return ProposerResult([], [f"malformed reply: {e}"])
    except ValidationError as e:
        error = e.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        return ProposerResult(
            [], [f"malformed reply: {where}: {error['msg']}" if where else f"malformed reply: {error['msg']}"]
        )
    proposed, errors = [], []
    for i, proposal in enumerate(batch.tasks[:max_tasks]):
        like = examples.get(proposal.like)
        if like is None:
            errors.append(f"proposal {i}: 'like' names {proposal.like!r}, not one of the examples")
            continue
        digest = f"{json.dumps(proposal.payload, sort_keys=True)}|{proposal.prompt}"
        try:
            task = Task(
                id=f"{like.id}~p{stable_hash(digest):08x}",
                prompt=proposal.prompt,
                payload=proposal.payload,
                metadata=like.metadata,
            )
        except ValidationError as e:  # an example id near the length limit
            errors.append(f"proposal {i}: {e.errors()[0]['msg']}")
            continue
        proposed.append(ProposedTask(task, like))
    return ProposerResult(proposed, errors)


def _strip_fence(text: str) -> str:
    match = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    return match.group(1) if match else text.strip()


def _describe(clusters: Sequence[FailureCluster], max_tasks: int) -> str:
    lines = [f"Write up to {max_tasks} new tasks. The agent failed these clusters of tasks:"]
    for c in clusters:
        where = "an unknown turn" if c.break_turn is None else f"turn {c.break_turn}"
        lines.append(f"\n## family {c.family}: {c.count} failures of kind {c.kind!r}, breaking at {where}")
        for t in c.examples:
            lines.append(json.dumps({"id": t.id, "prompt": t.prompt, "payload": t.payload}, ensure_ascii=False))
    # A task made in Python may hold a lone surrogate, which no UTF-8 request body takes.
    return _safejson.clean_text("\n".join(lines))
