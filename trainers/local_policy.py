"""A model on disk or on the hub as a policy, to evaluate or watch it: `local_policy` loads
what a path or name points to and samples from it with the trainer's own samplers
(`policy.TransformersPolicy`, or `vllm_engine.VLLMPolicy` over a vLLM engine in this
process), token in, token out, as the trainer's rollouts are sampled.

What ``model`` may name (`resolve` decides, before anything is loaded):

- a folder ``from_pretrained`` loads (config.json, the weights, the tokenizer);
- a LoRA adapter folder (adapter_config.json; a LoRA run's final/): over the base model
  its run's config.json names, or else the adapter's ``base_model_name_or_path``;
- a training checkpoint (checkpoints/step-NNNNNN/, whose model.pt is the trainer's state
  dict): the model its run's config.json names, with that run's LoRA if it had one, then
  these weights, and the run's tokenizer/;
- a training run (its final/, or else its latest checkpoint) or its checkpoints/ folder;
- a known model's name (`pretrained.KNOWN_MODELS`) or a hub id (org/name): from the local
  Hugging Face cache without the network when it is there, otherwise downloaded once the
  hub answered for it (offline, one question instead of a minute of retries).

A model that comes from a training run (its final/, a checkpoint, a LoRA run's adapter)
samples as that run sampled unless told otherwise: its temperature, top-p, top-k, stop
strings and token limits (`Sampling.of_run`), and `LocalPolicy.env_kwargs` gives the env
settings it was trained under (the tool prompt, for the run's own envs their
``env_kwargs`` and ``max_turns``), so its evaluation reads the prompts it learned on.

A LoRA model is merged into its base: the same function up to float rounding, sampled
faster. What cannot be loaded is one `LocalPolicyError` line saying what was found.
Weights are float32 on a CPU and bfloat16 on a GPU unless asked otherwise.

Left out: serving the model to other processes (a vLLM server and ``--policy openai``
do that), quantised weights, several GPUs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentenv.core.checkpoints import latest_checkpoint
from agentenv.core.policy import Conversation, PolicyOutput
from agentenv.trainers.config import GRPOConfig, VLLMConfig
from agentenv.trainers.model import build_tiny, load_model, resolve_device
from agentenv.trainers.model_setup import prepare_model
from agentenv.trainers.policy import TokenPolicy, TransformersPolicy
from agentenv.trainers.pretrained import KNOWN_MODELS

if TYPE_CHECKING:
    from agentenv.trainers.vllm_engine import VLLMEngine

__all__ = ["LocalPolicy", "LocalPolicyError", "ModelSource", "Sampling", "load", "local_policy", "resolve"]

_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
_VLLM_GPU_SHARE = 0.9
"""The share of the GPU a vLLM engine takes here (vLLM's own default): unlike the
trainer's engine, it shares the GPU with no model being trained."""


class LocalPolicyError(ValueError):
    """What ``model`` names cannot be loaded, or the settings do not fit it (one line)."""


def _trainer_default(name: str) -> Any:
    return GRPOConfig.model_fields[name].default


class Sampling(BaseModel):
    """How the policy samples; the defaults are the trainer's (`GRPOConfig`)."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True, allow_inf_nan=False)

    temperature: float = Field(_trainer_default("temperature"), ge=0.0, le=10.0)
    """The trainer's rollout temperature; 0 is greedy (as its held-out evaluation samples)."""
    top_p: float = Field(_trainer_default("top_p"), gt=0.0, le=1.0)
    max_new_tokens: int = Field(_trainer_default("max_new_tokens"), ge=1)
    """Tokens of one reply at most."""
    max_context_tokens: int | None = Field(None, ge=2)
    """Tokens of one episode at most; None: the trainer's ``max_seq_len``, or the model's
    positions where it has fewer."""
    top_k: int = Field(_trainer_default("top_k"), ge=0)
    """Top-k sampling (0 = off)."""
    stop: list[str] = Field(default_factory=list)
    """Strings that end a reply (kept in it), as the trainer's ``stop``."""

    @classmethod
    def of_run(cls, config: GRPOConfig, **given: Any) -> Sampling:
        """How a run of ``config`` sampled its rollouts, with ``given`` fields instead."""
        run = dict(
            temperature=config.temperature,
            top_p=config.top_p,
            top_k=config.top_k,
            max_new_tokens=config.max_new_tokens,
            max_context_tokens=config.max_seq_len,
            stop=list(config.stop),
        )
        return cls(**{**run, **given})


@dataclass(frozen=True)
class ModelSource:
    """What a ``model`` argument names, found without loading anything."""

    kind: Literal["pretrained", "adapter", "checkpoint", "hub"]
    where: str
    """The folder; for "hub", the hub id or known model name."""
    run: Path | None = None
    """The training run the folder belongs to (its config.json says how it was trained)."""

    def describe(self) -> str:
        what = {
            "pretrained": "model folder",
            "adapter": "LoRA adapter",
            "checkpoint": "training checkpoint",
            "hub": "hub model" if self.where not in KNOWN_MODELS else "known model",
        }
        return f"{what[self.kind]} {self.where}"


def resolve(model: str) -> ModelSource:
    """The model ``model`` names (see the module docstring), or `LocalPolicyError`."""
    if model in KNOWN_MODELS:
        return ModelSource("hub", model)
    path = Path(model).expanduser()
    if path.exists():
        return _folder(path)
    if _HUB_ID.fullmatch(model) and not model.startswith("."):
        return ModelSource("hub", model)
    raise LocalPolicyError(f"no model folder {model!r}: the path does not exist (nor is it a hub id, org/name)")


def _folder(path: Path) -> ModelSource:
    if not path.is_dir():
        raise LocalPolicyError(f"{path} is a file; give the model's folder")
    if (path / "model.pt").is_file() and (path / "trainer_state.json").is_file():
        run = path.parent.parent
        if _run_config_file(run) is None:
            raise LocalPolicyError(
                f"{path} is a training checkpoint, but {run / 'config.json'} (its run's config, which says "
                "which model it is) is missing: give the checkpoint inside its run directory"
            )
        return ModelSource("checkpoint", str(path), run)
    owner = path.parent if _run_config_file(path.parent) is not None else None  # a run's final/
    if (path / "adapter_config.json").is_file():
        return ModelSource("adapter", str(path), owner)
    if "model_type" in _json(path / "config.json"):
        return ModelSource("pretrained", str(path), owner)
    if path.name == "checkpoints" and (path / "latest").exists():
        return _folder(_latest(path.parent))
    if (path / "final").is_dir():
        return _folder(path / "final")
    if (path / "checkpoints").is_dir():
        return _folder(_latest(path))
    raise LocalPolicyError(
        f"{path} is not a model folder: expected config.json with a model_type (a transformers model), "
        "adapter_config.json (a LoRA adapter), model.pt with trainer_state.json (a training checkpoint), "
        f"or final/ or checkpoints/ (a training run); found {_listing(path)}"
    )


def _latest(run: Path) -> Path:
    try:
        latest = latest_checkpoint(run)
    except ValueError as e:
        raise LocalPolicyError(str(e)) from None
    if latest is None:
        raise LocalPolicyError(f"{run} is a training run with no final/ and no checkpoint yet")
    return latest


def _listing(path: Path, shown: int = 6) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more if names else "nothing"


def _json(file: Path) -> dict[str, Any]:
    """The JSON object in ``file``; empty when there is none."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _run_config_file(run: Path) -> Path | None:
    """The run's config.json, when ``run`` holds one a training run wrote (no model_type)."""
    file = run / "config.json"
    data = _json(file)
    return file if data and "model_type" not in data and "model" in data else None


# -- loading ------------------------------------------------------------------------------


def load(source: ModelSource, *, dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Module, Any]:
    """The model ``source`` names in ``dtype`` on the CPU, in eval mode, with its tokenizer."""
    try:
        if source.kind in ("pretrained", "hub"):
            model, tokenizer = _pretrained(source.where, dtype)
        elif source.kind == "adapter":
            model, tokenizer = _adapter(Path(source.where), source.run, dtype)
        else:
            folder = Path(source.where)
            model, tokenizer = _checkpoint(folder, source.run or folder.parent.parent, dtype)
    except LocalPolicyError:
        raise
    except Exception as e:  # noqa: BLE001 - a file cut short, edited or not what it claims: the loaders raise anything
        raise LocalPolicyError(f"cannot load the {source.describe()}: {type(e).__name__}: {_first_line(e)}") from None
    return model.to(dtype).eval(), tokenizer


def _pretrained(name: str, dtype: torch.dtype) -> tuple[torch.nn.Module, Any]:
    return load_model(name if name in KNOWN_MODELS or Path(name).is_dir() else _hub_folder(name), dtype=dtype)


def _hub_folder(repo_id: str) -> str:
    """The cached snapshot of ``repo_id`` (no network), or ``repo_id`` itself once the hub
    answered for it (`load_model` downloads it then). Transformers alone, offline, retries
    for about a minute and then prints a page."""
    import huggingface_hub
    from huggingface_hub import HfApi, snapshot_download

    try:
        return snapshot_download(repo_id, local_files_only=True)
    except (OSError, ValueError):  # not cached (LocalEntryNotFoundError), or not a valid id
        pass
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        raise LocalPolicyError(
            f"no folder {repo_id!r}, and no hub model of that id in the cache (HF_HUB_OFFLINE is set)"
        )
    try:
        HfApi().model_info(repo_id, timeout=10)
    except Exception as e:  # noqa: BLE001 - the client's errors differ by version: network, 401, 404, a bad id
        raise LocalPolicyError(
            f"no folder {repo_id!r}, and no hub model of that id in the cache nor from the hub "
            f"({type(e).__name__}: {_first_line(e)})"
        ) from None
    return repo_id


def _run_config(run: Path) -> GRPOConfig:
    file = run / "config.json"
    try:
        return GRPOConfig.from_dict(_json(file), source=str(file))
    except ValueError as e:
        raise LocalPolicyError(_first_line(e)) from None


def _run_base(config: GRPOConfig, dtype: torch.dtype) -> tuple[torch.nn.Module, Any]:
    """The model a run of ``config`` started from, as the trainer built it (before LoRA)."""
    if config.model == "tiny":
        return build_tiny(list(config.envs), seed=config.seed)
    return _pretrained(config.model, dtype)


def _tokenizer(folder: Path) -> Any | None:
    if not (folder / "tokenizer_config.json").is_file():
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    if tokenizer.pad_token_id is None:  # as load_model does
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _adapter(folder: Path, run: Path | None, dtype: torch.dtype) -> tuple[torch.nn.Module, Any]:
    try:
        from peft import PeftModel
    except ImportError:
        raise LocalPolicyError(f"{folder} is a LoRA adapter, which needs peft: pip install peft") from None
    if run is not None:
        config = _run_config(run)
        base, tokenizer = _run_base(config, dtype)
        named = f"model {config.model!r} of {run / 'config.json'}"
    else:
        name = _json(folder / "adapter_config.json").get("base_model_name_or_path")
        if not isinstance(name, str) or not name:
            raise LocalPolicyError(
                f"{folder} is a LoRA adapter that names no base model (base_model_name_or_path), and no "
                "training run's config.json beside it does"
            )
        base, tokenizer = _pretrained(name, dtype)
        named = f"base model {name!r}"
    try:
        model = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise LocalPolicyError(f"{folder}: the adapter does not fit the {named} ({_first_line(e)})") from None
    return model, _tokenizer(folder) or (_tokenizer(run / "tokenizer") if run else None) or tokenizer


def _checkpoint(folder: Path, run: Path, dtype: torch.dtype) -> tuple[torch.nn.Module, Any]:
    config = _run_config(run)
    model, tokenizer = _run_base(config, dtype)
    if config.lora_r > 0:  # the trainer's LoRA wrapping; nothing else the training set up
        bare = config.model_copy(
            update=dict(gradient_checkpointing=False, lean_activations=False, cpu_onednn_linear=False)
        )
        model = prepare_model(model, bare, torch.device("cpu"))
    file = folder / "model.pt"
    try:
        weights = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - edited or cut-short bytes: the unpickler raises whatever it meets
        raise LocalPolicyError(f"{file}: not a model.pt the trainer wrote ({type(e).__name__})") from None
    try:
        model.load_state_dict(weights)
    except (RuntimeError, KeyError, TypeError) as e:
        raise LocalPolicyError(
            f"{file} does not fit the model {config.model!r} that {run / 'config.json'} names ({_first_line(e)}); "
            "a run given a model object rather than config.model cannot be rebuilt from its folder"
        ) from None
    merge = getattr(model, "merge_and_unload", None)
    return (merge() if callable(merge) else model), _tokenizer(run / "tokenizer") or tokenizer


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return (lines[0][:300] if lines else "") or type(e).__name__


# -- the policy ---------------------------------------------------------------------------


@dataclass
class LocalPolicy:
    """A loaded model's sampler, and what it is and how it samples (``description``)."""

    sampler: TokenPolicy
    description: str
    engine: VLLMEngine | None = None
    run: GRPOConfig | None = None
    """The config of the training run the model comes from, if it does."""

    def env_kwargs(self, env_id: str) -> dict[str, Any]:
        """The settings the run made ``env_id`` with (see `trainers.sources.build_source`):
        its tool prompt for any env (the format the model learned to read), and for an env
        it trained on, that env's ``env_kwargs`` and the run's ``max_turns``. Empty when
        the model comes from no run."""
        if self.run is None:
            return {}
        kwargs: dict[str, Any] = {"tool_prompt": self.run.tool_prompt} if self.run.tool_prompt != "json" else {}
        if env_id in self.run.envs:
            kwargs.update(self.run.env_kwargs.get(env_id, {}))
            if self.run.max_turns is not None:
                kwargs["max_turns"] = self.run.max_turns
        return kwargs

    def act(self, conversations: Sequence[Conversation]) -> list[PolicyOutput]:
        return self.sampler.act(conversations)

    def close(self) -> None:
        """Stop the vLLM engine (a no-op for the transformers sampler). Idempotent."""
        if self.engine is not None:
            self.engine.close()


def local_policy(
    model: str,
    *,
    engine: Literal["transformers", "vllm"] = "transformers",
    device: str = "auto",
    dtype: Literal["auto", "float32", "bfloat16"] = "auto",
    sampling: Sampling | Mapping[str, Any] | None = None,
    seed: int = 0,
    enforce_eager: bool = False,
) -> LocalPolicy:
    """The policy of the model ``model`` names (`resolve`), sampled as ``sampling`` says.

    Args:
        model: A model folder, LoRA adapter, training checkpoint or run, known name or hub id.
        engine: "transformers" samples in this process with `TransformersPolicy`; "vllm"
            with a vLLM engine (the vllm extra).
        device: "auto" (CUDA where torch sees it), "cpu", "cuda" or "cuda:N".
        dtype: The weights and compute; "auto" is bfloat16 on a GPU, float32 on a CPU.
        sampling: How to sample: a `Sampling` as it is, or the fields to change (a mapping)
            from the default: how the model's training run sampled where it comes from
            one (`Sampling.of_run`), the trainer's defaults otherwise.
        seed: Seeds the samples (vLLM on a CPU: once per engine).
        enforce_eager: vLLM only: skip compiling the model (starts in seconds, samples slower).
    """
    try:
        where = resolve_device(device)
    except RuntimeError as e:
        raise LocalPolicyError(f"device {device!r}: {_first_line(e)}") from None
    dtype_name = _dtype_name(dtype, where)
    weights = _DTYPES[dtype_name]
    source = resolve(model)
    run = _settings_of(source)
    if not isinstance(sampling, Sampling):
        try:
            sampling = Sampling.of_run(run, **(sampling or {})) if run else Sampling(**(sampling or {}))
        except ValidationError as e:
            error = e.errors()[0]
            field = ".".join(str(part) for part in error["loc"])
            raise LocalPolicyError(f"sampling: {field}: {error['msg']}, got {error.get('input')!r}") from None
    module, tokenizer = load(source, dtype=weights)
    context = _context(sampling, module)
    shared: dict[str, Any] = dict(
        max_new_tokens=sampling.max_new_tokens,
        max_context_tokens=context,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        stop=tuple(sampling.stop),
    )
    how = ", ".join(f"{k} {v}" for k, v in shared.items() if k not in ("top_k", "stop") or v)
    merged = " merged into its base" if source.kind == "adapter" else ""
    sampled_as = f" (as its run {source.run} sampled)" if run is not None else ""
    description = f"{source.describe()}{merged} on {where} in {dtype_name}, {engine} sampler{sampled_as}: {how}"
    if engine == "vllm":
        from agentenv.trainers.vllm_engine import VLLMEngine, VLLMPolicy

        settings = VLLMConfig(dtype=dtype_name, enforce_eager=enforce_eager, gpu_memory_utilization=_VLLM_GPU_SHARE)
        vllm = VLLMEngine(module, tokenizer, max_model_len=context, device=where, seed=seed, **settings.model_dump())
        sampler = VLLMPolicy(vllm, tokenizer, **shared)
        sampler.generator = torch.Generator().manual_seed(seed)
        return LocalPolicy(sampler, description, vllm, run)
    bf16 = where.type == "cuda" and weights == torch.bfloat16  # the static decoder computes in bf16 then
    local = TransformersPolicy(module.to(where), tokenizer, seed=seed, bf16=bf16, **shared)
    return LocalPolicy(local, description, run=run)


def _settings_of(source: ModelSource) -> GRPOConfig | None:
    """The config of the run ``source`` comes from. A run's final/ loads without it, so a
    config this version cannot read (an older run's) leaves it sampled as told instead."""
    if source.run is None:
        return None
    try:
        return _run_config(source.run)
    except LocalPolicyError:
        if source.kind == "pretrained":
            return None
        raise


def _dtype_name(dtype: Literal["auto", "float32", "bfloat16"], device: torch.device) -> Literal["float32", "bfloat16"]:
    if dtype != "auto":
        return dtype
    return "bfloat16" if device.type == "cuda" else "float32"


def _context(sampling: Sampling, model: torch.nn.Module) -> int:
    """The episode's token limit: as asked, within the model's positions."""
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    context = sampling.max_context_tokens
    if context is None:
        context = min(_trainer_default("max_seq_len"), positions or _trainer_default("max_seq_len"))
    elif isinstance(positions, int) and context > positions:
        raise LocalPolicyError(
            f"max_context_tokens ({context}) is beyond the model's {positions} positions; give at most {positions}"
        )
    if sampling.max_new_tokens >= context:
        raise LocalPolicyError(
            f"max_new_tokens ({sampling.max_new_tokens}) must be below max_context_tokens ({context}): "
            "an episode's prompt needs room too"
        )
    return context
