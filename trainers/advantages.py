"""Advantages for multi-turn GRPO: a task-level group-relative term plus a step-level term.

Plain Python on lists, without torch, so rollout-side code can use it without the
``train`` extra; the batches are a few hundred trajectories, so speed is no concern.

Shapes (N trajectories in the batch, trajectory i having T_i steps, i.e. turns):

- per trajectory: a sequence of length N (``rewards``, ``group_ids``, ``valid``, task
  advantages). A group is the G rollouts that share a task and a seed.
- per step: a ragged list of N lists, list i of length T_i (returns, anchor keys,
  step advantages).

Every std here is the population std (divide by n, torch's ``unbiased=False``): a
group with rewards [1, 0, 0, 1] has std 0.5, not 0.577. Trajectories with
``valid[i] == False`` (infrastructure failures, not bad answers) are left out of every
mean and std and get advantage 0, so a crashed sandbox neither rewards nor punishes
the group it was in. Broadcasting a step's advantage to its tokens is the caller's job.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from agentenv.trainers.modes import TASK_ADVANTAGES, check_mode

__all__ = [
    "anchor_state_advantages",
    "combine",
    "discounted_returns",
    "group_advantages",
    "informative_mask",
    "per_turn_advantages",
    "zero_variance_groups",
]

# --- helpers -----------------------------------------------------------------------


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _pstd(xs: Sequence[float]) -> float:
    mean = _mean(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))


def _check_len(name: str, seq: Sequence[object], n: int, like: str) -> None:
    if len(seq) != n:
        raise ValueError(f"expected {name} of length {n} (one per trajectory, like {like}), got {len(seq)}")


def _valid_flags(valid: Sequence[bool] | None, n: int, like: str) -> list[bool]:
    if valid is None:
        return [True] * n
    _check_len("valid", valid, n, like)
    return [bool(v) for v in valid]


def _check_ragged(name: str, rows: Sequence[Sequence[object]], ref: Sequence[Sequence[object]]) -> None:
    for i, (row, ref_row) in enumerate(zip(rows, ref, strict=False)):
        if len(row) != len(ref_row):
            raise ValueError(
                f"expected {name}[{i}] of length {len(ref_row)} (one per step, like step_returns[{i}]), got {len(row)}"
            )


def _group_members(group_ids: Sequence[Hashable], ok: Sequence[bool]) -> dict[Hashable, list[int]]:
    """Indices of the valid trajectories of each group, groups in first-seen order."""
    members: dict[Hashable, list[int]] = {}
    for i, gid in enumerate(group_ids):
        bucket = members.setdefault(gid, [])
        if ok[i]:
            bucket.append(i)
    return members


def _normalise_within(
    values: Sequence[Sequence[float]],
    keys: Sequence[Sequence[Hashable]],
    ok: Sequence[bool],
    *,
    normalize: bool,
    eps: float,
) -> list[list[float]]:
    """(v - mean) / (std + eps) among entries sharing a key; singletons and invalid rows 0."""
    groups: dict[Hashable, list[tuple[int, int]]] = {}
    for i, row_keys in enumerate(keys):
        if ok[i]:
            for t, key in enumerate(row_keys):
                groups.setdefault(key, []).append((i, t))
    out = [[0.0] * len(row) for row in values]
    for positions in groups.values():
        if len(positions) < 2:
            continue  # nothing to compare against: no signal, not a zero-std blow-up
        vs = [float(values[i][t]) for i, t in positions]
        mean = _mean(vs)
        scale = _pstd(vs) + eps if normalize else 1.0
        for (i, t), v in zip(positions, vs, strict=False):
            out[i][t] = (v - mean) / scale
    return out


# --- task level --------------------------------------------------------------------


def group_advantages(
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    *,
    mode: str = "std",
    eps: float = 1e-6,
    valid: Sequence[bool] | None = None,
) -> list[float]:
    """Group-relative advantage per trajectory: A_i = (r_i - mean_g) / scale.

    ``mode`` (a name in `agentenv.trainers.modes.TASK_ADVANTAGES`) picks the scale:
    ``"std"`` the group's std + eps (GRPO, Shao et al. 2024); ``"none"`` 1 (Dr. GRPO,
    Liu et al. 2025: dividing by the std over-weights groups that are nearly all
    right or all wrong); ``"batch_std"`` the std of all valid rewards in the batch +
    eps. Groups with fewer than two valid trajectories get 0.
    """
    check_mode("mode", mode, TASK_ADVANTAGES)
    n = len(rewards)
    _check_len("group_ids", group_ids, n, "rewards")
    ok = _valid_flags(valid, n, "rewards")
    rs = [float(r) for r in rewards]
    batch = [r for r, o in zip(rs, ok, strict=False) if o]
    batch_std = _pstd(batch) if mode == "batch_std" and batch else 0.0

    advantages = [0.0] * n
    for idx in _group_members(group_ids, ok).values():
        if len(idx) < 2:
            continue
        group = [rs[i] for i in idx]
        mean = _mean(group)
        if mode == "std":
            scale = _pstd(group) + eps
        elif mode == "batch_std":
            scale = batch_std + eps
        else:
            scale = 1.0
        for i in idx:
            advantages[i] = (rs[i] - mean) / scale
    return advantages


def zero_variance_groups(
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    *,
    valid: Sequence[bool] | None = None,
) -> set[Hashable]:
    """Ids of the groups whose valid rewards are all equal (exact comparison).

    Such a group has every task advantage 0 and so no policy gradient; DAPO's dynamic
    sampling (Yu et al. 2025, sec. 3.2) drops it and samples more. A group with fewer
    than two valid trajectories counts as zero-variance too.
    """
    n = len(rewards)
    _check_len("group_ids", group_ids, n, "rewards")
    ok = _valid_flags(valid, n, "rewards")
    return {gid for gid, idx in _group_members(group_ids, ok).items() if len({float(rewards[i]) for i in idx}) <= 1}


def informative_mask(
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    *,
    valid: Sequence[bool] | None = None,
) -> list[bool]:
    """Per trajectory: True if it is valid and its group is not zero-variance.

    The trajectories to keep under dynamic sampling.
    """
    ok = _valid_flags(valid, len(rewards), "rewards")
    flat = zero_variance_groups(rewards, group_ids, valid=ok)
    return [o and gid not in flat for o, gid in zip(ok, group_ids, strict=False)]


# --- step level --------------------------------------------------------------------


def discounted_returns(step_rewards: Sequence[float], gamma: float) -> list[float]:
    """Return-to-go of one trajectory: G_t = r_t + gamma * G_{t+1}, G_{T} = 0."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"expected 0 <= gamma <= 1, got {gamma}")
    returns = [0.0] * len(step_rewards)
    running = 0.0
    for t in range(len(step_rewards) - 1, -1, -1):
        running = float(step_rewards[t]) + gamma * running
        returns[t] = running
    return returns


def anchor_state_advantages(
    step_returns: Sequence[Sequence[float]],
    anchor_keys: Sequence[Sequence[Hashable]],
    group_ids: Sequence[Hashable],
    *,
    normalize: bool = True,
    eps: float = 1e-6,
    valid: Sequence[bool] | None = None,
) -> list[list[float]]:
    """GiGPO step advantages (Feng et al. 2025, "Group-in-Group Policy Optimization").

    Steps of trajectories in the same task group that start from the same state
    (equal ``anchor_keys[i][t]``, e.g. a hash of the observation before step t) form a
    step group, including repeat visits within one trajectory. Within it,
    A_step = (G - mean) / (std + eps), or G - mean with ``normalize=False``, G the
    discounted return from ``step_returns``. Steps whose state no other step shares
    get 0. Returns per trajectory a list of per-step advantages.
    """
    n = len(step_returns)
    _check_len("anchor_keys", anchor_keys, n, "step_returns")
    _check_len("group_ids", group_ids, n, "step_returns")
    _check_ragged("anchor_keys", anchor_keys, step_returns)
    ok = _valid_flags(valid, n, "step_returns")
    # Keyed by group too: equal states of different tasks are not comparable.
    keys = [[(gid, key) for key in row] for gid, row in zip(group_ids, anchor_keys, strict=False)]
    return _normalise_within(step_returns, keys, ok, normalize=normalize, eps=eps)


def per_turn_advantages(
    step_returns: Sequence[Sequence[float]],
    group_ids: Sequence[Hashable],
    *,
    normalize: bool = True,
    eps: float = 1e-6,
    valid: Sequence[bool] | None = None,
) -> list[list[float]]:
    """Step advantages compared among the same turn index of the same task group.

    The alternative to :func:`anchor_state_advantages` when states cannot be matched:
    step t of trajectory i is compared with step t of the other trajectories of its
    group, A_step = (G - mean) / (std + eps) (or G - mean with ``normalize=False``).
    A turn only one trajectory reached gets 0.
    """
    n = len(step_returns)
    _check_len("group_ids", group_ids, n, "step_returns")
    ok = _valid_flags(valid, n, "step_returns")
    keys = [[(gid, t) for t in range(len(row))] for gid, row in zip(group_ids, step_returns, strict=False)]
    return _normalise_within(step_returns, keys, ok, normalize=normalize, eps=eps)


def combine(
    task_adv: Sequence[float],
    step_adv: Sequence[Sequence[float]],
    w: float,
) -> list[list[float]]:
    """Per trajectory, per step: A = A_task + w * A_step (GiGPO, w the step weight omega)."""
    _check_len("step_adv", step_adv, len(task_adv), "task_adv")
    return [[float(a) + w * float(s) for s in steps] for a, steps in zip(task_adv, step_adv, strict=False)]
