"""An LLM proposer of new tasks from clustered failures (optional).

Failures are clustered by (family, failure kind, break turn); the proposer sends
the largest clusters, each with example tasks, to an OpenAI-compatible chat
endpoint over httpx and asks for JSON task proposals. Nothing it returns is
trusted: the reply must parse as JSON, each proposal is validated by a strict
pydantic model, must name one of the example tasks it imitates (which fixes its
env and metadata), and then passes the same validation as any variant (the
oracle solves it) before it enters the pool. A bad reply is logged in the result,
never raised into the training loop.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentenv.miner.variants import stable_hash
from agentenv.task import Task

__all__ = ["FailureCluster", "OpenAIProposer", "Proposal", "ProposalBatch", "cluster_failures"]


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


class ProposalBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks: list[Proposal] = Field(max_length=64)


@dataclass
class ProposerResult:
    tasks: list[Task]
    """Well-formed proposals (still to be validated by the miner)."""
    errors: list[str]


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
            response = self._client.post(f"{self.base_url}/chat/completions", json=body)
            response.raise_for_status()
            content = response.json()["choices"][0]["message"]["content"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
            return ProposerResult([], [f"request failed: {type(e).__name__}: {e}"])
        return parse_proposals(content, examples, self.max_tasks)


def parse_proposals(content: Any, examples: Mapping[str, Task], max_tasks: int) -> ProposerResult:
    """The well-formed proposals in a reply, each made a `Task` like its example."""
    if not isinstance(content, str):
        return ProposerResult([], [f"expected text content, got {type(content).__name__}"])
    try:
        batch = ProposalBatch.model_validate_json(_strip_fence(content))
    except ValidationError as e:
        return ProposerResult([], [f"malformed reply: {e.errors()[0]['msg']}"])
    tasks, errors = [], []
    for i, proposal in enumerate(batch.tasks[:max_tasks]):
        like = examples.get(proposal.like)
        if like is None:
            errors.append(f"proposal {i}: 'like' names {proposal.like!r}, not one of the examples")
            continue
        digest = f"{json.dumps(proposal.payload, sort_keys=True)}|{proposal.prompt}"
        tasks.append(
            Task(
                id=f"{like.id}~p{stable_hash(digest):08x}",
                prompt=proposal.prompt,
                payload=proposal.payload,
                metadata=like.metadata,
            )
        )
    return ProposerResult(tasks, errors)


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
    return "\n".join(lines)
