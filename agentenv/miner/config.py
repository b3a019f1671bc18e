"""`MinerConfig`: every knob of the failure miner, one strict pydantic model.

Loaded from the ``miner`` table of a training config file, so unknown keys and bad
values fail at construction with the field's name (infinity and NaN included: no
float knob means anything at either).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MinerConfig", "ProposerConfig"]


class ProposerConfig(BaseModel):
    """Where the optional LLM proposer of new tasks lives."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    base_url: str = Field(min_length=1, description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    model: str = Field(min_length=1, description="the model name the endpoint serves")
    every_steps: int = Field(10, ge=1, description="ask for proposals after every this many steps")
    max_tasks: int = Field(4, ge=1, le=64, description="proposals asked for per call")
    max_clusters: int = Field(4, ge=1, le=32, description="failure clusters shown per call")
    timeout_s: float = Field(60.0, gt=0, description="deadline of one whole call (not per read)")
    temperature: float = Field(0.7, ge=0, le=2, description="sampling temperature of the proposer model")


class MinerConfig(BaseModel):
    """Ledger, prioritised sampling, pool exits and mined tasks."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # -- ledger
    ema_alpha: float = Field(0.3, gt=0, le=1, description="weight of the newest visit in the success EMA")
    # -- Prioritized Level Replay
    temperature: float = Field(0.3, gt=0, description="beta: rank priorities are (1/rank)^(1/beta)")
    staleness_coef: float = Field(0.3, ge=0, le=1, description="rho: share of the staleness distribution in the mix")
    unseen_prob: float = Field(
        1.0, ge=0, le=1, description="chance a draw takes an unseen task while any remain (1 = unseen first)"
    )
    # -- pool exits
    solved_threshold: float = Field(0.9, gt=0, le=1, description="success rate over the window that retires a task")
    solved_window: int = Field(8, ge=1, description="most recent episodes the solved test looks at")
    quarantine_after: int = Field(3, ge=1, description="K: consecutive all-fail visits that quarantine a task")
    retest_every: int = Field(10, ge=1, description="steps between retests of a quarantined task")
    max_requeues: int = Field(
        2, ge=0, description="re-queues in a row of a task whose every rollout was lost to infrastructure"
    )
    # -- mined tasks
    resume: bool = Field(True, description="restart failed episodes from the turn where they broke")
    resume_min_turns_left: int = Field(
        2, ge=1, description="fewest turns a resume task from a truncated episode must have left (else none is made)"
    )
    resume_redraws: int = Field(
        16,
        ge=0,
        description=(
            "train tasks tried per failed state to redraw a resume task's hidden part (0 = keep the failed one's)"
        ),
    )
    variants: bool = Field(True, description="make validated variants of failed tasks with Env.mutate")
    variants_per_failure: int = Field(1, ge=0, le=8, description="variants tried per failed task and step")
    max_resume_tasks: int = Field(64, ge=0, description="resume tasks (and their snapshots) kept; oldest dropped")
    max_variants: int = Field(128, ge=0, description="validated variants kept; oldest dropped")
    mined_share: float = Field(0.5, ge=0, le=1, description="most of a batch's groups drawn from mined tasks")
    proposer: ProposerConfig | None = Field(None, description="an LLM proposer of new tasks (None = off)")
