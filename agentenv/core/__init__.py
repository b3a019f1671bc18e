"""The contract: what an env, a task, a tool, a policy and an episode are.

Everything else in agentenv is built on these modules, and they import nothing of the
rest of the project (tests/test_architecture.py holds them to it):

- `env`: `Env`, the reset/step loop an author subclasses, with snapshots and transitions;
- `state`: `State`, the pydantic model an env's state is, and `json_diff`;
- `tools`: `tool`, typed methods as tools, and their JSON schemas;
- `task`: `Task` and `TaskSet`, with task files and content splits;
- `task_sampler`: `TaskSampler`, what picks a trainer's tasks (uniform or the miner);
- `policy`: `Policy`, what a policy is asked and may answer;
- `trajectory`: `Trajectory`, one finished episode;
- `parsers`, `spaces`, `types`, `errors`: actions as text or tool calls, and what goes wrong;
- `checker`: `check_env`, the conformance checker env authors run.
"""
