"""The third domain of docs/tools_env.md is real: under 100 lines, and it runs."""

import re
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import agentenv
from agentenv import tool_call_text
from agentenv.envs.tools import ToolsEnv, oracle

pytestmark = pytest.mark.slow  # a domain service

DOC = Path(__file__).resolve().parents[2] / "docs" / "tools_env.md"


def _library_source() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    [source] = [b for b in blocks if "Domain(" in b]
    return source


def test_the_documented_domain_is_short_and_its_oracle_solves_it(tmp_path, monkeypatch):
    source = _library_source()
    assert len(source.splitlines()) < 100
    (tmp_path / "tools_doc_library.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))  # the service process inherits the import path
    env_factory = lambda: ToolsEnv("tools_doc_library:library")  # noqa: E731
    trajs = agentenv.rollout(env_factory, oracle(), tasks=["library-borrow", "library-return", "library-ask"])
    assert [t.task_reward for t in trajs] == [1.0, 1.0, 1.0]

    env = env_factory()
    try:
        env.reset(options={"task": "library-borrow"})
        _, _, _, _, info = env.step(tool_call_text("borrow", member_id="M1", card="1111", book_id="B4"))
        assert info["error_kind"] == "tool" and info["rewards"]["rule_violation"] == -0.1
        assert "no_copies_left" in info["error"]
        for fields, reward in (({}, 0.0), ({"copies": 3}, 0.0), ({"copies": 2}, 1.0)):  # the message never counts
            env.reset(options={"task": "library-ask"})
            env.step(tool_call_text("search_books", title="emma"))
            _, _, _, _, info = env.step(tool_call_text("respond", message="There are 2 copies of Emma.", **fields))
            assert info["task_reward"] == reward, fields
    finally:
        env.close()
