"""RLPR: rewards from the policy's own probability of a reference answer.

For tasks with a reference answer and no checker (Yu et al. 2025, "RLPR:
Extrapolating RLVR to General Domains without Verifiers"). With x the prompt, the
policy's final reply is split into reasoning z and answer y (`split_reply`); y is
replaced by the task's reference y* (``task.payload["reference"]``), o' = z || y*,
and the probability reward is the mean, over the reference's tokens, of the
policy's probability (not log-probability) of each:

    r = f_seq(o') = 1/|y*| * sum_{i in y*} pi_theta(o'_i | x, o'_<i)

Debiasing subtracts the same quantity without the reasoning, r_0 = f_seq(y*) given
x alone, and clips:  r_hat = clip(r - r_0, 0, 1). So the reward measures how much the
reasoning raises the reference's probability, not how likely the reference is anyway.

Standard-deviation filtering: a prompt (a GRPO group) whose rewards spread less than
a threshold beta (population std over its valid episodes) is left out of the update.
The paper adapts beta: an exponential moving average of each step's mean group std
(decay 0.99), times a factor (0.5 for Qwen in its scripts); `StdThreshold` offers
that ("ema"), a fixed beta ("fixed"), or no filter ("off").

Token layout. The sequence with the reasoning is the episode's context before its
final reply (every earlier turn and observation, token-exact, as the trainer trains on
them), then the reasoning's text tokenised, then the answer marker, then the reference;
the one without is the episode's opening (the prompt before the policy's first token)
and the same marker and reference:

    with reasoning:    context | z | marker | y*      (r: mean prob of the y* tokens)
    without reasoning: opening | marker | y*          (r_0)

In a single-turn episode the context is the opening. In a multi-turn one, r_0 is not
read after the policy's own earlier turns: there a wrong first answer (the model then
expects it again) lowered r_0, so answering wrong and then right paid more than
answering right at once. The baseline is the prompt's, as in the paper, and every
episode of a group shares it.

The marker (``"<answer>"`` by default) and the reference are tokenised on their own,
so both sequences score the very same reference tokens. The reasoning is
re-tokenised from the reply's text with special tokens split, so text that spells
``<|im_end|>`` stays text. A sequence longer than ``max_seq_len`` loses reasoning
from its start (the end of the reasoning stays next to the answer), then context (or
opening) from its start; the reference is never cut.

The forward pass is the trainer's: `policy_logprobs` with the reference tokens as the
mask (shared prompts, chunked ``lm_head`` projection, the same temperature), under
``torch.no_grad`` with the model in eval mode, ``micro_batch_size`` rows at a time. The
rows of a group open with one prompt, which runs once (``prompt_lengths``), and
share the no-reasoning sequence, which is scored once.

A run applies it with `RLPRRewards` each step, between the rollouts and the update:
each rank scores its share of the groups; the episodes written and the rollout metrics
keep the verifier's rewards.

Left out: the paper's other aggregations of token probabilities (it reports the
mean as best), and any check of the answer itself: the verifier still runs and the
trainer logs its success next to the RLPR reward. RLPR rewards reasoning that makes
the reference likely; a reply that lists many candidates can raise the reference's
probability a little, and the debiasing and clip bound that but do not remove it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from agentenv.core.task import Task
from agentenv.core.task_sampler import Draw
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.trainers.batch import Example, collate
from agentenv.trainers.config import GRPOConfig
from agentenv.trainers.distributed import DataParallel
from agentenv.trainers.logprobs import policy_logprobs
from agentenv.trainers.model import autocast
from agentenv.trainers.task_sampler import EnvSource

__all__ = [
    "Layout",
    "RLPRRewards",
    "RLPRScorer",
    "RLPRScores",
    "StdThreshold",
    "build_layout",
    "debiased_reward",
    "low_spread_groups",
    "probability_reward",
    "reference_of",
    "score_trajectories",
    "split_reply",
]

REASONING_CHARS_PER_TOKEN = 16
"""The reasoning's text is cut to its last ``16 * max_seq_len`` characters before it is
tokenised: a 1 MB reply costs no more than one that fills the sequence."""

Encode = Callable[[str], list[int]]


# --- the reply and the reference ------------------------------------------------------


def split_reply(text: str, marker: str = "<answer>") -> tuple[str, str | None]:
    """``(reasoning, answer)``: the reply up to its LAST ``marker``, and what follows it
    (None when the reply has no marker: the whole reply is reasoning).

    One rule for tags and prefixes alike: with ``"<answer>"``, ``"I think <answer>4</answer>"``
    gives ``("I think ", "4</answer>")``; with ``"Answer:"``, ``"so 4. Answer: 4"`` gives
    ``("so 4. ", " 4")``. With several markers, earlier ones (and their answers) are part
    of the reasoning. The answer is only returned for inspection: RLPR replaces it."""
    if not marker:
        raise ValueError("the answer marker is empty; use e.g. '<answer>' or 'Answer:'")
    at = text.rfind(marker)
    if at < 0:
        return text, None
    return text[:at], text[at + len(marker) :]


def reference_of(task: Task, env: str = "") -> str:
    """The task's reference answer, ``task.payload["reference"]``: a non-empty string,
    or an error that names the task (and the env)."""
    ref = task.payload.get("reference")
    where = f"task {task.id!r}" + (f" of env {env!r}" if env else "")
    if not isinstance(ref, str) or not ref.strip():
        got = "no payload['reference']" if ref is None else f"payload['reference'] = {ref!r:.60}"
        raise ValueError(
            f"reward='rlpr' needs a reference answer in every task: {where} has {got}. "
            "Give its tasks payload={'reference': '...'} (a non-empty string), or use reward='verifier'"
        )
    return ref


def _clean(text: str) -> str:
    """``text`` with lone surrogates replaced: tokenizers refuse them (a TypeError)."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _reply_text(action: str | dict[str, Any]) -> str:
    if isinstance(action, str):
        return action
    content = action.get("content")
    return content if isinstance(content, str) else ""


# --- token layout -----------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """One episode's RLPR sequences (see the module docstring)."""

    context: list[int]
    reasoning: list[int]
    marker: list[int]
    reference: list[int]
    opening: list[int]
    """The episode's prompt before the policy's first token: r_0's context."""

    def with_reasoning(self) -> list[int]:
        return [*self.context, *self.reasoning, *self.marker, *self.reference]

    def without_reasoning(self) -> list[int]:
        return [*self.opening, *self.marker, *self.reference]


def build_layout(
    traj: Trajectory,
    *,
    encode: Encode,
    encode_text: Encode,
    marker: str,
    max_seq_len: int,
) -> Layout:
    """The layout of ``traj``'s final reply. ``encode`` tokenises trusted text (the marker,
    the reference); ``encode_text`` the policy's text (special tokens split). A reasoning
    the tokenizer refuses counts as no reasoning."""
    gens = [g for g in traj.generations if g is not None]
    if not gens:
        raise ValueError(
            f"reward='rlpr' scores the policy's tokens, but the episode of task {traj.task.id!r} has no "
            "generations (a policy that returns token ids, such as TransformersPolicy, records them)"
        )
    context: list[int] = []
    for g in gens[:-1]:
        context += [*(g.prompt_ids or []), *g.token_ids]
    context += gens[-1].prompt_ids or []
    reference = encode(_clean(reference_of(traj.task, traj.env_id or "")))
    marker_ids = encode(_clean(marker))
    if len(reference) + len(marker_ids) + 1 > max_seq_len:
        raise ValueError(
            f"task {traj.task.id!r}: its reference answer is {len(reference)} tokens, too long to score within "
            f"max_seq_len={max_seq_len}; raise max_seq_len or shorten the reference"
        )
    reasoning_text, _answer = split_reply(_reply_text(gens[-1].action), marker)
    reasoning_text = _clean(reasoning_text[-REASONING_CHARS_PER_TOKEN * max_seq_len :])
    try:
        reasoning = encode_text(reasoning_text)
    except Exception:  # noqa: BLE001 - a tokenizer bug the text triggers: no reasoning, not a crashed step
        reasoning = []
    over = len(context) + len(reasoning) + len(marker_ids) + len(reference) - max_seq_len
    if over > 0:
        cut = min(over, len(reasoning))
        reasoning, over = reasoning[cut:], over - cut
    if over > 0:
        context = context[over:]
    room = max_seq_len - len(marker_ids) - len(reference)
    return Layout(context, reasoning, marker_ids, reference, list(gens[0].prompt_ids or [])[-room:])


# --- the reward, from per-token log-probs -------------------------------------------------


def probability_reward(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """f_seq per row: the mean over the masked positions of exp(logp), the probability
    of each reference token. ``logp``, ``mask``: ``[B, T]``; returns ``[B]`` (0 for a
    row with nothing masked)."""
    m = mask.to(logp.dtype)
    return (logp.exp() * m).sum(-1) / m.sum(-1).clamp(min=1.0)


def debiased_reward(prob: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """r_hat = clip(r - r_0, 0, 1): the reasoning's gain in the reference's probability."""
    return (prob - base).clamp(0.0, 1.0)


# --- standard-deviation filtering -------------------------------------------------------------


def _pstd(xs: Sequence[float]) -> float:
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))


def low_spread_groups(
    rewards: Sequence[float | None], group_ids: Sequence[Hashable], threshold: float
) -> tuple[set[Hashable], dict[Hashable, float]]:
    """``(filtered, stds)``: the groups whose reward std (population, over the rewards that
    are not None) is below ``threshold``, and every group's std. A group with fewer than
    two rewards has std 0."""
    if len(rewards) != len(group_ids):
        raise ValueError(f"expected one group id per reward ({len(rewards)}), got {len(group_ids)}")
    members: dict[Hashable, list[float]] = {}
    for r, g in zip(rewards, group_ids, strict=True):
        bucket = members.setdefault(g, [])
        if r is not None:
            bucket.append(r)
    stds = {g: _pstd(rs) if len(rs) > 1 else 0.0 for g, rs in members.items()}
    return {g for g, s in stds.items() if s < threshold}, stds


@dataclass
class StdThreshold:
    """beta, the std below which a group is filtered.

    ``"fixed"``: ``value``. ``"ema"``: ``factor`` times an exponential moving average of
    each step's mean group std, m <- decay * m + (1 - decay) * mean_std; a step is filtered
    with the average of the steps before it (the first step: its own mean std).
    ``"off"``: 0, nothing is filtered."""

    mode: Literal["ema", "fixed", "off"] = "ema"
    value: float = 0.0
    factor: float = 0.5
    decay: float = 0.99
    ema: float | None = None

    def threshold(self, step_mean_std: float) -> float:
        if self.mode == "off":
            return 0.0
        if self.mode == "fixed":
            return self.value
        return self.factor * (step_mean_std if self.ema is None else self.ema)

    def observe(self, step_mean_std: float) -> None:
        """Fold one step's mean group std into the average (NaN and inf are skipped)."""
        if self.mode != "ema" or not math.isfinite(step_mean_std):
            return
        self.ema = step_mean_std if self.ema is None else self.decay * self.ema + (1 - self.decay) * step_mean_std

    def state_dict(self) -> dict[str, Any]:
        return {"ema": self.ema}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ema = state.get("ema")
        self.ema = None if ema is None else float(ema)


# --- a batch of trajectories, with the policy -------------------------------------------------


@dataclass
class RLPRScores:
    """Per trajectory (None for infra failures, which are never scored). An episode whose
    final reply the env refused (a format error: no answer was given) earns reward 0,
    with no probabilities."""

    reward: list[float | None] = field(default_factory=list)
    """r_hat = clip(r - r_0, 0, 1), or r itself without debiasing."""
    prob: list[float | None] = field(default_factory=list)
    """r: the reference's mean token probability after the reasoning."""
    base: list[float | None] = field(default_factory=list)
    """r_0: the same without the reasoning."""


def score_trajectories(
    model: torch.nn.Module,
    trajs: Sequence[Trajectory],
    *,
    encode: Encode,
    encode_text: Encode,
    marker: str = "<answer>",
    debias: bool = True,
    max_seq_len: int = 2048,
    micro_batch_size: int = 8,
    chunk_tokens: int = 1024,
    temperature: float = 1.0,
    share_prompts: bool = True,
    pad_id: int = 0,
    device: torch.device | str = "cpu",
) -> RLPRScores:
    """RLPR scores of ``trajs`` under ``model``: `policy_logprobs` over each episode's
    sequences (identical no-reasoning sequences run once), ``micro_batch_size`` rows per
    pass, without gradients and with the model in eval mode (its mode is restored)."""
    live = [i for i, t in enumerate(trajs) if t.failure is not Failure.INFRA]
    refused = {i for i in live if trajs[i].transitions and trajs[i].transitions[-1].error_kind == "format"}
    layouts = {
        i: build_layout(trajs[i], encode=encode, encode_text=encode_text, marker=marker, max_seq_len=max_seq_len)
        for i in live
        if i not in refused
    }
    rows: dict[tuple[tuple[int, ...], int], int] = {}  # (ids, reference length) -> row
    contexts: list[int] = []  # each row's context length: the prompt its group shares
    wanted: dict[int, tuple[int, int]] = {}

    def row(ids: list[int], lay: Layout, context: list[int]) -> int:
        key = (tuple(ids), len(lay.reference))
        if key not in rows:
            rows[key] = len(rows)
            contexts.append(len(context))
        return rows[key]

    for i, lay in layouts.items():
        with_row = row(lay.with_reasoning(), lay, lay.context)
        wanted[i] = (with_row, row(lay.without_reasoning(), lay, lay.opening) if debias else with_row)
    probs = _row_probabilities(
        model,
        list(rows),
        contexts,
        micro_batch_size=micro_batch_size,
        chunk_tokens=chunk_tokens,
        temperature=temperature,
        share_prompts=share_prompts,
        pad_id=pad_id,
        device=device,
    )
    if not bool(torch.isfinite(probs).all()):
        raise FloatingPointError(
            "RLPR: the model gave a non-finite probability of a reference answer (its logits overflowed or are "
            "NaN); the policy's weights are broken, not an episode"
        )
    out = RLPRScores([None] * len(trajs), [None] * len(trajs), [None] * len(trajs))
    for i in refused:  # the env refused the final reply as an answer: nothing to score, nothing earned
        out.reward[i] = 0.0
    for i, (w, b) in wanted.items():
        out.prob[i] = float(probs[w])
        if debias:
            out.base[i] = float(probs[b])
            out.reward[i] = float(debiased_reward(probs[w], probs[b]))
        else:
            out.reward[i] = float(probs[w])
    return out


def _row_probabilities(
    model: torch.nn.Module,
    rows: Sequence[tuple[tuple[int, ...], int]],
    contexts: Sequence[int],
    *,
    micro_batch_size: int,
    chunk_tokens: int,
    temperature: float,
    share_prompts: bool,
    pad_id: int,
    device: torch.device | str,
) -> torch.Tensor:
    """f_seq of each row ``(ids, n)``, whose last ``n`` ids are the reference; rows that
    open with the same context share its forward pass (``share_prompts``)."""
    examples = []
    for ids, n in rows:
        mask = [0] * (len(ids) - n) + [1] * n
        zeros = [0.0] * len(ids)
        examples.append(Example(list(ids), mask, zeros, zeros, [n], False))
    was_training = model.training
    model.eval()
    out: list[torch.Tensor] = []
    try:
        with torch.no_grad():
            for start in range(0, len(examples), micro_batch_size):
                part = slice(start, start + micro_batch_size)
                batch = collate(examples[part], pad_id, device)
                logp, _ = policy_logprobs(
                    model,
                    batch,
                    temperature=temperature,
                    chunk_tokens=chunk_tokens,
                    share_prompts=share_prompts,
                    prompt_lengths=[max(1, n) for n in contexts[part]],
                )
                out.append(probability_reward(logp, batch.mask).float().cpu())
    finally:
        model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0)


# --- what the trainer holds ------------------------------------------------------------------


@dataclass
class RLPRScorer:
    """The trainer's RLPR settings and its filter's state: scores groups of episodes
    with the policy and picks the groups that go into the update."""

    tokenizer: Any
    marker: str = "<answer>"
    debias: bool = True
    threshold: StdThreshold = field(default_factory=StdThreshold)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_text(self, text: str) -> list[int]:
        """The policy's text: a special token spelled out in it stays text."""
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])

    @classmethod
    def from_config(cls, config: GRPOConfig, tokenizer: Any) -> RLPRScorer:
        """The scorer of a run of ``config`` (its ``rlpr_*`` settings)."""
        threshold = StdThreshold(
            config.rlpr_std_filter, config.rlpr_std_threshold, config.rlpr_std_factor, config.rlpr_ema_decay
        )
        return cls(tokenizer, config.rlpr_answer_marker, config.rlpr_debias, threshold)

    def check_tasks(self, tasks: Sequence[Task], env: str) -> None:
        for task in tasks:
            reference_of(task, env)

    def score(self, model: torch.nn.Module, trajs: Sequence[Trajectory], **forward: Any) -> RLPRScores:
        """`score_trajectories` with this scorer's tokenizer, marker and debiasing;
        ``forward``: its keyword arguments for the forward pass."""
        return score_trajectories(
            model,
            trajs,
            encode=self.encode,
            encode_text=self.encode_text,
            marker=self.marker,
            debias=self.debias,
            **forward,
        )

    def select(self, rewards: Sequence[float | None], group_ids: Sequence[int]) -> tuple[list[int], dict[str, float]]:
        """The groups kept by the std filter (in order), and the ``rlpr/*`` metrics of the
        step; the filter's average then takes this step in."""
        _, stds = low_spread_groups(rewards, group_ids, 0.0)
        mean_std = sum(stds.values()) / len(stds) if stds else 0.0
        beta = self.threshold.threshold(mean_std)
        filtered = {g for g, s in stds.items() if s < beta}
        self.threshold.observe(mean_std)
        scored = [r for r in rewards if r is not None]
        metrics = {
            "rlpr/reward_mean": sum(scored) / len(scored) if scored else 0.0,
            "rlpr/group_std_mean": mean_std,
            "rlpr/std_threshold": beta,
            "rlpr/filtered_groups": float(len(filtered)),
        }
        return [g for g in dict.fromkeys(group_ids) if g not in filtered], metrics


# --- each step of a run ------------------------------------------------------------------


class RLPRRewards:
    """A run's RLPR step: the groups of a step's batch scored with the policy ``model``,
    given RLPR's reward as their task reward, and filtered by ``scorer``'s std filter.

    Args:
        scorer: The run's scorer (its settings and its filter's state, which checkpoints keep).
        model: The policy, as it is now (the forward runs under ``torch.no_grad``).
        config: The run's config: the forward pass's settings (``max_seq_len``,
            ``micro_batch_size``, ``logprob_chunk_tokens``, ``temperature``, ``share_prompts``).
        dist: This rank of a data-parallel job: each rank scores its share of the groups.
        sources: The run's envs, by their index in a `Draw`: every task of theirs must have
            a reference (ValueError naming the first without, before training starts).
        pad_id: The tokenizer's pad id.
        device: Where the model is.
        bf16: Compute under bf16 autocast.
    """

    def __init__(
        self,
        scorer: RLPRScorer,
        model: torch.nn.Module,
        config: GRPOConfig,
        dist: DataParallel,
        *,
        sources: Sequence[EnvSource],
        pad_id: int,
        device: torch.device,
        bf16: bool,
    ) -> None:
        self.scorer = scorer
        self.model = model
        self.config = config
        self.dist = dist
        self.env_names = [s.name for s in sources]
        self.pad_id = pad_id
        self.device = device
        self.bf16 = bf16
        for source in sources:
            scorer.check_tasks([*source.train, *source.test], source.name)

    def apply(
        self, groups: Sequence[list[Trajectory]], draws: Sequence[Draw]
    ) -> tuple[list[list[Trajectory]], list[Draw], dict[str, Any]]:
        """The groups the std filter keeps (and their draws), with RLPR's reward as their
        task reward, and the step's ``rlpr/*`` metrics; the episodes given keep the
        verifier's rewards. Every rank gets every group's scores."""
        for d in draws:  # tasks a sampler made (miner variants) have not been checked yet
            self.scorer.check_tasks([d.task], self.env_names[d.source])
        with torch.no_grad(), autocast(self.device, self.bf16), self.dist.generating():
            scored = self.dist.spread(list(groups), self._score, what="gathering the RLPR rewards")
        rewards = [r for s in scored for r in s.reward]
        kept, metrics = self.scorer.select(rewards, [i for i, g in enumerate(groups) for _ in g])
        bases = [b for s in scored for b in s.base if b is not None]
        probs = [p for s in scored for p in s.prob if p is not None]
        metrics["rlpr/debias_mean"] = float(np.mean(bases)) if bases else 0.0
        metrics["rlpr/prob_mean"] = float(np.mean(probs)) if probs else 0.0
        rescored = [
            [t.model_copy(update={"task_reward": r}) for t, r in zip(g, s.reward, strict=True)]
            for g, s in zip(groups, scored, strict=True)
        ]
        return [rescored[i] for i in kept], [draws[i] for i in kept], metrics

    def _score(self, groups: list[list[Trajectory]]) -> list[RLPRScores]:
        """RLPR scores of ``groups``' episodes, in one pass over all of them, split per group."""
        cfg = self.config
        flat = self.scorer.score(
            self.model,
            [t for g in groups for t in g],
            max_seq_len=cfg.max_seq_len,
            micro_batch_size=cfg.micro_batch_size,
            chunk_tokens=cfg.logprob_chunk_tokens,
            temperature=cfg.temperature,
            share_prompts=cfg.share_prompts,  # within `generating`: every rank runs its own passes
            pad_id=self.pad_id,
            device=self.device,
        )
        out, at = [], 0
        for g in groups:
            part = slice(at, at + len(g))
            out.append(RLPRScores(flat.reward[part], flat.prob[part], flat.base[part]))
            at += len(g)
        return out
