"""Loss variants on small hand-computed batches (B rows x T tokens)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from agentenv.trainers.losses import (
    LOSSES,
    LossOutput,
    cispo_loss,
    compute_loss,
    dapo_loss,
    dr_grpo_loss,
    grpo_loss,
    gspo_loss,
    kl_k3,
    overlong_penalty,
)

# Keyword arguments a variant needs beyond the common four tensors.
EXTRA: dict[str, dict[str, object]] = {"dr_grpo": {"max_len": 4}}


def leaf(values: list[list[float]]) -> Tensor:
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def t(values: list[list[float]]) -> Tensor:
    return torch.tensor(values, dtype=torch.float32)


def grad_of(out: LossOutput, logp: Tensor) -> Tensor:
    out.loss.backward()
    assert logp.grad is not None
    return logp.grad


# --- GRPO --------------------------------------------------------------------------


def test_grpo_at_ratio_one_is_minus_mean_advantage() -> None:
    # ratio = 1 everywhere, so pg_loss = -A per token.
    # row 0: A = 1 on 3 tokens -> token-mean -1; row 1: A = -0.5 on 2 tokens -> 0.5
    # sequence-mean: (-1 + 0.5) / 2 = -0.25 = -mean advantage.
    logp = leaf([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    adv = t([[1.0, 1.0, 1.0], [-0.5, -0.5, 0.0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    out = grpo_loss(logp, logp.detach(), adv, mask)
    assert out.loss.item() == pytest.approx(-0.25)
    assert out.metrics["ratio_mean"] == pytest.approx(1.0)
    assert out.metrics["approx_kl"] == pytest.approx(0.0)
    assert out.metrics["clipfrac"] == 0.0


def test_grpo_clips_and_zeroes_gradient_on_clipped_tokens() -> None:
    # eps = 0.2, one row of 4 tokens, log ratio [0.5, -0.5, 0.5, 0.1]:
    # t0: r = e^0.5 = 1.6487 > 1.2, A = +1 -> max(-1.6487, -1.2) = -1.2   clipped, grad 0
    # t1: r = e^-0.5 = 0.6065 < 0.8, A = -1 -> max(0.6065, 0.8) = 0.8     clipped, grad 0
    # t2: r = 1.6487, A = -1 -> max(1.6487, 1.2) = 1.6487 unclipped: grad -A r / 4 = 0.41218
    # t3: r = e^0.1 = 1.10517 in range, A = +1 -> -1.10517: grad -A r / 4 = -0.27629
    # loss = (-1.2 + 0.8 + 1.6487 - 1.10517) / 4 = 0.035883
    old = t([[-1.0, -2.0, -0.5, -1.5]])
    log_ratio = t([[0.5, -0.5, 0.5, 0.1]])
    logp = (old + log_ratio).requires_grad_(True)
    adv = t([[1.0, -1.0, -1.0, 1.0]])
    out = grpo_loss(logp, old, adv, torch.ones(1, 4), eps=0.2)

    e5, e1 = math.exp(0.5), math.exp(0.1)
    assert out.loss.item() == pytest.approx((-1.2 + 0.8 + e5 - e1) / 4, abs=1e-6)
    grad = grad_of(out, logp)[0]
    assert grad[0].item() == 0.0 and grad[1].item() == 0.0
    assert grad[2].item() == pytest.approx(e5 / 4, rel=1e-5)
    assert grad[3].item() == pytest.approx(-e1 / 4, rel=1e-5)
    # ratio outside [0.8, 1.2] on t0, t1, t2
    assert out.metrics["clipfrac"] == pytest.approx(0.75)
    assert out.metrics["ratio_mean"] == pytest.approx((2 * e5 + math.exp(-0.5) + e1) / 4, rel=1e-6)


def test_approx_kl_is_k3_between_old_and_new() -> None:
    # log r = 0.1: (r - 1) - log r = (1.105171 - 1) - 0.1 = 0.0051709
    old = t([[-1.0]])
    logp = (old + 0.1).requires_grad_(True)
    out = grpo_loss(logp, old, t([[1.0]]), t([[1]]))
    assert out.metrics["approx_kl"] == pytest.approx(math.exp(0.1) - 1 - 0.1, rel=1e-4)


# --- aggregation -------------------------------------------------------------------


def unequal_lengths() -> tuple[Tensor, Tensor, Tensor]:
    # ratio 1, so pg_loss = -A: row 0 has one token with A = +1 (loss -1),
    # row 1 has three tokens with A = -1 (loss +1 each).
    logp = leaf([[-1.0, 0.0, 0.0], [-1.0, -1.0, -1.0]])
    adv = t([[1.0, 0.0, 0.0], [-1.0, -1.0, -1.0]])
    mask = t([[1, 0, 0], [1, 1, 1]])
    return logp, adv, mask


def test_grpo_is_sequence_mean_of_token_means() -> None:
    logp, adv, mask = unequal_lengths()
    # (-1/1 + 3/3) / 2 = 0
    assert grpo_loss(logp, logp.detach(), adv, mask).loss.item() == pytest.approx(0.0)


def test_dapo_is_token_mean_over_the_batch() -> None:
    logp, adv, mask = unequal_lengths()
    # (-1 + 1 + 1 + 1) / 4 tokens = 0.5
    assert dapo_loss(logp, logp.detach(), adv, mask).loss.item() == pytest.approx(0.5)


@pytest.mark.parametrize("name", ["dapo", "cispo"])
def test_a_token_mean_loss_made_episode_balanced_is_the_sequence_mean_of_token_means(name: str) -> None:
    logp, adv, mask = unequal_lengths()
    # like grpo: (-1/1 + 3/3) / 2 = 0, not the token-mean 0.5
    out = LOSSES[name](logp, logp.detach(), adv, mask, per="sequence")
    assert out.loss.item() == pytest.approx(0.0)
    with pytest.raises(ValueError, match="per must be 'token' or 'sequence'"):
        LOSSES[name](logp, logp.detach(), adv, mask, per="episode")


def test_dr_grpo_divides_by_sequences_times_max_len() -> None:
    logp, adv, mask = unequal_lengths()
    # (-1 + 3) / (2 sequences * max_len 4) = 0.25
    out = dr_grpo_loss(logp, logp.detach(), adv, mask, max_len=4)
    assert out.loss.item() == pytest.approx(0.25)
    # and the per-token gradient does not depend on the row's length: -A / 8 everywhere
    grad = grad_of(out, logp)
    torch.testing.assert_close(grad, t([[-1 / 8, 0.0, 0.0], [1 / 8, 1 / 8, 1 / 8]]))


def test_dr_grpo_rejects_a_non_positive_max_len() -> None:
    logp, adv, mask = unequal_lengths()
    with pytest.raises(ValueError, match="max_len >= 1"):
        dr_grpo_loss(logp, logp.detach(), adv, mask, max_len=0)


# --- DAPO clip-higher --------------------------------------------------------------


def test_dapo_clip_higher_keeps_gradient_that_grpo_clips() -> None:
    # t0: r = e^0.2 = 1.2214, A = +1: above GRPO's 1.2 (clipped) but below DAPO's 1.28
    # t1: r = e^-0.25 = 0.7788, A = -1: below 0.8 for both (eps_low = 0.2), clipped
    old = t([[-1.0, -1.0]])
    logp = (old + t([[0.2, -0.25]])).requires_grad_(True)
    adv = t([[1.0, -1.0]])
    mask = torch.ones(1, 2)

    g_grpo = grad_of(grpo_loss(logp, old, adv, mask, eps=0.2), logp)[0].clone()
    logp.grad = None
    out = dapo_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.28)
    g_dapo = grad_of(out, logp)[0]

    assert g_grpo.tolist() == [0.0, 0.0]
    assert g_dapo[0].item() == pytest.approx(-math.exp(0.2) / 2, rel=1e-5)  # -A r / N
    assert g_dapo[1].item() == 0.0
    # loss = (-1.2214 + 0.8) / 2
    assert out.loss.item() == pytest.approx((-math.exp(0.2) + 0.8) / 2, rel=1e-5)
    assert out.metrics["clipfrac"] == pytest.approx(0.5)  # only t1 is outside [0.8, 1.28]


# --- GSPO --------------------------------------------------------------------------


def test_gspo_uses_one_clipped_ratio_per_sequence() -> None:
    # row 0: log r = [1e-4, 2e-4, 3e-4] -> mean 2e-4 -> s = e^2e-4 = 1.0002, inside
    #        [1 - 3e-4, 1 + 4e-4]; A = 2 -> -2 * 1.0002; grad per token -A s / 3
    # row 1: log r = [3e-3, 3e-3, pad] -> s = e^3e-3 = 1.0030 > 1.0004, A = +1
    #        -> max(-1.0030, -1.0004) = -1.0004, clipped: grad 0
    # loss = (-2 * 1.0002 - 1.0004) / 2
    old = t([[-1.0, -1.0, -1.0], [-2.0, -2.0, 0.0]])
    logp = (old + t([[1e-4, 2e-4, 3e-4], [3e-3, 3e-3, 0.0]])).requires_grad_(True)
    adv = t([[2.0, 2.0, 2.0], [1.0, 1.0, 0.0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    out = gspo_loss(logp, old, adv, mask)

    s0, s1 = math.exp(2e-4), math.exp(3e-3)
    assert out.loss.item() == pytest.approx((-2 * s0 - (1 + 4e-4)) / 2, abs=1e-5)
    grad = grad_of(out, logp)
    assert grad[0].tolist() == pytest.approx([-2 * s0 / 3 / 2] * 3, rel=1e-5)  # / 2 sequences
    assert grad[1].tolist() == [0.0, 0.0, 0.0]
    assert out.metrics["clipfrac"] == pytest.approx(0.5)  # one of two sequences
    assert out.metrics["ratio_mean"] == pytest.approx((s0 + s1) / 2, rel=1e-5)


def test_gspo_sequence_advantage_is_the_masked_mean_of_token_advantages() -> None:
    # per-turn advantages [1, 3] on the masked tokens -> A = 2; ratio 1 -> loss -2
    logp = leaf([[-1.0, -1.0, -1.0]])
    out = gspo_loss(logp, logp.detach(), t([[1.0, 3.0, 100.0]]), t([[1, 1, 0]]))
    assert out.loss.item() == pytest.approx(-2.0)


# --- CISPO -------------------------------------------------------------------------


def test_cispo_weight_is_clipped_and_detached() -> None:
    # log r = [0.5, 0, -0.5], A = [1, 1, -1], eps_high = 0.28, no lower bound:
    # w = [min(1.6487, 1.28), 1, 0.6065] = [1.28, 1, 0.6065]
    # loss = sum(-w A logp) / 3; d/dlogp = -w A / 3 exactly (w is a constant),
    # so t0 keeps a gradient although its ratio is past the bound.
    logp = leaf([[-1.0, -2.0, -0.5]])
    old = logp.detach() - t([[0.5, 0.0, -0.5]])
    adv = t([[1.0, 1.0, -1.0]])
    out = cispo_loss(logp, old, adv, torch.ones(1, 3))

    w = [1.28, 1.0, math.exp(-0.5)]
    a = [1.0, 1.0, -1.0]
    lp = [-1.0, -2.0, -0.5]
    expected = sum(-wi * ai * li for wi, ai, li in zip(w, a, lp, strict=True)) / 3
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)
    assert grad_of(out, logp)[0].tolist() == pytest.approx(
        [-wi * ai / 3 for wi, ai in zip(w, a, strict=True)], rel=1e-5
    )
    assert out.metrics["clipfrac"] == pytest.approx(1 / 3)  # only the upper bound exists


def test_cispo_lower_bound_when_eps_low_is_given() -> None:
    # r = e^-0.5 = 0.6065 < 0.8 -> w = 0.8; grad = -w A / 1 = 0.8 for A = -1
    logp = leaf([[-1.0]])
    out = cispo_loss(logp, logp.detach() + 0.5, t([[-1.0]]), t([[1]]), eps_low=0.2)
    assert grad_of(out, logp).item() == pytest.approx(0.8)


# --- KL to the reference -----------------------------------------------------------


def test_kl_k3_is_zero_at_the_reference_and_positive_elsewhere() -> None:
    logp = t([[-1.0, -2.0, 5.0]])
    mask = t([[1, 1, 0]])
    assert kl_k3(logp, logp.clone(), mask).item() == 0.0
    # d = ref - logp = [0.5, -0.5]: (e^0.5 - 0.5 - 1 + e^-0.5 + 0.5 - 1) / 2 = 0.127626
    ref = t([[-0.5, -2.5, 0.0]])
    kl = kl_k3(logp, ref, mask).item()
    assert kl > 0
    assert kl == pytest.approx((math.exp(0.5) + math.exp(-0.5) - 2) / 2, rel=1e-6)


def test_kl_coef_adds_the_k3_term_to_the_loss() -> None:
    # ratio 1, A = 1 -> pg_loss = -1; kl as above for d = [0.5, -0.5]
    logp = leaf([[-1.0, -2.0]])
    ref = t([[-0.5, -2.5]])
    adv = torch.ones(1, 2)
    kl = (math.exp(0.5) + math.exp(-0.5) - 2) / 2
    out = grpo_loss(logp, logp.detach(), adv, torch.ones(1, 2), ref_logp=ref, kl_coef=0.1)
    assert out.loss.item() == pytest.approx(-1.0 + 0.1 * kl, rel=1e-6)
    assert out.metrics["kl_ref"] == pytest.approx(kl, rel=1e-6)
    assert out.metrics["pg_loss"] == pytest.approx(-1.0)


def test_kl_coef_without_ref_is_an_error() -> None:
    logp = leaf([[-1.0]])
    with pytest.raises(ValueError, match="needs ref_logp"):
        grpo_loss(logp, logp.detach(), t([[1.0]]), t([[1]]), kl_coef=0.1)


# --- every variant -----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_dropped_rows_and_padding_contribute_nothing_and_never_nan(name: str) -> None:
    nan, inf = float("nan"), float("inf")
    logp = leaf([[-1.0, -0.5, -inf], [-0.7, -1.2, -0.3]])
    old = t([[-1.1, -0.45, -inf], [-0.6, -1.0, -0.3]])
    adv = t([[1.0, 1.0, nan], [-0.5, -0.5, -0.5]])
    mask = t([[1, 1, 0], [1, 1, 1]])
    ref = t([[-1.0, -0.6, -inf], [-0.7, -1.1, -0.2]])
    kw = {"ref_logp": ref, "kl_coef": 0.05, **EXTRA.get(name, {})}
    # a dropped row (an infra failure) full of garbage, appended to the batch
    logp_x = torch.cat([logp.detach(), t([[nan, -inf, inf]])]).requires_grad_(True)
    old_x = torch.cat([old, t([[-inf, nan, 0.0]])])
    adv_x = torch.cat([adv, t([[nan, 1e9, -inf]])])
    mask_x = torch.cat([mask, t([[0, 0, 0]])])
    ref_x = torch.cat([ref, t([[nan, nan, nan]])])

    base = LOSSES[name](logp, old, adv, mask, **kw)
    kw_x = {**kw, "ref_logp": ref_x}
    more = LOSSES[name](logp_x, old_x, adv_x, mask_x, **kw_x)

    assert more.loss.item() == pytest.approx(base.loss.item(), rel=1e-6)
    assert more.metrics == pytest.approx(base.metrics, rel=1e-6)
    grad = grad_of(more, logp_x)
    assert torch.isfinite(grad).all()
    assert (grad[mask_x == 0] == 0).all()
    torch.testing.assert_close(grad_of(base, logp), grad[:2])


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_all_masked_batch_gives_zero_not_nan(name: str) -> None:
    logp = leaf([[-1.0, -2.0]])
    out = LOSSES[name](logp, logp.detach(), torch.ones(1, 2), torch.zeros(1, 2), **EXTRA.get(name, {}))
    assert out.loss.item() == 0.0
    assert all(math.isfinite(v) for v in out.metrics.values())
    assert grad_of(out, logp).tolist() == [[0.0, 0.0]]


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_variant_reports_the_diagnostics(name: str) -> None:
    logp = leaf([[-1.0, -2.0]])
    out = compute_loss(
        name,
        logp=logp,
        old_logp=logp.detach() - 0.1,
        advantages=torch.ones(1, 2),
        mask=torch.ones(1, 2, dtype=torch.bool),
        ref_logp=logp.detach(),
        **EXTRA.get(name, {}),
    )
    assert {"pg_loss", "clipfrac", "approx_kl", "ratio_mean", "kl_ref"} <= out.metrics.keys()
    assert out.loss.dim() == 0
    assert all(isinstance(v, float) for v in out.metrics.values())


def test_shape_mismatch_says_what_was_expected() -> None:
    logp = leaf([[-1.0, -2.0]])
    with pytest.raises(ValueError, match=r"expected mask of shape \(1, 2\) like logp, got \(1, 3\)"):
        grpo_loss(logp, logp.detach(), torch.ones(1, 2), torch.ones(1, 3))


def test_unknown_loss_name_suggests_the_closest() -> None:
    with pytest.raises(ValueError, match=r"loss must be one of .*, got 'grpoo'\. Did you mean 'grpo'"):
        compute_loss("grpoo")
    with pytest.raises(ValueError, match="loss must be one of 'grpo', 'dapo', 'dr_grpo', 'gspo', 'cispo'"):
        compute_loss("ppo_with_extras")


# --- overlong shaping --------------------------------------------------------------


def test_overlong_penalty_in_its_three_regimes() -> None:
    # max_len 100, cache 20 -> expected length 80:
    # L <= 80: 0; 80 < L <= 100: (80 - L) / 20; L > 100: -1
    lengths = torch.tensor([50, 80, 90, 95, 100, 101, 500])
    got = overlong_penalty(lengths, max_len=100, cache_len=20)
    assert got.tolist() == pytest.approx([0.0, 0.0, -0.5, -0.75, -1.0, -1.0, -1.0])
    assert got.dtype == torch.float32


def test_overlong_penalty_rejects_a_bad_cache_len() -> None:
    with pytest.raises(ValueError, match="0 < cache_len <= max_len"):
        overlong_penalty(torch.tensor([1]), max_len=10, cache_len=0)
