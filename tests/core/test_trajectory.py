import json
import math
import types

import pytest
from pydantic import ValidationError

from agentenv import ScriptedPolicy, Trajectory, rollout, tool_call_text
from tests.toy_envs import CounterEnv


def test_jsonl_files_read_back_as_a_list_or_a_stream(tmp_path):
    out = tmp_path / "trajs.jsonl"
    written = rollout(CounterEnv, ScriptedPolicy(lambda c: tool_call_text("submit")), tasks=["t0", "t1"], out=out)
    loaded = Trajectory.load_jsonl(out)
    assert isinstance(loaded, list) and loaded == written
    stream = Trajectory.read_jsonl(out)
    assert isinstance(stream, types.GeneratorType) and list(stream) == written


_STEP = {
    "turn": 0,
    "action": "a",
    "calls": [],
    "observation": [],
    "task_rewards": {},
    "state_diff": [],
    "duration_s": 0,
}


@pytest.mark.parametrize(
    "hostile",
    [
        {"task_reward": math.nan},
        {"rewards": [math.inf]},
        {"duration_s": -math.inf},
        {"transitions": [{**_STEP, "rewards": {"x": math.nan}}]},
    ],
)
def test_a_trajectory_holding_nan_or_infinity_is_refused_as_json_cannot_write_it_back(hostile):
    # Accepted, it was written back with null there and never read again (nor an evaluation scored from it).
    record = {"task": {"id": "t", "prompt": "p"}, "messages": [], "transitions": [], "failure": "policy"}
    with pytest.raises(ValidationError, match="is NaN or infinity, which JSON cannot hold"):
        Trajectory.from_json(json.dumps({**record, **hostile}))  # json.dumps writes NaN and Infinity
    assert Trajectory.from_json(json.dumps(record)).to_json()
