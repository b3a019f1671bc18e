"""docs/world.md: its Python runs and prints what it says, and both of its worlds (the one
written in Python, the one from the YAML spec) are solved by their oracles; and it
says what the response cache key holds, as the code does."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest
import yaml

import agentenv
from agentenv.envs.world import WorldCache, WorldEnv, WorldMetrics, load_spec, oracle

DOC = (Path(__file__).resolve().parents[3] / "docs" / "world.md").read_text(encoding="utf-8")
PYTHON = re.findall(r"^```python\n(.*?)^```", DOC, re.DOTALL | re.MULTILINE)
YAML = re.findall(r"^```yaml\n(.*?)^```", DOC, re.DOTALL | re.MULTILINE)


def solved(world) -> bool:
    trajs = agentenv.rollout(
        lambda: WorldEnv(world, cache=WorldCache(), metrics=WorldMetrics()), oracle(), tasks=list(world.tasks)
    )
    return bool(trajs) and all(t.success for t in trajs)


def test_the_python_examples_run_and_print_what_they_say(tmp_path: Path) -> None:
    namespace: dict = {}
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the OpenAI example names a cache file under runs/
    try:
        with contextlib.redirect_stdout(out):
            for block in PYTHON:
                exec(block, namespace)
    finally:
        os.chdir(cwd)
    assert out.getvalue().split("\n")[0] == "1.0 True"
    assert (tmp_path / "runs" / "world-cache.sqlite").exists()
    assert solved(namespace["world"])


def test_the_yaml_spec_loads_and_its_oracle_solves_it() -> None:
    (spec,) = YAML
    world = load_spec(yaml.safe_load(spec))
    assert world.name == "notes" and solved(world)


@pytest.mark.parametrize("name", ["world-fs-v0", "world-bank-v0"])
def test_the_docs_table_counts_match_the_shipped_worlds(name: str) -> None:
    env = agentenv.make(name)
    row = next(line for line in DOC.splitlines() if line.startswith(f"| `{name}`"))
    assert f"{len(env.tasks)} over levels 0-3" in row
    env.close()


def test_the_doc_says_the_history_is_in_the_cache_key_as_the_code_does() -> None:
    """It once said so in "How a call is handled" and the opposite in "The cache"."""
    from agentenv.envs.world.keys import cache_key

    assert cache_key("w", "t", {}, "s", "m", "one history") != cache_key("w", "t", {}, "s", "m", "another")
    cache_section = DOC.split("## The cache", 1)[1].split("\n## ", 1)[0]
    assert "hash of the history" in cache_section and "not in the key" not in DOC
