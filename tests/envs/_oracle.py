"""Record an oracle's actions for a seeded episode: a realistic plan for `check_env`."""

import agentenv


def oracle_plan(env_id: str, seed: int) -> list:
    (traj,) = agentenv.rollout(env_id, agentenv.spec(env_id).make_oracle(), seeds=[seed])
    assert traj.success, traj.failure
    return [t.action for t in traj.transitions]
