"""The bank back office world (`world-bank-v0`): the spec ``bank.yaml`` beside this file,
loaded with no Python of its own; this module only finds the file."""

from __future__ import annotations

import functools
from pathlib import Path

from agentenv.envs.world.spec import load_spec
from agentenv.envs.world.world import World

__all__ = ["SPEC", "world"]

SPEC = Path(__file__).with_name("bank.yaml")


@functools.cache
def world() -> World:
    """The bank world, loaded once per process."""
    return load_spec(SPEC)
