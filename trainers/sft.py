"""Supervised warm start: teach a model the oracle's episodes before RL.

Sequences are built the same append-only way as in RL (prompt ids, then each
assistant turn's canonical ids + end-of-turn, then the observation ids), and the
loss is the cross-entropy on assistant tokens only. A run's warm start (`warm_start`)
imitates its envs' oracles: each registered env's oracle plays its training tasks, and
the episodes it solved are the data (`oracle_episodes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

import agentenv
from agentenv.core.trajectory import Trajectory
from agentenv.rollout import rollout
from agentenv.trainers.batch import Example, collate
from agentenv.trainers.config import GRPOConfig
from agentenv.trainers.logprobs import policy_logprobs
from agentenv.trainers.task_sampler import EnvSource
from agentenv.trainers.tokens import ChatDelta

__all__ = ["oracle_episodes", "sft", "trajectory_example", "warm_start"]


def warm_start(
    model: torch.nn.Module,
    tokenizer: Any,
    sources: Sequence[EnvSource],
    config: GRPOConfig,
    *,
    end_of_turn: str | None,
    bf16: bool = False,
    log: Callable[[int, float], None] | None = None,
) -> list[float]:
    """``config.sft_steps`` supervised steps of ``model`` on the episodes ``sources``'
    oracles solve (`oracle_episodes`), with the ``sft_*`` settings; prints what it does
    and returns the losses."""
    print(f"warm start: the oracle plays the training tasks, then {config.sft_steps} supervised steps", flush=True)
    trajs = oracle_episodes(sources)
    losses = sft(
        model,
        tokenizer,
        trajs,
        steps=config.sft_steps,
        learning_rate=config.sft_learning_rate,
        weight_decay=config.sft_weight_decay,
        max_seq_len=config.max_seq_len,
        end_of_turn=end_of_turn,
        seed=config.seed,
        share_prompts=config.share_prompts,
        bf16=bf16,
        log=log,
    )
    print(
        f"warm start: {config.sft_steps} supervised steps on {len(trajs)} oracle episodes, "
        f"loss {losses[0]:.3f} -> {losses[-1]:.3f}"
    )
    return losses


def oracle_episodes(sources: Sequence[EnvSource]) -> list[Trajectory]:
    """The episodes each env's oracle solved, playing its training tasks once each; an env
    given as a factory has no oracle to ask (ValueError)."""
    trajs: list[Trajectory] = []
    for source in sources:
        if source.env_id is None:
            raise ValueError(f"sft_steps > 0 needs registered envs with an oracle; {source.name!r} is a factory")
        oracle = agentenv.spec(source.env_id).make_oracle()
        trajs += [t for t in rollout(source.factory, oracle, tasks=list(source.train)) if t.success]
    return trajs


def trajectory_example(delta: ChatDelta, traj: Trajectory, max_seq_len: int) -> Example:
    """The training sequence of a trajectory, with the assistant turns as targets."""
    messages = traj.messages
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    ids = delta.prompt_ids(messages[:first])
    mask = [0] * len(ids)
    i = first
    while i <= last:
        text = delta.tokenizer(messages[i]["content"], add_special_tokens=False)["input_ids"]
        turn = [*list(text), delta.end_of_turn_id]
        ids += turn
        mask += [1] * len(turn)
        j = i + 1
        while j < len(messages) and messages[j]["role"] != "assistant":
            j += 1
        if j <= last:
            obs = delta.observation_ids(messages[i + 1 : j], stopped=True)
            ids += obs
            mask += [0] * len(obs)
        i = j
    n = min(len(ids), max_seq_len)
    return Example(ids[:n], mask[:n], [0.0] * n, [0.0] * n, [], len(ids) > max_seq_len)


def sft(
    model: torch.nn.Module,
    tokenizer: Any,
    trajectories: Sequence[Trajectory],
    *,
    steps: int,
    learning_rate: float = 3e-3,
    batch_size: int = 16,
    max_seq_len: int = 2048,
    end_of_turn: str | None = None,
    seed: int = 0,
    weight_decay: float = 0.0,
    share_prompts: bool = True,
    bf16: bool = False,
    log: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train on the assistant turns of ``trajectories`` for ``steps`` steps; returns the
    losses. ``share_prompts``: episodes in a batch that open with the same prompt run it
    once (`policy_logprobs`), the same gradient up to float rounding. ``bf16``: compute
    under bf16 autocast (the weights stay as they are: the trainer's float32 masters)."""
    delta = ChatDelta(tokenizer, end_of_turn or tokenizer.eos_token)
    examples = [trajectory_example(delta, t, max_seq_len) for t in trajectories]
    if not examples:
        raise ValueError("sft needs at least one trajectory")
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=learning_rate, weight_decay=weight_decay
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10) * max(0.1, 1 - s / steps))
    generator = torch.Generator().manual_seed(seed)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else delta.end_of_turn_id
    model.train()
    losses = []
    for step in range(steps):
        pick = torch.randint(len(examples), (min(batch_size, len(examples)),), generator=generator).tolist()
        batch = collate([examples[i] for i in pick], pad, device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            logp, _ = policy_logprobs(model, batch, share_prompts=share_prompts)
        loss = -(logp * batch.mask).sum() / batch.mask.sum().clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if log is not None:
            log(step, losses[-1])
    return losses
