"""Importance weights for tokens the learner did not sample itself.

Two sources: older weights (asynchronous rollouts, `truncated_importance_weights`) and
another implementation of the same weights (an inference engine such as vLLM, or a
served model: `sampler_importance_weights`). The first is described here; the second
in its own docstring.

With rollouts generated ahead of the update (`agentenv.trainers.async_rollout`), a
token may have been sampled by a behaviour policy mu, the weights of a few versions
ago, while the learner is at pi. The policy gradient wants samples from pi, so each
such token's loss is weighted by the importance ratio pi / mu, truncated at a cap C
(truncated importance sampling, Ionides 2008; as used against the sampler/learner
mismatch by Yao et al. 2025, and for stale rollouts by PipelineRL and ScaleRL):

    w_t = min(exp(logp_prox_t - logp_mu_t), C)   for a policy token with lag > 0
    w_t = 1                                       for a policy token with lag 0

``logp_prox`` is the learner's log-prob before the update (the "proximal" policy
of decoupled PPO, Hilton et al. 2021): the loss's own ratio and clipping stay
relative to it, and ``w`` is a constant (no gradient) that multiplies the token's
advantage. Every loss here is linear in the advantage per token (PPO-clip's max of
two terms scales with a positive factor), so this is the token's loss times ``w``;
GSPO averages the weighted advantages over the sequence. ``logp_mu`` are the
log-probs recorded at generation time (`Generation.logprobs`).

A token sampled by the learner's own version has weight exactly 1, not the ratio of
two numerically different computations of the same policy: with no stale token the
update is the synchronous trainer's, bit for bit. Truncation bounds the variance a
rare token with pi >> mu would add, at the cost of a bias towards mu.

Shapes follow `agentenv.trainers.losses`: ``[B, T]``, aligned with the targets,
``mask`` nonzero on policy tokens only. Torch only; no model, no trainer.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["SAMPLER_IS_MODES", "sampler_importance_weights", "truncated_importance_weights"]


def truncated_importance_weights(
    logp_prox: Tensor, logp_behaviour: Tensor, lag: Tensor, mask: Tensor, *, cap: float
) -> tuple[Tensor, dict[str, float]]:
    """The weights ``w`` (float32, no grad, 1 off the mask) and their diagnostics.

    Diagnostics, each a mean over the policy tokens (0 when there are none):
    ``off_policy/stale_frac`` (tokens with lag > 0), ``off_policy/lag_mean``,
    ``off_policy/weight_mean`` (of ``w``; 1 when nothing is stale),
    ``off_policy/truncated_frac`` (tokens whose ratio exceeded ``cap``) and
    ``off_policy/log_ratio_abs`` (mean |logp_prox - logp_mu| over the stale tokens:
    how far the behaviour policy was; 0 when nothing is stale).
    """
    if not cap >= 1.0:
        raise ValueError(f"expected cap >= 1 (a ratio of 1 is never truncated), got {cap}")
    shapes = {"logp_behaviour": logp_behaviour, "lag": lag, "mask": mask}
    for name, tensor in shapes.items():
        if tensor.shape != logp_prox.shape:
            raise ValueError(
                f"expected {name} of shape {tuple(logp_prox.shape)} like logp_prox, got {tuple(tensor.shape)}"
            )
    with torch.no_grad():
        m = mask != 0
        stale = m & (lag > 0)
        # Zeroed before exp: padding may hold anything, as in the losses.
        log_ratio = torch.where(stale, logp_prox.float() - logp_behaviour.float(), 0.0)
        ratio = log_ratio.exp()
        weights = torch.where(stale, ratio.clamp(max=cap), 1.0)
        n = m.sum().clamp(min=1)
        n_stale = stale.sum().clamp(min=1)
        values = torch.stack(
            [
                stale.sum() / n,
                torch.where(m, lag, 0).sum() / n,
                torch.where(m, weights, 0.0).sum() / n if m.any() else torch.ones(()),
                (stale & (ratio > cap)).sum() / n,
                log_ratio.abs().sum() / n_stale,
            ]
        ).tolist()
    names = ("stale_frac", "lag_mean", "weight_mean", "truncated_frac", "log_ratio_abs")
    return weights, {f"off_policy/{k}": v for k, v in zip(names, values, strict=True)}


SAMPLER_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask", "none")
"""How `sampler_importance_weights` corrects the sampler/trainer mismatch: per token or
per sequence (one ratio for a row's policy tokens: the product of theirs), truncating
the ratio at the cap or masking what lies beyond it; "none" weighs every token 1 and
only measures."""

_MAX_LOG_RATIO = 50.0
"""A sequence's log-ratio is clamped here before exp: past it the weight is masked or
truncated anyway, and exp would overflow float32 at 89."""


def sampler_importance_weights(
    logp_prox: Tensor, logp_sampler: Tensor, mask: Tensor, *, mode: str, cap: float
) -> tuple[Tensor, dict[str, float]]:
    """Weights correcting for tokens sampled by another implementation of the same policy.

    An inference engine (vLLM) samples with kernels, dtypes and batching of its own, so
    the log-probs it samples by, ``logp_sampler``, differ from the trainer's ``logp_prox``
    for the same weights (the learner's log-probs before the update); in bf16 the gap
    grows large enough to bias the gradient (Yao et al. 2025, "Your efficient RL framework
    secretly brings you off-policy RL training"). The ratio r = exp(logp_prox -
    logp_sampler) is the importance weight, taken per token (``token_*``) or per sequence
    (``sequence_*``: r of a row is the product of its policy tokens' ratios, every token
    of the row weighted by it), and bounded by ``cap`` C >= 1:

    - ``*_truncate`` (TIS): w = min(r, C);
    - ``*_mask`` (MIS): w = r where 1/C <= r <= C, else 0: a token or sequence one side
      finds far likelier than the other leaves the update (the lower bound is this
      project's addition to TRL's ``sequence_mask``, whose weights otherwise fall to
      exp(-gap x length) on long multi-turn rows and leave them in with weight ~0);
    - ``none``: w = 1.

    ``w`` is a constant (no gradient) multiplying each policy token's advantage, as in
    `truncated_importance_weights`. Diagnostics, over the policy tokens:
    ``sampler/logprob_gap_mean`` and ``_max`` (|logp_prox - logp_sampler|),
    ``sampler/is_ratio_min``, ``_mean`` and ``_max`` (r at the mode's granularity, before
    bounding: per token, or per row for the sequence modes), ``sampler/masked_frac``
    (tokens with weight 0) and ``sampler/truncated_frac`` (tokens whose r exceeded C).
    Shapes ``[B, T]`` as in `agentenv.trainers.losses`.
    """
    if mode not in SAMPLER_IS_MODES:
        raise ValueError(f"expected mode in {SAMPLER_IS_MODES}, got {mode!r}")
    if not cap >= 1.0:
        raise ValueError(f"expected cap >= 1 (a ratio of 1 is never bounded), got {cap}")
    for name, tensor in {"logp_sampler": logp_sampler, "mask": mask}.items():
        if tensor.shape != logp_prox.shape:
            raise ValueError(
                f"expected {name} of shape {tuple(logp_prox.shape)} like logp_prox, got {tuple(tensor.shape)}"
            )
    with torch.no_grad():
        m = mask != 0
        log_ratio = torch.where(m, logp_prox.float() - logp_sampler.float(), 0.0)
        gap = log_ratio.abs()
        rows = m.any(-1)
        if mode.startswith("sequence"):
            per_row = log_ratio.sum(-1).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).exp()
            ratio = per_row[:, None].expand_as(log_ratio)
            measured = per_row[rows]
        else:
            ratio = log_ratio.clamp(max=_MAX_LOG_RATIO).exp()
            measured = ratio[m]
        if mode.endswith("truncate"):
            weights = ratio.clamp(max=cap)
        elif mode.endswith("mask"):
            weights = torch.where((ratio >= 1.0 / cap) & (ratio <= cap), ratio, 0.0)
        else:
            weights = torch.ones_like(ratio)
        weights = torch.where(m, weights, 1.0)
        n = m.sum().clamp(min=1)
        any_token = bool(m.any())
        values = torch.stack(
            [
                gap.sum() / n,
                gap.max(),
                measured.min() if any_token else torch.ones(()),
                measured.mean() if any_token else torch.ones(()),
                measured.max() if any_token else torch.ones(()),
                (m & (weights == 0)).sum() / n,
                (m & (ratio > cap)).sum() / n,
            ]
        ).tolist()
    names = (
        "logprob_gap_mean",
        "logprob_gap_max",
        "is_ratio_min",
        "is_ratio_mean",
        "is_ratio_max",
        "masked_frac",
        "truncated_frac",
    )
    return weights, {f"sampler/{k}": v for k, v in zip(names, values, strict=True)}
