"""Truncated importance weights for stale tokens: 1 on-policy, the ratio below the cap, the cap above it."""

from __future__ import annotations

import math

import pytest
import torch

from agentenv.trainers.off_policy import truncated_importance_weights


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
