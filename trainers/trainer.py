"""`GRPOTrainer`: multi-turn GRPO on any registered env.

Each step: draw groups of tasks, roll out G episodes per task with the
transformers policy (all live episodes batched per turn), compute task-level and
step-level advantages, and update the model with the configured loss on the
token-exact sequences. Metrics go to metrics.jsonl, the console and TensorBoard;
the episodes of each step to trajectories/step-NNNNNN.jsonl, the held-out episodes
of each evaluation to evals/step-NNNNNN.jsonl; checkpoints to output_dir/checkpoints.
``agentenv report`` turns the folder into one HTML page.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

import agentenv
from agentenv.core.env import Env
from agentenv.core.task import Task, TaskSet
from agentenv.core.task_sampler import Draw, TaskSampler
from agentenv.core.trajectory import Trajectory
from agentenv.core.types import Failure
from agentenv.eval.evaluation import outcomes, success_interval
from agentenv.miner import MinerSampler
from agentenv.rollout import rollout
from agentenv.rollout.ray import RayExecutor
from agentenv.trainers import advantages as adv
from agentenv.trainers.async_rollout import AsyncRollouts, RolloutBatch
from agentenv.trainers.batch import Example, TrainBatch, build_examples, collate, turn_advantages
from agentenv.trainers.checkpoint import clear_run, latest_checkpoint, load_checkpoint, other_run, save_checkpoint
from agentenv.trainers.compute import ComputeMeter, world_size
from agentenv.trainers.config import GRPOConfig
from agentenv.trainers.distributed import DataParallel, checkpoint_reachable
from agentenv.trainers.gemm import onednn_linear
from agentenv.trainers.logprobs import Opening, opening_pass, policy_logprobs
from agentenv.trainers.losses import batch_share, compute_loss, kl_k3, loss_kwargs, overlong_penalty
from agentenv.trainers.metrics import MetricsLogger, advantage_metrics, rollout_metrics
from agentenv.trainers.model import (
    Saveable,
    build_tiny,
    enable_gradient_checkpointing,
    keep_freed_cpu_memory,
    lean_activations,
    load_model,
    master_weights,
    quiet_progress_bars,
    resolve_device,
)
from agentenv.trainers.off_policy import sampler_importance_weights, truncated_importance_weights
from agentenv.trainers.policy import TokenPolicy, TransformersPolicy
from agentenv.trainers.rlpr import RLPRScorer, RLPRScores, StdThreshold
from agentenv.trainers.sft import sft
from agentenv.trainers.task_sampler import EnvSource, UniformSampler

if TYPE_CHECKING:
    from agentenv.trainers.vllm_engine import VLLMEngine

__all__ = ["GRPOTrainer"]

UPDATE_KL_PROBE = 4
"""Sequences (of the first micro-batch) on which ``update_kl`` is measured."""

EnvLike = str | Callable[[], Env]


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
    """

    def __init__(
        self,
        model: torch.nn.Module | str = "tiny",
        tokenizer: Any = None,
        envs: Sequence[EnvLike] | Mapping[str, float] | Mapping[EnvLike, float] | None = None,
        config: GRPOConfig | None = None,
        *,
        end_of_turn: str | None = None,
        sampler: TaskSampler | None = None,
        on_step: Callable[[int, dict[str, Any]], None] | None = None,
    ) -> None:
        self.config = config = config or GRPOConfig()
        self.on_step = on_step
        # Under torchrun: this rank of the job (data-parallel); otherwise one process.
        self.dist = DataParallel.from_environment(config.dist_timeout_s, shard=config.data_parallel == "fsdp")
        self.dist.check_groups(config.batch_size // config.group_size, config.group_size)
        self.dist.check_sharding(kl_coef=config.kl_coef, sft_steps=config.sft_steps, lora_r=config.lora_r)
        self.dist.check_async(config.async_rollouts)
        self.device = self.dist.place(resolve_device(config.device))
        if self.device.type == "cpu" and config.cpu_keep_freed_memory:
            keep_freed_cpu_memory()
        env_weights = _env_weights(envs if envs is not None else config.envs)
        self.executor: str | RayExecutor = "thread"
        if config.ray is not None:  # joined first: a missing Ray or an unreachable cluster fails in seconds
            self.executor = RayExecutor(config.ray)
            self.executor.connect()
        if isinstance(model, str):
            model_name = model if model != "tiny" or config.model == "tiny" else config.model
            if model_name == "tiny":
                ids = [e for e in env_weights if isinstance(e, str)] or ["arithmetic-v0"]
                model, tokenizer = build_tiny(ids, seed=config.seed)
            else:
                model, tokenizer = load_model(model_name)
        if tokenizer is None:
            raise ValueError("pass the model's tokenizer (or a model path, which loads it)")
        self.tokenizer = tokenizer
        positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        if isinstance(positions, int) and config.max_seq_len > positions:
            raise ValueError(
                f"max_seq_len ({config.max_seq_len}) is beyond the model's {positions} positions; "
                f"set max_seq_len <= {positions}"
            )
        self.model = self._prepare_model(model)
        self.dist.wrap(self.model, bf16=self._bf16)
        self._max_turns = 1  # the longest episode of any env: `generation_budget`
        self._twins: dict[str, int] = {}  # per env: held-out tasks that share content with training
        self.sources = [self._source(env, weight) for env, weight in env_weights.items()]
        self.sampler: TaskSampler = sampler or self._default_sampler()
        if isinstance(self.executor, RayExecutor):  # no room for the actors fails here, not at the first step
            self.executor.start()
        self.engine: VLLMEngine | None = None
        self.policy, self.eval_policy = self._policies(end_of_turn)
        self._foreign_tokens = False
        """Set while `update` trains on trajectories sampled elsewhere (a served model)."""
        self.rlpr = self._rlpr_scorer()
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
        self.ref_model: torch.nn.Module | None = None  # made when training starts, after any warm start
        self.run_dir = Path(config.output_dir)
        self.step = 0
        self.history: list[dict[str, Any]] = []
        self._async: AsyncRollouts | None = None  # started by the first step with async_rollouts

    # -- set-up -----------------------------------------------------------------

    def _prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        cfg = self.config
        if cfg.lora_r > 0:
            try:
                from peft import LoraConfig, get_peft_model
            except ImportError:
                raise ImportError("lora_r > 0 needs peft: pip install peft") from None
            model = get_peft_model(
                model,
                LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"),
            )
        if cfg.gradient_checkpointing:
            enable_gradient_checkpointing(model)
        if cfg.lean_activations:  # after peft: its wrapped layers are left alone
            # Grouped attention only helps on the CPU; elsewhere the model keeps "sdpa".
            lean_activations(model, attention=self.device.type == "cpu")
        if cfg.cpu_onednn_linear and self.device.type == "cpu":
            onednn_linear(model)
        return (master_weights(model) if cfg.master_weights else model).to(self.device)

    def _policies(self, end_of_turn: str | None) -> tuple[TokenPolicy, TokenPolicy]:
        """The rollout policy and the held-out one: the same settings but the temperature
        (the held-out one seeded alike at every evaluation), on the configured engine."""
        cfg = self.config
        shared: dict[str, Any] = dict(
            end_of_turn=end_of_turn,
            max_new_tokens=cfg.max_new_tokens,
            max_context_tokens=cfg.max_seq_len,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            stop=cfg.stop,
        )
        if cfg.rollout_engine == "vllm":
            from agentenv.trainers.vllm_engine import VLLMEngine, VLLMPolicy

            self.engine = VLLMEngine(
                self.model,
                self.tokenizer,
                max_model_len=cfg.max_seq_len,
                device=self.device,
                seed=cfg.seed,
                **cfg.vllm.model_dump(),
            )
            held_out = VLLMPolicy(self.engine, self.tokenizer, temperature=cfg.eval_temperature, **shared)
            held_out.generator = torch.Generator(device=self.device)  # seeded by each evaluation
            return VLLMPolicy(self.engine, self.tokenizer, temperature=cfg.temperature, **shared), held_out
        shared.update(reuse_cache=cfg.reuse_kv_cache, share_prompts=cfg.share_prompts, bf16=self._bf16)
        return (
            TransformersPolicy(self.model, self.tokenizer, temperature=cfg.temperature, **shared),
            TransformersPolicy(self.model, self.tokenizer, temperature=cfg.eval_temperature, seed=cfg.seed, **shared),
        )

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

    def _rlpr_scorer(self) -> RLPRScorer | None:
        """With reward="rlpr": the scorer, once every task of every env has a reference."""
        cfg = self.config
        if cfg.reward != "rlpr":
            return None
        threshold = StdThreshold(cfg.rlpr_std_filter, cfg.rlpr_std_threshold, cfg.rlpr_std_factor, cfg.rlpr_ema_decay)
        scorer = RLPRScorer(self.tokenizer, cfg.rlpr_answer_marker, cfg.rlpr_debias, threshold)
        for source in self.sources:
            scorer.check_tasks([*source.train, *source.test], source.name)
        return scorer

    def _default_sampler(self) -> TaskSampler:
        cfg = self.config
        if cfg.miner is None:
            return UniformSampler(self.sources, cfg.seed)
        return MinerSampler(self.sources, cfg.seed, cfg.miner)

    def _source(self, env: EnvLike, weight: float) -> EnvSource:
        cfg = self.config
        base: Callable[[], Env]
        if isinstance(env, str):
            agentenv.spec(env)  # unknown ids fail here, with a did-you-mean
            kwargs = {"tool_prompt": cfg.tool_prompt} if cfg.tool_prompt != "json" else {}
            kwargs.update(cfg.env_kwargs.get(env, {}))
            name, base = env, functools.partial(agentenv.make, env, **kwargs)
        else:
            name, base = getattr(env, "__name__", type(env).__name__), env

        def factory() -> Env:
            made = base()
            if cfg.max_turns is not None:
                made.max_turns = cfg.max_turns
            return made

        probe = factory()
        try:
            self._max_turns = max(self._max_turns, probe.max_turns)
            if cfg.eval_episodes == 0:  # nothing is evaluated: nothing held out
                train, test = probe.tasks, probe.tasks.filter(lambda _task: False)
            else:
                train, test = self._split(name, probe.tasks)
            if not train:
                raise ValueError(f"env {name!r} has no training tasks after the split; give it more tasks")
            return EnvSource(
                name,
                factory,
                weight,
                train,
                test,
                dict(probe.reward_weights),
                env_id=env if isinstance(env, str) else None,
            )
        finally:
            probe.close()

    def _split(self, name: str, tasks: TaskSet) -> tuple[TaskSet, TaskSet]:
        """``tasks``' (train, held-out) split by content (``split_by``), so no held-out
        task has a twin in training; printed with its counts. An env of too few distinct
        contents for both sides (one prompt and payload under every id) is split by id
        instead, and the printed line says how many held-out tasks then share content with
        training."""
        cfg = self.config
        seed = cfg.seed if cfg.split_seed is None else cfg.split_seed
        train, test = tasks.split(cfg.test_fraction, seed=seed, by=cfg.split_by)
        how = f"by {cfg.split_by}"
        if cfg.split_by == "content" and (not train or not test):
            train, test = tasks.split(cfg.test_fraction, seed=seed, by="id")
            how = f"by id (its {tasks.contents()} distinct contents cannot fill both sides)"
        twins = test.shared_content(train)
        if self.dist.is_writer:
            print(
                f"{name}: {len(test)} of {len(tasks)} tasks held out, split {how}: "
                f"{test.contents()} held-out contents, {twins} held-out tasks share content with training",
                flush=True,
            )
        self._twins[name] = twins
        return train, test

    # -- the loop ---------------------------------------------------------------

    def train(self) -> list[dict[str, Any]]:
        """Run to ``config.steps``; returns the metrics of each step."""
        cfg = self.config
        resumed = self._maybe_resume()
        if not resumed:
            self._claim_run_dir()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not resumed and self.dist.is_writer:
            _save_config(self.run_dir, cfg)
            if hasattr(self.tokenizer, "save_pretrained"):
                self.tokenizer.save_pretrained(str(self.run_dir / "tokenizer"))
        logger = (
            MetricsLogger(
                self.run_dir,
                total_steps=cfg.steps,
                tensorboard=cfg.tensorboard,
                resume_step=self.step if resumed else None,
            )
            if self.dist.is_writer
            else None
        )
        if resumed and logger is not None:  # the curve so far, so a resumed (or finished) run reports it from step 0
            self.history = logger.records()
        compute = ComputeMeter.resumed(self.history, world_size())  # cumulative, for `agentenv forecast`
        try:
            if not resumed and cfg.sft_steps > 0:
                self.warm_start()
                self.dist.broadcast_parameters(self.model)  # every rank ran it: rank 0's weights win
            if cfg.kl_coef > 0 and self.ref_model is None:
                # The reference is the policy RL starts from (on resume: the resumed weights).
                self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
                if self._bf16:  # frozen and only ever run under bf16 autocast: half the memory
                    self.ref_model.to(torch.bfloat16)
            if not resumed and cfg.eval_episodes > 0 and cfg.eval_first:
                start = {**compute.totals(), **self._held_out_metrics()}
                self.history.append({"step": 0, **start})
                if logger is not None:
                    logger.log(0, start)
            while self.step < cfg.steps:
                began = time.perf_counter()
                metrics = self.train_step()
                metrics.update(compute.add(metrics, time.perf_counter() - began))
                self.step += 1
                last = self.step == cfg.steps
                if cfg.eval_episodes > 0 and (last or (cfg.eval_every and self.step % cfg.eval_every == 0)):
                    metrics.update(self._held_out_metrics())
                self.history.append({"step": self.step, **metrics})
                if logger is not None:
                    logger.log(self.step, metrics)
                if self.on_step is not None:
                    self.on_step(self.step, metrics)
                if last or self.step % cfg.save_every == 0:
                    self._checkpoint()
        finally:
            self.close()
            if logger is not None:
                logger.close()
            if isinstance(self.executor, RayExecutor):
                self.executor.close()  # a later evaluate() starts the actors again
        full = self.dist.full_state(self.model, self.optimizer)
        if self.dist.is_writer:
            self._export(None if full is None else full[0])
        self.dist.barrier(what="finishing the run")
        self.dist.close()
        return self.history

    def _checkpoint(self) -> None:
        full = self.dist.full_state(self.model, self.optimizer)  # sharded: every rank takes part
        if self.dist.is_writer:
            save_checkpoint(
                self.run_dir,
                self.step,
                self.model if full is None else full[0],
                self.optimizer if full is None else full[1],
                {"sampler": self._sampler_state(), **({"rlpr": self.rlpr.threshold.state_dict()} if self.rlpr else {})},
                keep=self.config.keep_checkpoints,
            )
        # No rank starts the next step before the checkpoint is whole: a rank that
        # dies then can resume from it.
        self.dist.barrier(what="writing a checkpoint")

    def _claim_run_dir(self) -> None:
        """Before a run from step 0 writes anything: refuse an output_dir holding another
        run (FileExistsError saying the fix), and clear one holding this config's run.
        Rank 0 decides for every rank, so they all stop or go on together."""
        problem = other_run(self.run_dir, self.config.to_dict(), resume=self.config.resume)
        problem = self.dist.agree(problem if self.dist.is_writer else None, what="checking the run directory")
        if problem is not None:
            raise FileExistsError(problem)
        if self.dist.is_writer:
            clear_run(self.run_dir)

    def _maybe_resume(self) -> bool:
        if not self.config.resume:
            return False
        path = checkpoint_reachable(latest_checkpoint(self.run_dir), self.dist)
        if path is None:
            return False
        apply = functools.partial(self.dist.load_full_state, self.model, self.optimizer) if self.dist.lockstep else None
        state = load_checkpoint(path, self.model, self.optimizer, apply=apply)
        # What the sampler and RLPR saved, edited: one line naming the file, not a traceback from inside them.
        restore = [("sampler", self.sampler.load_state_dict)]
        if self.rlpr is not None:
            restore.append(("rlpr", self.rlpr.threshold.load_state_dict))
        for name, load in restore:
            try:
                load(state.get(name, {}))
            except (AttributeError, KeyError, IndexError, TypeError, ValueError) as e:
                why = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise ValueError(f"{path / 'trainer_state.json'}: the {name} state: {why}") from None
        self.step = state["step"]
        self._push_weights()
        if self.dist.is_writer:
            print(f"resumed from {path} at step {self.step}")
        return True

    def warm_start(self) -> list[float]:
        """The supervised warm start: each env's oracle plays its training tasks, and
        ``sft_steps`` steps imitate the episodes it solved; then the vLLM engine, if any,
        gets the weights. `train` runs it first (not on resume); call it yourself to keep
        one warm start for several runs (save the model, start each from its folder with
        ``sft_steps=0``). Returns the losses."""
        cfg = self.config
        if cfg.sft_steps == 0:
            raise ValueError("warm_start() with sft_steps=0 has nothing to do; set sft_steps > 0")
        trajs: list[Trajectory] = []
        print(f"warm start: the oracle plays the training tasks, then {cfg.sft_steps} supervised steps", flush=True)
        for source in self.sources:
            if source.env_id is None:
                raise ValueError(f"sft_steps > 0 needs registered envs with an oracle; {source.name!r} is a factory")
            oracle = agentenv.spec(source.env_id).make_oracle()
            trajs += [t for t in rollout(source.factory, oracle, tasks=list(source.train)) if t.success]
        losses = sft(
            self.model,
            self.tokenizer,
            trajs,
            steps=cfg.sft_steps,
            learning_rate=cfg.sft_learning_rate,
            weight_decay=cfg.sft_weight_decay,
            max_seq_len=cfg.max_seq_len,
            end_of_turn=self.policy.delta.end_of_turn,
            seed=cfg.seed,
            share_prompts=cfg.share_prompts,
            bf16=self._bf16,
            log=self._warm_start_progress,
        )
        print(
            f"warm start: {cfg.sft_steps} supervised steps on {len(trajs)} oracle episodes, "
            f"loss {losses[0]:.3f} -> {losses[-1]:.3f}"
        )
        self._push_weights()
        return losses

    def _warm_start_progress(self, step: int, loss: float) -> None:
        every = max(1, self.config.sft_steps // 10)
        if (step + 1) % every == 0 and step + 1 < self.config.sft_steps:
            print(f"warm start: step {step + 1}/{self.config.sft_steps}, loss {loss:.3f}", flush=True)

    def evaluate(self, episodes: int | None = None) -> float:
        """Success rate on the held-out tasks (the same tasks and seeds every time), counted
        as `_held_out_metrics` counts it: the env's infra failures left out, an episode the
        policy failed to answer a failed one (`agentenv.eval.evaluation`)."""
        tasks = outcomes(self._held_out(episodes))
        valid = sum(t.n for t in tasks)
        return sum(t.successes for t in tasks) / valid if valid else float("nan")

    def _held_out(self, episodes: int | None = None) -> list[Trajectory]:
        """The held-out episodes: each env's test tasks in turn, seeds 0, 1, ..., its share
        of ``episodes`` by weight."""
        episodes = episodes or self.config.eval_episodes
        self._engine_running()
        total = sum(s.weight for s in self.sources)
        trajs: list[Trajectory] = []
        for source in self.sources:
            n = max(1, round(episodes * source.weight / total))
            tasks = [source.test[i % len(source.test)] for i in range(n)] if source.test else []
            if not tasks:
                continue
            with self.dist.generating():
                done = self.dist.spread(  # each rank plays its share of the episodes
                    list(zip(tasks, range(n), strict=True)),
                    functools.partial(self._play_held_out, source),
                    what="gathering the held-out episodes",
                )
            trajs += _labelled(done, source.env_id)
        return trajs

    def _play_held_out(self, source: EnvSource, episodes: list[tuple[Task, int]]) -> list[Trajectory]:
        if not episodes:
            return []
        self.eval_policy.reset()
        if self.eval_policy.generator is not None:
            # The same samples for the same weights (and, on several ranks, a stream per rank).
            seed = self.config.seed
            if self.dist.active:
                seed = int(np.random.default_rng([seed, *self.dist.seed_salt]).integers(2**62))
            self.eval_policy.generator.manual_seed(seed)
        tasks, seeds = [t for t, _ in episodes], [s for _, s in episodes]
        return rollout(source.factory, self.eval_policy, tasks=tasks, seeds=seeds, executor=self.executor)

    def _held_out_metrics(self) -> dict[str, Any]:
        """``eval/success_rate`` with its 95% bootstrap interval over the held-out tasks
        (``eval/success_low``, ``eval/success_high``), ``eval/episodes`` (the valid ones the
        rate counts), ``eval/infra`` (those the env's infra failed, left out) and
        ``eval/content_twins`` (held-out tasks sharing content with training: 0 but for
        an env split by id, `_split`); the
        episodes go to output_dir/evals/step-NNNNNN.jsonl."""
        trajs = self._held_out()
        if self.config.save_trajectories:
            self._write_episodes("evals", self.step, trajs)
        rate = success_interval(trajs, seed=self.config.seed)
        valid = sum(t.n for t in outcomes(trajs))
        return {
            "eval/success_rate": float("nan") if rate.value is None else rate.value,
            "eval/success_low": rate.low,
            "eval/success_high": rate.high,
            "eval/episodes": valid,
            "eval/infra": len(trajs) - valid,
            "eval/content_twins": sum(self._twins.values()),
        }

    # -- one step ---------------------------------------------------------------

    def train_step(self) -> dict[str, Any]:
        cfg = self.config
        self._engine_running()
        extra: dict[str, Any] = {}
        if cfg.async_rollouts:
            if self._async is None:
                assert isinstance(self.policy, TransformersPolicy)  # the config refuses async with vLLM
                self._async = AsyncRollouts(
                    self._collect,
                    self.policy,
                    self.model,
                    start=self.step,
                    max_staleness=cfg.max_staleness,
                    staleness_policy=cfg.staleness_policy,
                    sampler_state=self.sampler.state_dict,
                )
            batch, extra = self._async.next_batch(self.step)
        else:
            batch = self._collect(self.step, self.policy)
        trajs = [t for g in batch.groups for t in g]
        if cfg.save_trajectories:
            self._write_episodes("trajectories", self.step + 1, trajs)
        metrics = rollout_metrics(trajs)
        metrics["zero_variance_frac"] = batch.zero_variance / max(batch.groups_seen, 1)
        metrics["groups"] = len(batch.groups)
        metrics["tasks"] = [d.task.id for d in batch.draws]
        metrics.update(batch.sampler_metrics)
        metrics.update(extra)
        timer = dict(batch.timer)
        groups, draws = batch.groups, batch.draws
        if self.rlpr is not None:
            start = time.perf_counter()
            groups, draws, rlpr_metrics = self._rlpr_rewards(groups, draws)
            metrics.update(rlpr_metrics)
            timer["rlpr_s"] = time.perf_counter() - start
        start = time.perf_counter()
        if groups:
            metrics.update(self._update(groups, [d.source for d in draws], self._group_weights(draws)))
        else:  # the std filter left no group
            metrics.update({"loss": 0.0, "skipped_update": 1.0})
        timer["train_s"] = time.perf_counter() - start
        if self._async is not None:
            self._async.publish(self.model, self.step + 1)
        if not metrics.get("skipped_update"):
            timer["push_s"] = self._push_weights()
        metrics.update({f"time/{k}": v for k, v in timer.items()})
        gen_tokens = sum(len(g.token_ids) for t in trajs for g in t.generations if g is not None)
        metrics["gen_tokens_per_s"] = gen_tokens / max(timer["generate_s"], 1e-9)
        metrics["tokens/trained"] = int(metrics.pop("_train_tokens", 0))  # every rank's (`_update` sums them)
        metrics["train_tokens_per_s"] = metrics["tokens/trained"] / max(timer["train_s"], 1e-9)
        metrics["tokens/generated"] = batch.generated_tokens
        return metrics

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
        for i, group in enumerate(groups):
            if len(group) < 2:
                raise ValueError(f"group {i} holds {len(group)} episode(s); group-relative advantages need >= 2")
            for j, traj in enumerate(group):
                if not any(g is not None and g.token_ids for g in traj.generations):
                    raise ValueError(
                        f"episode {j} of group {i} has no generated token ids to train on; roll it out with a policy "
                        "that returns them (OpenAIPolicy(..., return_tokens=True) against vLLM, or the trainer's own)"
                    )
        by_id = {s.env_id: k for k, s in enumerate(self.sources) if s.env_id is not None}
        sources = [by_id.get(g[0].env_id or "", -1) for g in groups]
        self._foreign_tokens, before = True, self._foreign_tokens
        try:
            metrics = self._update(groups, sources)
        finally:
            self._foreign_tokens = before
        self.step += 1
        if not metrics.get("skipped_update"):
            metrics["time/push_s"] = self._push_weights()
        metrics["tokens/trained"] = int(metrics.pop("_train_tokens", 0))
        return metrics

    def _rlpr_rewards(
        self, groups: Sequence[list[Trajectory]], draws: Sequence[Draw]
    ) -> tuple[list[list[Trajectory]], list[Draw], dict[str, Any]]:
        """The groups the RLPR std filter keeps (and their draws), with RLPR's reward as
        their task reward; the written trajectories and the rollout metrics keep the
        verifier's. Each rank scores its share of the groups; every rank gets them all."""
        assert self.rlpr is not None
        for d in draws:  # tasks a sampler made (miner variants) have not been checked yet
            self.rlpr.check_tasks([d.task], self.sources[d.source].name)
        with torch.no_grad(), self._autocast(), self.dist.generating():
            scored = self.dist.spread(list(groups), self._rlpr_score, what="gathering the RLPR rewards")
        rewards = [r for s in scored for r in s.reward]
        kept, metrics = self.rlpr.select(rewards, [i for i, g in enumerate(groups) for _ in g])
        bases = [b for s in scored for b in s.base if b is not None]
        probs = [p for s in scored for p in s.prob if p is not None]
        metrics["rlpr/debias_mean"] = float(np.mean(bases)) if bases else 0.0
        metrics["rlpr/prob_mean"] = float(np.mean(probs)) if probs else 0.0
        rescored = [
            [t.model_copy(update={"task_reward": r}) for t, r in zip(g, s.reward, strict=True)]
            for g, s in zip(groups, scored, strict=True)
        ]
        return [rescored[i] for i in kept], [draws[i] for i in kept], metrics

    def _rlpr_score(self, groups: list[list[Trajectory]]) -> list[RLPRScores]:
        """RLPR scores of ``groups``' episodes, in one pass over all of them, split per group."""
        assert self.rlpr is not None
        cfg = self.config
        flat = self.rlpr.score(
            self.model,
            [t for g in groups for t in g],
            max_seq_len=cfg.max_seq_len,
            micro_batch_size=cfg.micro_batch_size,
            chunk_tokens=cfg.logprob_chunk_tokens,
            temperature=cfg.temperature,
            share_prompts=cfg.share_prompts,  # within `generating`: every rank runs its own passes
            pad_id=self.policy.pad_id,
            device=self.device,
        )
        out, at = [], 0
        for g in groups:
            part = slice(at, at + len(g))
            out.append(RLPRScores(flat.reward[part], flat.prob[part], flat.base[part]))
            at += len(g)
        return out

    def _sampler_state(self) -> dict[str, Any] | None:
        """What a checkpoint saves of the sampler: with async rollouts, its state after the
        last batch trained on (the producer has updated it with later ones since)."""
        return self._async.sampler_state if self._async is not None else self.sampler.state_dict()

    def close(self) -> None:
        """Stop the rollout thread of ``async_rollouts`` and the vLLM engine, freeing its
        memory (`train` does when it returns); a later step or evaluation starts them again."""
        if self._async is not None:
            self._async.close()
            self._async = None
        if self.engine is not None:
            self.engine.close()

    def _collect(self, step: int, policy: TokenPolicy) -> RolloutBatch:
        """The groups of step ``step``, rolled out with ``policy`` (with dynamic sampling,
        round after round until the batch is full), and the sampler updated with them."""
        cfg = self.config
        n_groups = cfg.batch_size // cfg.group_size
        timer: dict[str, float] = defaultdict(float)
        kept: list[list[Trajectory]] = []
        groups_seen = zero_var = 0
        draws_used: list[Draw] = []
        rolled: list[Trajectory] = []  # every group, dropped ones too: the sampler learns from all of them
        for round_ in range(cfg.max_sampling_rounds if cfg.dynamic_sampling else 1):
            draws = self.sampler.sample(step, round_, n_groups - len(kept))
            # Each rank rolls out its share of the groups; every rank gets them all back.
            play = functools.partial(self._rollout_groups, timer=timer, round_=round_, step=step, policy=policy)
            with self.dist.generating():
                groups = self.dist.spread(draws, play, what="gathering the rollouts")
            for draw, group in zip(draws, groups, strict=True):
                groups_seen += 1
                rolled += group
                rewards = [t.task_reward or 0.0 for t in group]
                valid = [t.failure is not Failure.INFRA for t in group]
                informative = any(adv.informative_mask(rewards, [0] * len(group), valid=valid))
                zero_var += not informative
                if informative or not cfg.dynamic_sampling:
                    kept.append(group)
                    draws_used.append(draw)
            if len(kept) >= n_groups:
                break
        self.sampler.update(step, rolled)
        timer.setdefault("generate_s", 0.0)
        # Every group rolled out costs compute, the ones dynamic sampling dropped too.
        generated = sum(len(g.token_ids) for t in rolled for g in t.generations if g is not None)
        metrics = self.sampler.metrics()
        return RolloutBatch(
            step, kept, draws_used, groups_seen, zero_var, dict(timer), metrics, generated_tokens=generated
        )

    def _rollout_groups(
        self, draws: Sequence[Draw], timer: dict[str, float], round_: int, step: int, policy: TokenPolicy
    ) -> list[list[Trajectory]]:
        cfg = self.config
        timed = _TimedPolicy(policy)
        seed = int(np.random.default_rng([cfg.seed, step, round_, 7, *self.dist.seed_salt]).integers(2**62))
        policy.generator = torch.Generator(device=self.device).manual_seed(seed)
        by_source: dict[int, list[int]] = defaultdict(list)
        for i, d in enumerate(draws):
            by_source[d.source].append(i)
        groups: list[list[Trajectory]] = [[] for _ in draws]
        start = time.perf_counter()
        for src, idx in by_source.items():
            tasks = [draws[i].task for i in idx for _ in range(cfg.group_size)]
            seeds = [draws[i].seed for i in idx for _ in range(cfg.group_size)]
            resume = [draws[i].snapshot for i in idx for _ in range(cfg.group_size)]
            policy.reset()
            trajs = rollout(
                self.sources[src].factory,
                timed,
                tasks=tasks,
                seeds=seeds,
                resume_from=resume if any(r is not None for r in resume) else None,
                keep_snapshots=self.sampler.keep_snapshots,
                executor=self.executor,
            )
            policy.reset()  # every episode has ended: free the kept KV cache before the update
            trajs = _labelled(trajs, self.sources[src].env_id)
            for j, i in enumerate(idx):
                groups[i] = trajs[j * cfg.group_size : (j + 1) * cfg.group_size]
        timer["generate_s"] += timed.seconds
        timer["env_s"] += time.perf_counter() - start - timed.seconds
        return groups

    def _group_weights(self, draws: Sequence[Draw]) -> list[float] | None:
        """Importance weights per group, normalised to mean 1 (None when off)."""
        if not self.config.importance_weighting or not draws:
            return None
        w = np.array([d.weight for d in draws], dtype=float)
        return (w / w.mean()).tolist()

    def _update(
        self,
        groups: Sequence[Sequence[Trajectory]],
        sources: Sequence[int],
        group_weights: Sequence[float] | None = None,
    ) -> dict[str, Any]:
        cfg = self.config
        trajs = [t for g in groups for t in g]
        if cfg.shuffle_rewards:
            trajs = self._shuffled_rewards(trajs)
        group_ids = [i for i, g in enumerate(groups) for _ in g]
        weights = [
            self.sources[src].reward_weights if src >= 0 else {}
            for src, g in zip(sources, groups, strict=True)
            for _ in g
        ]
        # Length shaping: DAPO's soft overlong penalty per turn, and a penalty for the share
        # of turns cut at max_new_tokens (no end-of-turn token), at the episode level so a
        # short episode is not cheaper than a long one. Without it a model loses nothing by
        # never ending its turn once its call parses, and drifts there.
        turn_shaping = [self._overlong(t) for t in trajs]
        extra = [
            sum(shape) - cfg.truncation_penalty * _cut_share(t) for shape, t in zip(turn_shaping, trajs, strict=True)
        ]
        per_turn, _rewards = turn_advantages(
            trajs,
            group_ids,
            weights,
            task_mode=cfg.advantage,
            step_mode=cfg.step_advantage,
            step_weight=cfg.step_advantage_weight,
            gamma=cfg.gamma,
            step_std=cfg.step_advantage_std,
            extra_rewards=extra,
            extra_step_rewards=turn_shaping,
        )
        if group_weights is not None:
            # The policy-gradient term of every loss is linear in the advantage (clipped or
            # not), so scaling a group's advantages scales its share of that term.
            per_turn = [[a * group_weights[g] for a in turns] for g, turns in zip(group_ids, per_turn, strict=True)]
        built = build_examples(trajs, per_turn, max_seq_len=cfg.max_seq_len, version=self.step)
        # Every rank holds the whole batch; it trains on its share of the groups.
        mine = set(self.dist.mine(len(groups)))
        local = [e for e in built if group_ids[e.episode] in mine and any(e.mask)]
        examples = [e for e in built if any(e.mask)]
        if not any(a for e in examples for a, m in zip(e.advantages, e.mask, strict=True) if m):
            # No signal (every group's rewards were equal). An optimiser step now would only
            # replay Adam's momentum from earlier batches, which is drift, not learning.
            examples = []
        weighted = [a for e in examples for a, m in zip(e.advantages, e.mask, strict=True) if m]
        out: dict[str, Any] = {
            **advantage_metrics(per_turn),
            # The advantage as a token-mean loss weighs it: below 0 when failures run longer.
            "adv/token_mean": float(np.mean(weighted)) if weighted else 0.0,
            "seq_truncated_frac": float(np.mean([e.truncated for e in examples])) if examples else 0.0,
        }
        if group_weights is not None:
            out["importance_weight/max"] = max(group_weights)
        if not examples:
            return {**out, "loss": 0.0, "skipped_update": 1.0, "_train_tokens": 0}
        return {**out, **self._optimise(local)}

    def _shuffled_rewards(self, trajs: list[Trajectory]) -> list[Trajectory]:
        """The control arm's batch (``shuffle_rewards``): the task rewards of the episodes
        that are not infra, permuted among them (drawn from the seed and the step)."""
        valid = [i for i, t in enumerate(trajs) if t.failure is not Failure.INFRA]
        rng = np.random.default_rng([self.config.seed, self.step, 11])
        order = rng.permutation(len(valid))
        out = list(trajs)
        for i, j in zip(valid, order, strict=True):
            out[i] = trajs[i].model_copy(update={"task_reward": trajs[valid[j]].task_reward})
        return out

    def _overlong(self, traj: Trajectory) -> list[float]:
        cfg = self.config
        if not cfg.overlong_cache_len:
            return [0.0] * len(traj.generations)
        lengths = torch.tensor([len(g.token_ids) if g is not None else 0 for g in traj.generations])
        return overlong_penalty(lengths, cfg.max_new_tokens, cfg.overlong_cache_len).tolist()

    def _optimise(self, examples: list[Example]) -> dict[str, Any]:
        """``ppo_epochs`` optimiser steps on ``examples``, accumulated over micro-batches;
        returns the loss diagnostics averaged over the epochs (clipping and the ratio's
        drift show from the second epoch on) and the last step's gradient norm."""
        cfg = self.config
        micro = [examples[i : i + cfg.micro_batch_size] for i in range(0, len(examples), cfg.micro_batch_size)]
        batches = [collate(m, self.policy.pad_id, self.device) for m in micro]
        # Each micro-batch's loss is scaled by its share of the batch's averaging unit
        # (on several ranks: of the whole batch, every rank's), so the accumulated
        # gradient is that of the whole batch at once.
        sizes = [batch_share(cfg.loss, b.mask, episode_balanced=cfg.episode_balanced) for b in batches]
        total = self.dist.total(sum(sizes), what="counting the batch's tokens") or 1.0
        shares = [size / total for size in sizes]
        # Every rank runs as many passes (a rank short of data runs empty ones, weighing 0).
        for _ in range(self.dist.most(len(batches)) - len(batches)):
            batches.append(collate([_EMPTY], self.policy.pad_id, self.device))
            shares.append(0.0)
        olds = self._generation_logprobs(batches)
        # How far the whole update moves the policy, measured on the first micro-batch's
        # first sequences: before, from the first training pass; after, one small pass.
        probe = TrainBatch(*(getattr(batches[0], f.name)[:UPDATE_KL_PROBE] for f in dataclasses.fields(TrainBatch)))
        before: torch.Tensor | None = None
        sums: dict[str, float] = defaultdict(float)
        extremes: dict[str, float] = {}  # the sampler's min and max ratios and gaps: over micro-batches
        self.model.train()
        for _ in range(cfg.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            opening = self._opening(batches)
            for i, (batch, old, share) in enumerate(zip(batches, olds, shares, strict=True)):
                with self.dist.accumulating(sync=i == len(batches) - 1):
                    diagnostics, logp = self._backward(batch, old, share, opening)
                if before is None:
                    before = logp[:UPDATE_KL_PROBE]
                for k, v in diagnostics.items():
                    if k.startswith("sampler/") and k.endswith(("_min", "_max")):
                        pick = min if k.endswith("_min") else max
                        extremes[k] = pick(extremes.get(k, v), v) if share > 0 else extremes.get(k, v)
                    else:
                        sums[k] += v * share / cfg.ppo_epochs
            if opening is not None:
                opening.backward()
            for group in self.optimizer.param_groups:  # a function of the step: nothing to checkpoint
                group["lr"] = self._learning_rate()
            grad_norm = torch.nn.utils.clip_grad_norm_(
                [p for p in self.model.parameters() if p.requires_grad], cfg.max_grad_norm
            )
            self.optimizer.step()
        out = self.dist.sum_metrics(dict(sums))  # each rank's are weighed by its share of the whole batch
        out.update(extremes)
        out["grad_norm"] = float(grad_norm)
        with torch.no_grad(), self._autocast():
            after = self.dist.forward(lambda: self._logprobs(self.model, probe)[0])
        # k3 estimate of KL(before || after) per policy token, over the probe's tokens the
        # policy sampled before the update: the step size, in nats.
        update_kl = float(kl_k3(before, after, probe.mask)) if before is not None else 0.0
        out["update_kl"] = self.dist.weighted_mean(update_kl, float(probe.mask.sum()) if examples else 0.0)
        out["lr"] = self.optimizer.param_groups[0]["lr"]
        out["_train_tokens"] = self.dist.total(float(sum(len(e.ids) for e in examples) * cfg.ppo_epochs))
        return out

    def _generation_logprobs(self, batches: Sequence[TrainBatch]) -> list[torch.Tensor | None]:
        """The old log-probs of the importance ratio, per micro-batch: with one epoch,
        None (the ratio is 1: the current log-probs, detached); with more, the
        log-probs before the first update, so later epochs see the ratio move."""
        cfg = self.config
        if cfg.ppo_epochs == 1:
            return [None] * len(batches)
        with torch.no_grad(), self._autocast():
            return [self.dist.forward(functools.partial(self._logprobs, self.model, b))[0] for b in batches]

    def _opening(self, batches: Sequence[TrainBatch]) -> Opening | None:
        """The opening every prompt of the optimiser step shares (a system prompt), run once
        for all its micro-batches (`logprobs.opening_pass`); its backward runs after
        theirs. In one process only: under DDP a backward after the synchronising one
        would go unreduced."""
        if len(batches) < 2 or self.dist.active or not self.config.share_prompts:
            return None
        with self._autocast():
            return opening_pass(self.model, batches)

    def _backward(
        self, batch: TrainBatch, old: torch.Tensor | None, share: float, opening: Opening | None = None
    ) -> tuple[dict[str, float], torch.Tensor]:
        """Loss of one micro-batch, scaled by its ``share`` of the batch, backwards;
        returns its loss and diagnostics (unscaled) and its log-probs (detached). The
        step's ``opening`` collects its part of the gradient (`Opening.backward`)."""
        cfg = self.config
        with self._autocast():
            logp, entropy = self.dist.forward(lambda: self._logprobs(self.model, batch, opening))
            ref = None
            if self.ref_model is not None:
                with torch.no_grad():
                    ref = self._logprobs(self.ref_model, batch)[0]
        prox = old if old is not None else logp.detach()
        advantages = batch.advantages
        off_policy: dict[str, float] = {}
        if cfg.async_rollouts:  # tokens sampled by older weights: truncated importance weights
            weights, off_policy = truncated_importance_weights(
                prox, batch.old_logp, batch.lag, batch.mask, cap=cfg.importance_cap
            )
            advantages = advantages * weights
        elif self._foreign_tokens or not self.policy.exact_logprobs:  # vLLM, a server, bf16 graphs: the mismatch
            weights, off_policy = sampler_importance_weights(
                prox, batch.old_logp, batch.mask, mode=cfg.sampler_is, cap=cfg.sampler_is_cap
            )
            advantages = advantages * weights
        result = compute_loss(
            cfg.loss,
            logp=logp,
            old_logp=prox,
            advantages=advantages,
            mask=batch.mask,
            ref_logp=ref,
            kl_coef=cfg.kl_coef,
            **loss_kwargs(
                cfg.loss,
                eps_low=cfg.eps_low,
                eps_high=cfg.eps_high,
                max_len=self.generation_budget,
                episode_balanced=cfg.episode_balanced,
            ),
        )
        (result.loss * (share * self.dist.loss_scale)).backward()
        out = {"loss": result.loss.item(), **result.metrics, **off_policy}
        out["entropy"] = float(entropy.mean()) if entropy.numel() else 0.0
        m = batch.mask.bool()
        if m.any():  # how far the training forward pass is from the generation-time log-probs
            out["gen_logprob_gap"] = float((batch.old_logp[m] - logp.detach()[m]).abs().mean())
        return out, logp.detach()

    @property
    def generation_budget(self) -> int:
        """The most policy tokens one sequence can hold: ``max_new_tokens`` per turn for
        the longest episode, within ``max_seq_len`` (Dr. GRPO's constant divisor)."""
        cfg = self.config
        return min(cfg.max_seq_len, cfg.max_new_tokens * (cfg.max_turns or self._max_turns))

    def _logprobs(
        self, model: torch.nn.Module, batch: TrainBatch, opening: Opening | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.config
        return policy_logprobs(
            model,
            batch,
            temperature=cfg.temperature,
            chunk_tokens=cfg.logprob_chunk_tokens,
            share_prompts=cfg.share_prompts and not self.dist.lockstep,
            opening=opening,
        )

    def _learning_rate(self) -> float:
        cfg = self.config
        scale = min(1.0, (self.step + 1) / max(cfg.warmup_steps, 1))
        if cfg.lr_decay == "linear" and self.step >= cfg.warmup_steps:
            span = max(cfg.steps - cfg.warmup_steps, 1)
            scale *= 1.0 - 0.9 * (self.step - cfg.warmup_steps) / span
        return cfg.learning_rate * scale

    @property
    def _bf16(self) -> bool:
        """Compute in bf16 (autocast over the float32 masters): on a GPU, with ``bf16``."""
        return self.device.type == "cuda" and self.config.bf16

    def _autocast(self) -> Any:
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self._bf16)

    def _write_episodes(self, folder_name: str, step: int, trajs: Sequence[Trajectory]) -> None:
        if not self.dist.is_writer:
            return
        # One file per step, written whole: a step redone after a resume replaces its file.
        folder = self.run_dir / folder_name
        folder.mkdir(parents=True, exist_ok=True)  # train_step() may run without train()
        tmp = folder / f".step-{step:06d}.jsonl.tmp"
        # Snapshots (kept for the miner) would multiply the file's size: left out.
        lines = (t.model_copy(update={"snapshots": []}).to_json() if t.snapshots else t.to_json() for t in trajs)
        tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        tmp.replace(folder / f"step-{step:06d}.jsonl")

    def _export(self, weights: dict[str, Any] | None = None) -> None:
        """The final model (or, with LoRA, its adapter: peft's format) and the tokenizer,
        loadable by path (``weights``: a sharded model's, gathered). The training model
        is left as it is."""
        final = self.run_dir / "final"
        with quiet_progress_bars():
            if isinstance(self.model, Saveable):
                extra = {} if weights is None else {"state_dict": weights}
                self.model.save_pretrained(str(final), **extra)
            if isinstance(self.tokenizer, Saveable):
                self.tokenizer.save_pretrained(str(final))


_EMPTY = Example(ids=[0, 0], mask=[0, 1], old_logp=[0.0, 0.0], advantages=[0.0, 0.0], turn_lengths=[2], truncated=False)
"""A pass with no data, for a rank with fewer micro-batches than another: one policy
token with advantage 0 (weighing 0), so every parameter still joins the gradient reduction."""


class _TimedPolicy:
    """Counts the seconds spent inside the policy (generation) during a rollout."""

    def __init__(self, inner: TokenPolicy) -> None:
        self.inner = inner
        self.seconds = 0.0

    def act(self, conversations: Sequence[Any]) -> list[Any]:
        start = time.perf_counter()
        try:
            return self.inner.act(conversations)
        finally:
            self.seconds += time.perf_counter() - start


def _labelled(trajs: list[Trajectory], env_id: str | None) -> list[Trajectory]:
    """The rollout ran an env factory, so its trajectories name no env: name the registered
    one (reports and evaluations group by it)."""
    if env_id is not None:
        for t in trajs:
            t.env_id = env_id
    return trajs


def _cut_share(traj: Trajectory) -> float:
    gens = [g for g in traj.generations if g is not None]
    return sum(g.finish_reason == "length" for g in gens) / len(gens) if gens else 0.0


def _env_weights(envs: Sequence[EnvLike] | Mapping[str, float] | Mapping[EnvLike, float]) -> dict[EnvLike, float]:
    if isinstance(envs, str) or callable(envs):
        envs = [envs]
    weights: dict[EnvLike, float] = (
        {env: w for env, w in envs.items()} if isinstance(envs, Mapping) else dict.fromkeys(envs, 1.0)
    )
    if not weights:
        raise ValueError("give at least one env (a registered id or a factory)")
    for env, w in weights.items():
        if not (isinstance(w, (int, float)) and w > 0 and math.isfinite(w)):
            raise ValueError(f"weight of env {env!r} must be a positive number, got {w!r}")
    return weights


def _save_config(run_dir: Path, config: GRPOConfig) -> None:
    (run_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=1))
