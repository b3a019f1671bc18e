"""The failure miner: learn which tasks the agent fails, and where, and feed the
trainer what it can learn from next.

    ledger       per-task outcomes (infra failures re-queued, never counted)
    task_sampler Prioritized Level Replay over the learnability p(1-p), pool exits,
                 quarantine and retests; a `TaskSampler` for the GRPO trainer (the
                 contract, with `Draw` and `Source`, is in `agentenv.core.task_sampler`)
    breakpoints  the turn a failed episode broke at, and the resume task from there
    variants     `Env.mutate` variants, validated by the env's oracle
    proposer     an optional LLM proposer of tasks from clustered failures
    report       what `agentenv miner show RUN_DIR` prints

Importing it loads neither torch nor transformers.
"""

from agentenv.miner.breakpoints import BreakPoint, break_point, resume_task
from agentenv.miner.config import MinerConfig, ProposerConfig
from agentenv.miner.ledger import Ledger, TaskRecord, Visit
from agentenv.miner.priority import learnability, rank_priorities, replay_distribution, staleness_priorities
from agentenv.miner.proposer import FailureCluster, OpenAIProposer, cluster_failures
from agentenv.miner.task_sampler import MinedTask, MinerSampler
from agentenv.miner.variants import OracleValidator, make_variant

__all__ = [
    "BreakPoint",
    "FailureCluster",
    "Ledger",
    "MinedTask",
    "MinerConfig",
    "MinerSampler",
    "OpenAIProposer",
    "OracleValidator",
    "ProposerConfig",
    "TaskRecord",
    "Visit",
    "break_point",
    "cluster_failures",
    "learnability",
    "make_variant",
    "rank_priorities",
    "replay_distribution",
    "resume_task",
    "staleness_priorities",
]
