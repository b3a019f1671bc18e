"""Which checkpoint of a run is its latest: the contract between the trainer that writes
``checkpoints/latest`` and every reader of it (the trainer resuming a run, `agentenv miner
show` and `agentenv report`), kept torch-free so the readers need not load the trainer.

Left out: reading the checkpoint itself (the trainer's `load_checkpoint`, the report's
pydantic models).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["latest_checkpoint"]


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint ``checkpoints/latest`` names, or None when the run has none yet.

    A pointer that does not name a whole checkpoint of this run (emptied, edited, naming a
    folder elsewhere or one without its trainer_state.json) is a ValueError naming it: read
    as "no checkpoint", a resumed run of the same config would start over, and `clear_run`
    would delete the checkpoints the run has."""
    pointer = run_dir / "checkpoints" / "latest"
    if not pointer.exists() and not pointer.is_symlink():
        return None
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (OSError, ValueError) as e:  # a directory, unreadable, not UTF-8
        raise ValueError(f"{pointer}: unreadable ({getattr(e, 'strerror', None) or e}); {_POINTER_FIX}") from None
    path = pointer.parent / name
    if not _CHECKPOINT_NAME.fullmatch(name):
        raise ValueError(f"{pointer} names {name[:60]!r}, not a step-NNNNNN folder beside it; {_POINTER_FIX}")
    if not (path / "trainer_state.json").is_file():
        raise ValueError(
            f"{pointer} names {name}, which is not a whole checkpoint (no trainer_state.json); {_POINTER_FIX}"
        )
    return path


_CHECKPOINT_NAME = re.compile(r"step-\d{6,}")
_POINTER_FIX = "write the name of a whole checkpoint folder there (step-NNNNNN) to resume from it"
