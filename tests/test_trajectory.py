import types

from agentenv import ScriptedPolicy, Trajectory, rollout, tool_call_text
from tests.toy_envs import CounterEnv


def test_jsonl_files_read_back_as_a_list_or_a_stream(tmp_path):
    out = tmp_path / "trajs.jsonl"
    written = rollout(CounterEnv, ScriptedPolicy(lambda c: tool_call_text("submit")), tasks=["t0", "t1"], out=out)
    loaded = Trajectory.load_jsonl(out)
    assert isinstance(loaded, list) and loaded == written
    stream = Trajectory.read_jsonl(out)
    assert isinstance(stream, types.GeneratorType) and list(stream) == written
