"""Data-parallel training under ``torchrun``: the trainer's view of its process group.

Launched by ``torchrun --nproc_per_node N ...`` (which sets ``WORLD_SIZE``, ``RANK``
and ``LOCAL_RANK``), every rank builds the same trainer and, each step:

1. draws the step's whole list of groups from the sampler (sampling is a pure
   function of seed, step, round and the sampler's state, so every rank draws the
   same list) and rolls out its share, groups ``rank, rank + N, ...`` (`spread`):
   a group never spans ranks, and the union of the ranks' groups is the list one
   process would roll out;
2. gathers every rank's trajectories, so each rank holds the whole batch: the
   sampler learns from the same episodes on every rank (its state stays equal),
   advantages and rollout metrics are those of the whole batch, and rank 0 writes
   the episodes;
3. trains on its share of the kept groups (`mine`). Each micro-batch's loss is
   scaled by its share of the *global* averaging unit (policy tokens of the whole
   batch for a token-mean loss, sequences otherwise: `losses.batch_share`), summed
   across ranks (`total`), times the world size because DDP averages gradients. The
   synchronised gradient is then that of one process on the whole batch;
4. reduces the loss diagnostics (`sum_metrics`); rank 0 alone (`is_writer`) writes
   the run directory: config, metrics, episodes, checkpoints and the final model.

DDP (`torch.nn.parallel.DistributedDataParallel`) keeps a full copy of the model on
every rank and all-reduces gradients once per optimiser step (micro-batches before
the last accumulate under ``no_sync``). With ``shard=True`` FSDP2 (`fully_shard`,
per decoder layer and the whole model) shards weights, gradients and optimiser state
instead. Every training pass is then a collective, so ranks must run the same passes
(`lockstep`: no prompt sharing, empty passes for a rank short of micro-batches);
rollouts, whose pass counts differ by rank, gather the whole model once for the phase
(`generating`), so its bf16 weights must still fit one device; checkpoints gather the
whole state to rank 0 (`full_state`) and load back into shards (`load_full_state`).

A rank that dies stops the others: each collective waits at most ``timeout_s`` and
a broken or silent peer becomes one `RankFailure` naming what was being waited for
(torchrun then stops the job and names the rank that failed first; with
``--max-restarts`` it restarts every rank and the trainer resumes from the last
checkpoint).

Left out: under FSDP, a reference model, the warm start and LoRA (`check_sharding`
says so at start); tensor and pipeline parallelism; generation on an inference server
(point the policy at one); and checkpoints readable without a shared filesystem:
every rank reads the checkpoint rank 0 names, so ``output_dir`` must be on storage
every node sees when a multi-node run resumes.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import inspect
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = ["DataParallel", "RankFailure"]

T = TypeVar("T")
R = TypeVar("R")

_COMM_FAILURES = (
    "connection closed by peer",
    "connection reset",
    "timed out",
    "timeout",
    "broken pipe",
    "nccl",
    "gloo",
)


class RankFailure(RuntimeError):
    """A collective failed: another rank died, or did not answer within the timeout."""


class _Forward(torch.nn.Module):
    """Runs a closure as its forward pass, so DDP's hooks wrap whatever the trainer
    computes with the model (the chunked log-probs call the decoder and the head,
    never the model's own ``forward``)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, compute: Callable[[], Any]) -> Any:
        return compute()


class DataParallel:
    """One process (``world_size == 1``: every method is the identity) or one rank of a
    torchrun job. Build it with `from_environment`."""

    def __init__(
        self,
        *,
        rank: int = 0,
        world_size: int = 1,
        local_rank: int = 0,
        timeout_s: float = 600.0,
        owns_group: bool = False,
        shard: bool = False,
    ) -> None:
        self.rank = rank
        self.shard = shard
        self.world_size = world_size
        self.local_rank = local_rank
        self.timeout_s = timeout_s
        self._owns_group = owns_group
        self._wrapped: torch.nn.Module | None = None

    @classmethod
    def from_environment(cls, timeout_s: float = 600.0, *, shard: bool = False) -> DataParallel:
        """A rank of the process group torchrun describes in ``WORLD_SIZE``, ``RANK`` and
        ``LOCAL_RANK`` (joining it unless the caller already has), or one process."""
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if dist.is_available() and dist.is_initialized():
            world = dist.get_world_size()
            return cls(rank=dist.get_rank(), world_size=world, local_rank=local, timeout_s=timeout_s, shard=shard)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls(timeout_s=timeout_s)
        if not dist.is_available():
            raise RuntimeError(f"WORLD_SIZE={world} asks for {world} ranks, but this torch has no torch.distributed")
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local)
        timeout = datetime.timedelta(seconds=timeout_s)
        store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
        # After a restart (torchrun --max-restarts) the agent's store still holds the
        # last attempt's addresses: a rank reading one before its peer rewrote it would
        # dial a dead port. Each attempt keeps its keys apart.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = dist.PrefixStore(f"agentenv/attempt-{attempt}", store)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
        return cls(rank=rank, world_size=world, local_rank=local, timeout_s=timeout_s, owns_group=True, shard=shard)

    # -- what a rank is ------------------------------------------------------------

    @property
    def active(self) -> bool:
        """More than one rank."""
        return self.world_size > 1

    @property
    def is_writer(self) -> bool:
        """Rank 0: the one rank that writes the run directory and prints progress."""
        return self.rank == 0

    @property
    def seed_salt(self) -> tuple[int, ...]:
        """Appended to the generation seed: ranks sample from different streams, and one
        process keeps the seeds it had before data parallelism existed."""
        return (self.rank,) if self.active else ()

    @property
    def loss_scale(self) -> float:
        """DDP averages gradients over ranks; losses already divided by the global unit
        are multiplied back so the ranks' gradients add up."""
        return float(self.world_size)

    def check_groups(self, n_groups: int, group_size: int) -> None:
        """Every rank needs at least one group of the step to roll out."""
        if n_groups < self.world_size:
            raise ValueError(
                f"batch_size holds {n_groups} groups for {self.world_size} ranks, so some ranks would have none; "
                f"set batch_size >= {group_size * self.world_size} (group_size x ranks)"
            )

    def check_async(self, async_rollouts: bool) -> None:
        """Refuse asynchronous rollouts on several ranks: the producer thread would gather
        rollouts across ranks while the learner synchronises gradients, two threads'
        collectives on one process group."""
        if self.world_size > 1 and async_rollouts:
            self.close()
            raise ValueError(
                "async_rollouts = true does not run under torchrun yet; set it false to train data-parallel"
            )

    def check_sharding(self, *, kl_coef: float, sft_steps: int, lora_r: int) -> None:
        """What sharded training does not do yet, said before the run starts."""
        if not self.lockstep:
            return
        unsupported = [
            ("kl_coef=0", "a reference model (a copy of the sharded model)", kl_coef > 0),
            ("sft_steps=0", "the warm start (it trains the model outside FSDP's root)", sft_steps > 0),
            ("lora_r=0", "LoRA adapters", lora_r > 0),
        ]
        for setting, what, on in unsupported:
            if on:
                raise ValueError(f"data_parallel='fsdp' does not support {what}; set data_parallel='ddp' or {setting}")

    def place(self, device: torch.device) -> torch.device:
        """This rank's device: ``cuda:LOCAL_RANK`` when the trainer asked for CUDA."""
        if self.active and device.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return device

    # -- the model -------------------------------------------------------------------

    def wrap(self, model: torch.nn.Module, *, bf16: bool = False) -> None:
        """Make ``model`` data-parallel (rank 0's weights are copied to every rank). The
        trainer keeps using ``model`` itself; training passes go through `forward`.
        Sharded with ``bf16`` (on a GPU): FSDP2 gathers the float32 master weights as bf16
        for compute and reduces gradients in float32 (its MixedPrecisionPolicy)."""
        if not self.active:
            return
        if self.shard:
            with self._guard("sharding the model"):
                self._wrapped = _fully_shard(model, bf16=bf16)
            return
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [self.local_rank] if next(model.parameters()).device.type == "cuda" else None
        # Buffers are constants here (rotary frequencies): synced once, not per forward
        # pass (the pass counts differ between ranks).
        known = inspect.signature(DistributedDataParallel).parameters
        buffers: dict[str, Any] = (
            {"forward_sync_buffers": False} if "forward_sync_buffers" in known else {"broadcast_buffers": False}
        )
        with self._guard("sharing the initial weights"):
            self._wrapped = DistributedDataParallel(_Forward(model), device_ids=device_ids, **buffers)

    def forward(self, compute: Callable[[], R]) -> R:
        """Run a training forward pass (``compute`` uses the model) under DDP's hooks,
        so its backward synchronises gradients."""
        if self._wrapped is None:
            return compute()
        with self._guard("a training forward pass"):
            return self._wrapped(compute)

    @contextlib.contextmanager
    def accumulating(self, *, sync: bool) -> Iterator[None]:
        """A micro-batch's forward and backward pass; gradients are reduced across ranks
        only on the pass with ``sync`` (the last of the optimiser step)."""
        from torch.nn.parallel import DistributedDataParallel

        if self.shard and self._wrapped is not None:
            self._wrapped.set_requires_gradient_sync(sync)  # type: ignore[operator]
            with self._guard("synchronising gradients"):
                yield
            return
        if not isinstance(self._wrapped, DistributedDataParallel):
            yield
            return
        with self._guard("synchronising gradients"), contextlib.nullcontext() if sync else self._wrapped.no_sync():
            yield

    @property
    def lockstep(self) -> bool:
        """Whether every training forward pass is a collective (FSDP gathers each layer's
        weights), so ranks must run the same passes: no prompt sharing, whose number of
        decoder calls depends on the micro-batch."""
        return self.shard and self.active

    @contextlib.contextmanager
    def generating(self) -> Iterator[None]:
        """Rollouts and evaluations, where each rank runs its own number of forward
        passes: under FSDP every shard is gathered once for the phase (the full weights
        then sit on each device) instead of once per pass."""
        if not (self.shard and self._wrapped is not None):
            yield
            return
        from torch.distributed.fsdp import FSDPModule

        sharded = [m for m in self._wrapped.modules() if isinstance(m, FSDPModule)]
        with self._guard("gathering the weights for generation"):
            for m in sharded:
                m.set_reshard_after_forward(False, recurse=False)
                m.unshard()
        try:
            yield
        finally:
            for m in sharded:
                m.reshard()
                m.set_reshard_after_forward(True, recurse=False)

    def full_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Under FSDP, the whole (unsharded) model and optimiser state dicts, on the CPU
        of every rank (a collective: every rank calls it); None otherwise."""
        if not (self.shard and self._wrapped is not None):
            return None
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        with self._guard("gathering the state for a checkpoint"):
            return get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def load_full_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, weights: Any, optimizer_state: Any
    ) -> None:
        """Load what `full_state` gave (read from a checkpoint) into the sharded model."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        with self._guard("loading a checkpoint"):
            set_state_dict(
                model,
                optimizer,
                model_state_dict=weights,
                optim_state_dict=optimizer_state,
                options=StateDictOptions(full_state_dict=True),
            )

    def broadcast_parameters(self, model: torch.nn.Module) -> None:
        """Copy rank 0's weights to every rank (after a warm start each rank ran alone)."""
        if not self.active:
            return
        with self._guard("sharing the warm-started weights"), torch.no_grad():
            for tensor in [*model.parameters(), *model.buffers()]:
                dist.broadcast(tensor, src=0)

    # -- data ---------------------------------------------------------------------

    def mine(self, n: int, rank: int | None = None) -> range:
        """Indices of this rank's (or ``rank``'s) items among ``n``: ``rank, rank + N, ...``."""
        return range(self.rank if rank is None else rank, n, self.world_size)

    def spread(self, items: Sequence[T], run: Callable[[list[T]], list[R]], *, what: str) -> list[R]:
        """``run`` on this rank's share of ``items`` (one result per item), and every
        rank's results gathered back into the order of ``items``."""
        if not self.active:
            return run(list(items))
        idx = list(self.mine(len(items)))
        local = run([items[i] for i in idx])
        if len(local) != len(idx):
            raise ValueError(f"expected one result per item ({len(idx)}), got {len(local)}")
        parts: list[list[R]] = [[] for _ in range(self.world_size)]
        with self._guard(what):
            dist.all_gather_object(parts, local)
        out: list[Any] = [None] * len(items)
        for rank, part in enumerate(parts):
            for i, result in zip(self.mine(len(items), rank), part, strict=True):
                out[i] = result
        return out

    def agree(self, value: T, *, what: str) -> T:
        """Rank 0's ``value``, on every rank."""
        if not self.active:
            return value
        box: list[Any] = [value]
        with self._guard(what):
            dist.broadcast_object_list(box, src=0)
        return box[0]

    # -- reductions -------------------------------------------------------------

    def total(self, value: float, *, what: str = "summing across ranks") -> float:
        """The sum of ``value`` over ranks."""
        return self._reduce(value, dist.ReduceOp.SUM, what)

    def most(self, value: int, *, what: str = "agreeing on the micro-batches") -> int:
        """The largest ``value`` of any rank."""
        return int(self._reduce(float(value), dist.ReduceOp.MAX, what))

    def weighted_mean(self, value: float, weight: float, *, what: str = "averaging a metric") -> float:
        """Mean of ``value`` over ranks, rank by rank weighted by ``weight``."""
        if not self.active:
            return value
        total = self.total(weight, what=what)
        return self.total(value * weight, what=what) / total if total else 0.0

    def sum_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Each metric summed over ranks (metrics that only some ranks have included)."""
        if not self.active:
            return metrics
        parts: list[dict[str, float]] = [{} for _ in range(self.world_size)]
        with self._guard("reducing the loss metrics"):
            dist.all_gather_object(parts, metrics)
        out: dict[str, float] = defaultdict(float)
        for part in parts:
            for k, v in part.items():
                out[k] += v
        return dict(out)

    def _reduce(self, value: float, op: Any, what: str) -> float:
        if not self.active:
            return value
        device = torch.device("cuda", self.local_rank) if dist.get_backend() == "nccl" else torch.device("cpu")
        t = torch.tensor([value], dtype=torch.float64, device=device)
        with self._guard(what):
            dist.all_reduce(t, op=op)
        return float(t.item())

    # -- failures and the end --------------------------------------------------------

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except RuntimeError as e:
            if isinstance(e, RankFailure) or not _is_comm_failure(e):
                raise
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise RankFailure(
                f"rank {self.rank} of {self.world_size}: {what} failed: another rank died or did not answer "
                f"within {self.timeout_s:g} s ({first}). The rank that failed first says why (torchrun "
                "prints it); run the same command again to resume from the last checkpoint"
            ) from e

    def barrier(self, *, what: str) -> None:
        if self.active:
            with self._guard(what):
                dist.barrier()

    def close(self) -> None:
        """Leave the process group this object joined (a no-op otherwise); the trainer
        then works alone (an `evaluate` after `train` plays every episode itself)."""
        if self._owns_group and dist.is_initialized():
            # destroy_process_group now and then never returns, long after every rank has
            # passed the run's last barrier (pytorch/pytorch#75097): a finished run whose
            # results are all written would then hang at its very end. So it runs aside
            # and is waited for at most timeout_s; a daemon thread does not keep the
            # process from exiting.
            left = threading.Event()

            def leave() -> None:
                dist.destroy_process_group()
                left.set()

            threading.Thread(target=leave, name="destroy-process-group", daemon=True).start()
            if not left.wait(self.timeout_s):
                logging.getLogger(__name__).warning(
                    "rank %d: leaving the process group did not finish within %g s; going on without it",
                    self.rank,
                    self.timeout_s,
                )
            self._owns_group = False
            self.world_size, self._wrapped = 1, None


def checkpoint_reachable(path: Path | None, data: DataParallel, *, marker: str = "trainer_state.json") -> Path | None:
    """The checkpoint rank 0 resumes from, on every rank; an error naming the fix when
    this rank cannot read it (its file ``marker``)."""
    chosen = data.agree(None if path is None else str(path), what="agreeing on the checkpoint to resume from")
    if chosen is None:
        return None
    if not (Path(chosen) / marker).exists():
        raise RankFailure(
            f"rank {data.rank} cannot read the checkpoint {chosen} that rank 0 resumes from; "
            "put output_dir on a filesystem every node shares"
        )
    return Path(chosen)


def _is_comm_failure(e: BaseException) -> bool:
    if isinstance(e, getattr(dist, "DistError", ())):
        return True
    text = str(e).lower()
    return any(marker in text for marker in _COMM_FAILURES)


def _fully_shard(model: torch.nn.Module, *, bf16: bool = False) -> torch.nn.Module:
    """FSDP2 over each decoder layer, then the whole model under a `_Forward` root; with
    ``bf16``, parameters gathered in bf16 for compute, gradients reduced in float32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
    shard = functools.partial(fully_shard, mp_policy=policy) if policy is not None else fully_shard

    get_decoder = getattr(model, "get_decoder", None)
    layers = getattr(get_decoder() if callable(get_decoder) else None, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"data_parallel='fsdp' needs a decoder with a list of layers; {type(model).__name__} has none")
    for layer in layers:
        shard(layer)
    root = _Forward(model)
    shard(root)
    # One empty pass through the root makes it FSDP's root before a rollout calls the
    # layers directly (the first FSDP module to run takes that role).
    # The root keeps its weights gathered after a pass: shard them again, so the model's
    # parameters (what the optimiser is given) are the shards.
    with torch.no_grad():
        root(lambda: None)
    root.reshard()  # type: ignore[operator]
    return root
