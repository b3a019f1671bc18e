"""`WorldEnv`: an agent acting in a world whose tools a language model emulates.

The env owns the canonical state (`WorldEnvState.world`, valid against the world's
schema and invariants at every step); the world model only proposes an observation
and a JSON patch, which count once `agentenv.envs.world.validate` accepts them
(see `agentenv.envs.world.emulator`). Code tools run their code on a copy of the
state; their change is validated the same way.

Rewards. Task: 1 when the goal (JSON Logic) holds on the final canonical state and
the task's frame does too (`agentenv.envs.world.frame`: nothing outside what the task
may touch differs from the state its golden run ends in), else 0; ``goal`` and ``frame``
(weight 0) say which failed, and the state's ``frame_violations`` names what changed
that should not have. With ``stop_on_goal`` the episode ends once both hold. Step:
``subgoals``, shaping over the share of the task's sub-goals that hold: a step earns
``subgoal_weight`` times the rise of the share above its best so far, and is charged
for a fall below its lowest so far (the start's at first); the last step settles the
rest (`closing_rewards`), so an episode earns in all the share at its end minus the
share at its start, and undoing and redoing a sub-goal earns nothing. Paid on every
change of the share, an undo and a redo summed to nothing but not once discounted: the
trainer's returns (gamma < 1) kept ``w * (1 - gamma)`` a pair at the turns before it,
and a failed episode that toggled a sub-goal outscored one that held it. Only
validated state counts, so a rejected proposal earns nothing. An episode that fails
its goal gives back what its sub-goals earned: a sub-goal that reads one field holds
after a wrong action too (a withdrawal meets a balance meant to come from a transfer).
``emulator_rejections`` (weight 0) counts the replies rejected in the step: a
diagnostic the trainer's metrics show.

Faults. A world model that raises, hangs or cannot be reached ends the episode as
``infra``, with the reason, and is counted in `WorldMetrics` for the task and the
policy. One that gives no valid reply within its attempts fails the agent's call as
a tool error with the last reason (counted the same way): whether a valid outcome
exists depends on the call, so as infra an action could end any episode unscored.
Anything else an action alone causes (bad arguments, an unknown tool, a call too
large for the model) is the policy's too: a format or tool error.
"""

from __future__ import annotations

import functools
import importlib
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from agentenv import CallOutcome, Env, ScriptedPolicy, State, Task, TaskSet, tool_call_text
from agentenv.core.tools import ToolSpec, spec_from_model
from agentenv.envs.world.cache import WorldCache, open_cache
from agentenv.envs.world.emulator import CallRefused, Emulator, start_chars
from agentenv.envs.world.frame import Frame
from agentenv.envs.world.keys import canonical_json
from agentenv.envs.world.metrics import WorldMetrics, world_metrics
from agentenv.envs.world.models import ScriptedWorldModel, WorldModel
from agentenv.envs.world.predicates import Predicate, rule_predicate
from agentenv.envs.world.prompt import HistoryItem
from agentenv.envs.world.replay import checked_tasks, task_frame
from agentenv.envs.world.validate import run_code
from agentenv.envs.world.world import FINISH_TOOL, Args, World, WorldTaskPayload, WorldTool, task_payload

__all__ = ["WorldEnv", "WorldEnvState", "load_world", "oracle"]

_TOOL_ATTR = "world:"  # prefix of the per-instance callers the core dispatches to
_GOALS_KEPT = 4096
"""Compiled goals and frames an env keeps, the least recently used dropped first (a long run
meets many tasks)."""


class WorldEnvState(State):
    """The episode: the canonical world state and what the agent did to it."""

    world: dict[str, Any]
    """The world's canonical state (JSON), valid against its schema and invariants."""
    history: list[HistoryItem] = []
    """Every successful tool call of the episode (the world model is shown the last few)."""
    potential: float = 0.0
    """The share of the task's sub-goals that hold now (the step reward's potential)."""
    start_potential: float = 0.0
    """The share at the episode's start: a failed episode gives back what it earned beyond it."""
    best_potential: float | None = None
    """The highest share so far: only a rise above it pays (None: the current share)."""
    lowest_potential: float | None = None
    """The lowest share so far: only a fall below it is charged (None: the current share)."""
    start_chars: int | None = None
    """The size of the episode's first state in a world model's request (`start_chars`): a
    request too long for the model and well past it, the agent's calls made so."""
    frame_violations: list[str] = []
    """Set by `verify`: where the final state differs from the golden run's end outside what the
    task may touch (JSON Pointers, each with added, removed or changed); empty when none."""


class Finish(Args):
    """No arguments."""


class WorldEnv(Env[WorldEnvState]):
    state_type = WorldEnvState
    payload_type = WorldTaskPayload
    reward_weights: ClassVar[Mapping[str, float]] = {"emulator_rejections": 0.0, "goal": 0.0, "frame": 0.0}
    subgoal_weight: float = 0.5
    """The step reward a whole episode's sub-goal progress is worth (see the module doc)."""
    history_turns: int = 8
    """Earlier calls the world model is shown."""

    def __init__(
        self,
        world: World | str,
        tasks: TaskSet | Sequence[Task] | None = None,
        *,
        model: WorldModel | None = None,
        cache: WorldCache | str | Path | None = None,
        metrics: WorldMetrics | None = None,
        policy_id: str = "policy",
        max_attempts: int = 3,
        call_timeout_s: float = 120.0,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            world: A `World`, ``"module:attribute"`` naming one (or a function returning one),
                or the path of a world spec (.yaml, .yml, .json).
            tasks: Default: the world's tasks.
            model: The world model (default: the scripted model of the world's golden
                responses, which answers the golden runs and nothing else).
            cache: A `WorldCache`, or the path of its SQLite file (shared across runs; the
                envs of a process naming one file share its connection); default: one
                in-memory cache shared by this process's envs.
            metrics: Where the emulator counts (default: this process's for the world).
            policy_id: The name the metrics count this env's world-model trouble under.
            max_attempts: Replies asked of the model per tool call before the episode
                ends as infra.
            call_timeout_s: Longest wait for one reply.
            kwargs: Passed to `Env` (max_turns, parser, tool_prompt, render_mode, lean).
        """
        self.world: World = load_world(world) if isinstance(world, str) else world
        model = model if model is not None else scripted_model(self.world)
        if not isinstance(model, WorldModel):
            raise TypeError(f"model must have model_id and propose(request), got {type(model).__name__}")
        if not isinstance(cache, WorldCache):
            cache = open_cache(cache)
        self.policy_id = policy_id
        self.metrics = metrics if metrics is not None else world_metrics(self.world.name)
        self.emulator = Emulator(
            self.world, model, cache, self.metrics, max_attempts=max_attempts, call_timeout_s=call_timeout_s
        )
        self.instructions = f"{self.world.instructions}\nCall {FINISH_TOOL} when you are done."
        self.max_turns = self.world.max_turns
        self.tools = {  # type: ignore[misc]  # per instance: the tools are the world's
            **{name: _spec(tool) for name, tool in self.world.tools.items()},
            FINISH_TOOL: spec_from_model(
                FINISH_TOOL, "Say you are done; the episode ends.", Finish, method_name="_finish", terminal=True
            ),
        }
        for tool in self.world.tools.values():
            setattr(self, _TOOL_ATTR + tool.name, functools.partial(self._world_call, tool))
        self._rejections = 0
        self._goals: OrderedDict[tuple[str, str], _Compiled] = OrderedDict()
        super().__init__(tasks, **kwargs)

    @property
    def model(self) -> WorldModel:
        model: WorldModel = self.emulator.model
        return model

    # -- hooks -----------------------------------------------------------------------

    def default_tasks(self) -> TaskSet:
        return checked_tasks(self.world)

    def initial_state(self, task: Task) -> WorldEnvState:
        self._compiled(task)  # a task whose frame cannot be made (no golden run) fails here, not at verify
        start = self.world.task_start(task)
        self._rejections = 0
        potential = self._potential(task, start)
        return WorldEnvState(
            world=start,
            potential=potential,
            start_potential=potential,
            best_potential=potential,
            lowest_potential=potential,
            start_chars=start_chars(start),
        )

    def step_rewards(self, outcomes: list[CallOutcome]) -> dict[str, float]:
        rejections, self._rejections = self._rejections, 0
        state = self.state
        best, lowest = _bounds(state)
        state.potential = after = self._potential(self.task, state.world)
        state.best_potential, state.lowest_potential = max(best, after), min(lowest, after)
        change = max(0.0, after - best) - max(0.0, lowest - after)
        return {"subgoals": self.subgoal_weight * change, "emulator_rejections": float(rejections)}

    def closing_rewards(self, task_rewards: dict[str, float]) -> dict[str, float]:
        # The steps paid (best - start) - (start - lowest); an episode is owed the share at its
        # end minus the start's, a failed one none of it above the start.
        state = self.state
        best, lowest = _bounds(state)
        start, end = state.start_potential, state.potential
        owed = end - start if task_rewards["task"] >= self.success_threshold else min(0.0, end - start)
        settle = owed - ((best - start) - (start - lowest))
        return {"subgoals": self.subgoal_weight * settle} if settle else {}

    def verify(self, task: Task) -> dict[str, float]:
        compiled = self._compiled(task)
        world = self.state.world
        reached = compiled.goal.test(world)
        self.state.frame_violations = broken = compiled.frame.violations(world)
        return {"task": float(reached and not broken), "goal": float(reached), "frame": float(not broken)}

    def is_done(self) -> bool:
        if not self.world.stop_on_goal:
            return False
        compiled, world = self._compiled(self.task), self.state.world
        return compiled.goal.test(world) and compiled.frame.holds(world)

    def restore_external(self, data: Any) -> None:
        # initial_state does not run on a resume: drop the rejections an infra step left uncounted
        self._rejections = 0
        super().restore_external(data)

    # -- tools -------------------------------------------------------------------------

    def _finish(self) -> str:
        return "done"

    def _world_call(self, tool: WorldTool, **fields: Any) -> str:
        args_model = tool.args_model.model_construct(**fields)  # the core validated the fields
        args = args_model.model_dump(mode="json")
        state = self.state.world
        if tool.emulated:
            history = self.state.history[-self.history_turns :] if self.history_turns else []
            try:
                outcome = self.emulator.call(
                    tool,
                    args,
                    state,
                    history,
                    task=self.task.id,
                    policy=self.policy_id,
                    start_chars=self.state.start_chars,
                )
            except CallRefused as e:
                self._rejections += e.rejected
                raise
            self._rejections += outcome.rejected
            accepted = outcome.accepted
        else:
            accepted = run_code(self.world, tool, state, args_model)
        self.state.world = accepted.state
        self.state.history.append(HistoryItem(tool=tool.name, arguments=args, observation=accepted.observation))
        return accepted.observation

    # -- internals ---------------------------------------------------------------------

    def _compiled(self, task: Task) -> _Compiled:
        """The task's compiled goal, sub-goals and frame, kept by id *and* payload: tasks may
        share an id and differ in goal or golden run (mined variants, task files reusing ids,
        a task passed to reset)."""
        key = _goal_key(task)
        if key is not None and key in self._goals:
            self._goals.move_to_end(key)
            return self._goals[key]
        payload = task_payload(task)
        found = _Compiled(
            rule_predicate(f"{task.id}:goal", payload.goal),
            [rule_predicate(f"{task.id}:{s.name}", s.rule) for s in payload.subgoals],
            task_frame(self.world, task),
        )
        if key is not None:
            self._goals[key] = found
            if len(self._goals) > _GOALS_KEPT:
                self._goals.popitem(last=False)
        return found

    def _potential(self, task: Task, state: dict[str, Any]) -> float:
        subgoals = self._compiled(task).subgoals
        if not subgoals:
            return 0.0
        return sum(s.test(state) for s in subgoals) / len(subgoals)


def _bounds(state: WorldEnvState) -> tuple[float, float]:
    """The highest and lowest share so far (a snapshot from before they were kept has None)."""
    best = state.potential if state.best_potential is None else max(state.best_potential, state.potential)
    lowest = state.potential if state.lowest_potential is None else min(state.lowest_potential, state.potential)
    return max(best, state.start_potential), min(lowest, state.start_potential)


@dataclass(frozen=True, slots=True)
class _Compiled:
    """What `WorldEnv` derives from a task once: its rules compiled and its frame."""

    goal: Predicate
    subgoals: list[Predicate]
    frame: Frame


def _goal_key(task: Task) -> tuple[str, str] | None:
    """What a task's compiled rules and frame depend on: its id (the rules' names) and its
    payload as canonical JSON; None for a payload that is not JSON (compiling it says why)."""
    try:
        return task.id, canonical_json(task.payload)
    except (TypeError, ValueError, RecursionError):
        return None


def _spec(tool: WorldTool) -> ToolSpec:
    return spec_from_model(tool.name, tool.description, tool.args_model, method_name=_TOOL_ATTR + tool.name)


def load_world(source: str) -> World:
    """The world named by ``source``: ``"module:attribute"`` (a `World`, or a function
    returning one) or the path of a world spec file."""
    if source.endswith((".yaml", ".yml", ".json")) and ":" not in source.replace("\\", "/").split("/")[-1]:
        from agentenv.envs.world.spec import load_spec

        return load_spec(source)
    module_name, sep, attr = source.partition(":")
    if not sep or not attr:
        raise ValueError(f"a world is 'module:attribute' or a spec file path (.yaml, .json), got {source!r}")
    found = getattr(importlib.import_module(module_name), attr, None)
    if callable(found) and not isinstance(found, World):
        found = found()
    if not isinstance(found, World):
        raise TypeError(f"{source!r} is {type(found).__name__}, expected an agentenv.envs.world.World")
    return found


_scripted: weakref.WeakKeyDictionary[World, ScriptedWorldModel] = weakref.WeakKeyDictionary()


def scripted_model(world: World) -> ScriptedWorldModel:
    """The scripted model of ``world``'s golden responses (built once per world object)."""
    found = _scripted.get(world)
    if found is None:
        found = _scripted[world] = ScriptedWorldModel.from_world(world)
    return found


def oracle() -> ScriptedPolicy:
    """Replays the task's golden actions, one per turn, then ``finish``."""

    def act(conv: Any) -> str:
        golden = conv.task.payload["golden"]
        if conv.turn >= len(golden):
            return tool_call_text(FINISH_TOOL)
        step = golden[conv.turn]
        return tool_call_text(step["tool"], **step.get("arguments", {}))

    return ScriptedPolicy(act)
