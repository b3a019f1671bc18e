"""The update: from a batch of groups of episodes to one optimiser step of the policy.

`Updater.update` turns the episodes into advantages (task-level group-relative, plus
the step-level term and length shaping: `batch.turn_advantages`), builds the
token-exact training sequences (`batch.build_examples`), and makes ``ppo_epochs``
optimiser steps with the configured loss (`losses.compute_loss`), each accumulated
over micro-batches scaled so the gradient is the whole batch's. Log-probs the
sampler recorded that are not the trainer's own arithmetic (asynchronous rollouts,
vLLM, a served model, a bf16 graph) are corrected by importance weights
(`off_policy`). The learning rate follows warm-up then the configured decay, a
function of the step (`learning_rate`), so a checkpoint need not save a scheduler.
Compute runs under bf16 autocast where the trainer asks for it (`model.autocast`).

A batch with no signal (every group's rewards equal) makes no optimiser step: Adam's
momentum from earlier batches would move the weights with nothing learnt
(``skipped_update: 1``).

Left out: where the batch comes from (`collector`, RLPR's rewards, a served model's
episodes checked by `check_served_groups`), giving the new weights to a rollout engine,
and the step counter (the caller's, passed in).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.trainers.batch import Example, TrainBatch, build_examples, collate, turn_advantages
from agentenv.trainers.config import GRPOConfig
from agentenv.trainers.distributed import DataParallel
from agentenv.trainers.logprobs import Opening, opening_pass, policy_logprobs
from agentenv.trainers.losses import batch_share, compute_loss, kl_k3, loss_kwargs, overlong_penalty
from agentenv.trainers.metrics import advantage_metrics
from agentenv.trainers.model import autocast
from agentenv.trainers.off_policy import sampler_importance_weights, truncated_importance_weights
from agentenv.trainers.policy import TokenPolicy

__all__ = [
    "UPDATE_KL_PROBE",
    "Updater",
    "check_served_groups",
    "generation_budget",
    "learning_rate",
    "shuffled_rewards",
]

UPDATE_KL_PROBE = 4
"""Sequences (of the first micro-batch) on which ``update_kl`` is measured."""


class Updater:
    """Makes the optimiser steps of ``model`` with ``optimizer``.

    Args:
        model: The policy being trained (data-parallel already, if it is).
        optimizer: Its optimiser; `update` sets its learning rate each step.
        policy: The rollout policy: its pad id, and whether its log-probs are the
            trainer's own arithmetic (``exact_logprobs``; if not, ``sampler_is`` corrects).
        config: The run's config.
        dist: This rank of a data-parallel job: it trains on its share of the groups.
        device: Where the model is.
        bf16: Compute under bf16 autocast.
        budget: The most policy tokens one sequence can hold (`generation_budget`).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        policy: TokenPolicy,
        config: GRPOConfig,
        dist: DataParallel,
        device: torch.device,
        *,
        bf16: bool,
        budget: int,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.policy = policy
        self.config = config
        self.dist = dist
        self.device = device
        self.bf16 = bf16
        self.budget = budget
        self.ref_model: torch.nn.Module | None = None
        """The frozen reference of the KL penalty (``kl_coef > 0``), set by the trainer."""

    def update(
        self,
        groups: Sequence[Sequence[Trajectory]],
        reward_weights: Sequence[Mapping[str, float]],
        group_weights: Sequence[float] | None = None,
        *,
        step: int,
        foreign: bool = False,
    ) -> dict[str, Any]:
        """One update on ``groups`` (each the episodes of one task and seed), with each
        group's env's ``reward_weights`` and, optionally, importance weights per group;
        ``foreign``: the tokens were sampled elsewhere (a served model), so their
        log-probs are corrected whatever the policy says. Returns the step's metrics,
        with ``_train_tokens`` (every rank's, summed) for the caller to report."""
        examples, per_turn = self._examples(groups, reward_weights, group_weights, step)
        group_ids = [i for i, g in enumerate(groups) for _ in g]
        # Every rank holds the whole batch; it trains on its share of the groups.
        mine = set(self.dist.mine(len(groups)))
        local = [e for e in examples if group_ids[e.episode] in mine and any(e.mask)]
        examples = [e for e in examples if any(e.mask)]
        if not any(a for e in examples for a, m in zip(e.advantages, e.mask, strict=True) if m):
            # No signal (every group's rewards were equal). An optimiser step now would only
            # replay Adam's momentum from earlier batches, which is drift, not learning.
            examples = []
        weighted = [a for e in examples for a, m in zip(e.advantages, e.mask, strict=True) if m]
        out: dict[str, Any] = {
            **advantage_metrics(per_turn),
            # The advantage as a token-mean loss weighs it: below 0 when failures run longer.
            "adv/token_mean": float(np.mean(weighted)) if weighted else 0.0,
            "seq_truncated_frac": float(np.mean([e.truncated for e in examples])) if examples else 0.0,
        }
        if group_weights is not None:
            out["importance_weight/max"] = max(group_weights)
        if not examples:
            return {**out, "loss": 0.0, "skipped_update": 1.0, "_train_tokens": 0}
        return {**out, **self.optimise(local, step=step, foreign=foreign)}

    def _examples(
        self,
        groups: Sequence[Sequence[Trajectory]],
        reward_weights: Sequence[Mapping[str, float]],
        group_weights: Sequence[float] | None,
        step: int,
    ) -> tuple[list[Example], list[list[float]]]:
        """The training sequences of ``groups``' episodes, with each turn's advantage."""
        cfg = self.config
        trajs = [t for g in groups for t in g]
        if cfg.shuffle_rewards:
            trajs = shuffled_rewards(trajs, cfg.seed, step)
        group_ids = [i for i, g in enumerate(groups) for _ in g]
        weights = [w for w, g in zip(reward_weights, groups, strict=True) for _ in g]
        # Length shaping: DAPO's soft overlong penalty per turn, and a penalty for the share
        # of turns cut at max_new_tokens (no end-of-turn token), at the episode level so a
        # short episode is not cheaper than a long one. Without it a model loses nothing by
        # never ending its turn once its call parses, and drifts there.
        turn_shaping = [_overlong(t, cfg) for t in trajs]
        extra = [
            sum(shape) - cfg.truncation_penalty * _cut_share(t) for shape, t in zip(turn_shaping, trajs, strict=True)
        ]
        per_turn, _rewards = turn_advantages(
            trajs,
            group_ids,
            weights,
            task_mode=cfg.advantage,
            step_mode=cfg.step_advantage,
            step_weight=cfg.step_advantage_weight,
            gamma=cfg.gamma,
            step_std=cfg.step_advantage_std,
            extra_rewards=extra,
            extra_step_rewards=turn_shaping,
        )
        if group_weights is not None:
            # The policy-gradient term of every loss is linear in the advantage (clipped or
            # not), so scaling a group's advantages scales its share of that term.
            per_turn = [[a * group_weights[g] for a in turns] for g, turns in zip(group_ids, per_turn, strict=True)]
        return build_examples(trajs, per_turn, max_seq_len=cfg.max_seq_len, version=step), per_turn

    def optimise(self, examples: list[Example], *, step: int, foreign: bool = False) -> dict[str, Any]:
        """``ppo_epochs`` optimiser steps on ``examples``, accumulated over micro-batches;
        returns the loss diagnostics averaged over the epochs (clipping and the ratio's
        drift show from the second epoch on) and the last step's gradient norm."""
        cfg = self.config
        batches, shares = self._micro_batches(examples)
        olds = self._generation_logprobs(batches)
        # How far the whole update moves the policy, measured on the first micro-batch's
        # first sequences: before, from the first training pass; after, one small pass.
        probe = TrainBatch(*(getattr(batches[0], f.name)[:UPDATE_KL_PROBE] for f in dataclasses.fields(TrainBatch)))
        figures = _Diagnostics(cfg.ppo_epochs)
        self.model.train()
        for _ in range(cfg.ppo_epochs):
            grad_norm = self._epoch(batches, olds, shares, figures, lr=learning_rate(cfg, step), foreign=foreign)
        out = self.dist.sum_metrics(dict(figures.sums))  # each rank's are weighed by its share of the whole batch
        out.update(figures.extremes)
        out["grad_norm"] = float(grad_norm)
        with torch.no_grad(), self.autocast():
            after = self.dist.forward(lambda: self._logprobs(self.model, probe)[0])
        # k3 estimate of KL(before || after) per policy token, over the probe's tokens the
        # policy sampled before the update: the step size, in nats.
        before = figures.first_logp
        update_kl = float(kl_k3(before, after, probe.mask)) if before is not None else 0.0
        out["update_kl"] = self.dist.weighted_mean(update_kl, float(probe.mask.sum()) if examples else 0.0)
        out["lr"] = self.optimizer.param_groups[0]["lr"]
        out["_train_tokens"] = self.dist.total(float(sum(len(e.ids) for e in examples) * cfg.ppo_epochs))
        return out

    def _micro_batches(self, examples: list[Example]) -> tuple[list[TrainBatch], list[float]]:
        """``examples`` in micro-batches, each with its share of the batch's averaging unit."""
        cfg = self.config
        micro = [examples[i : i + cfg.micro_batch_size] for i in range(0, len(examples), cfg.micro_batch_size)]
        batches = [collate(m, self.policy.pad_id, self.device) for m in micro]
        # Each micro-batch's loss is scaled by its share of the batch's averaging unit
        # (on several ranks: of the whole batch, every rank's), so the accumulated
        # gradient is that of the whole batch at once.
        sizes = [batch_share(cfg.loss, b.mask, episode_balanced=cfg.episode_balanced) for b in batches]
        total = self.dist.total(sum(sizes), what="counting the batch's tokens") or 1.0
        shares = [size / total for size in sizes]
        # Every rank runs as many passes (a rank short of data runs empty ones, weighing 0).
        for _ in range(self.dist.most(len(batches)) - len(batches)):
            batches.append(collate([_EMPTY], self.policy.pad_id, self.device))
            shares.append(0.0)
        return batches, shares

    def _epoch(
        self,
        batches: Sequence[TrainBatch],
        olds: Sequence[torch.Tensor | None],
        shares: Sequence[float],
        figures: _Diagnostics,
        *,
        lr: float,
        foreign: bool,
    ) -> torch.Tensor:
        """One optimiser step over every micro-batch; returns the gradient norm before clipping."""
        self.optimizer.zero_grad(set_to_none=True)
        opening = self._opening(batches)
        for i, (batch, old, share) in enumerate(zip(batches, olds, shares, strict=True)):
            with self.dist.accumulating(sync=i == len(batches) - 1):
                diagnostics, logp = self._backward(batch, old, share, opening, foreign=foreign)
            figures.add(diagnostics, share, logp)
        if opening is not None:
            opening.backward()
        for group in self.optimizer.param_groups:  # a function of the step: nothing to checkpoint
            group["lr"] = lr
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for p in self.model.parameters() if p.requires_grad], self.config.max_grad_norm
        )
        self.optimizer.step()
        return grad_norm

    def _generation_logprobs(self, batches: Sequence[TrainBatch]) -> list[torch.Tensor | None]:
        """The old log-probs of the importance ratio, per micro-batch: with one epoch,
        None (the ratio is 1: the current log-probs, detached); with more, the
        log-probs before the first update, so later epochs see the ratio move."""
        if self.config.ppo_epochs == 1:
            return [None] * len(batches)
        with torch.no_grad(), self.autocast():
            return [self.dist.forward(functools.partial(self._logprobs, self.model, b))[0] for b in batches]

    def _opening(self, batches: Sequence[TrainBatch]) -> Opening | None:
        """The opening every prompt of the optimiser step shares (a system prompt), run once
        for all its micro-batches (`logprobs.opening_pass`); its backward runs after
        theirs. In one process only: under DDP a backward after the synchronising one
        would go unreduced."""
        if len(batches) < 2 or self.dist.active or not self.config.share_prompts:
            return None
        with self.autocast():
            return opening_pass(self.model, batches)

    def _backward(
        self, batch: TrainBatch, old: torch.Tensor | None, share: float, opening: Opening | None, *, foreign: bool
    ) -> tuple[dict[str, float], torch.Tensor]:
        """Loss of one micro-batch, scaled by its ``share`` of the batch, backwards;
        returns its loss and diagnostics (unscaled) and its log-probs (detached). The
        step's ``opening`` collects its part of the gradient (`Opening.backward`)."""
        cfg = self.config
        with self.autocast():
            logp, entropy = self.dist.forward(lambda: self._logprobs(self.model, batch, opening))
            ref = None
            if self.ref_model is not None:
                with torch.no_grad():
                    ref = self._logprobs(self.ref_model, batch)[0]
        prox = old if old is not None else logp.detach()
        advantages, off_policy = self._corrected(batch, prox, foreign=foreign)
        result = compute_loss(
            cfg.loss,
            logp=logp,
            old_logp=prox,
            advantages=advantages,
            mask=batch.mask,
            ref_logp=ref,
            kl_coef=cfg.kl_coef,
            **loss_kwargs(
                cfg.loss,
                eps_low=cfg.eps_low,
                eps_high=cfg.eps_high,
                max_len=self.budget,
                episode_balanced=cfg.episode_balanced,
            ),
        )
        (result.loss * (share * self.dist.loss_scale)).backward()
        out = {"loss": result.loss.item(), **result.metrics, **off_policy}
        out["entropy"] = float(entropy.mean()) if entropy.numel() else 0.0
        m = batch.mask.bool()
        if m.any():  # how far the training forward pass is from the generation-time log-probs
            out["gen_logprob_gap"] = float((batch.old_logp[m] - logp.detach()[m]).abs().mean())
        return out, logp.detach()

    def _corrected(
        self, batch: TrainBatch, prox: torch.Tensor, *, foreign: bool
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``batch``'s advantages times the importance weights of tokens another policy
        sampled, and their diagnostics; unchanged where the sampler is the trainer's own."""
        cfg = self.config
        if cfg.async_rollouts:  # tokens sampled by older weights: truncated importance weights
            weights, off_policy = truncated_importance_weights(
                prox, batch.old_logp, batch.lag, batch.mask, cap=cfg.importance_cap
            )
            return batch.advantages * weights, off_policy
        if foreign or not self.policy.exact_logprobs:  # vLLM, a server, bf16 graphs: the mismatch
            weights, off_policy = sampler_importance_weights(
                prox, batch.old_logp, batch.mask, mode=cfg.sampler_is, cap=cfg.sampler_is_cap
            )
            return batch.advantages * weights, off_policy
        return batch.advantages, {}

    def _logprobs(
        self, model: torch.nn.Module, batch: TrainBatch, opening: Opening | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.config
        return policy_logprobs(
            model,
            batch,
            temperature=cfg.temperature,
            chunk_tokens=cfg.logprob_chunk_tokens,
            share_prompts=cfg.share_prompts and not self.dist.lockstep,
            opening=opening,
        )

    def autocast(self) -> torch.autocast:
        return autocast(self.device, self.bf16)


class _Diagnostics:
    """The loss diagnostics of an update's epochs: each micro-batch's weighed by its share
    of the batch and averaged over the epochs; the sampler's min and max ratios and gaps
    taken over the micro-batches; and the first pass's log-probs (``update_kl``'s before)."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs
        self.sums: dict[str, float] = defaultdict(float)
        self.extremes: dict[str, float] = {}
        self.first_logp: torch.Tensor | None = None

    def add(self, diagnostics: Mapping[str, float], share: float, logp: torch.Tensor) -> None:
        if self.first_logp is None:
            self.first_logp = logp[:UPDATE_KL_PROBE]
        for k, v in diagnostics.items():
            if k.startswith("sampler/") and k.endswith(("_min", "_max")):
                pick = min if k.endswith("_min") else max
                self.extremes[k] = pick(self.extremes.get(k, v), v) if share > 0 else self.extremes.get(k, v)
            else:
                self.sums[k] += v * share / self.epochs


_EMPTY = Example(ids=[0, 0], mask=[0, 1], old_logp=[0.0, 0.0], advantages=[0.0, 0.0], turn_lengths=[2], truncated=False)
"""A pass with no data, for a rank with fewer micro-batches than another: one policy
token with advantage 0 (weighing 0), so every parameter still joins the gradient reduction."""


def generation_budget(config: GRPOConfig, max_turns: int) -> int:
    """The most policy tokens one sequence can hold: ``max_new_tokens`` per turn for the
    longest episode (``config.max_turns``, else ``max_turns``: the envs' longest), within
    ``max_seq_len`` (Dr. GRPO's constant divisor)."""
    return min(config.max_seq_len, config.max_new_tokens * (config.max_turns or max_turns))


def learning_rate(config: GRPOConfig, step: int) -> float:
    """The learning rate of step ``step`` (from 0): a linear warm-up over ``warmup_steps``,
    then constant, or with ``lr_decay="linear"`` down to a tenth at the last step."""
    scale = min(1.0, (step + 1) / max(config.warmup_steps, 1))
    if config.lr_decay == "linear" and step >= config.warmup_steps:
        span = max(config.steps - config.warmup_steps, 1)
        scale *= 1.0 - 0.9 * (step - config.warmup_steps) / span
    return config.learning_rate * scale


def shuffled_rewards(trajs: Sequence[Trajectory], seed: int, step: int) -> list[Trajectory]:
    """The control arm's batch (``shuffle_rewards``): the task rewards of the episodes
    that are not infra, permuted among them (drawn from the seed and the step)."""
    valid = [i for i, t in enumerate(trajs) if t.failure is not Failure.INFRA]
    rng = np.random.default_rng([seed, step, 11])
    order = rng.permutation(len(valid))
    out = list(trajs)
    for i, j in zip(valid, order, strict=True):
        out[i] = trajs[i].model_copy(update={"task_reward": trajs[valid[j]].task_reward})
    return out


def check_served_groups(groups: Sequence[Sequence[Trajectory]]) -> None:
    """Refuse groups rolled out elsewhere that cannot be trained on: a group of fewer
    than two episodes, or an episode with no generated token ids."""
    for i, group in enumerate(groups):
        if len(group) < 2:
            raise ValueError(f"group {i} holds {len(group)} episode(s); group-relative advantages need >= 2")
        for j, traj in enumerate(group):
            if not any(g is not None and g.token_ids for g in traj.generations):
                raise ValueError(
                    f"episode {j} of group {i} has no generated token ids to train on; roll it out with a policy "
                    "that returns them (OpenAIPolicy(..., return_tokens=True) against vLLM, or the trainer's own)"
                )


def _overlong(traj: Trajectory, config: GRPOConfig) -> list[float]:
    """Per turn, DAPO's soft overlong penalty (0s without ``overlong_cache_len``)."""
    if not config.overlong_cache_len:
        return [0.0] * len(traj.generations)
    lengths = torch.tensor([len(g.token_ids) if g is not None else 0 for g in traj.generations])
    return overlong_penalty(lengths, config.max_new_tokens, config.overlong_cache_len).tolist()


def _cut_share(traj: Trajectory) -> float:
    """The share of the episode's turns cut at ``max_new_tokens``."""
    gens = [g for g in traj.generations if g is not None]
    return sum(g.finish_reason == "length" for g in gens) / len(gens) if gens else 0.0
