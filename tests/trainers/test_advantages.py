"""Task- and step-level advantages on small hand-computed batches."""

from __future__ import annotations

import math

import pytest

from agentenv.trainers.advantages import (
    anchor_state_advantages,
    combine,
    discounted_returns,
    group_advantages,
    informative_mask,
    per_turn_advantages,
    zero_variance_groups,
)

# --- task level --------------------------------------------------------------------


def test_grpo_std_mode_divides_by_the_population_std() -> None:
    # mean 0.5, population std 0.5 (not the sample std 0.577) -> (r - 0.5) / 0.5
    adv = group_advantages([1.0, 0.0, 0.0, 1.0], ["g"] * 4)
    assert adv == pytest.approx([1.0, -1.0, -1.0, 1.0], rel=1e-5)


def test_none_mode_only_subtracts_the_group_mean() -> None:
    adv = group_advantages([1.0, 0.0, 0.0, 1.0], ["g"] * 4, mode="none")
    assert adv == pytest.approx([0.5, -0.5, -0.5, 0.5])


def test_batch_std_mode_divides_by_the_std_of_the_whole_batch() -> None:
    # batch [1, 0, 1, 1]: mean 0.75, population std sqrt(0.75 / 4) = 0.4330127
    # group a [1, 0] -> +-0.5 / 0.4330127 = +-1.1547; group b [1, 1] -> 0
    adv = group_advantages([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"], mode="batch_std")
    assert adv == pytest.approx([0.5 / math.sqrt(0.1875), -0.5 / math.sqrt(0.1875), 0.0, 0.0], rel=1e-5)
    # whereas "std" uses group a's own std 0.5
    assert group_advantages([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"]) == pytest.approx(
        [1.0, -1.0, 0.0, 0.0], rel=1e-5
    )


def test_groups_are_independent_and_a_singleton_gets_zero() -> None:
    # group 0 [3, 1] -> mean 2, std 1 -> [1, -1]; group 1 has one member -> 0
    adv = group_advantages([3.0, 7.0, 1.0], [0, 1, 0])
    assert adv == pytest.approx([1.0, 0.0, -1.0], rel=1e-5)


def test_invalid_trajectories_are_left_out_and_get_zero() -> None:
    # the infra failure (reward 5) would shift the mean; without it the group is [1, 0, 0, 1]
    adv = group_advantages([1.0, 0.0, 5.0, 0.0, 1.0], ["g"] * 5, mode="none", valid=[True, True, False, True, True])
    assert adv == pytest.approx([0.5, -0.5, 0.0, -0.5, 0.5])
    # a group left with one valid member has nothing to compare against
    assert group_advantages([1.0, 0.0], ["g", "g"], valid=[True, False]) == [0.0, 0.0]


def test_unknown_mode_suggests_the_closest() -> None:
    with pytest.raises(ValueError, match=r"got 'stdd'.*Did you mean 'std'"):
        group_advantages([1.0], ["g"], mode="stdd")  # type: ignore[arg-type]


def test_length_mismatch_says_what_was_expected() -> None:
    with pytest.raises(ValueError, match="expected group_ids of length 2"):
        group_advantages([1.0, 0.0], ["g"])


# --- dynamic sampling --------------------------------------------------------------


def test_zero_variance_groups_and_informative_mask() -> None:
    rewards = [1.0, 1.0, 0.0, 1.0, 0.5, 0.5]
    groups = ["a", "a", "b", "b", "c", "c"]
    assert zero_variance_groups(rewards, groups) == {"a", "c"}
    assert informative_mask(rewards, groups) == [False, False, True, True, False, False]


def test_an_invalid_trajectory_does_not_make_a_group_informative() -> None:
    # without the infra failure, group b is [0, 0]: no signal
    rewards = [0.0, 0.0, 1.0]
    groups = ["b", "b", "b"]
    valid = [True, True, False]
    assert zero_variance_groups(rewards, groups, valid=valid) == {"b"}
    assert informative_mask(rewards, groups, valid=valid) == [False, False, False]


# --- returns -----------------------------------------------------------------------


def test_discounted_returns() -> None:
    # G_2 = 1, G_1 = 0 + 0.9 * 1, G_0 = 0 + 0.9 * 0.9
    assert discounted_returns([0.0, 0.0, 1.0], 0.9) == pytest.approx([0.81, 0.9, 1.0])
    # G_1 = 2, G_0 = 1 + 0.5 * 2
    assert discounted_returns([1.0, 2.0], 0.5) == pytest.approx([2.0, 2.0])
    assert discounted_returns([], 0.9) == []
    with pytest.raises(ValueError, match="0 <= gamma <= 1"):
        discounted_returns([1.0], 1.5)


# --- GiGPO anchor states -----------------------------------------------------------


def test_anchor_states_shared_across_trajectories_form_a_step_group() -> None:
    # Both trajectories start from state s0; after that they diverge.
    # returns: traj 0 = discounted([0, 0, 1], 0.9) = [0.81, 0.9, 1.0], traj 1 = [0, 0]
    # step group s0 = {0.81, 0}: mean 0.405, std 0.405 -> [+1, -1]; the rest are singletons
    returns = [discounted_returns([0.0, 0.0, 1.0], 0.9), discounted_returns([0.0, 0.0], 0.9)]
    anchors = [["s0", "s1", "s2"], ["s0", "s3"]]
    adv = anchor_state_advantages(returns, anchors, ["g", "g"])
    assert adv[0] == pytest.approx([1.0, 0.0, 0.0], rel=1e-5)
    assert adv[1] == pytest.approx([-1.0, 0.0], rel=1e-5)

    raw = anchor_state_advantages(returns, anchors, ["g", "g"], normalize=False)
    assert raw[0] == pytest.approx([0.405, 0.0, 0.0])
    assert raw[1] == pytest.approx([-0.405, 0.0])


def test_anchor_states_do_not_mix_task_groups_and_count_revisits() -> None:
    # traj 0 visits s0 twice (returns 1 and 3: mean 2, std 1 -> [-1, 1]);
    # traj 1 is in another task group, so its s0 is a singleton -> 0
    # traj 2 is an infra failure: excluded, all zeros
    returns = [[1.0, 3.0], [5.0], [9.0, 9.0]]
    anchors = [["s0", "s0"], ["s0"], ["s0", "s0"]]
    adv = anchor_state_advantages(returns, anchors, ["g", "h", "g"], valid=[True, True, False])
    assert adv[0] == pytest.approx([-1.0, 1.0], rel=1e-5)
    assert adv[1] == [0.0]
    assert adv[2] == [0.0, 0.0]


def test_anchor_keys_must_match_the_steps() -> None:
    with pytest.raises(ValueError, match=r"expected anchor_keys\[0\] of length 2"):
        anchor_state_advantages([[1.0, 2.0]], [["s0"]], ["g"])


# --- per-turn ----------------------------------------------------------------------


def test_per_turn_advantages_normalise_within_group_and_turn() -> None:
    # turn 0: [1, 3, 2] mean 2, std sqrt(2/3) -> [-1.2247, 1.2247, 0]
    # turn 1: [2, 4]    mean 3, std 1         -> [-1, 1]
    # turn 2: [5] only one trajectory got there -> 0
    returns = [[1.0, 2.0], [3.0, 4.0, 5.0], [2.0]]
    adv = per_turn_advantages(returns, ["g", "g", "g"])
    k = 1 / math.sqrt(2 / 3)
    assert adv[0] == pytest.approx([-k, -1.0], rel=1e-5)
    assert adv[1] == pytest.approx([k, 1.0, 0.0], rel=1e-5)
    assert adv[2] == pytest.approx([0.0], abs=1e-9)

    raw = per_turn_advantages(returns, ["g", "g", "g"], normalize=False)
    assert raw == [[-1.0, -1.0], [1.0, 1.0, 0.0], [0.0]]


def test_per_turn_advantages_skip_invalid_and_other_groups() -> None:
    # only trajectories 0 and 2 share group g: turn 0 [1, 3] -> [-1, 1]
    returns = [[1.0], [100.0], [3.0], [50.0]]
    adv = per_turn_advantages(returns, ["g", "h", "g", "g"], valid=[True, True, True, False])
    assert [a[0] for a in adv] == pytest.approx([-1.0, 0.0, 1.0, 0.0], rel=1e-5)


# --- combine -----------------------------------------------------------------------


def test_combine_adds_the_weighted_step_term_to_every_step() -> None:
    # traj 0: 1 + 0.5 * [0.5, 0] = [1.25, 1.0]; traj 1: -1 + 0.5 * -1 = -1.5
    assert combine([1.0, -1.0], [[0.5, 0.0], [-1.0]], 0.5) == [[1.25, 1.0], [-1.5]]
    with pytest.raises(ValueError, match="expected step_adv of length 2"):
        combine([1.0, -1.0], [[0.5]], 0.5)
