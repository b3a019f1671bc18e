"""`Env`: the multi-turn environment contract every agentenv world implements.

The base class owns the loop: parse the action, validate arguments against the
tool's signature, call the tool, record a `Transition`, compute step rewards,
decide termination, run the task verifier at the end. Authors subclass
``Env[MyState]`` (the state model is read from the type argument), write tools as
typed methods (see `agentenv.tool`) and override a few hooks, the ones `HOOKS`
names (the docs and the error for a final method read that tuple):

    default_tasks()            the tasks when none are passed (default: one task, "default")
    sample_task()              which task a seeded reset draws
    initial_state(task)        the state an episode starts from
    system_prompt(task)        the system prompt (tools and format hint included)
    render_intro(task)         the first observation (system prompt + task)
    render_result(outcome)     how a tool result is shown to the agent
    step_rewards(outcomes)     named step-reward components
    verify(task)               the task reward, on the final state
    closing_rewards(task_rewards)  step-reward components of the last step, after verify
    is_done()                  extra stop conditions
    on_answer(answer)          in answer mode: end on this answer (None), or feedback and another try
    mutate(task, rng)          a new task like ``task`` (variants for the failure miner)
    snapshot_external() / restore_external(data) / on_close()
                               state that lives outside the pydantic model

A typed task payload: set ``payload_type`` to a pydantic model and read
``self.payload`` (validated once per task). ``Env(lean=True)`` records no state
diff and no observation in its transitions: the fastest path, for rollouts that
only need rewards and messages.

``reset(options={"snapshot": snap})`` starts an episode from a snapshot (the
failure miner's resume tasks): the conversation, state and turn number are the
snapshot's, and the episode continues from there.

`reset`, `step`, `snapshot`, `restore` and `close` are final: defining them in a
subclass is a TypeError. A bad action is data, never an exception: it comes back
as an error observation with a format penalty.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import json
import logging
import math
import time
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, TypeVar

import gymnasium as gym
import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from agentenv.core import _admit, _safejson
from agentenv.core.errors import EnvStateError, InfraError, ToolError
from agentenv.core.parsers import ActionParser, AutoParser, ParseError
from agentenv.core.spaces import ActionSpace, MessagesSpace
from agentenv.core.state import State, json_diff
from agentenv.core.task import Task, TaskSet, did_you_mean
from agentenv.core.tools import ToolSpec, collect_tools, non_finite
from agentenv.core.types import Action, Failure, Message, ToolCall

__all__ = ["HOOKS", "CallOutcome", "Env", "Snapshot", "Transition"]

S = TypeVar("S", bound=State)

_FINAL = ("reset", "step", "snapshot", "restore", "close")
HOOKS = (
    "default_tasks",
    "sample_task",
    "initial_state",
    "system_prompt",
    "render_intro",
    "render_result",
    "step_rewards",
    "verify",
    "closing_rewards",
    "is_done",
    "on_answer",
    "mutate",
    "snapshot_external",
    "restore_external",
    "on_close",
)
"""What a subclass overrides (besides its tools). Everything in `_FINAL` it may not."""
logger = logging.getLogger("agentenv.core.env")
ErrorKind = Literal["format", "tool", "infra"]
_clock = time.perf_counter
_JSON = json.JSONEncoder(ensure_ascii=False, default=str)  # one encoder: json.dumps(**kw) builds one per call
ToolPrompt = Literal["json", "compact", "none"]


@dataclass(slots=True)
class Transition:
    """What one step did. Recorded by the base class for every step.

    A dataclass rather than a pydantic model because one is made per step on the
    hot path; pydantic still validates and serialises it inside a `Trajectory`.
    """

    turn: int
    action: Any  # the raw action: text or an assistant-message dict
    calls: list[ToolCall]
    observation: list[dict[str, Any]]
    rewards: dict[str, float]
    """Step-reward components (the step channel)."""
    task_rewards: dict[str, float]
    """Verifier components, on the final step only (the task channel)."""
    state_diff: list[dict[str, Any]]
    duration_s: float
    error: str | None = None
    error_kind: ErrorKind | None = None
    closing: dict[str, float] = field(default_factory=dict)
    """What `Env.closing_rewards` added to ``rewards`` (the last step only): a trainer that
    discounts moves a take-back to the turns it cancels (`trainers.batch.step_rewards`)."""


class Snapshot(BaseModel):
    """Everything needed to rebuild an env mid-episode. JSON-serialisable."""

    model_config = ConfigDict(extra="forbid")

    env: str
    task: Task
    state: dict[str, Any]
    turn: int
    format_streak: int
    ended: bool
    messages: list[dict[str, Any]]
    rng: dict[str, Any]
    external: Any = None
    answer: str | None = None
    """In answer mode, the latest answer (`Env.answer`): one that got feedback is in no
    message `restore` could tell from a tool call or a refused reply."""


class _Acted:
    """What one step's action did (a plain class with slots: one is made per step)."""

    __slots__ = ("broken", "calls", "error", "error_kind", "infra", "obs", "outcomes", "terminal")

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.outcomes: list[CallOutcome] = []
        self.obs: list[Message] = []
        self.error: str | None = None
        self.error_kind: ErrorKind | None = None
        self.terminal = False
        self.infra = False
        self.broken = False
        """An env hook failed on what the action made: the episode ends unsolved."""


@dataclass(slots=True)
class CallOutcome:
    """The result of one tool call within a step, as the reward hooks see it."""

    call: ToolCall
    call_id: str
    ok: bool
    result: Any = None
    error: str | None = None
    error_kind: ErrorKind | None = None


class Env(gym.Env[list[Message], Action], Generic[S]):
    """A multi-turn, tool-using environment with typed state and two reward channels."""

    # -- set these in subclasses ------------------------------------------------
    state_type: ClassVar[type[State]] = State
    """The pydantic model of the episode state; read from ``Env[MyState]``, so rarely set."""
    payload_type: ClassVar[type[BaseModel] | None] = None
    """The pydantic model of a task's payload; every task is validated against it and
    ``self.payload`` gives the current task's, typed. None: payloads are plain dicts."""
    max_turns: int = 10
    """Steps before the episode is truncated."""
    instructions: str = "You are an agent. Solve the task by calling the tools."
    """The first part of the default system prompt."""
    reward_weights: ClassVar[Mapping[str, float]] = {}
    """Weight of each reward component in the scalar reward (1.0 when absent)."""
    format_penalty: float = 0.1
    """Subtracted (as the ``format`` component) for any invalid action."""
    max_action_chars: int = 32_000
    """Longer actions are refused with a format error before parsing."""
    max_calls_per_action: int | None = None
    """Most tool calls one action may make (None: the parser's limit, 16); more is a
    format error and none of them runs. An env whose budget is its turns (each call a
    guess, a move) sets 1, so that one action cannot make many moves."""
    max_format_errors: int = 3
    """Consecutive invalid actions that end the episode with failure ``format``."""
    success_threshold: float = 1.0
    """A task reward at or above this counts as solved."""
    answer_mode: bool = False
    """A reply without a tool call (no ``<tool_call>`` markup, no OpenAI ``tool_calls``)
    is the final answer: the episode ends and `verify` reads it as ``self.answer``.
    For tasks whose answer is text (most single-turn RLVR sets); an env in this mode
    may have no tools at all. Off, such a reply is a format error. `on_answer` may
    instead answer it with feedback and let the agent try again."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"]}
    tools: ClassVar[dict[str, ToolSpec]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in _FINAL:
            if name in vars(cls):
                raise TypeError(f"{cls.__name__}.{name}() is final; override the hooks instead ({', '.join(HOOKS)})")
        if "state_type" not in vars(cls):
            declared = _state_argument(cls)
            if declared is not None:
                cls.state_type = declared
        cls.tools = collect_tools(cls)
        for spec in cls.tools.values():
            if spec.method_name in _BASE_NAMES:
                raise TypeError(
                    f"{cls.__name__}.{spec.method_name}() is a tool and would replace Env.{spec.method_name}; name the "
                    f"method otherwise (the model may still see the name: @tool(name={spec.method_name!r}))"
                )

    def __init__(
        self,
        tasks: TaskSet | Iterable[Task] | None = None,
        *,
        max_turns: int | None = None,
        parser: ActionParser | None = None,
        tool_prompt: ToolPrompt = "json",
        render_mode: str | None = None,
        lean: bool = False,
    ) -> None:
        """
        Args:
            tasks: The task set (default: `default_tasks()`).
            max_turns: Override the class's max_turns.
            parser: How actions are read (default: `AutoParser`).
            tool_prompt: How the default system prompt shows the tools: "json" (their
                OpenAI schemas, as chat templates do), "compact" (one line per tool:
                short prompts for small models) or "none" (the policy sends the tools
                itself, e.g. an API with ``tools=``).
            render_mode: None or "ansi".
            lean: Record transitions without the state diff and the observation
                (the conversation still has it): the fastest step, for rollouts
                that need rewards and messages only.
        """
        if tool_prompt not in ("json", "compact", "none"):
            raise ValueError(f"tool_prompt must be 'json', 'compact' or 'none', got {tool_prompt!r}")
        self.tool_prompt = tool_prompt
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if max_turns is not None:
            if max_turns < 1:
                raise ValueError(f"max_turns must be >= 1, got {max_turns}")
            self.max_turns = max_turns
        if self.max_calls_per_action is not None and self.max_calls_per_action < 1:
            raise ValueError(f"max_calls_per_action must be None or >= 1, got {self.max_calls_per_action}")
        self.render_mode = render_mode
        self.parser: ActionParser = parser or AutoParser()
        if tasks is None:
            tasks = self.default_tasks()
        self.tasks = tasks if isinstance(tasks, TaskSet) else TaskSet(tasks)
        if self.payload_type is not None:
            for task in self.tasks:  # a malformed payload fails here, not mid-episode
                self._typed_payload(task)
        self.lean = lean
        self._payload: BaseModel | None = None
        self.observation_space = MessagesSpace()
        self.action_space = ActionSpace(self.max_action_chars)
        self.messages: list[Message] = []
        self.transitions: list[Transition] = []
        self._task: Task | None = None
        self._state: S | None = None
        self._state_json: dict[str, Any] = {}
        self._turn = 0
        self._format_streak = 0
        self._ended = False
        self._closed = False
        self._answer: str | None = None

    # -- hooks: override these ---------------------------------------------------

    def default_tasks(self) -> TaskSet:
        """The tasks used when none are passed to the constructor: by default one task,
        ``"default"``, whose prompt asks the agent to begin (an env whose goal is all in
        its instructions needs no task set)."""
        return TaskSet([Task(id="default", prompt="Begin.")])

    def sample_task(self) -> Task:
        """The task a reset without ``options["task"]`` runs; draw with ``self.np_random``."""
        if not self.tasks:
            raise EnvStateError(
                f"{type(self).__name__} has no tasks: pass tasks=... or reset(options={{'task': task}})"
            )
        return self.tasks.sample(self.np_random)

    def mutate(self, task: Task, rng: np.random.Generator) -> Task | None:
        """A new task like ``task`` (same family and difficulty, new content), drawn with
        ``rng``; None when the env makes no variants (the default). The failure miner
        validates every variant (it must be solvable) before training on it."""
        return None

    def initial_state(self, task: Task) -> S:
        """The state an episode of ``task`` starts from. Use ``self.np_random`` for randomness."""
        return self.state_type()  # type: ignore[return-value]

    def system_prompt(self, task: Task) -> str:
        if self.tool_prompt == "none":
            return self.instructions
        if self.tool_prompt == "compact":
            tools = "\n".join(_compact_signature(spec) for spec in self.tools.values())
            return f"{self.instructions}\nTools:\n{tools}\n{self.parser.format_hint}"
        tools = "\n".join(json.dumps(spec.schema, ensure_ascii=False) for spec in self.tools.values())
        return f"{self.instructions}\n\n# Tools\n\n<tools>\n{tools}\n</tools>\n\n{self.parser.format_hint}"

    def render_intro(self, task: Task) -> list[Message]:
        """The first observation: by default the system prompt and the task prompt."""
        return [
            {"role": "system", "content": self.system_prompt(task)},
            {"role": "user", "content": task.prompt},
        ]

    def render_result(self, outcome: CallOutcome) -> Message:
        """The message that shows the agent the outcome of one tool call: the result as
        text (a string as it is, anything else as JSON), or ``Error: ...``."""
        return _result_message(outcome)

    def step_rewards(self, outcomes: list[CallOutcome]) -> dict[str, float]:
        """Named step-reward components for this step (added to ``format``)."""
        return {}

    def verify(self, task: Task) -> float | dict[str, float]:
        """The task reward on the final state: a float, or named components including ``"task"``."""
        return 0.0

    def closing_rewards(self, task_rewards: dict[str, float]) -> dict[str, float]:
        """Step-reward components added to the episode's last step once `verify` has
        given ``task_rewards`` (however the episode ended, infra aside): where shaping
        the verifier did not confirm is taken back. Shaping paid on a signal the policy
        can satisfy without solving (visible tests it can hard-code) is then worth
        nothing unless the verifier agrees, as potential-based shaping is when the
        final state's potential is the verified one."""
        return {}

    def is_done(self) -> bool:
        """Stop conditions besides terminal tools, invalid-action streaks and max_turns."""
        return False

    def on_answer(self, answer: str) -> str | None:
        """In `answer_mode`, called with each answer (also in ``self.answer``). None (the
        default) ends the episode and `verify` scores the answer; a message instead is
        shown to the agent and the episode goes on, so it can try again (answers with
        feedback and retries). A message must not give away what `verify` checks.
        Raise `ParseError` to refuse the reply as an answer (one holding several answers):
        the step is then a format error, as an unreadable action is (an error observation
        with the message, the format penalty), and ``self.answer`` stays what it was."""
        return None

    def snapshot_external(self) -> Any:
        """JSON-serialisable external state (files, DB rows) to keep in a snapshot."""
        return None

    def restore_external(self, data: Any) -> None:
        """Rebuild the external state saved by `snapshot_external`."""

    def on_close(self) -> None:
        """Release resources (containers, servers). Called once."""

    # -- the contract (final) --------------------------------------------------

    @property
    def state(self) -> S:
        if self._state is None:
            raise EnvStateError("the env has no state yet: call reset() first")
        return self._state

    @property
    def task(self) -> Task:
        if self._task is None:
            raise EnvStateError("the env has no task yet: call reset() first")
        return self._task

    @property
    def turn(self) -> int:
        return self._turn

    @property
    def payload(self) -> Any:
        """The current task's payload as ``payload_type`` (the plain dict without one)."""
        task = self.task
        if self.payload_type is None:
            return task.payload
        if self._payload is None:
            self._payload = self._typed_payload(task)
        return self._payload

    def _typed_payload(self, task: Task) -> BaseModel:
        assert self.payload_type is not None
        try:
            return self.payload_type.model_validate(task.payload)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(payload)"
            raise ValueError(
                f"task {task.id!r}: payload field {where!r}: {err['msg']} (expected a {self.payload_type.__name__})"
            ) from None

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The OpenAI "tools" list for this env."""
        return [spec.schema for spec in self.tools.values()]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if self._closed:
            raise EnvStateError("reset() called after close(): the env is closed; make a new one")
        super().reset(seed=seed)
        options = dict(options or {})
        task_opt = options.pop("task", None)
        snapshot_opt = options.pop("snapshot", None)
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; supported: 'task', 'snapshot'")
        if snapshot_opt is not None:
            return self._reset_from_snapshot(snapshot_opt, task_opt)
        if task_opt is None:
            task = self.sample_task()
        elif isinstance(task_opt, Task):
            task = task_opt
        elif isinstance(task_opt, str):
            if task_opt not in self.tasks:
                raise KeyError(
                    f"{type(self).__name__} has no task {task_opt!r}.{did_you_mean(task_opt, self.tasks.ids)}"
                )
            task = self.tasks.get(task_opt)
        else:
            raise TypeError(f'options["task"] must be a Task or a task id, got {type(task_opt).__name__}')
        self._task = task
        self._payload = None
        self._turn = 0
        self._format_streak = 0
        self._ended = False
        self._answer = None
        self.transitions = []
        self._state = self.initial_state(task)
        self._state_json = self._state.model_dump(mode="json")
        self.messages = self.render_intro(task)
        return list(self.messages), {"task_id": task.id, "turn": 0}

    def _reset_from_snapshot(self, snapshot: Any, task: Any) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode where ``snapshot`` left off. ``task``, when given, relabels it
        (a resume task has its own id) and must have the snapshot task's prompt and payload."""
        snap = _as_snapshot(snapshot)
        if snap.ended:
            raise ValueError(
                "cannot resume from a snapshot of an episode that had ended; take one before its last turn"
            )
        if task is not None:
            if not isinstance(task, Task):
                raise TypeError(f'with options["snapshot"], options["task"] must be a Task, got {type(task).__name__}')
            if task.prompt != snap.task.prompt or task.payload != snap.task.payload:
                raise ValueError(
                    f"task {task.id!r} is not the snapshot's task {snap.task.id!r}: "
                    "a resume task must keep its prompt and payload"
                )
        messages = self.restore(snap)
        if task is not None:
            self._task = task
        return messages, {"task_id": self.task.id, "turn": self._turn, "resumed_from_turn": self._turn}

    def step(self, action: Action) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        # The hot path of every rollout: locals over attributes, no call that can be skipped
        # (a hook left as Env's is not called). bench/env_overhead.py times it.
        if self._closed or self._state is None or self._ended:
            self._check_live()  # raises, with the reason
        start = _clock()
        turn = self._turn
        admitted: tuple[Action, Message, str | None]
        if type(action) is str and action.isascii() and len(action) <= self.max_action_chars:
            admitted = action, {"role": "assistant", "content": action}, None  # plain text: nothing to refuse
        else:
            admitted = _admit.admit(action, turn, self.max_action_chars)
        self.messages.append(admitted[1])
        act = self._act(admitted, turn)
        obs = act.obs
        for shown in obs:  # what a tool returned must serialise: `clean_messages` spells out what would not
            content = shown.get("content")
            if type(content) is not str or not content.isascii():
                _admit.clean_messages(obs)
                break
        error_kind = act.error_kind
        if error_kind == "format":
            rewards = {"format": -self.format_penalty}
            self._format_streak = streak = self._format_streak + 1
        else:
            rewards = {"format": 0.0}
            self._format_streak = streak = 0
        cls = type(self)
        if not act.infra and cls.step_rewards is not Env.step_rewards:  # the default gives none
            rewards.update(self._step_rewards(act.outcomes))
        self._turn = turn + 1
        # is_done() runs once a step, and only when no terminal tool, infra failure or
        # streak of invalid actions already ended it.
        hard_end = act.terminal or act.infra or streak >= self.max_format_errors
        done = False if hard_end or cls.is_done is Env.is_done else self._is_done(act)
        if hard_end or done or turn + 1 >= self.max_turns:
            terminated, truncated, failure, task_rewards = self._end_of_step(act, done=done)
            self._ended = terminated or truncated
            error_kind = act.error_kind  # a verifier's infrastructure failure sets it
            own_closing = cls.closing_rewards is not Env.closing_rewards  # the default gives none
            closing = self._closing_rewards(task_rewards) if own_closing and failure is not Failure.INFRA else {}
            for k, v in closing.items():
                rewards[k] = rewards.get(k, 0.0) + v
        else:  # the common case: the episode goes on
            terminated = truncated = False
            failure, task_rewards, closing = None, {}, {}

        if self.lean:
            diff: list[dict[str, Any]] = []
        else:
            state = self._state
            assert state is not None  # checked at the top of step
            after = state.__pydantic_serializer__.to_python(state, mode="json")  # model_dump without its wrapper
            diff = json_diff(self._state_json, after)
            self._state_json = after
        self.messages.extend(obs)
        all_rewards = {**rewards, **task_rewards} if task_rewards else rewards
        weights = self.reward_weights
        if weights:
            reward = 0.0
            for k, v in all_rewards.items():
                reward += weights.get(k, 1.0) * v
        else:
            reward = float(sum(all_rewards.values()))
        recorded = admitted[0]
        if type(recorded) is ToolCall:  # a plain one: _admit rebuilt it
            recorded = recorded.to_dict()
        self.transitions.append(
            Transition(
                turn,
                recorded,
                act.calls,
                [] if self.lean else obs,  # type: ignore[arg-type]  # Message is a TypedDict of the same dicts
                rewards,
                task_rewards,
                diff,
                _clock() - start,
                act.error,
                error_kind,
                closing,
            )
        )
        info = {
            "task_id": self._task.id,  # type: ignore[union-attr]
            "turn": turn + 1,
            "rewards": all_rewards,
            "task_reward": None,
            "success": None,
            "failure": None,
            "error": act.error,
            "error_kind": error_kind,
        }
        if failure is not None:  # the episode ended
            info["task_reward"] = task_rewards.get("task")
            info["success"] = None if failure is Failure.INFRA else failure is Failure.NONE
            info["failure"] = failure.value
        return obs[:], reward, terminated, truncated, info

    def _act(self, admitted: tuple[Action, Message, str | None], turn: int) -> _Acted:
        """Parse the action and run its tool calls; bad actions become error observations.
        ``admitted``: what `agentenv.core._admit.admit` gives (action, message, error)."""
        action, message, error = admitted
        act = _Acted()
        try:
            if error is not None:
                raise ParseError(error)
            if self.answer_mode and _answer_text(action) is not None:
                calls = []
            else:
                act.calls = calls = self.parser.parse(action)
                if not calls:
                    raise ParseError(f"no tool call found. {self.parser.format_hint}")
                limit = self.max_calls_per_action
                if limit is not None and len(calls) > limit:
                    many = f"at most {limit} tool call{'s' if limit > 1 else ''} per turn here"
                    raise ParseError(f"{many}, got {len(calls)}")
            if not calls:  # answer mode: the reply is the answer
                previous, self._answer = self._answer, _answer_text(action)
                try:
                    feedback = self._on_answer(self._answer, act)  # type: ignore[arg-type]  # text, as checked above
                except ParseError:
                    self._answer = previous  # refused: no answer was given
                    raise
                if feedback is None:
                    act.terminal = True
                else:
                    act.obs.append({"role": "user", "content": feedback})
                return act
            outcomes, obs, tools = act.outcomes, act.obs, self.tools
            for i, call in enumerate(calls):
                call_id = call.id or f"call_{turn}_{i}"
                if act.terminal:  # the episode ended with an earlier call: a later read or write
                    # would change what verify sees after the answer was given
                    ended = next(o.call.name for o in outcomes if o.ok and tools[o.call.name].terminal)
                    error = f"not run: {ended!r} ended the episode before this call"
                    outcome = CallOutcome(call, call_id, False, error=error, error_kind="tool")
                else:
                    outcome = self._call(call, call_id)
                outcomes.append(outcome)
                obs.append(self._render(outcome))
                if outcome.ok:
                    if tools[call.name].terminal:
                        act.terminal = True
                elif act.error is None or (outcome.error_kind == "format" and act.error_kind != "format"):
                    # One invalid call makes the action invalid, whatever failed before it:
                    # a call that fails for free first must not buy the rest off the penalty.
                    act.error, act.error_kind = outcome.error, outcome.error_kind
        except ParseError as e:
            act.error, act.error_kind = str(e), "format"
            act.obs.extend(self._format_error_messages(message, act.error))
        except InfraError as e:
            act.error, act.error_kind, act.infra = str(e), "infra", True
            act.obs.append({"role": "user", "content": f"Error: the environment failed: {e}"})
        return act

    def _end_of_step(self, act: _Acted, *, done: bool) -> tuple[bool, bool, Failure | None, dict[str, float]]:
        """Termination, truncation, the failure kind and the task rewards of a step that ends
        the episode. ``done``: what `is_done` said (step asks it once, and not after a hard end)."""
        if act.infra:
            return False, True, Failure.INFRA, {}
        format_end = self._format_streak >= self.max_format_errors
        terminated = act.terminal or format_end or done
        truncated = not terminated and self._turn >= self.max_turns
        try:
            task_rewards = {"task": 0.0} if act.broken else self._task_rewards(self.verify(self.task))
        except InfraError as e:
            act.error, act.error_kind = str(e), "infra"
            return False, True, Failure.INFRA, {}
        except EnvStateError:
            raise
        except _HOOK_ERRORS as e:  # see _broken_verifier
            task_rewards = self._broken_verifier(e, act)
        if task_rewards["task"] >= self.success_threshold:
            failure = Failure.NONE
        elif format_end:
            failure = Failure.FORMAT
        elif truncated:
            failure = Failure.TRUNCATED
        else:
            failure = Failure.POLICY
        return terminated, truncated, failure, task_rewards

    def snapshot(self) -> Snapshot:
        """A serialisable copy of the episode so far; `restore` rebuilds it exactly."""
        self._check_open()
        if self._state is None or self._task is None:
            raise EnvStateError("snapshot() needs an episode: call reset() first")
        return Snapshot(
            env=_qualname(type(self)),
            task=self._task,
            state=self._state.model_dump(mode="json"),
            turn=self._turn,
            format_streak=self._format_streak,
            ended=self._ended,
            messages=copy.deepcopy(self.messages),
            rng=self.np_random.bit_generator.state,
            external=self.snapshot_external(),
            answer=self._answer,
        )

    def restore(self, snapshot: Snapshot | str | bytes | Mapping[str, Any]) -> list[Message]:
        """Rebuild the episode saved by `snapshot`; returns the conversation so far. A
        snapshot refused (`ValueError`) before any of it was read in leaves the env as it
        was; one whose outside world (a database, a workspace) fails to restore leaves it
        with no episode: reset or restore again."""
        self._check_open()
        snap = _as_snapshot(snapshot)
        if snap.env != _qualname(type(self)):
            raise ValueError(f"snapshot is of env {snap.env!r}, cannot restore it into {_qualname(type(self))!r}")
        rng = _rng_of(snap.rng)
        state = self.state_type.model_validate(snap.state)
        self._np_random = rng
        self._task, self._payload = snap.task, None  # the typed payload is the snapshot task's, read anew
        self._state = state  # type: ignore[assignment]
        self._state_json = state.model_dump(mode="json")
        self._turn = snap.turn
        self._format_streak = snap.format_streak
        self._ended = snap.ended
        self.messages = copy.deepcopy(snap.messages)  # type: ignore[arg-type]
        if "answer" in snap.model_fields_set:
            self._answer = snap.answer
        else:  # a snapshot from before answers were saved: an ended episode's last reply
            last = self.messages[-1] if self.messages else None
            self._answer = (
                _answer_text(dict(last))
                if self.answer_mode and snap.ended and last and last["role"] == "assistant"
                else None
            )
        self.transitions = []
        try:
            self.restore_external(snap.external)
        except BaseException:
            # Half restored (the state of one episode, the outside world of another): no
            # episode at all, so a step before the next reset or restore is refused.
            self._state, self._task, self._payload, self.messages = None, None, None, []
            raise
        return list(self.messages)

    @property
    def answer(self) -> str | None:
        """In `answer_mode`, the latest answer: the reply that ended the episode, or one that
        `on_answer` gave feedback on (None until one came)."""
        return self._answer

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.on_close()

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m['role']}] {m['content']}" for m in self.messages)

    # -- internals -----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise EnvStateError("the env is closed; make a new one")

    def _check_live(self) -> None:
        self._check_open()
        if self._state is None:
            raise EnvStateError("step() called before reset()")
        if self._ended:
            raise EnvStateError("the episode has ended (terminated or truncated); call reset() to start another")

    def _call(self, call: ToolCall, call_id: str) -> CallOutcome:
        spec = self.tools.get(call.name)
        if spec is None:
            hint = did_you_mean(call.name, self.tools) or f" Available tools: {', '.join(self.tools)}."
            return CallOutcome(call, call_id, False, error=f"unknown tool {call.name!r}.{hint}", error_kind="format")
        try:
            # Validators built once per tool, called without model_validate's wrapper: the hot path.
            fields = spec.fields_validator
            if fields is not None:
                kwargs = fields.validate_python(call.arguments)[0]
            else:
                kwargs = spec.args_model.__pydantic_validator__.validate_python(call.arguments).__dict__
        except ValidationError as e:
            return CallOutcome(call, call_id, False, error=_validation_message(call.name, e), error_kind="format")
        except _HOOK_ERRORS as e:  # an argument type's own validator failed on what the policy sent
            _log_once(type(self), f"the arguments of {call.name!r}", e)
            error = f"the arguments of {call.name!r} could not be validated: {_describe(e)}"
            return CallOutcome(call, call_id, False, error=error, error_kind="format")
        # NaN passes every range check a tool writes (``cost > cash`` is False); arguments whose
        # types refuse it (ints, strings, floats of the arguments' model) need no walk.
        if not spec.finite_by_type and non_finite(kwargs):
            error = f"the arguments of {call.name!r} hold NaN or an infinity, which no argument may"
            return CallOutcome(call, call_id, False, error=error, error_kind="format")
        try:
            result = getattr(self, spec.method_name)(**kwargs)
        except ToolError as e:
            return CallOutcome(call, call_id, False, error=str(e), error_kind="tool")
        except (InfraError, EnvStateError):
            raise
        except _HOOK_ERRORS as e:  # an action must not be able to crash step (or pass for infra)
            _log_once(type(self), f"tool {call.name!r}", e)
            return CallOutcome(
                call, call_id, False, error=f"the tool {call.name!r} failed: {_describe(e)}", error_kind="tool"
            )
        return CallOutcome(call, call_id, True, result)

    def _render(self, outcome: CallOutcome) -> Message:
        try:
            if type(self).render_result is Env.render_result:
                return _result_message(outcome)  # a tool message, as the checks below want
            message = self.render_result(outcome)
            if type(message) is not dict or message.get("role") not in _OBSERVATION_ROLES:
                # None (an error branch that returns nothing) ended the episode as infra; an
                # "assistant" message put words in the policy's mouth and broke its turn count.
                shown = message.get("role") if type(message) is dict else type(message).__name__
                raise TypeError(f"render_result must return one message of role 'tool' or 'user', got {shown!r}")
            return message
        except _HOOK_ERRORS as e:  # a result the tool returned but nobody can show
            _log_once(type(self), "render_result", e)
            return {
                "role": "tool",
                "tool_call_id": outcome.call_id,
                "name": outcome.call.name,
                "content": f"Error: the result could not be shown: {_describe(e)}",
            }

    def _on_answer(self, answer: str, act: _Acted) -> str | None:
        """`on_answer`, guarded: an answer that makes it raise, or return neither a str nor
        None, ends the episode (the verifier decides), never crashes step and never passes
        for infra (`InfraError` aside)."""
        try:
            feedback = self.on_answer(answer)
            if feedback is not None and not isinstance(feedback, str):
                # Raised out of step, it ended the episode as infra: an answer that made the
                # hook return something else (``return wrong and "Try again"``) dodged its score.
                raise TypeError(
                    f"{type(self).__name__}.on_answer() must return a str or None, got {type(feedback).__name__}"
                )
        except (InfraError, EnvStateError, ParseError):  # ParseError: the reply is refused, a format error
            raise
        except _HOOK_ERRORS as e:  # an answer must not be able to crash step
            _log_once(type(self), "on_answer", e)
            act.error = f"on_answer failed: {_describe(e)}"
            return None
        return feedback

    def _step_rewards(self, outcomes: list[CallOutcome]) -> dict[str, float]:
        """`step_rewards`, guarded: what it raises or gives that is not components (None
        from a branch without a return, a ``"task"`` key, NaN) is logged and the step gets
        no step reward; raised out of step, it ended the episode as infra, so an action
        that took that branch dodged the episode's score."""
        try:
            rewards = self.step_rewards(outcomes)
            if type(rewards) is dict and "task" not in rewards:
                for value in rewards.values():
                    if type(value) is not float or not math.isfinite(value):
                        break
                else:  # the common case: finite floats, returned as they are
                    return rewards
            where = f"{type(self).__name__}.step_rewards()"
            if not isinstance(rewards, Mapping):
                raise TypeError(f"{where} must return a dict of named components, got {type(rewards).__name__}")
            if "task" in rewards:
                raise TypeError(f"{where} must not return 'task': that name is the verifier's")
            # a NaN here would reach every advantage of the batch
            return {k: _finite(v, where) for k, v in rewards.items()}
        except (InfraError, EnvStateError):
            raise
        except _HOOK_ERRORS as e:  # logged; the step gets no step reward rather than a crash
            _log_once(type(self), "step_rewards", e)
            return {}

    def _closing_rewards(self, task_rewards: dict[str, float]) -> dict[str, float]:
        try:
            closing = self.closing_rewards(dict(task_rewards))
            if "task" in closing:
                raise TypeError(f"{type(self).__name__}.closing_rewards() must not return 'task'")
            return {k: _finite(v, f"{type(self).__name__}.closing_rewards()") for k, v in closing.items()}
        except _HOOK_ERRORS as e:  # logged; the last step gets no closing reward rather than a crash
            _log_once(type(self), "closing_rewards", e)
            return {}

    def _is_done(self, act: _Acted) -> bool:
        """`is_done`, guarded: a state that makes it raise ends the episode unsolved (the
        verifier is not asked), never crashes step and never passes for infra."""
        try:
            return bool(self.is_done())
        except (InfraError, EnvStateError):
            raise
        except _HOOK_ERRORS as e:  # an action must not be able to crash step
            _log_once(type(self), "is_done", e)
            act.error, act.broken = f"is_done failed: {_describe(e)}", True
            return True

    def _broken_verifier(self, error: BaseException, act: _Acted) -> dict[str, float]:
        """The verifier raised (not `InfraError`): the episode is not solved. Never infra,
        which would let a policy that can crash the verifier dodge its failures; never an
        exception out of step. Logged, and in ``info["error"]``: a bug to fix, not a score."""
        _log_once(type(self), "verify", error)
        act.error = f"the verifier failed: {_describe(error)}"
        return {"task": 0.0}

    def _task_rewards(self, value: float | dict[str, float]) -> dict[str, float]:
        """`verify`'s value as named components; TypeError or ValueError (a broken verifier)
        for anything but a finite number or a mapping of them with a ``"task"`` key."""
        if type(value) is float and math.isfinite(value):  # the common case
            return {"task": value}
        rewards = dict(value) if isinstance(value, Mapping) else {"task": value}
        if "task" not in rewards:
            raise TypeError(f"{type(self).__name__}.verify() must return a float or a dict with a 'task' key")
        return {k: _finite(v, f"{type(self).__name__}.verify()") for k, v in rewards.items()}

    def _format_error_messages(self, message: Message, error: str) -> list[Message]:
        # An OpenAI assistant message with tool_calls must be answered once per call id.
        ids = [c["id"] for c in message.get("tool_calls") or ()]
        if ids:
            return [{"role": "tool", "tool_call_id": i, "content": f"Error: {error}"} for i in ids]
        return [{"role": "user", "content": f"Error: {error}"}]


_OBSERVATION_ROLES = ("tool", "user")
_BASE_NAMES = frozenset(dir(Env)) | {"messages", "transitions", "tasks", "parser", "lean", "tool_prompt", "render_mode"}
"""What `Env` (and gymnasium's) defines, its instances' attributes included: a tool method
of one of these names would replace it (a ``verify`` tool became the verifier, a
``state`` tool the state)."""


def _result_message(outcome: CallOutcome) -> Message:
    """`Env.render_result`'s message (called without the method when it is not overridden)."""
    if outcome.ok:
        result = outcome.result
        if isinstance(result, str):
            content = result
        elif type(result) is int:  # the commonest non-text result; bools are not ints here
            content = str(result)
        else:
            content = _JSON.encode(result)
    else:
        content = f"Error: {outcome.error}"
    return {"role": "tool", "tool_call_id": outcome.call_id, "name": outcome.call.name, "content": content}


def _answer_text(action: Action) -> str | None:
    """The text of a reply that holds no tool call, or None (a `ToolCall`, an assistant
    message with ``tool_calls``, or text with ``<tool_call>`` markup)."""
    if isinstance(action, dict) and not action.get("tool_calls"):
        action = action.get("content") or ""
    if type(action) is not str or "<tool_call>" in action or "</tool_call>" in action:
        return None
    return action


def _state_argument(cls: type) -> type[State] | None:
    """``MyState`` from ``class MyEnv(Env[MyState])`` (or from a base's parameterisation)."""
    for base in getattr(cls, "__orig_bases__", ()):
        for arg in typing.get_args(base):
            if isinstance(arg, type) and issubclass(arg, State):
                return arg
    return None


def _compact_signature(spec: ToolSpec) -> str:
    """``name(arg: type, ...)``, with enums spelled out: one short line per tool."""
    props = spec.schema["function"]["parameters"].get("properties", {})
    args = []
    for name, prop in props.items():
        kind = "|".join(json.dumps(v) for v in prop["enum"]) if "enum" in prop else prop.get("type", "any")
        args.append(f"{name}: {kind}")
    return f"{spec.name}({', '.join(args)})"


def _as_snapshot(snapshot: Snapshot | str | bytes | Mapping[str, Any]) -> Snapshot:
    if isinstance(snapshot, Snapshot):
        return snapshot
    if isinstance(snapshot, (str, bytes)):
        return Snapshot.model_validate_json(snapshot)
    if isinstance(snapshot, Mapping):
        return Snapshot.model_validate(snapshot)
    raise TypeError(f"expected a Snapshot, its JSON or its dict, got {type(snapshot).__name__}")


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _validation_message(tool: str, error: ValidationError) -> str:
    parts = []
    for err in error.errors()[:5]:
        field = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        if err["type"] == "extra_forbidden":
            parts.append(f"unexpected argument {field!r}")
        elif err["type"] == "missing":
            parts.append(f"missing argument {field!r}")
        else:
            parts.append(f"argument {field!r}: {err['msg']}")
    return f"invalid arguments for {tool!r}: " + "; ".join(parts)


_logged: set[tuple[type, str, type]] = set()

_HOOK_ERRORS = (Exception, SystemExit)
"""What an env's own code may raise on an action and be caught for: SystemExit too (a
tool that parses a command line with argparse exits on a bad one), never
KeyboardInterrupt."""


_BIT_GENERATORS = ("MT19937", "PCG64", "PCG64DXSM", "Philox", "SFC64")


def _rng_of(saved: Mapping[str, Any]) -> np.random.Generator:
    """The generator a snapshot saved (its bit generator's state); `ValueError` for
    anything else: a snapshot on disk may have been edited, and its name picks a class
    to call (``"seed"`` would reseed numpy's global generator)."""
    name = saved.get("bit_generator")
    if name not in _BIT_GENERATORS:
        raise ValueError(f"snapshot rng: unknown bit generator {str(name)[:40]!r}; expected one of {_BIT_GENERATORS}")
    bit_generator = getattr(np.random, name)()
    try:
        bit_generator.state = dict(saved)
    except (TypeError, ValueError, KeyError, OverflowError) as e:
        raise ValueError(f"snapshot rng: not a {name} state ({type(e).__name__}: {str(e)[:200]})") from None
    return np.random.Generator(bit_generator)


def _finite(value: Any, where: str) -> float:
    """``value`` as a finite float; TypeError or ValueError naming ``where`` otherwise. Any
    real number passes (numpy's too: ``np.isclose`` gives a ``np.bool_``), no string."""
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"{where} must give numbers, got {type(value).__name__}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{where} must give numbers, got {type(value).__name__}") from None
    if not math.isfinite(number):
        raise ValueError(f"{where} gave {number}, not a finite number")
    return number


_hook_failures: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("hook_failures", default=None)
"""Where `check_env` collects the failures of the reward hooks that step swallows."""
_REWARD_HOOKS = ("step_rewards", "verify", "closing_rewards", "is_done")


@contextlib.contextmanager
def collecting_hook_failures() -> Iterator[list[str]]:
    """The failures of reward hooks that `step` swallows (an action must not crash it),
    collected while the block runs: how `check_env` reports them."""
    collected: list[str] = []
    token = _hook_failures.set(collected)
    try:
        yield collected
    finally:
        _hook_failures.reset(token)


def _log_once(env: type, where: str, error: BaseException) -> None:
    """Log an env's own code failing on an action, with its traceback, once per kind."""
    collected = _hook_failures.get()
    if collected is not None and where in _REWARD_HOOKS:
        collected.append(f"{env.__name__}.{where}() failed: {_describe(error)}")
    key = (env, where, type(error))
    if key in _logged:
        return
    _logged.add(key)
    logger.warning(
        "%s.%s raised %s (an action reached a bug; the step goes on)",
        env.__name__,
        where,
        _describe(error),
        exc_info=error,
    )


def _describe(error: BaseException) -> str:
    try:
        text = _safejson.clean_text(str(error))
    except Exception:  # noqa: BLE001 - a hostile __str__
        text = ""
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__
