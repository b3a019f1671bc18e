"""Small envs the tests share."""

from __future__ import annotations

from agentenv import Env, InfraError, State, Task, TaskSet, ToolError, tool


class CounterState(State):
    count: int = 0
    log: list[str] = []


class CounterEnv(Env[CounterState]):
    """A toy env exercising every hook: add to a counter, reach the target, submit."""

    max_turns = 5
    reward_weights = {"progress": 0.5}

    def default_tasks(self) -> TaskSet:
        return TaskSet(Task(id=f"t{i}", prompt=f"Reach {i + 2}.", payload={"target": i + 2}) for i in range(5))

    @tool
    def add(self, amount: int, note: str = "") -> int:
        """Add to the counter.

        Args:
            amount: How much to add; may be negative.
            note: A note kept in the log.
        """
        if amount == 13:
            raise ToolError("13 is unlucky")
        if amount == 666:
            raise InfraError("the counter service died")
        self.state.count += amount
        self.state.log.append(note)
        return self.state.count

    @tool(terminal=True)
    def submit(self) -> str:
        """Submit the counter."""
        return "ok"

    def step_rewards(self, outcomes):
        return {"progress": float(sum(o.ok and o.call.name == "add" for o in outcomes))}

    def verify(self, task: Task) -> float:
        return float(self.state.count == task.payload["target"])
