"""What the emulator did, counted per run: calls, cache hits, rejections, retries, failures, latency.

One `WorldMetrics` is shared by every env handed it (by default, one per world per
process, from `world_metrics`). World-model trouble is counted three ways: in
total, per task and per policy (``WorldEnv(policy_id=...)``), so a policy that
learns to break the emulator (to dodge a penalty) shows up as a rise in its own
rejection and failure counts. The env also
reports each step's rejections as the weight-0 reward component
``emulator_rejections``, so the trainer's ``reward/emulator_rejections`` curve shows
the same rise with no extra wiring.
"""

from __future__ import annotations

import statistics
import threading
from collections import Counter, defaultdict, deque
from typing import Any

__all__ = ["WorldMetrics", "world_metrics"]

_LATENCIES_KEPT = 10_000


class WorldMetrics:
    """Thread-safe counters of one run's emulated calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        """Emulated tool calls asked of the emulator."""
        self.cache_hits = 0
        self.model_calls = 0
        """Replies asked of the world model (retries included)."""
        self.retries = 0
        """Model calls after the first for one tool call."""
        self.accepted = 0
        self.rejected: Counter[str] = Counter()
        """Validation failures by kind (`agentenv.envs.world.validate.REJECTION_KINDS`)."""
        self.model_errors: Counter[str] = Counter()
        """Calls that got no reply, by kind (timeout, connection, rate_limited, ...)."""
        self.failures = 0
        """Tool calls the emulator gave up on: no valid reply within the attempts (the agent's
        call failed as a tool error), or no reply at all (the episode ended as infra)."""
        self.stale = 0
        """Cached replies that no longer validated (dropped and asked again)."""
        self.by_task: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.by_policy: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._latencies: deque[float] = deque(maxlen=_LATENCIES_KEPT)
        self.latency_total_s = 0.0
        self.latency_max_s = 0.0

    def request(self) -> None:
        with self._lock:
            self.requests += 1

    def hit(self) -> None:
        with self._lock:
            self.cache_hits += 1

    def call(self, latency_s: float, *, retry: bool) -> None:
        with self._lock:
            self.model_calls += 1
            self.retries += retry
            self._latencies.append(latency_s)
            self.latency_total_s += latency_s
            self.latency_max_s = max(self.latency_max_s, latency_s)

    def accept(self) -> None:
        with self._lock:
            self.accepted += 1

    def reject(self, kind: str, task: str, policy: str) -> None:
        with self._lock:
            self.rejected[kind] += 1
            self.by_task[task]["rejected"] += 1
            self.by_policy[policy]["rejected"] += 1

    def model_error(self, kind: str) -> None:
        with self._lock:
            self.model_errors[kind] += 1

    def fail(self, task: str, policy: str) -> None:
        with self._lock:
            self.failures += 1
            self.by_task[task]["failures"] += 1
            self.by_policy[policy]["failures"] += 1

    def stale_hit(self) -> None:
        with self._lock:
            self.stale += 1

    def summary(self) -> dict[str, Any]:
        """Every figure as flat ``world/...`` keys (a metrics line), plus the per-task and
        per-policy tables under ``world/by_task`` and ``world/by_policy``."""
        with self._lock:
            latencies = list(self._latencies)
            out: dict[str, Any] = {
                "world/requests": self.requests,
                "world/cache_hits": self.cache_hits,
                "world/cache_hit_rate": self.cache_hits / self.requests if self.requests else 0.0,
                "world/model_calls": self.model_calls,
                "world/retries": self.retries,
                "world/accepted": self.accepted,
                "world/rejected": sum(self.rejected.values()),
                "world/failures": self.failures,
                "world/stale_cache_entries": self.stale,
                "world/latency_mean_s": self.latency_total_s / self.model_calls if self.model_calls else 0.0,
                "world/latency_p50_s": statistics.median(latencies) if latencies else 0.0,
                "world/latency_max_s": self.latency_max_s,
            }
            out.update({f"world/rejected/{k}": v for k, v in sorted(self.rejected.items())})
            out.update({f"world/model_errors/{k}": v for k, v in sorted(self.model_errors.items())})
            out["world/by_task"] = {k: dict(v) for k, v in sorted(self.by_task.items())}
            out["world/by_policy"] = {k: dict(v) for k, v in sorted(self.by_policy.items())}
        return out


_shared: dict[str, WorldMetrics] = {}
_shared_lock = threading.Lock()


def world_metrics(world: str) -> WorldMetrics:
    """The process's shared metrics of ``world`` (made on first use)."""
    with _shared_lock:
        found = _shared.get(world)
        if found is None:
            found = _shared[world] = WorldMetrics()
        return found
