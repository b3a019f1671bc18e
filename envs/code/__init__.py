"""The code environment: multi-turn Python tasks verified by hidden tests in a sandbox.

    import agentenv
    env = agentenv.make("code-v0")            # the shipped procedural set, Docker or process sandboxes
    obs, info = env.reset(seed=0)

Modules: `env` (the `CodeEnv` and its oracle), `tasks` (the task payload, the
shipped set, benchmark loaders), `dataset` (tasks from a Hugging Face ``datasets``
split: HumanEval's, MBPP's or any columns), `families` (the procedural task families),
`verify` (running tests in a sandbox and judging them), `sandboxes` (the pools), `audit`
(checking a task set: references pass, trivial solutions do not).
"""

from agentenv.envs.code.audit import AuditReport, TaskAudit, audit_tasks
from agentenv.envs.code.dataset import from_dataset
from agentenv.envs.code.env import CodeEnv, CodeState, oracle, verify_solution
from agentenv.envs.code.sandboxes import CodeSandboxes
from agentenv.envs.code.tasks import (
    CodeTask,
    benchmark_task,
    code_task,
    default_tasks,
    load_benchmark_jsonl,
    make_task,
    make_tasks,
)
from agentenv.envs.code.verify import CallTest, CodeTest, TestJob, TestReport, run_tests

__all__ = [
    "AuditReport",
    "CallTest",
    "CodeEnv",
    "CodeSandboxes",
    "CodeState",
    "CodeTask",
    "CodeTest",
    "TaskAudit",
    "TestJob",
    "TestReport",
    "audit_tasks",
    "benchmark_task",
    "code_task",
    "default_tasks",
    "from_dataset",
    "load_benchmark_jsonl",
    "make_task",
    "make_tasks",
    "oracle",
    "run_tests",
    "verify_solution",
]
