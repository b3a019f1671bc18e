"""Supervised warm start: teach a model the oracle's episodes before RL.

Sequences are built the same append-only way as in RL (prompt ids, then each
assistant turn's canonical ids + end-of-turn, then the observation ids), and the
loss is the cross-entropy on assistant tokens only. A run's warm start imitates its
envs' oracles: each registered env's oracle plays its training tasks, and the episodes
it solved are the data (`oracle_episodes`); `Imitation` takes the supervised steps one
at a time, with the state a checkpoint keeps (`Imitation.for_run`: the run's settings).

Left out: the run around it (progress, metrics rows, checkpoints: the trainer's
``warm_start``).
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

__all__ = ["Imitation", "oracle_episodes", "sft", "trajectory_example"]


def oracle_episodes(
    sources: Sequence[EnvSource], *, on_episode: Callable[[Trajectory], None] | None = None
) -> list[Trajectory]:
    """The episodes each env's oracle solved, playing its training tasks once each
    (``on_episode`` sees each as it ends); an env given as a factory has no oracle to ask
    (ValueError)."""
    trajs: list[Trajectory] = []
    for source in sources:
        if source.env_id is None:
            raise ValueError(f"sft_steps > 0 needs registered envs with an oracle; {source.name!r} is a factory")
        oracle = agentenv.spec(source.env_id).make_oracle()
        played = rollout(source.factory, oracle, tasks=list(source.train), on_episode=on_episode)
        trajs += [t for t in played if t.success]
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
    losses (`Imitation`, run to its end; ``log(step, loss)`` after each step, from 0)."""
    imitation = Imitation(
        model,
        tokenizer,
        trajectories,
        steps=steps,
        learning_rate=learning_rate,
        batch_size=batch_size,
        max_seq_len=max_seq_len,
        end_of_turn=end_of_turn,
        seed=seed,
        weight_decay=weight_decay,
        share_prompts=share_prompts,
        bf16=bf16,
    )
    losses = []
    while imitation.done < steps:
        losses.append(imitation.step())
        if log is not None:
            log(imitation.done - 1, losses[-1])
    return losses


class Imitation:
    """Supervised steps on the assistant turns of ``trajectories``, one at a time, with
    the state a checkpoint needs to go on where it stopped (`state_dict`: the optimiser,
    the schedule, the batch sampler's generator and the steps done).

    ``share_prompts``: episodes in a batch that open with the same prompt run it once
    (`policy_logprobs`), the same gradient up to float rounding. ``bf16``: compute under
    bf16 autocast (the weights stay as they are: the trainer's float32 masters). The
    learning rate warms up over 10 steps, then decays linearly to 10% at ``steps``."""

    def __init__(
        self,
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
    ) -> None:
        delta = ChatDelta(tokenizer, end_of_turn or tokenizer.eos_token)
        self.examples = [trajectory_example(delta, t, max_seq_len) for t in trajectories]
        if not self.examples:
            raise ValueError("sft needs at least one trajectory")
        self.model = model
        self.steps = steps
        self.batch_size = batch_size
        self.share_prompts = share_prompts
        self.bf16 = bf16
        self.device = next(model.parameters()).device
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=learning_rate, weight_decay=weight_decay
        )
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / 10) * max(0.1, 1 - s / steps)
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else delta.end_of_turn_id
        self.done = 0
        self.lr = self.schedule.get_last_lr()[0]
        """The learning rate of the last step taken (of the next, before the first)."""

    @classmethod
    def for_run(
        cls,
        model: torch.nn.Module,
        tokenizer: Any,
        trajectories: Sequence[Trajectory],
        config: GRPOConfig,
        *,
        end_of_turn: str | None,
        bf16: bool = False,
    ) -> Imitation:
        """The warm start of a run of ``config``: ``sft_steps`` steps with its ``sft_*``
        settings, ``max_seq_len``, ``seed`` and ``share_prompts``."""
        return cls(
            model,
            tokenizer,
            trajectories,
            steps=config.sft_steps,
            learning_rate=config.sft_learning_rate,
            weight_decay=config.sft_weight_decay,
            max_seq_len=config.max_seq_len,
            end_of_turn=end_of_turn,
            seed=config.seed,
            share_prompts=config.share_prompts,
            bf16=bf16,
        )

    def step(self) -> float:
        """One supervised step; returns its loss."""
        self.model.train()
        n = min(self.batch_size, len(self.examples))
        pick = torch.randint(len(self.examples), (n,), generator=self.generator).tolist()
        batch = collate([self.examples[i] for i in pick], self.pad, self.device)
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logp, _ = policy_logprobs(self.model, batch, share_prompts=self.share_prompts)
        loss = -(logp * batch.mask).sum() / batch.mask.sum().clamp(min=1)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.lr = self.schedule.get_last_lr()[0]
        self.optimizer.step()
        self.schedule.step()
        self.done += 1
        return loss.item()

    def state_dict(self) -> dict[str, Any]:
        """What `load_state_dict` needs to go on from here (the model's weights aside)."""
        return {
            "done": self.done,
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from a `state_dict` (the model holding the weights saved with it)."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.generator.set_state(state["generator"])
        self.done = int(state["done"])
        self.lr = self.schedule.get_last_lr()[0]
