"""From trajectories to training tensors: token sequences, masks and advantages.

A trajectory's `Generation`s hold, per turn, the ids appended before the turn and
the ids generated in it, so a sequence is their concatenation in order; the loss
mask is 1 exactly on generated ids. Advantages are computed per turn (task-level
group term + step-level term) and broadcast onto that turn's tokens, and so is the
turn's lag: how many versions the weights that sampled it are behind the learner's
(0 unless rollouts run asynchronously, `agentenv.trainers.async_rollout`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from agentenv.core.policy import Generation
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.trainers import advantages as adv
from agentenv.trainers.modes import STEP_ADVANTAGES, check_mode

logger = logging.getLogger("agentenv.trainers")

MAX_REWARD = 1e12
"""Rewards past this size (either sign) are left out of the update, as non-finite ones
are: no reward scale needs them, and their squares and sums overflow the advantages'
statistics (an OverflowError at 1e154, NaN at 1e308) or the float32 loss."""

__all__ = ["Example", "TrainBatch", "build_examples", "collate", "turn_advantages"]


@dataclass
class Example:
    """One training sequence."""

    ids: list[int]
    mask: list[int]
    old_logp: list[float]
    advantages: list[float]
    turn_lengths: list[int]
    truncated: bool  # cut at max_seq_len
    lags: list[int] = field(default_factory=list)
    """Per id, learner version minus the version that sampled it (empty: all 0)."""
    episode: int = 0
    """The index of the trajectory it comes from, among those `build_examples` was given."""


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    targets: torch.Tensor  # [B, T]: the next token at each position
    mask: torch.Tensor  # [B, T]: 1 where the next token is a policy token
    old_logp: torch.Tensor  # [B, T], aligned with targets
    advantages: torch.Tensor  # [B, T], aligned with targets
    lag: torch.Tensor  # [B, T], aligned with targets: versions behind the learner (0: on-policy)


def step_rewards(traj: Trajectory, weights: Mapping[str, float]) -> list[float]:
    """The step channel of each turn: the weighted sum of its step components, with what
    the env's closing rewards took back (`Transition.closing`) moved from the last turn
    to the turns that were paid it, latest first; what it takes back beyond the payments
    of these turns was paid before the first (an episode resumed from a snapshot) and
    goes on the first. Discounted, a take-back on the last turn alone weighs less than
    the payments it cancels, the more so the later the episode ends: a policy that earns
    shaping it cannot confirm (hard-coded visible tests) and then stalls to the turn
    limit would keep the difference."""
    turns = [dict(t.rewards) for t in traj.transitions]
    for k, v in (traj.transitions[-1].closing if traj.transitions else {}).items():
        if not v < 0:
            continue
        turns[-1][k] = turns[-1].get(k, 0.0) - v  # the last turn without the take-back
        owed = -v
        for turn in reversed(turns):
            paid = turn.get(k, 0.0)
            if owed > 0 and paid > 0:
                taken = min(paid, owed)
                turn[k], owed = paid - taken, owed - taken
        turns[0][k] = turns[0].get(k, 0.0) - owed
    return [sum(weights.get(k, 1.0) * v for k, v in turn.items()) for turn in turns]


def anchor_keys(traj: Trajectory) -> list[str]:
    """GiGPO anchor state of each turn: a hash of everything the agent has seen and
    done before it (the group shares the initial observation). The last observation
    alone is not a state: "higher" after two different guesses is two states."""
    if not traj.transitions:  # it ended before its first step (its reset failed)
        return []
    keys = ["start"]
    digest = hashlib.blake2b(digest_size=12)
    for transition in traj.transitions[:-1]:
        digest.update(json.dumps([transition.action, transition.observation], sort_keys=True, default=str).encode())
        keys.append(digest.copy().hexdigest())
    return keys


def turn_advantages(
    trajs: Sequence[Trajectory],
    group_ids: Sequence[int],
    weights: Sequence[Mapping[str, float]],
    *,
    task_mode: str,
    step_mode: str,
    step_weight: float,
    gamma: float,
    step_std: bool = False,
    extra_rewards: Sequence[float] | None = None,
    extra_step_rewards: Sequence[Sequence[float]] | None = None,
) -> tuple[list[list[float]], list[float]]:
    """Per trajectory, the combined advantage of each turn; and the episode rewards used.

    ``task_mode`` and ``step_mode`` are names in `agentenv.trainers.modes`'
    ``TASK_ADVANTAGES`` and ``STEP_ADVANTAGES``. The step term compares discounted
    returns, which (as in GiGPO) include the episode's reward on its last turn, so a
    solved episode's turns are not outweighed by a small step penalty; it is the return
    minus its step group's mean, divided by the group's std too with ``step_std``. Infra
    failures are invalid: excluded from every statistic, advantage 0.
    """
    check_mode("step_mode", step_mode, STEP_ADVANTAGES)
    rewards = [(t.task_reward or 0.0) + (extra_rewards[i] if extra_rewards else 0.0) for i, t in enumerate(trajs)]
    # A non-finite reward (Env.step refuses them, but a trajectory may come from elsewhere)
    # would make its whole group's advantages NaN, and one past MAX_REWARD overflow them:
    # such an episode is invalid, as infra is.
    finite = [
        _usable(r) and all(_usable(s) for s in step_rewards(t, w))
        for r, t, w in zip(rewards, trajs, weights, strict=True)
    ]
    if not all(finite):
        logger.warning(
            "%d trajectories with a reward that is not a finite number within +-%g are left out of the update",
            finite.count(False),
            MAX_REWARD,
        )
    valid = [ok and t.failure is not Failure.INFRA for ok, t in zip(finite, trajs, strict=True)]
    rewards = [r if ok else 0.0 for r, ok in zip(rewards, finite, strict=True)]
    task_adv = adv.group_advantages(rewards, group_ids, mode=task_mode, valid=valid)
    if step_mode == "none" or step_weight == 0:
        step_adv = [[0.0] * t.turns for t in trajs]
    else:
        returns = []
        for i, (t, w) in enumerate(zip(trajs, weights, strict=True)):
            rewards_i = step_rewards(t, w) if finite[i] else [0.0] * len(t.transitions)
            if extra_step_rewards is not None:  # trainer-side shaping, per turn
                rewards_i = [
                    r + (extra_step_rewards[i][k] if k < len(extra_step_rewards[i]) else 0.0)
                    for k, r in enumerate(rewards_i)
                ]
            if rewards_i:  # the episode's reward is earned on its last turn: every return-to-go includes it
                rewards_i[-1] += rewards[i]
            returns.append(adv.discounted_returns(rewards_i, gamma))
        if step_mode == "gigpo":
            keys = [anchor_keys(t) for t in trajs]
            step_adv = adv.anchor_state_advantages(returns, keys, group_ids, normalize=step_std, valid=valid)
        else:  # "per_turn"
            step_adv = adv.per_turn_advantages(returns, group_ids, normalize=step_std, valid=valid)
    return adv.combine(task_adv, step_adv, step_weight), rewards


def build_examples(
    trajs: Sequence[Trajectory], per_turn: Sequence[Sequence[float]], *, max_seq_len: int, version: int | None = None
) -> list[Example]:
    """The `Example`s of ``trajs``, in order: one per trajectory, or one per run of turns
    where a turn holds its whole prompt (`Generation.full_prompt`: a server's rendering
    whose earlier ids are not a prefix of it), each naming its trajectory (``episode``).
    Infra ones get an all-zero mask, and one without generations (it ended before its
    first turn) gets no ids at all.

    With the learner's ``version``, each generated id's lag is ``version`` minus its
    turn's `Generation.policy_version` (0 for a turn that records none). A turn whose
    log-probs do not match its ids one for one is refused (ValueError): its tokens would
    otherwise train against a made-up sampling probability."""
    examples = []
    for index, (traj, advs) in enumerate(zip(trajs, per_turn, strict=True)):
        live = traj.failure is not Failure.INFRA
        segment = _Segment()
        for k, gen in enumerate(traj.generations):
            if gen is None:
                continue
            if len(gen.logprobs) != len(gen.token_ids):
                raise ValueError(
                    f"trajectory {index} ({traj.task.id}), turn {k}: {len(gen.logprobs)} log-probs for "
                    f"{len(gen.token_ids)} generated tokens; a policy that returns token ids must return one "
                    "log-prob per token"
                )
            if gen.full_prompt and segment.ids:
                examples.append(segment.example(max_seq_len, index))
                segment = _Segment()
            behind = version - gen.policy_version if version is not None and gen.policy_version is not None else 0
            if behind < 0:
                raise ValueError(
                    f"a turn was sampled by version {gen.policy_version}, newer than the learner's {version}"
                )
            segment.add(gen.prompt_ids or [], gen, advs[k] if k < len(advs) else 0.0, live=live, behind=behind)
        examples.append(segment.example(max_seq_len, index))
    return examples


@dataclass
class _Segment:
    """The ids of one training sequence as its turns are added."""

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    old: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    lags: list[int] = field(default_factory=list)

    def add(self, prompt: Sequence[int], gen: Generation, advantage: float, *, live: bool, behind: int) -> None:
        """A turn: the ids before it, then what it generated (scored unless ``live`` is
        false: an infra episode), ``behind`` versions behind the learner."""
        n = len(gen.token_ids)
        self.ids += [*prompt, *gen.token_ids]
        self.mask += [0] * len(prompt) + [int(live)] * n
        self.old += [0.0] * len(prompt) + list(gen.logprobs)
        self.advantages += [0.0] * len(prompt) + [advantage] * n
        self.lags += [0] * len(prompt) + [behind] * n
        self.lengths.append(n)

    def example(self, max_seq_len: int, episode: int) -> Example:
        cut = max_seq_len
        return Example(
            self.ids[:cut],
            self.mask[:cut],
            self.old[:cut],
            self.advantages[:cut],
            self.lengths,
            len(self.ids) > max_seq_len,
            self.lags[:cut],
            episode,
        )


def collate(examples: Sequence[Example], pad_id: int, device: torch.device | str = "cpu") -> TrainBatch:
    """Right-pad into tensors; position t predicts token t + 1."""
    if not examples or not all(e.ids for e in examples):
        raise ValueError("collate needs examples that each hold at least one id")
    width = max(len(e.ids) for e in examples)
    b = len(examples)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.float32)
    old = torch.zeros((b, width), dtype=torch.float32)
    advs = torch.zeros((b, width), dtype=torch.float32)
    lag = torch.zeros((b, width), dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e.ids)
        input_ids[i, :n] = torch.tensor(e.ids)
        attention[i, :n] = 1
        # Shift by one: the prediction at position t is scored against token t + 1.
        mask[i, : n - 1] = torch.tensor(e.mask[1:], dtype=torch.float32)
        old[i, : n - 1] = torch.tensor(e.old_logp[1:])
        advs[i, : n - 1] = torch.tensor(e.advantages[1:])
        if e.lags:
            lag[i, : n - 1] = torch.tensor(e.lags[1:], dtype=torch.long)
    targets = torch.cat([input_ids[:, 1:], torch.full((b, 1), pad_id, dtype=torch.long)], dim=1)
    return TrainBatch(*(t.to(device) for t in (input_ids, attention, targets, mask, old, advs, lag)))


def _usable(reward: float) -> bool:
    return math.isfinite(reward) and abs(reward) <= MAX_REWARD
