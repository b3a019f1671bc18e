"""`GRPOConfig`: every knob of a GRPO run, one typed dataclass, validated on construction.

Read from Python, or from YAML/TOML by `GRPOConfig.from_file` (the CLI's
`agentenv train CONFIG`). Every invalid value fails at construction with a message
that says the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = ["GRPOConfig"]

LOSSES = ("grpo", "dapo", "dr_grpo", "gspo", "cispo")
TASK_ADVANTAGES = ("std", "none", "batch_std")
STEP_ADVANTAGES = ("none", "gigpo", "per_turn")


@dataclass
class GRPOConfig:
    # -- model -----------------------------------------------------------------
    model: str = "tiny"
    """A local path or hub id of a causal LM, or "tiny" for the project's tiny Qwen2
    (hidden 128, 2 layers, random init) with a tokenizer built from the envs' text."""
    envs: dict[str, float] = field(default_factory=lambda: {"arithmetic-v0": 1.0})
    """Registered env ids and their sampling weights (used by the CLI; the trainer's
    ``envs`` argument overrides it)."""
    env_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Keyword arguments for `agentenv.make` per env id, e.g. {"guess-number-v0": {"difficulties": [0]}}."""
    output_dir: str = "runs/grpo"
    """Run directory: config.json, metrics.jsonl, trajectories/, checkpoints/, final/."""
    seed: int = 0
    """Seeds task sampling, generation and initialisation; a resumed run repeats them."""
    device: str = "auto"
    """"auto" (cuda when available), "cpu", "cuda" or "cuda:N"."""

    # -- rollouts ---------------------------------------------------------------
    steps: int = 50
    """Optimiser steps (one batch of groups each)."""
    group_size: int = 4
    """G: rollouts per task, sharing its seed and initial state."""
    batch_size: int = 16
    """Episodes per step; a multiple of group_size."""
    max_turns: int | None = None
    """Override each env's max_turns (None keeps the env's)."""
    tool_prompt: Literal["json", "compact", "none"] = "json"
    """How envs made from ids show their tools: JSON schemas, one compact line each, or not at all."""
    max_new_tokens: int = 128
    """Tokens the model may generate per turn; a turn cut here is flagged as truncated."""
    max_seq_len: int = 2048
    """Longest training sequence (prompt + all turns); longer episodes stop generating."""
    stop: list[str] = field(default_factory=list)
    """Strings that end a turn besides the end-of-turn token, e.g. ["</tool_call>"] (one call per turn)."""
    temperature: float = 1.0
    """Sampling temperature (log-probs are computed at the same temperature)."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    top_k: int = 0
    """Top-k sampling (0 = off)."""
    test_fraction: float = 0.2
    """Share of each env's tasks held out for evaluation (split by task id hash)."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: drop groups whose rewards are all equal and sample more."""
    max_sampling_rounds: int = 4
    """Rounds of sampling dynamic sampling may take to fill the batch."""

    miner: dict[str, Any] | None = None
    """The failure miner's settings (`agentenv.miner.MinerConfig` fields, e.g. {"temperature": 0.3});
    None samples tasks uniformly. {} turns the miner on with its defaults."""
    importance_weighting: bool = False
    """With the miner: multiply each group's advantages by w = (1/|pool|) / P(task), the
    uniform over the sampling probability, normalised to mean 1 over the batch's groups."""

    # -- advantages and loss ----------------------------------------------------------
    loss: Literal["grpo", "dapo", "dr_grpo", "gspo", "cispo"] = "grpo"
    """Policy loss: grpo, dapo, dr_grpo, gspo or cispo."""
    advantage: Literal["std", "none", "batch_std"] = "std"
    """Task-level advantage: group std-normalised (GRPO), none (Dr. GRPO), or batch std."""
    step_advantage: Literal["none", "gigpo", "per_turn"] = "gigpo"
    """Step-level advantage: GiGPO anchor-state groups, per-turn normalisation, or none."""
    step_advantage_weight: float = 1.0
    """w in A = A_task + w * A_step."""
    gamma: float = 0.95
    """Discount of step rewards in the step-level returns."""
    eps_low: float | None = None
    """Lower clip range of the importance ratio; None = the loss's paper default
    (0.2; gspo 3e-4 on the sequence ratio; cispo none). grpo and dr_grpo clip both ways with it."""
    eps_high: float | None = None
    """Upper clip range; None = the loss's default (dapo and cispo 0.28, gspo 4e-4)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the initial (reference) model; 0 = no reference model."""
    overlong_cache_len: int = 0
    """DAPO overlong shaping: penalise turns longer than max_new_tokens - this (0 = off)."""
    truncation_penalty: float = 0.0
    """Times the share of an episode's turns cut at max_new_tokens (no end-of-turn token),
    subtracted from its episode reward."""
    ppo_epochs: int = 1
    """Passes over each batch; above 1 the importance ratio departs from 1 and clipping acts."""

    # -- optimisation ------------------------------------------------------------
    learning_rate: float = 1e-5
    """AdamW learning rate."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up over this many steps."""
    lr_decay: Literal["constant", "linear"] = "constant"
    """After warm-up: keep the learning rate, or decay it linearly to 10% at the last step."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm."""
    micro_batch_size: int = 8
    """Sequences per forward/backward; gradients accumulate over the batch."""
    logprob_chunk_tokens: int = 1024
    """Policy tokens per log-prob chunk, so full-vocabulary logits never exist for the whole batch."""
    bf16: bool = True
    """bf16 autocast on GPU (ignored on CPU)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    lora_r: int = 0
    """LoRA rank through peft (0 = full fine-tuning)."""
    lora_alpha: int = 16
    """LoRA alpha."""

    # -- warm start, evaluation, checkpoints ---------------------------------------
    sft_steps: int = 0
    """Supervised steps on oracle trajectories before GRPO (the envs need an oracle)."""
    sft_learning_rate: float = 3e-3
    """Learning rate of the supervised warm start."""
    eval_every: int = 10
    """Evaluate greedy success on held-out tasks every this many steps (0 = only at start and end)."""
    eval_episodes: int = 64
    """Held-out episodes per evaluation (0 = no evaluation)."""
    eval_temperature: float = 0.0
    """Sampling temperature of evaluation episodes (0 = greedy)."""
    save_trajectories: bool = True
    """Write each step's episodes to output_dir/trajectories/step-NNNNNN.jsonl."""
    save_every: int = 10
    """Checkpoint every this many steps (and at the end)."""
    keep_checkpoints: int = 2
    """Most recent checkpoints kept on disk."""
    resume: bool = True
    """Continue from the latest checkpoint in output_dir when there is one."""
    tensorboard: bool = True
    """Also log to TensorBoard when it is installed."""

    def __post_init__(self) -> None:
        if self.miner is not None and not isinstance(self.miner, dict):
            dump = getattr(self.miner, "model_dump", None)  # a MinerConfig: stored as its fields
            self.miner = dump(mode="json", exclude_unset=True) if callable(dump) else self.miner
        problems = list(self._problems())
        if problems:
            raise ValueError("invalid GRPOConfig:\n- " + "\n- ".join(problems))

    def _problems(self) -> list[str]:
        p = []
        if self.group_size < 2:
            p.append(f"group_size must be >= 2 for group-relative advantages, got {self.group_size}; set group_size=4")
        if self.batch_size < 1 or self.batch_size % max(self.group_size, 1):
            p.append(
                f"batch_size ({self.batch_size}) must be a positive multiple of group_size ({self.group_size}); "
                f"try batch_size={max(self.group_size, 1) * max(1, round(self.batch_size / max(self.group_size, 1)))}"
            )
        for name, choices in (("loss", LOSSES), ("advantage", TASK_ADVANTAGES), ("step_advantage", STEP_ADVANTAGES)):
            value = getattr(self, name)
            if value not in choices:
                close = difflib.get_close_matches(str(value), choices, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                p.append(f"{name} must be one of {', '.join(choices)}, got {value!r}.{hint}")
        if self.model != "tiny" and not Path(self.model).exists() and not re.fullmatch(r"[\w.-]+/[\w.-]+", self.model):
            p.append(f"model {self.model!r} is neither 'tiny', an existing path, nor a hub id (org/name)")
        if not self.envs:
            p.append("envs is empty; give at least one registered env id, e.g. {'arithmetic-v0': 1.0}")
        for env_id in self.env_kwargs:
            if env_id not in self.envs:
                p.append(f"env_kwargs names {env_id!r}, which is not in envs {sorted(self.envs)}")
        for env_id, weight in self.envs.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
                p.append(f"weight of env {env_id!r} must be > 0, got {weight}")
        positive = (
            "steps",
            "max_new_tokens",
            "max_seq_len",
            "micro_batch_size",
            "logprob_chunk_tokens",
            "ppo_epochs",
            "max_sampling_rounds",
            "save_every",
            "keep_checkpoints",
        )
        for name in positive:
            if getattr(self, name) < 1:
                p.append(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in (
            "warmup_steps",
            "sft_steps",
            "eval_every",
            "eval_episodes",
            "overlong_cache_len",
            "lora_r",
            "top_k",
        ):
            if getattr(self, name) < 0:
                p.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_new_tokens >= self.max_seq_len:
            p.append(f"max_new_tokens ({self.max_new_tokens}) must be below max_seq_len ({self.max_seq_len})")
        if self.overlong_cache_len >= self.max_new_tokens:
            p.append(
                f"overlong_cache_len ({self.overlong_cache_len}) must be below max_new_tokens ({self.max_new_tokens})"
            )
        if self.max_turns is not None and self.max_turns < 1:
            p.append(f"max_turns must be >= 1 or None, got {self.max_turns}")
        if not 0.0 <= self.temperature <= 10.0:
            p.append(f"temperature must be in [0, 10], got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            p.append(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 < self.test_fraction < 1.0:
            p.append(f"test_fraction must be in (0, 1), got {self.test_fraction}")
        if not 0.0 <= self.gamma <= 1.0:
            p.append(f"gamma must be in [0, 1], got {self.gamma}")
        for name in ("learning_rate", "sft_learning_rate"):
            if not getattr(self, name) > 0:
                p.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.lr_decay not in ("constant", "linear"):
            p.append(f"lr_decay must be 'constant' or 'linear', got {self.lr_decay!r}")
        if self.tool_prompt not in ("json", "compact", "none"):
            p.append(f"tool_prompt must be 'json', 'compact' or 'none', got {self.tool_prompt!r}")
        for name in ("eps_low", "eps_high"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                p.append(f"{name} must be >= 0 or None, got {getattr(self, name)}")
        for name in ("truncation_penalty", "kl_coef", "weight_decay", "max_grad_norm", "step_advantage_weight"):
            if getattr(self, name) < 0:
                p.append(f"{name} must be >= 0, got {getattr(self, name)}")
        p += _miner_problems(self.miner, self.importance_weighting)
        if self.device not in ("auto", "cpu", "cuda") and not re.fullmatch(r"cuda:\d+", self.device):
            p.append(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")
        return p

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "config") -> GRPOConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            hints = [
                f"{k!r}" + (f" (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, known, n=1)) else "")
                for k in unknown
            ]
            raise ValueError(f"{source}: unknown field(s) {', '.join(hints)}")
        if isinstance(data.get("envs"), list):
            data = {**data, "envs": {env_id: 1.0 for env_id in data["envs"]}}
        for f in dataclasses.fields(cls):
            if f.name in data and not _type_ok(data[f.name], f.type):
                raise ValueError(f"{source}: field {f.name!r} expects {f.type}, got {data[f.name]!r}")
        return cls(**data)

    @classmethod
    def from_file(cls, path: str | Path) -> GRPOConfig:
        """Read a YAML (.yaml/.yml) or TOML (.toml) file of the same fields."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"config file {path} does not exist")
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".toml":
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as e:
                raise ValueError(f"{path}: invalid TOML: {e}") from None
        elif path.suffix in (".yaml", ".yml"):
            import yaml

            try:
                data = yaml.safe_load(text) or {}
            except yaml.YAMLError as e:
                raise ValueError(f"{path}: invalid YAML: {e}") from None
        else:
            raise ValueError(f"{path}: expected a .toml, .yaml or .yml file")
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of config fields at the top level")
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _miner_problems(miner: Any, importance_weighting: bool) -> list[str]:
    if miner is None:
        return (
            ["importance_weighting corrects the miner's sampling; set miner={} or importance_weighting=false"]
            if importance_weighting
            else []
        )
    if not isinstance(miner, dict):
        return [f"miner must be a table of MinerConfig fields or None, got {type(miner).__name__}"]
    from pydantic import ValidationError

    from agentenv.miner import MinerConfig

    try:
        MinerConfig.model_validate(miner)
    except ValidationError as e:
        return [f"miner.{'.'.join(str(x) for x in err['loc']) or '(table)'}: {err['msg']}" for err in e.errors()]
    return []


def _type_ok(value: Any, annotation: str) -> bool:
    """A light check of values read from files (the dataclass checks ranges)."""
    if value is None:
        return "None" in annotation
    if annotation.startswith(("int", "float", "bool", "str")):
        base = annotation.split(" ")[0]
        if base == "float":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if base == "int":
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, {"bool": bool, "str": str}[base])
    if annotation.startswith("dict"):
        return isinstance(value, dict)
    if annotation.startswith("list"):
        return isinstance(value, list)
    if annotation.startswith("Literal"):
        return isinstance(value, str)
    return True
