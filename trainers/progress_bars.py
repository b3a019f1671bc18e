"""Transformers' progress bars, silenced while the trainer loads or saves a model.

Left out: the hub's download bars, which stay (a download takes time worth showing).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["quiet_progress_bars"]


@contextmanager
def quiet_progress_bars() -> Iterator[None]:
    """Silence transformers' own progress bars ("Loading weights", "Writing model shards")
    for the block: loading and saving a small model is instant, and a bar printed after
    the last step reads like more work to come. Downloads keep the hub's bars; the
    previous setting is restored on exit."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    was_on, hub_was_off = hf_logging.is_progress_bar_enabled(), are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # also turns the hub's off...
    if not hub_was_off:
        enable_progress_bars()  # ...which downloads keep
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
        if hub_was_off:
            disable_progress_bars()
