"""Asynchronous off-policy rollouts: generation runs ahead of the update (PipelineRL, ScaleRL).

With ``GRPOConfig.async_rollouts`` the trainer's rollouts move to a producer thread
(`AsyncRollouts`) that gathers batch after batch, exactly as the synchronous step
would (the same sampler, seeds, dynamic sampling and rollout engine), and queues
them; the learner takes one batch per step, updates, and publishes its new weights.

What runs where:

- the learner (the caller's thread) owns the model it trains and, after every step,
  copies its trainable parameters into one staging copy (`PublishedWeights`) with the
  version number ``step + 1``: the number of updates they have seen;
- the producer samples from its own copy of the model. Before every turn it swaps in
  the newest published weights if there are any (in-flight updates, as in PipelineRL),
  so a turn is sampled by one version and an episode may span several. Each
  `Generation` records its version (``policy_version``): per turn, and every token
  of a turn has its turn's version. A swap writes the copy in place, which drops
  the policy's kept KV cache: a cache built by older weights is never reused.

Staleness of a token = the learner's version when it trains on it minus the
token's version. ``max_staleness`` = k bounds it, with one of two policies:

- ``wait``: the producer starts batch b only once the learner has published version
  b - k. Batch b is trained at step b, so no token is older than k. With k = 0 the
  producer waits for every update and samples batch b from the very weights the
  synchronous trainer would: the same batches, the same parameters.
- ``drop``: the producer never waits for weights, only for room in a queue of
  k + 1 batches; at its step a group holding a token older than k is dropped
  (``async/dropped_groups``) and a batch left with none is replaced by the next.

The learner corrects the stale tokens with truncated importance weights
(`agentenv.trainers.off_policy`) computed from the log-probs recorded at
generation time, and logs them with the staleness (``off_policy/*``, ``async/*``,
``time/wait_s``: the learner's wait for a batch).

The producer also updates the task sampler, right after each batch, so a learning
sampler (the failure miner) sees outcomes in batch order whatever the timing;
its state after a batch travels with the batch and is what a checkpoint saves.

The cost: two more copies of the trainable weights (staging and generation) and
the competition of two threads for the same cores. On a CPU both use torch's
intra-op threads, so the overlap only pays where one side leaves cores idle
(``bench/scale_async.py`` measures it); on a GPU the two share the device.

Left out: generation in another process or on another device (an inference
server), keeping a KV cache across a weight swap, and resuming with batches that
were queued but not trained (a resumed run samples them again).
"""

from __future__ import annotations

import copy
import dataclasses
import queue
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from agentenv.core.policy import Conversation, Generation, PolicyOutput
from agentenv.core.task_sampler import Draw
from agentenv.core.trajectory import Trajectory
from agentenv.trainers.policy import TransformersPolicy

__all__ = ["AsyncRollouts", "PublishedWeights", "RolloutBatch", "VersionedPolicy"]

_POLL_S = 0.1
"""How often a blocked thread looks at the stop flag."""
_JOIN_S = 60.0
"""How long `AsyncRollouts.close` waits for a turn or env step in progress to finish."""


class Stopped(BaseException):
    """Raised inside the producer when it is told to stop. A BaseException, so the rollout
    engine, which turns a policy's exceptions into infra failures, lets it through."""


@dataclass
class RolloutBatch:
    """What one trainer step trains on: the groups kept, their draws, and how they were gathered."""

    index: int
    """The step it was sampled for (seeds and sampler draws are a function of it)."""
    groups: list[list[Trajectory]]
    draws: list[Draw]
    groups_seen: int
    """Groups rolled out, the ones dynamic sampling dropped included."""
    zero_variance: int
    """Groups among them whose rewards were all equal."""
    timer: dict[str, float]
    """Seconds spent generating (``generate_s``) and in the envs (``env_s``)."""
    sampler_metrics: dict[str, Any] = field(default_factory=dict)
    sampler_state: dict[str, Any] | None = None
    """The sampler's state right after this batch updated it (asynchronous runs)."""
    generated_tokens: int = 0
    """Tokens generated for it, the groups dynamic sampling dropped included (compute)."""

    def keep(self, indices: Sequence[int]) -> RolloutBatch:
        """The same batch with only the groups at ``indices``."""
        return dataclasses.replace(
            self, groups=[self.groups[i] for i in indices], draws=[self.draws[i] for i in indices]
        )


class PublishedWeights:
    """The learner's newest trainable parameters, for the generator, with their version.

    One staging copy behind a condition: `publish` writes it from the learner's model,
    `load` copies it into the generator's model between turns. The learner never waits
    for a turn to finish, and the generator never sees half an optimiser step."""

    def __init__(self, model: torch.nn.Module, version: int) -> None:
        self._cond = threading.Condition()
        with torch.no_grad():
            self._staged = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        self.version = version

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """Stage ``model``'s trainable parameters as ``version`` and wake any waiter."""
        with self._cond, torch.no_grad():
            for name, p in model.named_parameters():
                if name in self._staged:
                    self._staged[name].copy_(p)
            self.version = version
            self._cond.notify_all()

    def load(self, model: torch.nn.Module, have: int) -> int:
        """Copy the staged weights into ``model`` if they are newer than ``have``; returns
        the version ``model`` now holds."""
        with self._cond:
            if self.version == have:
                return have
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if name in self._staged:
                        p.copy_(self._staged[name])
            return self.version

    def wait_for(self, version: int, stop: threading.Event) -> None:
        """Block until ``version`` (or a newer one) is published; `Stopped` if told to stop."""
        with self._cond:
            while self.version < version:
                if stop.is_set():
                    raise Stopped
                self._cond.wait(_POLL_S)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


class VersionedPolicy(TransformersPolicy):
    """A `TransformersPolicy` on the generator's copy of the model that loads the newest
    published weights before each turn and stamps every `Generation` with their version."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        weights: PublishedWeights,
        stop_event: threading.Event,
        **settings: Any,
    ) -> None:
        super().__init__(model, tokenizer, **settings)
        self.weights = weights
        self._stop = stop_event
        self.version = weights.load(model, have=-1)

    def act(self, conversations: Sequence[Conversation]) -> list[PolicyOutput]:
        if self._stop.is_set():
            raise Stopped
        self.version = self.weights.load(self.model, self.version)
        outputs = super().act(conversations)
        for out in outputs:
            if isinstance(out, Generation):
                out.policy_version = self.version
        return outputs


Collect = Callable[[int, TransformersPolicy], RolloutBatch]
"""Gathers the batch of a step with a policy: the trainer's synchronous collection."""


class AsyncRollouts:
    """A producer thread that gathers the trainer's batches ahead of its updates.

    Args:
        collect: Gathers batch ``index`` with a policy, updating the sampler.
        policy: The trainer's policy: the generator samples with its settings.
        model: The learner's model, copied for generation when this starts.
        start: The learner's step (and version) now: the first batch to gather.
        max_staleness: k: no token older than k versions is trained on.
        staleness_policy: "wait" or "drop" (see the module's docstring).
        sampler_state: The sampler's `state_dict`, read after each batch.
    """

    def __init__(
        self,
        collect: Collect,
        policy: TransformersPolicy,
        model: torch.nn.Module,
        *,
        start: int,
        max_staleness: int,
        staleness_policy: Literal["wait", "drop"],
        sampler_state: Callable[[], dict[str, Any]],
    ) -> None:
        if max_staleness < 0:
            raise ValueError(f"expected max_staleness >= 0, got {max_staleness}")
        self.max_staleness = max_staleness
        self.staleness_policy = staleness_policy
        self.sampler_state: dict[str, Any] | None = None
        """The sampler's state after the batch last handed to the learner."""
        self._collect = collect
        self._read_sampler = sampler_state
        self._stop = threading.Event()
        self.weights = PublishedWeights(model, start)
        self.policy = VersionedPolicy(
            _generation_copy(model), policy.tokenizer, self.weights, self._stop, **policy.settings()
        )
        self._queue: queue.Queue[RolloutBatch | BaseException] = queue.Queue(maxsize=max_staleness + 1)
        self._thread = threading.Thread(target=self._produce, args=(start,), name="agentenv-rollouts", daemon=True)
        self._thread.start()

    # -- the producer ------------------------------------------------------------

    def _produce(self, index: int) -> None:
        try:
            while not self._stop.is_set():
                if self.staleness_policy == "wait":
                    self.weights.wait_for(index - self.max_staleness, self._stop)
                batch = self._collect(index, self.policy)
                batch.sampler_state = copy.deepcopy(self._read_sampler())
                self._put(batch)
                index += 1
        except Stopped:
            return
        except BaseException as e:  # noqa: BLE001 - handed to the learner, which raises it
            try:
                self._put(e)
            except Stopped:
                return

    def _put(self, item: RolloutBatch | BaseException) -> None:
        while True:
            if self._stop.is_set():
                raise Stopped
            try:
                self._queue.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                continue

    # -- the learner's side ---------------------------------------------------------

    def next_batch(self, version: int) -> tuple[RolloutBatch, dict[str, float]]:
        """The batch to train on at ``version`` (the learner's step), without the groups
        holding a token older than ``max_staleness``, and the step's ``async/*`` metrics
        and ``time/wait_s``. Batches dropped whole add what they cost (groups seen, tokens
        generated, time) to the one returned, so compute counts every group rolled out.
        Raises what the producer raised."""
        start = time.perf_counter()
        dropped = 0
        oldest = version - self.max_staleness
        skipped: list[RolloutBatch] = []  # dropped whole: what they cost still counts (compute/tokens)
        while True:
            batch = self._get()
            fresh = [i for i, group in enumerate(batch.groups) if _oldest_version(group, version) >= oldest]
            dropped += len(batch.groups) - len(fresh)
            if fresh or not batch.groups:
                break
            skipped.append(batch)
        self.sampler_state = batch.sampler_state
        batch = batch.keep(fresh)
        if skipped:
            timer = dict(batch.timer)
            for old in skipped:
                for k, v in old.timer.items():
                    timer[k] = timer.get(k, 0.0) + v
            batch = dataclasses.replace(
                batch,
                groups_seen=batch.groups_seen + sum(b.groups_seen for b in skipped),
                zero_variance=batch.zero_variance + sum(b.zero_variance for b in skipped),
                generated_tokens=batch.generated_tokens + sum(b.generated_tokens for b in skipped),
                timer=timer,
            )
        lags = [
            version - gen.policy_version
            for group in batch.groups
            for traj in group
            for gen in traj.generations
            if gen is not None and gen.policy_version is not None
        ]
        metrics = {
            "async/dropped_groups": float(dropped),
            "async/lag_mean": statistics.fmean(lags) if lags else 0.0,
            "async/lag_max": float(max(lags, default=0)),
            "time/wait_s": time.perf_counter() - start,
        }
        return batch, metrics

    def _get(self) -> RolloutBatch:
        while True:
            try:
                item = self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._thread.is_alive():
                    raise RuntimeError("the rollout thread has stopped; no batch will come") from None
                continue
            if isinstance(item, BaseException):
                raise item
            return item

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """The learner's weights after an update, as ``version``, for the next turns."""
        self.weights.publish(model, version)

    def close(self) -> None:
        """Stop the producer: it leaves at its next turn, wait or queue hand-off."""
        self._stop.set()
        self.weights.wake()
        while True:  # make room, so a hand-off in progress ends at once
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(_JOIN_S)
        if self._thread.is_alive():
            warnings.warn(f"the rollout thread did not stop within {_JOIN_S:.0f} s", stacklevel=2)


def _generation_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The generator's own copy of the weights. Parameters keep ``requires_grad``: the
    policy tells a swap by their in-place version counters and drops its KV cache."""
    gen = copy.deepcopy(model).eval()
    for p in gen.parameters():
        p.grad = None
    return gen


def _oldest_version(group: Sequence[Trajectory], default: int) -> int:
    versions = [
        g.policy_version for t in group for g in t.generations if g is not None and g.policy_version is not None
    ]
    return min(versions, default=default)
