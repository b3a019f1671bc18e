"""Importance weights: for stale tokens (1 on-policy, the ratio below the cap, the cap above
it) and for the tokens of another sampler (an inference engine)."""

from __future__ import annotations

import math

import pytest
import torch

from agentenv.trainers.off_policy import sampler_importance_weights, truncated_importance_weights


def _weights(prox, behaviour, lag, mask, cap=2.0):
    t = [torch.tensor([row], dtype=torch.float32) for row in (prox, behaviour)]
    return truncated_importance_weights(t[0], t[1], torch.tensor([lag]), torch.tensor([mask]), cap=cap)


def test_on_policy_tokens_weigh_exactly_one_even_when_the_log_probs_differ():
    # Lag 0: sampled by the learner's own version; a numerical gap between the sampler's
    # and the learner's log-probs is not off-policyness.
    w, metrics = _weights([-1.0, -2.0, -0.1], [-3.0, -0.5, -0.1], [0, 0, 0], [1, 1, 1])
    assert w.tolist() == [[1.0, 1.0, 1.0]]
    assert metrics["off_policy/stale_frac"] == 0.0 and metrics["off_policy/weight_mean"] == 1.0


def test_stale_tokens_weigh_the_ratio_truncated_at_the_cap():
    prox = [math.log(0.5), math.log(0.9), math.log(0.9)]
    behaviour = [math.log(1.0), math.log(0.3), math.log(0.6)]  # ratios 0.5, 3.0, 1.5
    w, metrics = _weights(prox, behaviour, [1, 2, 1], [1, 1, 1], cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[0.5, 2.0, 1.5]]))
    assert metrics["off_policy/truncated_frac"] == pytest.approx(1 / 3)
    assert metrics["off_policy/stale_frac"] == 1.0
    assert metrics["off_policy/lag_mean"] == pytest.approx(4 / 3)


def test_the_cap_of_one_never_lets_a_stale_token_weigh_more_than_an_on_policy_one():
    w, _ = _weights([0.0, 0.0], [-5.0, 0.0], [1, 1], [1, 1], cap=1.0)
    assert w.tolist() == [[1.0, 1.0]]


def test_off_mask_entries_weigh_one_and_padding_never_makes_nan():
    inf = float("inf")
    w, metrics = _weights([-inf, -1.0, -inf], [-inf, -2.0, 0.0], [3, 1, 5], [0, 1, 0], cap=10.0)
    assert w[0, 0] == 1.0 and w[0, 2] == 1.0 and w[0, 1] == pytest.approx(math.e)
    assert all(math.isfinite(v) for v in metrics.values())
    assert metrics["off_policy/stale_frac"] == 1.0  # of the policy tokens


def test_a_batch_with_no_policy_token_gives_neutral_metrics():
    w, metrics = _weights([-1.0], [-2.0], [1], [0])
    assert w.tolist() == [[1.0]]
    assert metrics["off_policy/weight_mean"] == 1.0 and metrics["off_policy/stale_frac"] == 0.0


def test_bad_arguments_say_what_was_expected():
    with pytest.raises(ValueError, match="cap >= 1"):
        _weights([-1.0], [-1.0], [1], [1], cap=0.5)
    with pytest.raises(ValueError, match="expected lag of shape"):
        truncated_importance_weights(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 3), torch.ones(1, 2), cap=2)


# -- the sampler/trainer mismatch (an inference engine's tokens) ----------------------------


def _sampler(prox, sampler, mask, mode, cap=2.0):
    t = [torch.tensor(rows, dtype=torch.float32) for rows in (prox, sampler)]
    return sampler_importance_weights(t[0], t[1], torch.tensor(mask), mode=mode, cap=cap)


# Row 0: token ratios 0.5, 3.0 (product 1.5); row 1: ratios 1.1 and, off the mask, e^9.
PROX = [[math.log(0.5), math.log(0.9)], [math.log(0.55), 9.0]]
SAMPLER = [[math.log(1.0), math.log(0.3)], [math.log(0.5), 0.0]]
MASK = [[1, 1], [1, 0]]


def test_token_truncation_weighs_each_token_its_ratio_capped():
    w, metrics = _sampler(PROX, SAMPLER, MASK, "token_truncate")
    torch.testing.assert_close(w, torch.tensor([[0.5, 2.0], [1.1, 1.0]]))  # off the mask: 1
    assert metrics["sampler/truncated_frac"] == pytest.approx(1 / 3)
    assert metrics["sampler/masked_frac"] == 0.0
    assert metrics["sampler/is_ratio_min"] == pytest.approx(0.5)
    assert metrics["sampler/is_ratio_max"] == pytest.approx(3.0)
    assert metrics["sampler/is_ratio_mean"] == pytest.approx((0.5 + 3.0 + 1.1) / 3)


def test_token_masking_drops_tokens_beyond_the_cap_either_way():
    w, metrics = _sampler(PROX, SAMPLER, MASK, "token_mask")
    torch.testing.assert_close(w, torch.tensor([[0.5, 0.0], [1.1, 1.0]]))
    assert metrics["sampler/masked_frac"] == pytest.approx(1 / 3)
    w, metrics = _sampler(PROX, SAMPLER, MASK, "token_mask", cap=1.5)  # 0.5 < 1/1.5: masked too
    torch.testing.assert_close(w, torch.tensor([[0.0, 0.0], [1.1, 1.0]]))
    assert metrics["sampler/masked_frac"] == pytest.approx(2 / 3)


def test_sequence_modes_weigh_a_rows_tokens_by_the_product_of_their_ratios():
    w, metrics = _sampler(PROX, SAMPLER, MASK, "sequence_truncate", cap=1.2)
    torch.testing.assert_close(w, torch.tensor([[1.2, 1.2], [1.1, 1.0]]))
    assert metrics["sampler/is_ratio_max"] == pytest.approx(1.5)  # per row, before the cap
    assert metrics["sampler/truncated_frac"] == pytest.approx(2 / 3)
    w, _ = _sampler(PROX, SAMPLER, MASK, "sequence_mask", cap=1.2)
    torch.testing.assert_close(w, torch.tensor([[0.0, 0.0], [1.1, 1.0]]))
    w, _ = _sampler(PROX, SAMPLER, MASK, "sequence_mask", cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[1.5, 1.5], [1.1, 1.0]]))


def test_a_long_row_of_small_gaps_is_masked_not_left_in_with_a_vanishing_weight():
    # 400 tokens each 0.01 nats less likely to the trainer: a sequence ratio of e^-4.
    prox, sampler = [[-1.01] * 400], [[-1.0] * 400]
    w, metrics = _sampler(prox, sampler, [[1] * 400], "sequence_mask", cap=3.0)
    assert w.unique().tolist() == [0.0] and metrics["sampler/masked_frac"] == 1.0
    assert metrics["sampler/logprob_gap_mean"] == pytest.approx(0.01, abs=1e-6)


def test_none_only_measures_the_gap():
    w, metrics = _sampler(PROX, SAMPLER, MASK, "none")
    assert w.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert metrics["sampler/logprob_gap_max"] == pytest.approx(math.log(3.0))


def test_a_huge_sequence_gap_neither_overflows_nor_gives_nan():
    w, metrics = _sampler([[0.0] * 50], [[-30.0] * 50], [[1] * 50], "sequence_truncate", cap=3.0)
    assert w.unique().tolist() == [3.0] and math.isfinite(metrics["sampler/is_ratio_max"])


@pytest.mark.parametrize(("mode", "cap"), [("token_clip", 2.0), ("token_mask", 0.5)])
def test_a_bad_mode_or_cap_is_refused(mode, cap):
    with pytest.raises(ValueError, match="expected"):
        _sampler(PROX, SAMPLER, MASK, mode, cap=cap)
