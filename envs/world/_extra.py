"""The world env's optional dependencies (the ``world`` extra), imported when first needed."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["need"]

EXTRA = ("jsonpatch", "jsonpointer", "jsonschema", "datalogic_py")


def need(module: str) -> Any:
    """``module``, imported; a ModuleNotFoundError that says how to install it otherwise."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        raise ModuleNotFoundError(
            f"agentenv.envs.world needs {module!r}: pip install 'agentenv[world]'", name=module
        ) from e
