"""`GRPOTrainer`: multi-turn GRPO on any registered env.

Each step: draw groups of tasks, roll out G episodes per task with the
transformers policy (all live episodes batched per turn), compute task-level and
step-level advantages, and update the model with the configured loss on the
token-exact sequences. Metrics go to metrics.jsonl, the console and the experiment
trackers of ``report_to`` (`trackers`; a finished run's report too);
the episodes of each step to trajectories/step-NNNNNN.jsonl, the held-out episodes
of each evaluation to evals/step-NNNNNN.jsonl; checkpoints to output_dir/checkpoints.
``agentenv report`` turns the folder into one HTML page.

The trainer is the loop; each part is a module of its own, usable alone:
`collector.Collector` gathers a step's batch, `rlpr.RLPRRewards` rescores it with
``reward="rlpr"``, `updater.Updater` makes the optimiser step, `evaluator.Evaluator`
measures the held-out tasks (split off by `evaluator.HeldOutSplit`), and
`run_dir.RunDir` claims, resumes, checkpoints and exports the run's directory. The
model and its policies are set up by `model_setup`, the envs by `sources`.

Left out: the parts' own logic (their modules), and a run's command line (`agentenv train`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import torch

from agentenv.core.task_sampler import TaskSampler
from agentenv.core.trajectory import Trajectory
from agentenv.rollout.ray import RayExecutor
from agentenv.trainers.async_rollout import RolloutBatch
from agentenv.trainers.checkpoint import WarmStartCheckpoint
from agentenv.trainers.collector import Batches, Collector, batch_metrics, group_weights
from agentenv.trainers.compute import ComputeMeter, world_size
from agentenv.trainers.config import GRPOConfig
from agentenv.trainers.distributed import DataParallel
from agentenv.trainers.evaluator import Evaluator, HeldOutSplit, success_rate
from agentenv.trainers.metrics import MetricsLogger, truncate_metrics
from agentenv.trainers.model import keep_freed_cpu_memory, resolve_device
from agentenv.trainers.model_setup import make_policies, model_and_tokenizer, prepare_model
from agentenv.trainers.progress import Phase, ProgressBoard
from agentenv.trainers.rlpr import RLPRRewards, RLPRScorer
from agentenv.trainers.run_dir import RunDir
from agentenv.trainers.sft import Imitation, oracle_episodes
from agentenv.trainers.sources import Envs, build_source, env_weights
from agentenv.trainers.task_sampler import default_sampler
from agentenv.trainers.trackers import Trackers
from agentenv.trainers.updater import Updater, check_served_groups, generation_budget

if TYPE_CHECKING:
    from agentenv.trainers.vllm_engine import VLLMEngine

__all__ = ["GRPOTrainer"]


class GRPOTrainer:
    """Trains ``model`` on ``envs`` with multi-turn GRPO.

    Args:
        model: A causal LM module, a local path or hub id, or "tiny".
        tokenizer: Its tokenizer (None when ``model`` is a path or "tiny").
        envs: Registered ids or env factories, as a list or a mapping to weights
            (None: ``config.envs``).
        config: The run's `GRPOConfig`.
        sampler: A task sampler, an `agentenv.core.task_sampler.TaskSampler` (default: the
            failure miner when ``config.miner`` is set, otherwise uniform over each
            env's train split).
        on_step: Called after each step with its number and metrics (which hold its
            time split, ``time/*``): a progress bar, a timer, an early stop by raising.
        on_sft_step: Called after each step of the warm start with its number (from 1)
            and its row (``sft/loss``, ``sft/lr``, ``time/sft_s``), the same way.
    """

    def __init__(
        self,
        model: torch.nn.Module | str = "tiny",
        tokenizer: Any = None,
        envs: Envs | None = None,
        config: GRPOConfig | None = None,
        *,
        end_of_turn: str | None = None,
        sampler: TaskSampler | None = None,
        on_step: Callable[[int, dict[str, Any]], None] | None = None,
        on_sft_step: Callable[[int, dict[str, Any]], None] | None = None,
    ) -> None:
        self.config = config = config or GRPOConfig()
        self.on_step = on_step
        self.on_sft_step = on_sft_step
        if config.torch_threads is not None:  # first: loading the model computes too
            torch.set_num_threads(config.torch_threads)
        # Under torchrun: this rank of the job (data-parallel); otherwise one process.
        self.dist = DataParallel.from_environment(config.dist_timeout_s, shard=config.data_parallel == "fsdp")
        self.dist.check_groups(config.batch_size // config.group_size, config.group_size)
        self.dist.check_sharding(kl_coef=config.kl_coef, sft_steps=config.sft_steps, lora_r=config.lora_r)
        self.dist.check_async(config.async_rollouts)
        self.device = self.dist.place(resolve_device(config.device))
        # The warm start, the steps and each evaluation show their progress (rank 0 alone).
        self.progress = ProgressBoard(enabled=self.dist.is_writer)
        if self.device.type == "cpu" and config.cpu_keep_freed_memory:
            keep_freed_cpu_memory()
        weights = env_weights(envs if envs is not None else config.envs)
        self.executor: str | RayExecutor = "thread"
        if config.ray is not None:  # joined first: a missing Ray or an unreachable cluster fails in seconds
            self.executor = RayExecutor(config.ray)
            self.executor.connect()
        model, self.tokenizer = model_and_tokenizer(
            model, tokenizer, config, [e for e in weights if isinstance(e, str)]
        )
        self.model = prepare_model(model, config, self.device)
        self.dist.wrap(self.model, bf16=self._bf16)
        split = HeldOutSplit(config, announce=self.dist.is_writer)
        built = [build_source(env, weight, config, split) for env, weight in weights.items()]
        self.sources = [source for source, _ in built]
        self._max_turns = max([1, *(turns for _, turns in built)])  # the longest episode of any env
        self.sampler: TaskSampler = sampler or default_sampler(self.sources, config.seed, config.miner)
        if isinstance(self.executor, RayExecutor):  # no room for the actors fails here, not at the first step
            self.executor.start()
        policies = make_policies(
            self.model, self.tokenizer, config, self.device, bf16=self._bf16, end_of_turn=end_of_turn
        )
        self.policy, self.eval_policy = policies.rollout, policies.held_out
        self.engine: VLLMEngine | None = policies.engine
        self.rlpr = RLPRScorer.from_config(config, self.tokenizer) if config.reward == "rlpr" else None
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
        self.step = 0
        self.history: list[dict[str, Any]] = []
        self._warm: WarmStartCheckpoint | None = None  # a stopped warm start, to go on from
        self._make_parts(split)

    # -- set-up -----------------------------------------------------------------

    def _make_parts(self, split: HeldOutSplit) -> None:
        """The parts the loop runs, sharing the model, optimiser, sources and policies."""
        cfg, dist, device = self.config, self.dist, self.device
        self.run = RunDir(cfg, dist)
        self.collector = Collector(cfg, self.sources, self.sampler, dist, device, self.executor)
        self.batches = Batches(self.collector, self.policy, self.model, cfg)
        self.updater = Updater(
            self.model,
            self.optimizer,
            self.policy,
            cfg,
            dist,
            device,
            bf16=self._bf16,
            budget=generation_budget(cfg, self._max_turns),
        )
        self.evaluator = Evaluator(
            cfg, self.sources, self.eval_policy, dist, self.executor, split.twins, progress=self.progress
        )
        self.rlpr_rewards: RLPRRewards | None = None
        if self.rlpr is not None:
            pad_id, bf16 = self.policy.pad_id, self._bf16
            self.rlpr_rewards = RLPRRewards(
                self.rlpr, self.model, cfg, dist, sources=self.sources, pad_id=pad_id, device=device, bf16=bf16
            )

    @property
    def _bf16(self) -> bool:
        """Compute in bf16 (autocast over the float32 masters): on a GPU, with ``bf16``."""
        return self.device.type == "cuda" and self.config.bf16

    @property
    def generation_budget(self) -> int:
        """The most policy tokens one sequence can hold: ``max_new_tokens`` per turn for
        the longest episode, within ``max_seq_len`` (Dr. GRPO's constant divisor)."""
        return generation_budget(self.config, self._max_turns)

    @property
    def ref_model(self) -> torch.nn.Module | None:
        """The frozen reference of the KL penalty: made when training starts (``kl_coef > 0``)."""
        return self.updater.ref_model

    @ref_model.setter
    def ref_model(self, model: torch.nn.Module | None) -> None:
        self.updater.ref_model = model

    @property
    def run_dir(self) -> Path:
        """``output_dir``, where the run writes (`run_dir.RunDir`)."""
        return self.run.path

    # -- the loop ---------------------------------------------------------------

    def train(self) -> list[dict[str, Any]]:
        """Run to ``config.steps``; returns the metrics of each step."""
        resumed = self._maybe_resume()
        self.run.start(self.tokenizer, resumed=resumed)
        at = self.step if resumed else None
        sft_at = self._warm.sft_step if self._warm is not None else None  # later warm-start rows run again
        try:
            log = _StepLog.open(
                self.run.path,
                self.config,
                self.history,
                writer=self.dist.is_writer,
                resume_step=at,
                sft_step=sft_at,
                stream=self.progress.stream,
            )
        except BaseException:  # a tracker that cannot start (no W&B login): nothing ran, nothing is claimed
            self.run.release()
            raise
        self.history = log.history
        finished = False
        try:
            self._before_rl(resumed, log)
            with self.progress.phase("GRPO", self.config.steps, done=self.step) as steps:
                while self.step < self.config.steps:
                    self._train_one_step(log, steps)
            finished = True
        finally:
            self.close()
            self.run.release()  # before the report is built for the trackers: the run is no longer in progress
            log.close(failed=not finished)  # a finished run's report goes to the trackers
            if isinstance(self.executor, RayExecutor):
                self.executor.close()  # a later evaluate() starts the actors again
        self.run.export(self.model, self.optimizer, self.tokenizer)
        self.dist.close()
        return self.history

    def _before_rl(self, resumed: bool, log: _StepLog) -> None:
        """The warm start (or what a stopped one left to do), the KL reference, and the
        start's evaluation (unless a stopped run logged it already)."""
        cfg = self.config
        if cfg.sft_steps > 0 and (not resumed or (self._warm is not None and not self._warm.done)):
            self._warm_start(log)
            self.dist.broadcast_parameters(self.model)  # every rank ran it: rank 0's weights win
        self._warm = None
        if cfg.kl_coef > 0 and self.ref_model is None:
            self.ref_model = self._reference(resumed)
        if self.step == 0 and cfg.eval_episodes > 0 and cfg.eval_first:
            logged = any(row.get("step") == 0 for row in self.history)  # by a run stopped after it
            if not self.dist.agree(logged, what="reading the run's metrics"):  # rank 0 alone reads them
                log.record(0, {**log.compute.totals(), **self._held_out_metrics()})

    def _reference(self, resumed: bool) -> torch.nn.Module:
        """The frozen policy the KL penalty pulls toward: the one RL starts from. That is the
        model now, unless the run resumed past its start: then the weights the warm start
        ended with, read back from its last checkpoint (without a warm start, `_maybe_resume`
        copied the model as loaded before the checkpoint's weights replaced it)."""
        weights = self.run.warm_started_weights() if resumed and self.step > 0 else None
        if resumed and self.step > 0 and weights is None and self.dist.is_writer:
            print(
                "the run kept no warm-start checkpoint: the KL reference is the resumed policy, "
                "not the warm-started one it had"
            )
        return self._frozen_copy(weights)

    def _frozen_copy(self, weights: dict[str, Any] | None = None) -> torch.nn.Module:
        """A frozen copy of the model (with ``weights`` in it, when given)."""
        ref = copy.deepcopy(self.model).eval().requires_grad_(False)
        if weights is not None:
            ref.load_state_dict(weights)
        if self._bf16:  # frozen and only ever run under bf16 autocast: half the memory
            ref.to(torch.bfloat16)
        return ref

    def _train_one_step(self, log: _StepLog, progress: Phase) -> None:
        cfg = self.config
        began = time.perf_counter()
        metrics = self.train_step()
        metrics.update(log.compute.add(metrics, time.perf_counter() - began))
        self.step += 1
        last = self.step == cfg.steps
        if cfg.eval_episodes > 0 and (last or (cfg.eval_every and self.step % cfg.eval_every == 0)):
            metrics.update(self._held_out_metrics())
        log.record(self.step, metrics)
        progress.advance()
        if self.on_step is not None:
            self.on_step(self.step, metrics)
        if last or self.step % cfg.save_every == 0:
            self._checkpoint()

    def _checkpoint(self) -> None:
        rlpr = {"rlpr": self.rlpr.threshold.state_dict()} if self.rlpr is not None else {}
        state = {"sampler": self.batches.sampler_state(), **rlpr}
        self.run.checkpoint(self.step, self.model, self.optimizer, state)

    def _maybe_resume(self) -> bool:
        """Go on from the run's latest checkpoint: a step's, else the warm start's (which
        leaves ``step`` at 0 and, while the warm start had steps to go, ``_warm`` set)."""
        cfg = self.config
        if cfg.kl_coef > 0 and cfg.sft_steps == 0 and self.ref_model is None:
            self.ref_model = self._frozen_copy()  # RL starts from the model as loaded, resumed or not
        if not cfg.resume:
            return False
        restore = {"sampler": self.sampler.load_state_dict}
        if self.rlpr is not None:
            restore["rlpr"] = self.rlpr.threshold.load_state_dict
        step = self.run.resume(self.model, self.optimizer, restore)
        if step is None and cfg.sft_steps > 0:
            self._warm = self.run.resume_warm_start(self.model)
            step = None if self._warm is None else 0
        if step is None:
            return False
        self.step = step
        self._push_weights()
        return True

    def warm_start(self) -> list[float]:
        """The supervised warm start: each env's oracle plays its training tasks, and
        ``sft_steps`` steps imitate the episodes it solved; then the vLLM engine, if any,
        gets the weights. `train` runs it first (and checkpoints it; a resumed run goes on
        where it stopped); call it yourself to keep one warm start for several runs (save
        the model, start each from its folder with ``sft_steps=0``). Returns the losses."""
        if self.config.sft_steps == 0:
            raise ValueError("warm_start() with sft_steps=0 has nothing to do; set sft_steps > 0")
        return self._warm_start(None)

    def _warm_start(self, log: _StepLog | None) -> list[float]:
        """The warm start; within `train` (``log``): each step's row to metrics.jsonl, a
        checkpoint every ``sft_checkpoint_every`` steps and at the end, and a stopped warm
        start (``_warm``) goes on from its checkpoint on the same episodes."""
        cfg, saved = self.config, self._warm if log is not None else None
        began = time.monotonic() - (saved.time_s if saved is not None else 0.0)  # time/sft_s spans a resume
        if saved is None or saved.episodes is None:
            print(f"warm start: the oracle plays the training tasks, then {cfg.sft_steps} supervised steps", flush=True)
            tasks = sum(len(source.train) for source in self.sources)
            with self.progress.phase("oracle", tasks, unit="episode") as played:
                episodes = oracle_episodes(self.sources, on_episode=lambda _episode: played.advance())
                played.note = f"{len(episodes)} solved"
        else:
            episodes = saved.episodes
        imitation = Imitation.for_run(
            self.model, self.tokenizer, episodes, cfg, end_of_turn=self.policy.delta.end_of_turn, bf16=self._bf16
        )
        if saved is not None and saved.state is not None:
            imitation.load_state_dict(saved.state)
        losses: list[float] = []
        with self.progress.phase("warm start", cfg.sft_steps, done=min(imitation.done, cfg.sft_steps)) as bar:
            while imitation.done < cfg.sft_steps:
                losses.append(imitation.step())
                bar.advance(note=f"loss {losses[-1]:.3f}")
                spent = time.monotonic() - began
                row = {"sft/loss": losses[-1], "sft/lr": imitation.lr, "time/sft_s": spent}
                if log is not None:
                    log.sft(imitation.done, row)
                if self.on_sft_step is not None:
                    self.on_sft_step(imitation.done, row)
                if log is None:
                    continue
                if imitation.done % cfg.sft_checkpoint_every == 0 and imitation.done < cfg.sft_steps:
                    state = imitation.state_dict()
                    self.run.checkpoint_warm_start(
                        self.model, sft_step=imitation.done, time_s=spent, state=state, episodes=episodes
                    )
        if log is not None:  # the weights RL starts from: a resumed run's KL reference
            self.run.checkpoint_warm_start(self.model, sft_step=imitation.done, time_s=time.monotonic() - began)
        self._push_weights()
        return losses

    def evaluate(self, episodes: int | None = None) -> float:
        """Success rate on the held-out tasks (the same tasks and seeds every time), counted
        as the ``eval/*`` metrics count it: the env's infra failures left out, an episode
        the policy failed to answer a failed one (`evaluator.success_rate`)."""
        self._engine_running()
        return success_rate(self.evaluator.episodes(episodes))

    def _held_out_metrics(self) -> dict[str, Any]:
        """The ``eval/*`` metrics of step ``step`` (`evaluator.Evaluator.metrics`); the
        episodes go to output_dir/evals/step-NNNNNN.jsonl."""
        self._engine_running()
        trajs = self.evaluator.episodes()
        if self.config.save_trajectories:
            self.run.write_episodes("evals", self.step, trajs)
        return self.evaluator.metrics(trajs)

    # -- one step ---------------------------------------------------------------

    def train_step(self) -> dict[str, Any]:
        """One step at ``step`` (which it leaves as it is: `train` advances it): collect the
        batch, write its episodes, rescore it (RLPR), update; returns the step's metrics."""
        self._engine_running()
        batch, extra = self.batches.next(self.step)
        trajs = [t for g in batch.groups for t in g]
        if self.config.save_trajectories:
            self.run.write_episodes("trajectories", self.step + 1, trajs)
        metrics = batch_metrics(batch)
        metrics.update(extra)
        timer = dict(batch.timer)
        groups, draws = batch.groups, batch.draws
        if self.rlpr_rewards is not None:
            start = time.perf_counter()
            groups, draws, rlpr_metrics = self.rlpr_rewards.apply(groups, draws)
            metrics.update(rlpr_metrics)
            timer["rlpr_s"] = time.perf_counter() - start
        start = time.perf_counter()
        if groups:
            weights = group_weights(draws) if self.config.importance_weighting else None
            rewards = [self.sources[d.source].reward_weights for d in draws]
            metrics.update(self.updater.update(groups, rewards, weights, step=self.step))
        else:  # the std filter left no group
            metrics.update({"loss": 0.0, "skipped_update": 1.0})
        timer["train_s"] = time.perf_counter() - start
        self.batches.publish(self.model, self.step + 1)
        if not metrics.get("skipped_update"):
            timer["push_s"] = self._push_weights()
        return _with_throughput(metrics, timer, trajs, batch)

    def update(self, groups: Sequence[Sequence[Trajectory]]) -> dict[str, Any]:
        """One optimiser step on ``groups`` rolled out elsewhere: each group the G episodes
        of one task and seed, sampled by another implementation of this model (a served
        one: `agentenv.OpenAIPolicy` with ``return_tokens=True`` against vLLM or SGLang,
        given these weights). Every turn must carry the ids it was prompted with and
        generated, with their log-probs; the gap between those and the trainer's own is
        corrected by ``sampler_is`` (``sampler/*`` in the returned metrics). Advances the
        step (the learning-rate schedule) and gives the vLLM engine, if any, the new weights.
        The episodes' env (`Trajectory.env_id`) picks its reward weights among the
        trainer's envs; one unknown to it counts every reward component once."""
        groups = [list(g) for g in groups]
        check_served_groups(groups)
        by_id = {s.env_id: s.reward_weights for s in self.sources if s.env_id is not None}
        rewards = [by_id.get(g[0].env_id or "", {}) for g in groups]
        metrics = self.updater.update(groups, rewards, step=self.step, foreign=True)
        self.step += 1
        if not metrics.get("skipped_update"):
            metrics["time/push_s"] = self._push_weights()
        metrics["tokens/trained"] = int(metrics.pop("_train_tokens", 0))
        return metrics

    # -- the rollout engine -----------------------------------------------------

    def _push_weights(self) -> float:
        """Give the running vLLM engine the model's weights; returns the seconds it took
        (0 without one: a stopped engine takes the weights of when it starts again)."""
        if self.engine is None or self.engine.closed:
            return 0.0
        start = time.perf_counter()
        self.engine.push(self.model)
        return time.perf_counter() - start

    def _engine_running(self) -> None:
        """Start the vLLM engine again on the current weights if `close` stopped it."""
        if self.engine is not None and self.engine.closed:
            self.engine.start(self.model)

    def close(self) -> None:
        """Stop the rollout thread of ``async_rollouts`` and the vLLM engine, freeing its
        memory (`train` does when it returns); a later step or evaluation starts them again."""
        self.batches.close()
        if self.engine is not None:
            self.engine.close()


@dataclass
class _StepLog:
    """Where each step's metrics go: the trainer's history, and metrics.jsonl, the console
    and the trackers of ``report_to`` through rank 0's logger; with the run's cumulative compute."""

    history: list[dict[str, Any]]
    logger: MetricsLogger | None
    compute: ComputeMeter

    @classmethod
    def open(
        cls,
        path: Path,
        config: GRPOConfig,
        history: list[dict[str, Any]],
        *,
        writer: bool,
        resume_step: int | None,
        sft_step: int | None = None,
        stream: TextIO | None = None,
    ) -> _StepLog:
        """The log of a run in ``path`` that goes on from ``history``: on rank 0 (``writer``),
        with its metrics.jsonl, whose curve so far a run resumed at ``resume_step`` takes
        as its history, so a resumed (or finished) run reports it from step 0. A run resumed
        in its warm start, at ``sft_step``, drops the warm start's later rows (they run again).
        The console lines go to ``stream``."""
        logger = None
        if writer:
            if resume_step is not None and sft_step is not None:
                truncate_metrics(path / "metrics.jsonl", resume_step, sft_step=sft_step)
            trackers = Trackers.open(config.report_to, path, config.to_dict(), resume_step=resume_step)
            logger = MetricsLogger(
                path, total_steps=config.steps, trackers=trackers, stream=stream, resume_step=resume_step
            )
            if resume_step is not None:
                history = logger.records()
        return cls(history, logger, ComputeMeter.resumed(history, world_size()))  # cumulative, for `agentenv forecast`

    def record(self, step: int, metrics: dict[str, Any]) -> None:
        self.history.append({"step": step, **metrics})
        if self.logger is not None:
            self.logger.log(step, metrics)

    def sft(self, sft_step: int, metrics: dict[str, Any]) -> None:
        """A warm-start step's row (metrics.jsonl and the trackers; not the history)."""
        if self.logger is not None:
            self.logger.log_sft(sft_step, metrics)

    def close(self, *, failed: bool) -> None:
        if self.logger is not None:
            self.logger.close(failed=failed)


def _with_throughput(
    metrics: dict[str, Any], timer: dict[str, float], trajs: Sequence[Trajectory], batch: RolloutBatch
) -> dict[str, Any]:
    """``metrics`` with the step's time split (``time/*``), tokens and tokens per second."""
    metrics.update({f"time/{k}": v for k, v in timer.items()})
    gen_tokens = sum(len(g.token_ids) for t in trajs for g in t.generations if g is not None)
    metrics["gen_tokens_per_s"] = gen_tokens / max(timer["generate_s"], 1e-9)
    metrics["tokens/trained"] = int(metrics.pop("_train_tokens", 0))  # every rank's (`Updater.update` sums them)
    metrics["train_tokens_per_s"] = metrics["tokens/trained"] / max(timer["train_s"], 1e-9)
    metrics["tokens/generated"] = batch.generated_tokens
    return metrics
