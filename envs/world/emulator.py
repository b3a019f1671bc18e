"""The emulator: one tool call in, one validated change out, or a refusal or infra failure with the reason.

For an emulated tool `Emulator.call`:

1. builds the cache key (world fingerprint, tool, canonical arguments, state hash,
   model id, and the history the model is shown) and returns the cached reply when there is one, validated again
   against the current state (cheap; a reply that no longer validates, after a
   change to the validation code, is dropped and asked again);
2. otherwise asks the world model with the prompt of `agentenv.envs.world.prompt`,
   in a worker thread with a deadline (a model that hangs cannot hang `step`);
3. validates the reply (`agentenv.envs.world.validate`); a rejected reply is asked
   again with the reasons fed back, up to ``max_attempts`` replies in all;
4. stores the accepted reply in the cache, or raises `CallRefused` (a `ToolError`)
   naming the last reason: the agent's call fails, the state is unchanged, the
   episode goes on, and the failure is counted in the metrics for the task and the
   policy. Whether a model can answer a call validly depends on the call: a write
   that would break an invariant, text that talks a model into a forbidden change;
   as infra, such an action would end any episode unscored. A model that gives no
   reply at all (its transport gave up after its own retries, it raised, it hung)
   is an infra failure at once;
   but a scripted table's miss (``no_entry``) is the agent's tool error, and so are
   a request the model's provider refuses for its content (``content_policy``: a
   content filter flagged what the agent wrote) and a request or reply too long for
   the model (``too_long``) when the agent's part of the request is at least the
   model's ``reply_tokens`` characters, or more than `START_SLACK` characters past
   its size at the episode's start (``start_chars``): the actions set it. Only a
   request the task alone makes too long (the world or the model's context too
   small for it) is infra.

The canonical state is never touched here: the caller swaps it for
``Accepted.state``. Code tools go through `agentenv.envs.world.validate.run_code`: the
function gets a copy of the typed state, and its change (a diff) is validated like a proposal.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from agentenv import InfraError, ToolError
from agentenv.core._deadline import run_within
from agentenv.envs.world.cache import WorldCache
from agentenv.envs.world.keys import cache_key, canonical_json, state_hash
from agentenv.envs.world.metrics import WorldMetrics
from agentenv.envs.world.models import WorldModelError
from agentenv.envs.world.paths import bind_all, select
from agentenv.envs.world.prompt import HistoryItem, WorldRequest
from agentenv.envs.world.validate import Accepted, Rejected, validate
from agentenv.envs.world.world import World, WorldTool

__all__ = ["START_SLACK", "CallRefused", "Emulator", "start_chars"]

logger = logging.getLogger("agentenv.envs.world")
_FEEDBACK_CHARS = 400
HISTORY_CHARS = 2000
"""Each earlier observation is cut to this many characters in a prompt."""
START_SLACK = 256
"""Characters a request's agent part may pass its episode's start by (a first call's
arguments) and still be the task's size: past that, the agent's calls grew it."""


class CallRefused(ToolError):
    """No reply of the world model passed validation within its attempts: the agent's
    call fails with the last reason. ``rejected``: the replies rejected."""

    def __init__(self, message: str, rejected: int) -> None:
        super().__init__(message)
        self.rejected = rejected


@dataclass(frozen=True, slots=True)
class Outcome:
    """An accepted change and what it took."""

    accepted: Accepted
    cached: bool
    rejected: int
    """Replies rejected before this one."""


class Emulator:
    """Runs emulated calls of one world against one model, cache and metrics."""

    def __init__(
        self,
        world: World,
        model: Any,
        cache: WorldCache,
        metrics: WorldMetrics,
        *,
        max_attempts: int = 3,
        call_timeout_s: float = 120.0,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if not call_timeout_s > 0:
            raise ValueError(f"call_timeout_s must be > 0, got {call_timeout_s}")
        self.world, self.model, self.cache, self.metrics = world, model, cache, metrics
        self.max_attempts = max_attempts
        self.call_timeout_s = call_timeout_s

    @property
    def world_key(self) -> str:
        """The world's part of the cache key: its name and fingerprint (which a new tool or
        invariant changes)."""
        return f"{self.world.name}:{self.world.fingerprint}"

    def call(
        self,
        tool: WorldTool,
        args: dict[str, Any],
        state: dict[str, Any],
        history: list[HistoryItem],
        *,
        task: str,
        policy: str,
        start_chars: int | None = None,
    ) -> Outcome:
        """The accepted change of one emulated call (see the module docstring); `CallRefused`
        or `InfraError` otherwise. ``start_chars``: `start_chars` of the episode's first
        state, when the caller knows it."""
        self.metrics.request()
        writes = bind_all(tool.writes, args)
        digest = state_hash(state)
        model_id = str(self.model.model_id)
        shown = [_shortened(h) for h in history]
        seen = state_hash([h.model_dump(mode="json") for h in shown]) if shown else ""
        key = cache_key(self.world_key, tool.name, args, digest, model_id, seen)
        hit = self._cached(key, tool, writes, state, args)
        if hit is not None:
            return Outcome(hit, True, 0)
        with self.cache.claim(key, self.call_timeout_s * self.max_attempts):
            # Again: another episode may have asked the same question since the first look.
            hit = self._cached(key, tool, writes, state, args)
            if hit is not None:
                return Outcome(hit, True, 0)
            request = WorldRequest(
                world=self.world.name,
                world_description=self.world.description,
                tool=tool.name,
                tool_description=tool.description,
                arguments_schema=tool.arguments_schema,
                arguments=args,
                may_change=[b.shown for b in writes],
                state=state if tool.reads is None else select(state, bind_all(tool.reads, args)),
                state_is_slice=tool.reads is not None,
                history=shown,
                key=key,
                state_hash=digest,
            )
            large_from = getattr(self.model, "reply_tokens", 0)
            if start_chars is not None:
                large_from = min(large_from, start_chars + START_SLACK)
            accepted, rejected = self._ask(
                request, tool, writes, state, args, task=task, policy=policy, large_from=large_from
            )
            self.cache.put(key, self.world_key, tool.name, model_id, canonical_json(_reply(accepted)))
            return Outcome(accepted, False, rejected)

    def _cached(
        self, key: str, tool: WorldTool, writes: list[Any], state: dict[str, Any], args: dict[str, Any]
    ) -> Accepted | None:
        text = self.cache.get(key)
        if text is None:
            return None
        try:
            accepted = validate(text, self.world, tool, writes, state, args)
        except Rejected:
            self.metrics.stale_hit()
            self.cache.delete(key)
            return None
        self.metrics.hit()
        return accepted

    def _ask(
        self,
        request: WorldRequest,
        tool: WorldTool,
        writes: list[Any],
        state: dict[str, Any],
        args: dict[str, Any],
        *,
        task: str,
        policy: str,
        large_from: int,
    ) -> tuple[Accepted, int]:
        reasons: list[str] = []
        for attempt in range(self.max_attempts):
            request = request.model_copy(update={"attempt": attempt, "rejected_attempts": list(reasons)})
            try:
                text = self._reply(request, attempt, task=task, policy=policy, large_from=large_from)
                accepted = validate(text, self.world, tool, writes, state, args)
            except Rejected as e:
                self.metrics.reject(e.kind, task, policy)
                reasons.append(f"attempt {attempt + 1}: {e.kind}: {e.message[:_FEEDBACK_CHARS]}")
                continue
            self.metrics.accept()
            return accepted, attempt
        self.metrics.fail(task, policy)
        raise CallRefused(
            f"{tool.name} cannot be carried out here: the world gave no valid outcome for it in "
            f"{self.max_attempts} attempts; last: {reasons[-1]}",
            rejected=len(reasons),
        )

    def _reply(self, request: WorldRequest, attempt: int, *, task: str, policy: str, large_from: int) -> Any:
        """The model's reply text, asked in a worker thread under the deadline. ``large_from``:
        the agent part's size (`_agent_chars`) from which a request too long is the agent's."""
        start = time.perf_counter()
        done = run_within(self.call_timeout_s, lambda: self.model.propose(request), name="agentenv-world-model")
        self.metrics.call(time.perf_counter() - start, retry=attempt > 0)
        if done is None:
            self._give_up("timeout", task, policy)
            raise InfraError(f"the world model did not answer within {self.call_timeout_s} s")
        error = done.error
        if isinstance(error, WorldModelError):
            if error.kind == "no_entry":
                # A table with no row for this call: the action alone decides that, so it is the
                # agent's error, not the world's. As infra it would let one off-script call
                # leave any episode unscored.
                self.metrics.model_error(error.kind)
                raise ToolError(f"{request.tool} cannot be carried out here: this world has no outcome for it")
            if error.kind == "content_policy":
                # The provider's content filter refused the request: what the agent wrote (its
                # arguments, the state and history its calls built) set it off. As infra, one
                # flagged argument would leave any episode unscored; asking again gets the same.
                self.metrics.model_error(error.kind)
                raise ToolError(
                    f"{request.tool} cannot be carried out here: the world model's provider refused the call's "
                    "content (a content filter)"
                )
            if error.kind in ("too_long", "cut") and _agent_chars(request) >= large_from:
                # The prompt past the model's context, or its reply past its token limit, on a
                # request the agent made large (its arguments, the state its calls built, their
                # history): as infra, one long write would leave any episode unscored. On a small
                # request the model itself failed (a reply that rambles on), which is infra.
                self.metrics.model_error(error.kind)
                raise ToolError(
                    f"{request.tool} cannot be carried out here: the call, or the state it works on, is too large "
                    "for this world; work on less at once"
                )
            if error.kind == "cut":
                # A reply that ran past the token limit on a small request: text in the
                # arguments can talk an obedient model into rambling, so this is a rejected
                # attempt (asked again, then the agent's tool error), never infra.
                raise Rejected("too_large", f"the reply was cut at the token limit ({error}); reply with the JSON only")
            self._give_up(error.kind, task, policy)
            raise InfraError(f"the world model failed: {error}")
        if error is not None:
            if not isinstance(error, Exception):
                raise error  # KeyboardInterrupt and the like are the caller's
            logger.warning("world model %s raised %s", self.model.model_id, type(error).__name__, exc_info=error)
            self._give_up("error", task, policy)
            raise InfraError(f"the world model raised {type(error).__name__}: {str(error)[:300]}")
        return done.value

    def _give_up(self, kind: str, task: str, policy: str) -> None:
        self.metrics.model_error(kind)
        self.metrics.fail(task, policy)


def start_chars(state: dict[str, Any]) -> int:
    """`_agent_chars` of a request on ``state`` with no arguments and no history: an
    episode's floor, given its first state."""
    return len(json.dumps([{}, state, []], ensure_ascii=True, separators=(",", ":"), default=str))


def _agent_chars(request: WorldRequest) -> int:
    """Size of the request's part that the agent's calls shaped (arguments, state, history),
    as ASCII-escaped JSON: at least its UTF-8 bytes and any JSON spelling of it, so a reply
    budget of this many tokens fits an echo of all of it, whatever the tokenizer (a token
    is at least a byte)."""
    shaped = [request.arguments, request.state, [[h.arguments, h.observation] for h in request.history]]
    return len(json.dumps(shaped, ensure_ascii=True, separators=(",", ":"), default=str))


def _shortened(item: HistoryItem) -> HistoryItem:
    """A history item whose observation fits a prompt (a `cat` of a big file would not)."""
    if len(item.observation) <= HISTORY_CHARS:
        return item
    cut = len(item.observation) - HISTORY_CHARS
    return item.model_copy(update={"observation": f"{item.observation[:HISTORY_CHARS]}... [{cut} more characters]"})


def _reply(accepted: Accepted) -> dict[str, Any]:
    return {"observation": accepted.observation, "state_patch": accepted.patch}
