"""Policy-gradient losses for multi-turn GRPO and its variants, as pure functions.

Every loss takes per-token tensors of shape ``[B, T]`` (one row per trained sequence):

- ``logp``: log-probs of the sampled tokens under the policy being updated (has grad);
- ``old_logp``: the same tokens' log-probs at generation time (treated as a constant);
- ``advantages``: one advantage per token (the caller broadcasts per-turn advantages);
- ``mask``: nonzero only on policy-generated tokens. Prompt, observation and padding
  tokens, and whole rows the caller drops (infrastructure failures), are 0.

and returns a :class:`LossOutput`. Variants differ only in their clipping and in how
per-token terms are averaged, so each is one small function. Each is declared in
`agentenv.trainers.modes.LOSS_MODES` (its name, how it averages, its clip defaults);
:data:`LOSSES` maps those names to the functions here.

Values under ``mask == 0`` are never read, so padding may hold anything (even
``-inf``), and a row with no masked token adds nothing to the loss or its denominator:
the loss of a batch equals the loss of the same batch with that row removed.
The arithmetic is done in float32 whatever the input dtype, because bf16 ratios near
1 would round away the clipping decisions.

Left out on purpose: building sequences and masks, computing log-probs from a model,
advantages (see :mod:`agentenv.trainers.advantages`), and the optimiser step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from agentenv.trainers.modes import LOSS_MODES, check_mode

__all__ = [
    "LOSSES",
    "LossOutput",
    "batch_share",
    "cispo_loss",
    "compute_loss",
    "dapo_loss",
    "dr_grpo_loss",
    "grpo_loss",
    "gspo_loss",
    "kl_k3",
    "loss_kwargs",
    "overlong_penalty",
]


@dataclass(frozen=True)
class LossOutput:
    """What every loss function returns."""

    loss: Tensor
    """Scalar to call ``.backward()`` on: the policy loss plus ``kl_coef * kl_ref``."""
    metrics: dict[str, float]
    """Detached diagnostics: ``pg_loss`` (policy loss without the KL term),
    ``clipfrac`` (share of masked tokens, or of sequences for GSPO, whose ratio lies
    outside the clip range), ``approx_kl`` (k3 estimate of KL(old || new)),
    ``ratio_mean``, and ``kl_ref`` when a ``ref_logp`` was given."""


# --- shared pieces -----------------------------------------------------------------


def _paper(loss: str, name: str) -> float:
    """The default of clip argument ``name`` of ``loss``: its row in `LOSS_MODES`."""
    value = LOSS_MODES[loss].clip[name]
    if value is None:
        raise TypeError(f"LOSS_MODES[{loss!r}].clip[{name!r}] is None; that loss needs a number there")
    return value


def _check_inputs(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    ref_logp: Tensor | None,
    kl_coef: float,
) -> None:
    if logp.dim() != 2:
        raise ValueError(f"expected logp of shape [B, T], got shape {tuple(logp.shape)}")
    others = {"old_logp": old_logp, "advantages": advantages, "mask": mask, "ref_logp": ref_logp}
    for name, tensor in others.items():
        if tensor is not None and tensor.shape != logp.shape:
            raise ValueError(f"expected {name} of shape {tuple(logp.shape)} like logp, got {tuple(tensor.shape)}")
    if kl_coef < 0:
        raise ValueError(f"expected kl_coef >= 0, got {kl_coef}")
    if kl_coef != 0 and ref_logp is None:
        raise ValueError(f"kl_coef={kl_coef} needs ref_logp; pass ref_logp or set kl_coef=0.0")


def _check_eps(**eps: float | None) -> None:
    for name, value in eps.items():
        if value is not None and value < 0:
            raise ValueError(f"expected {name} >= 0, got {value}")


def _prepare(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Return (bool mask, log ratio, advantages) in float32 with unmasked entries 0.

    Zeroing with ``where`` before any ``exp`` keeps padding such as ``-inf - -inf``
    from turning into NaN in the forward pass or the gradient.
    """
    m = mask != 0
    log_ratio = torch.where(m, logp.float() - old_logp.detach().float(), 0.0)
    adv = torch.where(m, advantages.detach().float(), 0.0)
    return m, log_ratio, adv


def _token_mean(x: Tensor, m: Tensor) -> Tensor:
    """sum(x * mask) / sum(mask); 0 (not 0/0) when nothing is masked."""
    return torch.where(m, x, 0.0).sum() / m.sum().clamp(min=1)


def _sequence_mean(x: Tensor, m: Tensor) -> Tensor:
    """Mean over rows with >= 1 masked token of that row's masked token-mean."""
    n_tok = m.sum(-1)
    per_seq = torch.where(m, x, 0.0).sum(-1) / n_tok.clamp(min=1)  # empty rows give 0
    return per_seq.sum() / (n_tok > 0).sum().clamp(min=1)


def _average(x: Tensor, m: Tensor, per: str) -> Tensor:
    """`_token_mean` (``per="token"``) or `_sequence_mean` (``per="sequence"``)."""
    if per == "token":
        return _token_mean(x, m)
    if per == "sequence":
        return _sequence_mean(x, m)
    raise ValueError(f"per must be 'token' or 'sequence', got {per!r}")


def _clipped_token_loss(log_ratio: Tensor, adv: Tensor, low: float | None, high: float) -> Tensor:
    """PPO-clip loss per token (Schulman et al. 2017, eq. 7).

    pg_loss = max(-A * r, -A * clip(r, low, high)): the pessimistic bound, whose
    gradient is zero once the ratio has moved past the bound in the advantage's
    direction.
    """
    ratio = log_ratio.exp()
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * torch.clamp(ratio, low, high)
    return torch.max(pg_loss1, pg_loss2)


def _ratio_metrics(log_ratio: Tensor, m: Tensor, low: float | None, high: float) -> dict[str, Tensor]:
    with torch.no_grad():
        ratio = log_ratio.exp()
        # k3 estimator (r - 1) - log r: unbiased for KL(old || new) and never negative,
        # unlike the plain -log r (Schulman 2020, "Approximating KL divergence").
        approx_kl = _token_mean((ratio - 1) - log_ratio, m)
        outside = ratio > high
        if low is not None:
            outside = outside | (ratio < low)
        return {
            "clipfrac": _token_mean(outside.float(), m),
            "approx_kl": approx_kl,
            "ratio_mean": _token_mean(ratio, m),
        }


def _finish(
    pg_loss: Tensor,
    metrics: dict[str, Tensor],
    logp: Tensor,
    m: Tensor,
    ref_logp: Tensor | None,
    kl_coef: float,
    per: str = "token",
) -> LossOutput:
    """The loss with its KL term, averaged ``per`` the loss's own unit (`kl_k3`), so that
    splitting a batch into micro-batches weighted by `batch_share` changes neither."""
    loss = pg_loss
    metrics = {"pg_loss": pg_loss.detach(), **metrics}
    if ref_logp is not None:
        kl = kl_k3(logp, ref_logp, m, per=per)
        metrics["kl_ref"] = kl.detach()
        if kl_coef != 0:
            loss = loss + kl_coef * kl
    # One device-to-host copy for all metrics instead of one sync per .item().
    values = torch.stack([v.float() for v in metrics.values()]).tolist()
    return LossOutput(loss=loss, metrics=dict(zip(metrics, values, strict=False)))


# --- KL to a reference policy ------------------------------------------------------


def kl_k3(logp: Tensor, ref_logp: Tensor, mask: Tensor, *, per: str = "token") -> Tensor:
    """k3 estimate of KL(pi_theta || pi_ref): the token-mean over masked tokens, or with
    ``per="sequence"`` the mean over rows of each row's token-mean (how grpo, dr_grpo
    and gspo average, so their KL term weighs each sequence as their loss does).

    DeepSeekMath (Shao et al. 2024), with d = ref_logp - logp:
    ``k3 = exp(d) - d - 1``; >= 0 for every token and 0 where the policies agree.
    Differentiable in ``logp``; ``ref_logp`` is treated as a constant.
    """
    m = mask != 0
    d = torch.where(m, ref_logp.detach().float() - logp.float(), 0.0)
    return _average(d.exp() - d - 1, m, per)


# --- loss variants -----------------------------------------------------------------


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps: float = _paper("grpo", "eps"),
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
) -> LossOutput:
    """GRPO (Shao et al. 2024, DeepSeekMath): PPO-clip, sequence-mean of token-means.

    loss = 1/G sum_i 1/|o_i| sum_t max(-A_it r_it, -A_it clip(r_it, 1-eps, 1+eps)),
    r_it = exp(logp - old_logp), over the G rows with at least one masked token.
    Dividing by |o_i| makes every token of a long answer weigh less than one of a
    short answer; :func:`dapo_loss` and :func:`dr_grpo_loss` remove that bias.
    """
    _check_inputs(logp, old_logp, advantages, mask, ref_logp, kl_coef)
    _check_eps(eps=eps)
    m, log_ratio, adv = _prepare(logp, old_logp, advantages, mask)
    pg_loss = _clipped_token_loss(log_ratio, adv, 1 - eps, 1 + eps)
    metrics = _ratio_metrics(log_ratio, m, 1 - eps, 1 + eps)
    return _finish(_sequence_mean(pg_loss, m), metrics, logp, m, ref_logp, kl_coef, per="sequence")


def dapo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = _paper("dapo", "eps_low"),
    eps_high: float = _paper("dapo", "eps_high"),
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    per: str = "token",
) -> LossOutput:
    """DAPO (Yu et al. 2025): clip-higher and token-level mean.

    loss = sum_{i,t} max(-A r, -A clip(r, 1-eps_low, 1+eps_high)) / sum_i |o_i|.
    The wider upper bound lets low-probability tokens with positive advantage grow
    (against entropy collapse); the token-mean weighs every token of the batch equally.
    ``per="sequence"`` averages each sequence's token-mean instead (episode-balanced:
    see `GRPOConfig.episode_balanced`).
    """
    _check_inputs(logp, old_logp, advantages, mask, ref_logp, kl_coef)
    _check_eps(eps_low=eps_low, eps_high=eps_high)
    m, log_ratio, adv = _prepare(logp, old_logp, advantages, mask)
    pg_loss = _clipped_token_loss(log_ratio, adv, 1 - eps_low, 1 + eps_high)
    metrics = _ratio_metrics(log_ratio, m, 1 - eps_low, 1 + eps_high)
    return _finish(_average(pg_loss, m, per), metrics, logp, m, ref_logp, kl_coef, per=per)


def dr_grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    max_len: int,
    eps: float = _paper("dr_grpo", "eps"),
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
) -> LossOutput:
    """Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): no length norm.

    loss = sum_{i,t} max(-A r, -A clip(r, 1-eps, 1+eps)) / (G * max_len), G the
    number of rows with at least one masked token. A constant denominator means a
    wrong answer is not penalised less per token for being long.
    ``max_len`` is the generation budget in tokens, the same for every step.
    """
    _check_inputs(logp, old_logp, advantages, mask, ref_logp, kl_coef)
    _check_eps(eps=eps)
    if max_len < 1:
        raise ValueError(f"expected max_len >= 1 (the generation budget in tokens), got {max_len}")
    m, log_ratio, adv = _prepare(logp, old_logp, advantages, mask)
    pg_loss = _clipped_token_loss(log_ratio, adv, 1 - eps, 1 + eps)
    n_seq = (m.sum(-1) > 0).sum().clamp(min=1)
    loss = torch.where(m, pg_loss, 0.0).sum() / (n_seq * max_len)
    metrics = _ratio_metrics(log_ratio, m, 1 - eps, 1 + eps)
    return _finish(loss, metrics, logp, m, ref_logp, kl_coef, per="sequence")


def gspo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = _paper("gspo", "eps_low"),
    eps_high: float = _paper("gspo", "eps_high"),
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
) -> LossOutput:
    """GSPO (Zheng et al. 2025): one clipped importance ratio per sequence.

    s_i = exp(1/|o_i| sum_t (logp - old_logp)), the length-normalised sequence ratio;
    A_i = masked mean of the row's token advantages (constant per row when the caller
    broadcast one task advantage; the mean of per-turn advantages otherwise);
    loss = 1/G sum_i max(-A_i s_i, -A_i clip(s_i, 1-eps_low, 1+eps_high)).
    The clip range is tiny because s_i is a geometric mean and moves little.
    Metrics: ``clipfrac`` and ``ratio_mean`` are over sequences, ``approx_kl`` over tokens.
    """
    _check_inputs(logp, old_logp, advantages, mask, ref_logp, kl_coef)
    _check_eps(eps_low=eps_low, eps_high=eps_high)
    m, log_ratio, adv = _prepare(logp, old_logp, advantages, mask)
    n_tok = m.sum(-1)
    valid = n_tok > 0
    seq_log_ratio = log_ratio.sum(-1) / n_tok.clamp(min=1)
    seq_adv = adv.sum(-1) / n_tok.clamp(min=1)
    seq_ratio = seq_log_ratio.exp()
    pg_loss1 = -seq_adv * seq_ratio
    pg_loss2 = -seq_adv * torch.clamp(seq_ratio, 1 - eps_low, 1 + eps_high)
    pg_loss = torch.where(valid, torch.max(pg_loss1, pg_loss2), 0.0)
    loss = pg_loss.sum() / valid.sum().clamp(min=1)

    metrics = _ratio_metrics(log_ratio, m, 1 - eps_low, 1 + eps_high)
    with torch.no_grad():
        seq_m = valid.unsqueeze(-1)
        outside = (seq_ratio > 1 + eps_high) | (seq_ratio < 1 - eps_low)
        metrics["clipfrac"] = _token_mean(outside.float().unsqueeze(-1), seq_m)
        metrics["ratio_mean"] = _token_mean(seq_ratio.unsqueeze(-1), seq_m)
    return _finish(loss, metrics, logp, m, ref_logp, kl_coef, per="sequence")


def cispo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float | None = LOSS_MODES["cispo"].clip["eps_low"],
    eps_high: float = _paper("cispo", "eps_high"),
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    per: str = "token",
) -> LossOutput:
    """CISPO (MiniMax-M1, MiniMax 2025): clip the importance weight, not the update.

    w = sg(clip(r, 1-eps_low, 1+eps_high)), no lower bound when ``eps_low`` is None
    (as in the paper); loss = sum_{i,t} -w A logp / sum_i |o_i|.
    Because w is detached, every token keeps a gradient -w A / N; PPO-clip would
    zero it for tokens past the bound, and those are often the rare "fork" tokens
    of long reasoning. ``per="sequence"``: episode-balanced, as in `dapo_loss`.
    """
    _check_inputs(logp, old_logp, advantages, mask, ref_logp, kl_coef)
    _check_eps(eps_low=eps_low, eps_high=eps_high)
    m, log_ratio, adv = _prepare(logp, old_logp, advantages, mask)
    low = None if eps_low is None else 1 - eps_low
    weight = torch.clamp(log_ratio.exp(), low, 1 + eps_high).detach()
    pg_loss = -weight * adv * torch.where(m, logp.float(), 0.0)
    metrics = _ratio_metrics(log_ratio, m, low, 1 + eps_high)
    return _finish(_average(pg_loss, m, per), metrics, logp, m, ref_logp, kl_coef, per=per)


# --- registry ----------------------------------------------------------------------

LOSSES: dict[str, Callable[..., LossOutput]] = {name: globals()[f"{name}_loss"] for name in LOSS_MODES}
"""Loss functions by the name a config uses: ``<name>_loss`` for each row of `LOSS_MODES`."""


def compute_loss(name: str, **kwargs: object) -> LossOutput:
    """Call the loss registered as ``name`` in :data:`LOSSES` with ``kwargs``."""
    return LOSSES[check_mode("loss", name, LOSSES)](**kwargs)


def loss_kwargs(
    name: str, *, eps_low: float | None, eps_high: float | None, max_len: int, episode_balanced: bool = False
) -> dict[str, Any]:
    """The keyword arguments a config gives loss ``name`` besides the tensors.

    Its clip defaults from `LOSS_MODES`, with ``eps_low`` and ``eps_high`` where they
    are set (a loss that clips both ways with one ``eps`` takes ``eps_low``),
    ``max_len`` for a loss that divides by it, and ``per="sequence"`` for a
    token-mean loss made ``episode_balanced``.
    """
    mode = LOSS_MODES[check_mode("loss", name, LOSS_MODES)]
    kwargs: dict[str, Any] = dict(mode.clip)
    if "eps" in kwargs:
        kwargs["eps"] = eps_low if eps_low is not None else kwargs["eps"]
    else:
        if eps_low is not None:
            kwargs["eps_low"] = eps_low
        if eps_high is not None:
            kwargs["eps_high"] = eps_high
    if mode.needs_max_len:
        kwargs["max_len"] = max_len
    if episode_balanced and mode.averaging == "token":
        kwargs["per"] = "sequence"
    return kwargs


def batch_share(name: str, mask: Tensor, *, episode_balanced: bool = False) -> float:
    """How much a micro-batch counts in loss ``name``'s average over the whole batch:
    its policy tokens for a token-averaged loss, its rows with any policy token
    otherwise (`LossMode.averaging`, or rows when ``episode_balanced``). Scaling each
    micro-batch's loss by its share of the total makes accumulated gradients equal
    those of the whole batch at once."""
    m = mask != 0
    if LOSS_MODES[check_mode("loss", name, LOSS_MODES)].averaging == "token" and not episode_balanced:
        return float(m.sum())
    return float((m.sum(-1) > 0).sum())


# --- reward shaping ----------------------------------------------------------------


def overlong_penalty(lengths: Tensor, max_len: int, cache_len: int) -> Tensor:
    """DAPO soft overlong punishment (Yu et al. 2025, sec. 3.4), added to the reward.

    With L a response length and L_exp = max_len - cache_len:
    0 if L <= L_exp; (L_exp - L) / cache_len if L_exp < L <= max_len (from 0 down
    to -1 linearly); -1 if L > max_len. Returns a float tensor shaped like ``lengths``.
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"expected 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    expected = max_len - cache_len
    lengths = lengths.float()
    ramp = (expected - lengths) / cache_len
    penalty = torch.where(lengths <= expected, 0.0, ramp)
    return torch.where(lengths > max_len, -1.0, penalty)
