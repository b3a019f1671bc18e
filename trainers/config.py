"""`GRPOConfig`: every knob of a GRPO run, one strict pydantic model, validated on construction.

Made in Python, or read from YAML/TOML by `GRPOConfig.from_file` (the CLI's
``agentenv train CONFIG``). Each field's docstring is its documentation: `help(GRPOConfig)`
lists them, and so do ``GRPOConfig.model_json_schema()`` and
``GRPOConfig.model_fields[name].description``.

An invalid config fails at construction with one ValueError that lists every
problem, each naming its field and the fix (translated from pydantic's report, which
adds input types and links). Types are strict: ``steps = 10.0`` or ``bf16 = "yes"``
is an error, not a silent conversion; an int is a valid float. A problem between
fields (batch_size and group_size, say) is reported once every field is valid.
Build one with ``GRPOConfig(...)``, `from_dict` or `from_file` (``model_validate``
works too, but wraps that message in pydantic's report).

The loss and advantage names are the rows of `agentenv.trainers.modes`. Torch-free.
"""

from __future__ import annotations

import inspect
import math
import re
import textwrap
import tomllib
import types
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import ErrorDetails

from agentenv.core import _safejson
from agentenv.core.task import did_you_mean
from agentenv.miner.config import MinerConfig
from agentenv.rollout.ray import RayConfig
from agentenv.trainers.modes import LOSS_MODES, STEP_ADVANTAGES, TASK_ADVANTAGES, check_mode
from agentenv.trainers.pretrained import KNOWN_MODELS
from agentenv.trainers.trackers import DEFAULT_TRACKERS, TrackerName, missing_libraries

__all__ = ["GRPOConfig", "VLLMConfig"]

_RLPR_FILTER_FIELDS = ("rlpr_std_threshold", "rlpr_std_factor", "rlpr_ema_decay")

_MODE_TABLES: dict[str, Mapping[str, object]] = {
    "loss": LOSS_MODES,
    "advantage": TASK_ADVANTAGES,
    "step_advantage": STEP_ADVANTAGES,
}


class VLLMConfig(BaseModel):
    """The vLLM engine's settings (the trainer's ``vllm`` field, with ``rollout_engine = "vllm"``)."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True, allow_inf_nan=False)

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """The engine's weights and compute: "auto" is float32 on a CPU (the trainer's dtype
    there, so the two log-probs agree to float rounding) and bfloat16 on a GPU."""
    kv_cache_gb: float = Field(1.0, gt=0.0)
    """On a CPU: memory reserved for the engine's KV cache (vLLM's own default takes 92%
    of the machine's memory)."""
    gpu_memory_utilization: float = Field(0.3, gt=0.0, lt=1.0)
    """On a GPU: the share of its memory the engine may take, weights and KV cache; the
    trainer's model, gradients and optimiser need the rest."""
    enforce_eager: bool = False
    """Skip compiling the engine's model (torch.compile, CUDA graphs): it starts in
    seconds instead of about a minute and samples somewhat slower. For tests and short runs."""


class GRPOConfig(BaseModel):
    """Every setting of a GRPO run: model, rollouts, advantages and loss, optimisation,
    warm start, evaluation and checkpoints. Fields are listed below.

    A step whose every group has equal rewards (no advantage anywhere) makes no
    optimiser step; its metrics say ``skipped_update: 1``. An Adam step then would
    only replay the momentum of earlier batches: drift, not learning."""

    # allow_inf_nan=False: no float field has a meaning for infinity or NaN (a learning
    # rate or a KL weight of inf trains on NaN), so every one must be a finite number.
    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True, allow_inf_nan=False)

    # -- model -----------------------------------------------------------------
    model: str = "tiny"
    """A local path or hub id of a causal LM; "tiny" for the project's tiny Qwen2 (hidden
    128, 2 layers, random init) with a tokenizer built from the envs' text; or a known
    model, ready offline ("smollm2-135m-instruct": SmolLM2-135M-Instruct, the smollm2
    extra; `agentenv.trainers.pretrained`)."""
    envs: dict[str, float] = Field(default_factory=lambda: {"arithmetic-v0": 1.0})
    """Registered env ids and their sampling weights; a list of ids means equal weights
    (used by the CLI; the trainer's ``envs`` argument overrides it)."""
    env_kwargs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Keyword arguments for `agentenv.make` per env id, e.g. {"guess-number-v0": {"difficulties": [0]}}."""
    output_dir: str = "runs/grpo"
    """Run directory: config.json, metrics.jsonl, trajectories/, evals/, checkpoints/,
    final/. One run's: see ``resume`` for a directory that holds a run already."""
    seed: int = Field(0, ge=0, lt=2**64)
    """Seeds task sampling, generation and initialisation; a resumed run repeats them.
    Non-negative and below 2**64 (as numpy's, gymnasium's and torch's seeds are)."""
    device: str = "auto"
    """"auto" (cuda when available), "cpu", "cuda" or "cuda:N"."""

    # -- rollouts ---------------------------------------------------------------
    steps: int = Field(50, ge=1)
    """Optimiser steps (one batch of groups each)."""
    group_size: int = 4
    """G: rollouts per task, sharing its seed and initial state (at least 2)."""
    batch_size: int = 16
    """Episodes per step; a multiple of group_size."""
    max_turns: int | None = Field(None, ge=1)
    """Override each env's max_turns (None keeps the env's)."""
    tool_prompt: Literal["json", "compact", "none"] = "json"
    """How envs made from ids show their tools: JSON schemas, one compact line each, or not at all."""
    max_new_tokens: int = Field(128, ge=1)
    """Tokens the model may generate per turn; a turn cut here is flagged as truncated."""
    max_seq_len: int = Field(2048, ge=1)
    """Longest training sequence (prompt + all turns); longer episodes stop generating."""
    stop: list[str] = Field(default_factory=list)
    """Strings that end a turn besides the end-of-turn token, e.g. ["</tool_call>"] (one call
    per turn). Not empty: "" is in every text, so every turn would end at its first token."""
    temperature: float = Field(1.0, gt=0.0, le=10.0)
    """Sampling temperature (log-probs are computed at the same temperature). Above 0:
    a group sampled greedily is G copies of one episode, with no signal to learn from."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    top_k: int = Field(0, ge=0)
    """Top-k sampling (0 = off)."""
    reuse_kv_cache: bool = True
    """Keep each live episode's KV cache between turns: a turn feeds the model only the
    new observation, not the whole conversation. The same samples up to float
    rounding; off for models with sliding-window attention."""
    share_prompts: bool = True
    """Run a prompt that several sequences open with once for all of them: a group's
    prompt, and the opening every prompt shares (a system prompt, a tool list), in
    sampling, in the update and in the warm start. The same samples and gradients up
    to float rounding; off for models with sliding-window attention."""
    rollout_engine: Literal["transformers", "vllm"] = "transformers"
    """What samples the rollouts. "transformers": the model itself, through this project's
    sampler (no extra dependency; the KV cache kept across turns). "vllm": a vLLM engine
    in this process on a copy of the weights (the vllm extra; see
    `agentenv.trainers.vllm_engine`), given the new weights after every optimiser step,
    its prefix cache carrying each conversation from turn to turn; its log-probs differ
    from the trainer's (kernels, dtype), which ``sampler_is`` corrects."""
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)
    """With rollout_engine="vllm": the engine's settings (a `VLLMConfig`, or a table of its
    fields, e.g. {"kv_cache_gb": 2, "enforce_eager": true})."""
    sampler_is: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask", "none"] = "sequence_mask"
    """For tokens another implementation sampled (rollout_engine="vllm", or trajectories
    from a served model given to `GRPOTrainer.update`): importance weights for the gap
    between its log-probs and the trainer's (`agentenv.trainers.off_policy.sampler_importance_weights`),
    per token or per sequence, truncated at sampler_is_cap or masked beyond it; "none"
    only measures the gap (``sampler/*`` in the metrics). TRL's default. Tokens the
    transformers engine sampled are never weighted: they come from the trainer's own
    arithmetic."""
    sampler_is_cap: float = Field(3.0, ge=1.0)
    """C of sampler_is: the truncation cap, or the mask's bounds [1/C, C]. TRL's default."""
    split_seed: int | None = Field(None, ge=0, lt=2**64)
    """Seeds the held-out split (None: ``seed``). Fix it to compare runs of several seeds
    on one held-out set, or to share one warm start between them (it trains on the split's
    training side)."""
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    """Share of each env's tasks held out for evaluation, split as ``split_by`` says."""
    split_by: Literal["content", "id"] = "content"
    """How tasks are held out. "content" (`TaskSet.split`): no held-out task shares its
    prompt and payload with a training task, so held-out success measures tasks never
    trained on; an env of too few distinct contents for both sides is split by id, and
    the run says so. "id": held-out task ids never trained on, which may share content
    with training tasks (guess-number: 400 ids over 16 secrets); the run prints and logs
    how many do (``eval/content_twins``), so the held-out set is what it says."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: drop groups whose rewards are all equal and sample more."""
    max_sampling_rounds: int = Field(4, ge=1)
    """Rounds of sampling dynamic sampling may take to fill the batch."""

    miner: MinerConfig | None = None
    """The failure miner's settings (a `agentenv.miner.MinerConfig`, or a table of its
    fields, e.g. {"temperature": 0.3}); None samples tasks uniformly, {} turns the
    miner on with its defaults."""
    importance_weighting: bool = False
    """With the miner: multiply each group's advantages by w = (1/|pool|) / P(task), the
    uniform over the sampling probability, normalised to mean 1 over the batch's groups."""
    ray: RayConfig | None = None
    """Run the envs in Ray actors (a `agentenv.rollout.ray.RayConfig`, or a table of its
    fields, e.g. {"actors": 4, "address": "10.0.0.5:6379"}); the model stays here and
    generates for every actor's episodes at once. None steps the envs in threads of this
    process. Needs the ray extra."""

    # -- advantages and loss ----------------------------------------------------------
    loss: str = Field("grpo", json_schema_extra={"enum": list(LOSS_MODES)})
    """Policy loss: a row of `agentenv.trainers.modes.LOSS_MODES`."""
    advantage: str = Field("std", json_schema_extra={"enum": list(TASK_ADVANTAGES)})
    """Task-level advantage: a row of `agentenv.trainers.modes.TASK_ADVANTAGES`."""
    step_advantage: str = Field("gigpo", json_schema_extra={"enum": list(STEP_ADVANTAGES)})
    """Step-level advantage: a row of `agentenv.trainers.modes.STEP_ADVANTAGES`."""
    step_advantage_weight: float = Field(1.0, ge=0.0)
    """w in A = A_task + w * A_step."""
    step_advantage_std: bool = False
    """Divide the step term by the std of its step group (GiGPO's F_norm = std). Off, the
    step term is the return minus its group's mean (F_norm = 1, GiGPO's "mean_norm"): a
    baseline that does not depend on the action, so the term's expectation stays the
    gradient of the return, in reward units. Two winning paths that differ only by the
    discount (one turn sooner) then differ by a few hundredths, not by the unit a win
    over a loss gets. On, every step group is stretched to unit std, however near-tied
    its returns: in one run of the learning demonstration (its earlier settings) that
    taught the policy to guess 13 at 13..16 in 58 of 59 episodes, a move that wins
    sooner but less often than 14. At the current settings the ablation does not
    separate the two (bench/README.md)."""
    gamma: float = Field(0.95, ge=0.0, le=1.0)
    """Discount of step rewards in the step-level returns."""
    eps_low: float | None = Field(None, ge=0.0)
    """Lower clip range of the importance ratio; None = the loss's default (its ``clip``
    in LOSS_MODES). A loss that clips both ways with one range (``eps``) takes this one."""
    eps_high: float | None = Field(None, ge=0.0)
    """Upper clip range; None = the loss's default. Only for a loss that clips each way
    apart (dapo, gspo, cispo); grpo and dr_grpo clip both ways with ``eps_low``."""
    episode_balanced: bool = False
    """For a token-mean loss (dapo, cispo): average each episode's token-mean instead,
    so every episode weighs the same. In multi-turn batches failed episodes run longer;
    a token-mean then weighs the advantage below zero overall (``adv/token_mean`` in
    the metrics; -0.32 measured), which pushes entropy up. The sequence-level losses
    (grpo, dr_grpo, gspo) weigh episodes equally already."""
    kl_coef: float = Field(0.0, ge=0.0)
    """Weight of the k3 KL to the initial (reference) model; 0 = no reference model."""
    overlong_cache_len: int = Field(0, ge=0)
    """DAPO overlong shaping: penalise turns longer than max_new_tokens - this (0 = off)."""
    truncation_penalty: float = Field(0.0, ge=0.0)
    """Times the share of an episode's turns cut at max_new_tokens (no end-of-turn token),
    subtracted from its episode reward."""
    ppo_epochs: int = Field(1, ge=1)
    """Passes over each batch; above 1 the importance ratio departs from 1 and clipping acts."""

    shuffle_rewards: bool = False
    """A control arm: each step, the episodes' task rewards are permuted across the batch
    before the advantages are computed, so the update has the RL arm's every ingredient
    (data, tokens, lengths, KL, optimiser) but no information about which episode earned
    what. Run it from the same warm start and seeds as the RL arm: RL minus this control is
    what the reward taught. Step rewards are not permuted; for a clean control use
    step_advantage="none". The logged and written rewards stay the true ones."""

    # -- reward -----------------------------------------------------------------------
    reward: Literal["verifier", "rlpr"] = "verifier"
    """Episode reward in the advantage: the env's verifier (its task reward), or "rlpr": the
    policy's own probability of each task's reference answer after its reasoning, debiased
    and clipped (`agentenv.trainers.rlpr`; every task needs payload["reference"]). With
    "rlpr" the verifier still runs and its success is logged as usual, next to
    rlpr/reward_mean, rlpr/debias_mean and rlpr/filtered_groups."""
    rlpr_answer_marker: str = "<answer>"
    """With reward="rlpr": the reasoning is the final reply up to its last occurrence of this
    string (a reply without it is all reasoning); the reference is scored right after it."""
    rlpr_debias: bool = True
    """With reward="rlpr": subtract the reference's probability without the reasoning and clip
    to [0, 1] (the paper's debiasing); false: the probability itself."""
    rlpr_std_filter: Literal["ema", "fixed", "off"] = "ema"
    """With reward="rlpr": leave out of the update the groups whose reward std is below beta.
    "ema" (the paper): beta = rlpr_std_factor * a moving average of each step's mean group
    std; "fixed": beta = rlpr_std_threshold; "off": keep every group."""
    rlpr_std_threshold: float = Field(0.05, ge=0.0, le=0.5)
    """With rlpr_std_filter="fixed": beta (rewards lie in [0, 1], so a std is at most 0.5)."""
    rlpr_std_factor: float = Field(0.5, ge=0.0)
    """With rlpr_std_filter="ema": beta is this times the moving average (0.5 in the paper's Qwen runs)."""
    rlpr_ema_decay: float = Field(0.99, ge=0.0, lt=1.0)
    """With rlpr_std_filter="ema": m <- decay * m + (1 - decay) * the step's mean group std."""

    # -- asynchronous rollouts -----------------------------------------------------
    async_rollouts: bool = False
    """Generate the next batches in a background thread, on a copy of the weights
    swapped for the learner's newest between turns, while the learner updates
    (PipelineRL-style; `agentenv.trainers.async_rollout`). Each turn records the
    version of the weights that sampled it; stale tokens are corrected with truncated
    importance weights."""
    max_staleness: int = Field(1, ge=0)
    """With async_rollouts: the most versions (optimiser steps) the weights that sampled
    a token may be behind the learner's when it is trained on. 0 is the synchronous
    trainer: the same batches and parameters."""
    staleness_policy: Literal["wait", "drop"] = "wait"
    """With async_rollouts: "wait" holds the generator back until the learner is within
    max_staleness versions of the batch it starts, so nothing is ever too old; "drop"
    never holds it back (beyond a buffer of max_staleness + 1 batches) and drops the
    groups holding a token older than max_staleness when their step comes."""
    importance_cap: float = Field(2.0, ge=1.0)
    """With async_rollouts: C in the truncated importance weight min(pi / mu, C) of a
    token sampled by older weights mu (`agentenv.trainers.off_policy`)."""

    # -- optimisation ------------------------------------------------------------
    learning_rate: float = Field(1e-5, ge=0.0)
    """AdamW learning rate. 0 is a sanity control arm: the same run with no change to the
    weights (what the held-out figure does with nothing learned)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear learning-rate warm-up over this many steps."""
    lr_decay: Literal["constant", "linear"] = "constant"
    """After warm-up: keep the learning rate, or decay it linearly to 10% at the last step."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay."""
    max_grad_norm: float = Field(1.0, ge=0.0)
    """Gradient clipping by global norm."""
    micro_batch_size: int = Field(8, ge=1)
    """Sequences per forward/backward; gradients accumulate over the batch."""
    logprob_chunk_tokens: int = Field(1024, ge=1)
    """Policy tokens per log-prob chunk, so full-vocabulary logits never exist for the whole batch."""
    bf16: bool = True
    """bf16 autocast on GPU (ignored on CPU)."""
    master_weights: bool = True
    """Keep the trainable weights and AdamW's state in float32 whatever the checkpoint's
    dtype (compute still runs in bf16 under autocast on a GPU). False trains in the
    checkpoint's dtype: for a bf16 checkpoint, half the weight and optimiser memory, and
    every update smaller than bf16's rounding step is lost (at lr 1e-6, one AdamW step
    changed about 2% of a bf16 model's weights)."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass to save memory,
    for about a third more training time. The update's shared prompt pass stays on: a
    group's prompt runs once, without checkpointing, and the rows' passes read its keys
    and values (`agentenv.trainers.logprobs`). On the benches' 4-layer model it holds a
    little less than lean activations without it (225 against 240 MiB), for 1.3x the
    step time (bench/train_vs_trl.py); it pays off with many layers or long completions."""
    lean_activations: bool = True
    """Hold fewer activations for the backward pass and recompute them there, with the
    same gradients bit for bit (`lean_activations`): gated MLPs (Llama, Qwen, Mistral, ...)
    keep two of their four intermediate tensors, RMSNorms drop their normalised input,
    and the layers that read a norm's output recompute it from what the norm holds
    (`recomputed_norm_outputs`); on the CPU, grouped-query attention holds each key/value
    head once instead of once per query head (`lean_attention`; gradients equal up to
    float rounding). About two fifths less activation memory on the benches' Qwen2 (0.43
    on 16 rows of 160 tokens), no slower. Modules of any other shape are left as they are."""
    cpu_onednn_linear: bool = True
    """Training on the CPU: the model's linear layers take float32 products from oneDNN
    instead of MKL (`gemm.onednn_linear`), forward and backward, in training and in
    sampling. On AMD CPUs, where MKL runs at about half the cores' float32 peak, a
    single-turn step is about a fifth faster (bench/cpu_gemm.py, bench/train_vs_trl.py);
    results equal MKL's up to float rounding. Ignored on GPUs, and where PyTorch lacks
    the kernel."""
    cpu_keep_freed_memory: bool = True
    """Training on the CPU: glibc's malloc keeps freed blocks of up to 1 GiB for the next
    step instead of returning them to the kernel and faulting them in again (process-wide;
    `keep_freed_cpu_memory`). Steps about 15% faster on a multi-turn batch, peak memory
    about 5% higher. Ignored on GPUs and with other C libraries."""
    torch_threads: int | None = Field(None, ge=1)
    """Intra-op threads torch computes with on the CPU (``torch.set_num_threads``, set when
    the trainer is made, for the whole process). None leaves torch's setting as it is (by
    default one per core of the machine, blind to a container's CPU quota and to other
    ranks on it); ``agentenv train --threads`` defaults to the CPUs this process may use,
    shared among a torchrun job's ranks on the machine (`threads.available_cpus`)."""
    lora_r: int = Field(0, ge=0)
    """LoRA rank through peft (0 = full fine-tuning)."""
    lora_alpha: int = 16
    """LoRA alpha."""

    # -- warm start, evaluation, checkpoints ---------------------------------------
    sft_steps: int = Field(0, ge=0)
    """Supervised steps on oracle trajectories before GRPO (the envs need an oracle)."""
    sft_learning_rate: float = Field(3e-3, gt=0.0)
    """Learning rate of the supervised warm start."""
    sft_weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay of the supervised warm start."""
    sft_checkpoint_every: int = Field(100, ge=1)
    """Checkpoint the warm start every this many supervised steps (checkpoints/warm-start-NNNNNN:
    the weights, the optimiser, the batch sampler's state and the oracle's episodes), so a
    run stopped during it goes on from there; and at its end, keeping the weights alone: a
    run stopped after it does not run it again, and a resumed run's KL reference
    (``kl_coef``) is those weights, not the resumed ones."""
    eval_every: int = Field(10, ge=0)
    """Evaluate success on held-out tasks every this many steps (0 = only at start and end),
    sampled at eval_temperature (greedy at 0) with top_p and top_k."""
    eval_episodes: int = Field(64, ge=0)
    """Held-out episodes per evaluation (0 = no evaluation, and no task is held out:
    every env trains on all its tasks, however few)."""
    eval_first: bool = True
    """Evaluate before the first step too (logged at step 0). False for a run whose start
    another run measured already (a control arm from the same warm start and seed)."""
    eval_temperature: float = Field(0.0, ge=0.0, le=10.0)
    """Sampling temperature of evaluation episodes (0 = greedy)."""
    save_trajectories: bool = True
    """Write each step's episodes to output_dir/trajectories/step-NNNNNN.jsonl, and each
    held-out evaluation's to output_dir/evals/step-NNNNNN.jsonl."""
    save_every: int = Field(10, ge=1)
    """Checkpoint every this many steps (and at the end)."""
    keep_checkpoints: int = Field(2, ge=1)
    """Most recent checkpoints kept on disk."""
    resume: bool = True
    """Continue from the latest checkpoint in output_dir when there is one. A run that
    starts from step 0 instead (resume=False, or no checkpoint yet) never mixes with an
    earlier run there: one of the same config (its config.json equal to this config but
    for resume and output_dir) is replaced, its files deleted first; one of another
    config is refused before anything is written (choose another output_dir, resume it,
    or delete it)."""
    report_to: list[TrackerName] = Field(default_factory=lambda: list(DEFAULT_TRACKERS))
    """Experiment trackers the run logs to, each through its own library (the trackers
    extra): any of "tensorboard", "wandb", "mlflow", "trackio"; [] for none. Each gets every
    step's figures as metrics.jsonl has them (the step as x axis) and the config; when the
    run completes, W&B, MLflow and Trackio also get its report (the page ``agentenv report``
    writes). Their settings come from the libraries' environment variables (WANDB_MODE,
    WANDB_PROJECT, MLFLOW_TRACKING_URI, TRACKIO_DIR, ...; `agentenv.trainers.trackers`).
    A tracker whose library is missing is an error, except in the default, ["tensorboard"],
    which logs to TensorBoard when it is installed."""
    tensorboard: bool | None = None
    """Deprecated: use report_to. True adds "tensorboard" to report_to, False takes it out."""

    # -- several processes (torchrun) --------------------------------------------------
    data_parallel: Literal["ddp", "fsdp"] = "ddp"
    """Under torchrun: "ddp" keeps a whole model on every rank; "fsdp" shards weights,
    gradients and AdamW state over the ranks (FSDP2) for a model whose training state
    does not fit one device (its weights must, for generation). Ignored in one process."""
    dist_timeout_s: float = Field(600.0, gt=0.0)
    """Under torchrun (data-parallel: `agentenv.trainers.distributed`): how long a rank
    waits for the others in a collective before the run stops with an error (a rank
    that died or hangs). Longer than any phase one rank spends alone, such as a slow
    rollout. Ignored in one process."""

    if not TYPE_CHECKING:  # type checkers keep the pydantic plugin's typed signature

        def __init__(self, **data: Any) -> None:
            try:
                super().__init__(**data)
            except ValidationError as e:
                raise _Invalid("invalid GRPOConfig", _problems(e)) from None

    # -- single fields -------------------------------------------------------------

    @field_validator("envs", mode="before")
    @classmethod
    def _list_means_equal_weights(cls, value: Any) -> Any:
        return dict.fromkeys(value, 1.0) if isinstance(value, list) else value

    @field_validator("envs")
    @classmethod
    def _check_envs(cls, envs: dict[str, float]) -> dict[str, float]:
        if not envs:
            raise ValueError("envs is empty; give at least one registered env id, e.g. {'arithmetic-v0': 1.0}")
        bad = [f"weight of env {env_id!r} must be > 0, got {w}" for env_id, w in envs.items() if not 0 < w < math.inf]
        if bad:
            raise ValueError("; ".join(bad))
        # Each finite, they can still sum to infinity; the trainer and the miner divide by the sum.
        if not math.isfinite(sum(envs.values())):
            raise ValueError("the env weights sum to infinity; use smaller ones (only their ratios matter), e.g. 1.0")
        return envs

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, stop: list[str]) -> list[str]:
        if "" in stop:
            raise ValueError(f"stop holds an empty string, which every text contains; drop it, got {stop!r}")
        return stop

    @field_validator("env_kwargs")
    @classmethod
    def _check_env_kwargs(cls, env_kwargs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        # allow_inf_nan covers typed fields only: a NaN here reached the env (max_turns=nan
        # ran with no turn limit) and config.json recorded null in its place.
        where = _safejson.first_non_finite(env_kwargs)
        if where is not None:
            raise ValueError(f"env_kwargs.{where} must be a finite number, got NaN or infinity")
        return env_kwargs

    @field_validator("model")
    @classmethod
    def _check_model(cls, model: str) -> str:
        if model in ("tiny", *KNOWN_MODELS) or Path(model).exists() or re.fullmatch(r"[\w.-]+/[\w.-]+", model):
            return model
        known = ", ".join(repr(m) for m in KNOWN_MODELS)
        raise ValueError(
            f"model {model!r} is neither 'tiny', a known model ({known}), an existing path, nor a hub id (org/name)."
            f"{did_you_mean(model, ['tiny', *KNOWN_MODELS])}"
        )
        return model

    @field_validator("device")
    @classmethod
    def _check_device(cls, device: str) -> str:
        if device not in ("auto", "cpu", "cuda") and not re.fullmatch(r"cuda:\d+", device):
            raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
        return device

    @field_validator("group_size")
    @classmethod
    def _check_group_size(cls, group_size: int) -> int:
        if group_size < 2:
            raise ValueError(
                f"group_size must be >= 2 for group-relative advantages, got {group_size}; set group_size=4"
            )
        return group_size

    @field_validator(*_MODE_TABLES)
    @classmethod
    def _check_mode(cls, name: str, info: ValidationInfo) -> str:
        field = str(info.field_name)
        return check_mode(field, name, _MODE_TABLES[field])

    @field_validator("report_to")
    @classmethod
    def _once_each(cls, names: list[TrackerName]) -> list[TrackerName]:
        return list(dict.fromkeys(names))

    # -- between fields ------------------------------------------------------------

    @model_validator(mode="after")
    def _fold_tensorboard(self) -> GRPOConfig:
        """The deprecated ``tensorboard`` becomes report_to's entry (and None, so the
        config says it once)."""
        if self.tensorboard is not None:
            warnings.warn(
                f"GRPOConfig.tensorboard is deprecated: use report_to (tensorboard={self.tensorboard} "
                f"is report_to={['tensorboard'] if self.tensorboard else []})",
                DeprecationWarning,
                stacklevel=4,  # the caller of GRPOConfig(...), through pydantic's __init__ and ours
            )
            others: list[TrackerName] = [name for name in self.report_to if name != "tensorboard"]
            self.report_to = [*others, "tensorboard"] if self.tensorboard else others
            self.tensorboard = None
        return self

    @model_validator(mode="after")
    def _check_together(self) -> GRPOConfig:
        p = []
        if self.batch_size < 1 or self.batch_size % self.group_size:
            suggestion = self.group_size * max(1, round(self.batch_size / self.group_size))
            p.append(
                f"batch_size ({self.batch_size}) must be a positive multiple of group_size ({self.group_size}); "
                f"try batch_size={suggestion}"
            )
        if self.max_new_tokens >= self.max_seq_len:
            p.append(f"max_new_tokens ({self.max_new_tokens}) must be below max_seq_len ({self.max_seq_len})")
        if self.overlong_cache_len >= self.max_new_tokens:
            p.append(
                f"overlong_cache_len ({self.overlong_cache_len}) must be below max_new_tokens ({self.max_new_tokens})"
            )
        p += [
            f"env_kwargs names {e!r}, which is not in envs {sorted(self.envs)}"
            for e in self.env_kwargs
            if e not in self.envs
        ]
        if self.eps_high is not None and "eps_high" not in LOSS_MODES[self.loss].clip:
            p.append(
                f"eps_high has no effect with loss {self.loss!r}, which clips both ways with one range (eps_low); "
                "use a loss that clips each way apart (dapo, gspo, cispo) or leave eps_high unset"
            )
        if self.episode_balanced and LOSS_MODES[self.loss].averaging != "token":
            p.append(
                f"episode_balanced applies to token-mean losses (dapo, cispo); loss {self.loss!r} "
                "already weighs every episode the same"
            )
        if self.importance_weighting and self.miner is None:
            p.append("importance_weighting corrects the miner's sampling; set miner={} or importance_weighting=false")
        p += missing_libraries(self.report_to)
        p += self._async_problems()
        p += self._rlpr_problems()
        p += self._engine_problems()
        if p:
            raise ValueError("\n".join(p))
        return self

    def _async_problems(self) -> list[str]:
        p = []
        if not self.async_rollouts:
            fields = ("max_staleness", "staleness_policy", "importance_cap")
            changed = [
                f"{f}={getattr(self, f)!r}" for f in fields if getattr(self, f) != type(self).model_fields[f].default
            ]
            if changed:
                p.append(
                    f"{', '.join(changed)} only apply with async_rollouts=true; set it or leave them at their defaults"
                )
        elif self.staleness_policy == "drop" and self.max_staleness == 0:
            p.append(
                "staleness_policy='drop' with max_staleness=0 would drop every batch generated during an update; "
                "use staleness_policy='wait' (max_staleness=0 is then the synchronous trainer) or max_staleness >= 1"
            )
        return p

    def _engine_problems(self) -> list[str]:
        if self.rollout_engine == "vllm":
            if self.async_rollouts:
                return [
                    "async_rollouts samples from a copy of the model in a thread; with rollout_engine='vllm' "
                    "set async_rollouts=false (or use rollout_engine='transformers')"
                ]
            return []
        if self.vllm != VLLMConfig():
            return [
                f"vllm settings only apply with rollout_engine='vllm' (it is {self.rollout_engine!r}); "
                "set it or leave vllm at its defaults"
            ]
        return []

    def _rlpr_problems(self) -> list[str]:
        def changed(*fields: str) -> list[str]:
            return [
                f"{f}={getattr(self, f)!r}" for f in fields if getattr(self, f) != type(self).model_fields[f].default
            ]

        if self.reward != "rlpr":
            names = changed("rlpr_answer_marker", "rlpr_debias", "rlpr_std_filter", *_RLPR_FILTER_FIELDS)
            if not names:
                return []
            return [f"{', '.join(names)} only apply with reward='rlpr'; set it or leave them at their defaults"]
        p = []
        if not self.rlpr_answer_marker.strip():
            p.append("rlpr_answer_marker is blank; use a marker the replies end their reasoning with, e.g. '<answer>'")
        for mode, fields in (("fixed", ("rlpr_std_threshold",)), ("ema", ("rlpr_std_factor", "rlpr_ema_decay"))):
            names = changed(*fields)
            if names and self.rlpr_std_filter != mode:
                p.append(
                    f"{', '.join(names)} only apply with rlpr_std_filter={mode!r} (it is {self.rlpr_std_filter!r})"
                )
        if self.dynamic_sampling:
            p.append(
                "dynamic_sampling drops groups by the verifier's reward; with reward='rlpr' the std filter "
                "(rlpr_std_filter) picks the groups: set dynamic_sampling=false"
            )
        return p

    # -- files and dicts -----------------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "invalid GRPOConfig") -> GRPOConfig:
        """Validate ``data`` (field names to values); errors start with ``source``."""
        odd = [key for key in data if not isinstance(key, str)]
        if odd:
            raise ValueError(f"{source}: field names are strings, got {odd[0]!r}")
        try:
            return cls(**data)
        except _Invalid as e:
            raise _Invalid(source, e.problems) from None

    @classmethod
    def from_file(cls, path: str | Path) -> GRPOConfig:
        """Read a YAML (.yaml/.yml) or TOML (.toml) file of the same fields. Any file that
        cannot be read as one is a ValueError naming it (FileNotFoundError when missing)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"config file {path} does not exist")
        if path.suffix not in (".toml", ".yaml", ".yml"):
            raise ValueError(f"{path}: expected a .toml, .yaml or .yml file")
        data = _read_mapping(path)
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data (what `from_dict` reads back, and the run's config.json)."""
        return self.model_dump(mode="json")


# --- reading a file ---------------------------------------------------------------------


def _read_mapping(path: Path) -> dict[str, Any]:
    """The top-level table of a TOML or YAML file; a ValueError naming ``path`` for anything
    else (a directory, bytes that are not UTF-8, bad syntax, an integer past Python's digit
    limit, nesting deeper than the parser's recursion)."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte order mark (Notepad writes one) is not TOML
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{path}: not UTF-8 text: byte {e.object[e.start]:#04x} at byte {e.start + 1}; save the file as UTF-8"
        ) from None
    except OSError as e:
        what = "is a directory; give a .toml or .yaml file" if path.is_dir() else f"cannot be read: {e.strerror or e}"
        raise ValueError(f"config file {path} {what}") from None
    kind = "TOML" if path.suffix == ".toml" else "YAML"
    try:
        data = tomllib.loads(text) if kind == "TOML" else _yaml_mapping(text)
    except RecursionError:
        raise ValueError(f"{path}: invalid {kind}: nested too deeply") from None
    except ValueError as e:  # bad syntax, or an integer of more digits than int() converts
        reason = "an integer of more than 4300 digits" if "integer string conversion" in str(e) else str(e)
        raise ValueError(f"{path}: invalid {kind}: {reason}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of config fields at the top level")
    return data


MAX_YAML_VALUES = 100_000
"""A YAML config expanding to more values is refused: no config holds so many, and
aliases make a few lines expand to billions (or, an alias inside itself, forever)."""


def _yaml_mapping(text: str) -> Any:
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ValueError(str(e)) from None
    # An alias is the same object again: walked as a tree, as everything after this does.
    stack, seen = [data], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > MAX_YAML_VALUES:
            raise ValueError(
                f"it expands to more than {MAX_YAML_VALUES:,} values (aliases of aliases, or an alias "
                "inside itself): write the values out"
            )
        stack.extend(item.values() if isinstance(item, dict) else item if isinstance(item, list) else ())
    return data


# --- pydantic's report in the config's words -----------------------------------------

_BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
_BOUND_KEYS = {"greater_than_equal": "ge", "greater_than": "gt", "less_than_equal": "le", "less_than": "lt"}


class _Invalid(ValueError):
    """An invalid config: one line for one problem, a list for several."""

    def __init__(self, head: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{head}: {problems[0]}" if len(problems) == 1 else f"{head}:\n- " + "\n- ".join(problems))


def _problems(error: ValidationError) -> list[str]:
    # The check between fields reports its problems one per line.
    return [line for e in error.errors() for line in _explain(e).splitlines()]


def _explain(e: ErrorDetails) -> str:
    loc = tuple(e["loc"])
    name = ".".join(str(part) for part in loc)
    kind, value = e["type"], e.get("input")
    annotation = _annotation_at(GRPOConfig, loc)
    if kind == "value_error":  # raised by a validator, whose message says the field and the fix
        message = str(e["ctx"]["error"])
        return message if len(loc) <= 1 else f"{name}: {message}"
    if kind == "extra_forbidden":
        known = getattr(_unwrap_optional(_annotation_at(GRPOConfig, loc[:-1])), "model_fields", {})
        return f"unknown field {name!r}.{did_you_mean(str(loc[-1]), known)}"
    if kind in _BOUNDS:
        bound = e["ctx"][_BOUND_KEYS[kind]]
        bound = int(bound) if isinstance(bound, float) and bound.is_integer() else bound  # ">= 0", not ">= 0.0"
        optional = " or None" if type(None) in get_args(annotation) else ""
        return f"{name} must be {_BOUNDS[kind]} {bound}{optional}, got {value!r}"
    if kind == "finite_number":
        return f"{name} must be a finite number, got {value!r}"
    if kind == "literal_error":
        choices = get_args(annotation) or (e["ctx"]["expected"],)
        listed = ", ".join(map(repr, choices))
        return f"{name} must be one of {listed}, got {value!r}.{did_you_mean(str(value), map(str, choices))}"
    if kind.endswith(("_type", "_parsing")) or kind == "int_from_float":
        expected = _type_name(annotation) if annotation is not None else e["msg"].lower()
        return f"field {name!r} expects {expected}, got {value!r}"
    return f"{name}: {e['msg']}"


def _unwrap_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        return rest[0] if len(rest) == 1 else annotation
    return annotation


def _annotation_at(model: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The annotation of the value at ``loc`` (through nested models, dicts and lists), or None."""
    annotation: Any = model
    for part in loc:
        inner = _unwrap_optional(annotation)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            field = inner.model_fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
        elif get_origin(inner) in (dict, list):
            annotation = get_args(inner)[-1]
        else:
            return None
    return annotation


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(annotation))
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _document(model: type[BaseModel]) -> str:
    """The class docstring followed by every field's type, default and docstring (for help())."""
    lines = [inspect.cleandoc(model.__doc__ or ""), "", "Fields:"]
    for name, field in model.model_fields.items():
        default = field.get_default(call_default_factory=True)
        lines += ["", f"{name}: {_type_name(field.annotation)} = {default!r}"]
        lines += textwrap.indent(field.description or "", "    ").splitlines()
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        choices = extra.get("enum")
        if isinstance(choices, list):
            lines.append(f"    One of: {', '.join(map(repr, choices))}.")
    return "\n".join(lines)


GRPOConfig.__doc__ = _document(GRPOConfig)
