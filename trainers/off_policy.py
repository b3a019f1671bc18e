"""Truncated importance weights for tokens sampled by older weights (asynchronous rollouts).

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

__all__ = ["truncated_importance_weights"]


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
