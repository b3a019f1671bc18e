"""The LLM-emulated world: steps/s with a cold and a warm response cache, 32 concurrent
episodes vs 1, and the validation cost per step.

    .venv/bin/python bench/world_env.py [--rounds 3] [--steps 40] [--episodes 32] [--delay-ms 20]

The world model is `OpenAIWorldModel` talking to a local server that speaks the OpenAI
chat protocol (tests/openai_server.py, in a process of its own, as a model server would
be) and answers every request after a fixed delay (20 ms) with the faithful reply,
computed from the request's JSON document: a key-value world whose one emulated tool,
``put(key, value)``, may write only ``/kv/{key}``. So a
cold step is the HTTP round trip, the delay, and the env's own work (prompt, validation,
cache write); a warm step replays the same seeded episode, every reply from the cache.

- cold / warm: one episode of ``--steps`` puts, then the same episode again on the same cache.
- concurrency: ``--episodes`` episodes at once (each its own keys, so no two share a reply
  and the cache's coalescing of equal misses does not help), cold, against one episode:
  the wall time ratio (1.0x = perfect overlap of the waits).
- validation: `validate` alone (parse, paths, patch, schema, invariants, postconditions)
  on a golden reply of each shipped world and of the bench world, in microseconds.

Medians over rounds. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.openai_server
from _common import header, table
from pydantic import Field

import agentenv
from agentenv import State, Task, tool_call_text
from agentenv.envs.world import Args, OpenAIWorldModel, World, WorldCache, WorldEnv, WorldMetrics
from agentenv.envs.world.keys import state_hash
from agentenv.envs.world.paths import bind_all, escape
from agentenv.envs.world.replay import golden_run
from agentenv.envs.world.validate import validate
from agentenv.envs.world.worlds import bank, fs
from tests.openai_server import OpenAIServer, Request, chat_reply


class KV(State):
    kv: dict[str, str] = {}


class Put(Args):
    key: str = Field(min_length=1, max_length=40)
    value: str = Field(max_length=200)


def kv_world() -> World:
    world = World("bench-kv", state=KV, initial_state=KV(), instructions="Store values.", max_turns=10_000)
    world.emulated("put", Put, "Store a value under a key.", writes=["/kv/{key}"])
    world.invariant("bounded", {"<=": [{"length": {"keys": {"var": "kv"}}}, 5000]})
    return world


TASK = Task(id="fill", prompt="Store values.", payload={"goal": {"==": [{"val": ["kv", "never"]}, "x"]}})


def faithful(delay_s: float):
    def answer(request: Request):
        document = json.loads(request.body["messages"][1]["content"])
        args = document["call"]["arguments"]
        patch = [{"op": "add", "path": "/kv/" + escape(args["key"]), "value": args["value"]}]
        return chat_reply(json.dumps({"observation": "stored", "state_patch": patch}), delay_s=delay_s)

    return answer


def serve(delay_ms: float) -> None:
    """The server process: print the base URL, answer until stdin closes."""
    server = OpenAIServer(faithful(delay_ms / 1e3)).start()
    print(server.base_url, flush=True)
    sys.stdin.read()
    server.stop()


def start_server(delay_ms: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(delay_ms)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def episode(env: WorldEnv, steps: int, tag: str) -> float:
    """Seconds for ``steps`` puts of one seeded episode (reset not timed)."""
    env.reset(seed=0, options={"task": TASK})
    t0 = time.perf_counter()
    for i in range(steps):
        *_, info = env.step(tool_call_text("put", key=f"{tag}-{i}", value=f"value {i}"))
        if info["error"] is not None:
            raise RuntimeError(f"a timed step failed: {info['error']}")
    return time.perf_counter() - t0


def concurrent(world: World, model: OpenAIWorldModel, episodes: int, steps: int, round_: int) -> float:
    cache, metrics = WorldCache(), WorldMetrics()

    def act(conv: agentenv.Conversation) -> str:
        return tool_call_text("put", key=f"r{round_}-e{conv.id}-{conv.turn}", value="v")

    t0 = time.perf_counter()
    trajs = agentenv.rollout(
        lambda: WorldEnv(world, [TASK], model=model, cache=cache, metrics=metrics, max_turns=steps),
        agentenv.ScriptedPolicy(act),
        tasks=[TASK] * episodes,
    )
    elapsed = time.perf_counter() - t0
    if any(t.failure.value == "infra" for t in trajs) or metrics.model_calls != episodes * steps:
        raise RuntimeError(f"the concurrent run failed: {metrics.summary()}")
    return elapsed


def validation_us(world: World, task_id: str, repeat: int) -> tuple[str, float]:
    """Microseconds to validate the golden reply of the first emulated step of a task."""
    task = world.tasks.get(task_id)
    state = world.task_start(task)
    record = next(r for r in golden_run(world, task) if r.response is not None)
    assert record.state_hash == state_hash(state)
    tool = world.tools[record.tool]
    text = record.response.model_dump_json() if record.response else ""
    writes = bind_all(tool.writes, record.arguments)
    t0 = time.perf_counter()
    for _ in range(repeat):
        validate(text, world, tool, writes, state, record.arguments)
    return f"{world.name}: {record.tool}", (time.perf_counter() - t0) / repeat * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40, help="steps per episode")
    parser.add_argument("--episodes", type=int, default=32, help="concurrent episodes")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="the server's answer delay")
    parser.add_argument("--serve", type=float, default=None, help=argparse.SUPPRESS)  # the server process
    args = parser.parse_args(argv)
    if args.serve is not None:
        return serve(args.serve)
    if min(args.rounds, args.steps, args.episodes) < 1 or args.delay_ms < 0:
        parser.error("counts must be >= 1 and the delay >= 0")

    t_start = time.perf_counter()
    server, base_url = start_server(args.delay_ms)
    world = kv_world()
    model = OpenAIWorldModel(base_url, "bench-model", concurrency=max(64, args.episodes))
    cold, warm, one, many = [], [], [], []
    try:
        for r in range(args.rounds):
            env = WorldEnv(world, [TASK], model=model, cache=WorldCache(), metrics=WorldMetrics())
            cold.append(args.steps / episode(env, args.steps, f"r{r}"))
            warm.append(args.steps / episode(env, args.steps, f"r{r}"))  # the same episode: all hits
            if env.metrics.cache_hits != args.steps:
                raise RuntimeError(f"the warm episode missed the cache: {env.metrics.summary()}")
            one.append(concurrent(world, model, 1, args.steps, r))
            many.append(concurrent(world, model, args.episodes, args.steps, r))
    finally:
        model.close()
        server.communicate(timeout=30)  # closes its stdin: the server stops
    checks = [
        validation_us(world_, task, 2000)
        for world_, task in (
            (fs.WORLD, "fs-mkdir-projects"),
            (fs.WORLD, "fs-write-hello"),
            (bank.world(), "bank-transfer-A1-A3"),
        )
    ]
    kv_state = {"kv": {f"k{i}": "v" for i in range(20)}}
    kv_text = json.dumps({"observation": "stored", "state_patch": [{"op": "add", "path": "/kv/new", "value": "v"}]})
    tool = world.tools["put"]
    t0 = time.perf_counter()
    for _ in range(2000):
        validate(kv_text, world, tool, bind_all(tool.writes, {"key": "new"}), kv_state, {"key": "new", "value": "v"})
    checks.append(("bench-kv: put", (time.perf_counter() - t0) / 2000 * 1e6))

    med = statistics.median
    print(header("world env: emulated steps through an OpenAI-protocol server, cold and warm cache"))
    print(
        f"{args.rounds} rounds; {args.steps} steps per episode; server delay {args.delay_ms:.0f} ms; "
        f"{args.episodes} concurrent episodes; {time.perf_counter() - t_start:.1f} s\n"
    )
    print(
        table(
            ["measure", "steps/s (median)", "ms per step"],
            [
                ["1 episode, cold cache (every step asks the server)", f"{med(cold):.1f}", f"{1e3 / med(cold):.2f}"],
                ["1 episode, warm cache (the same episode replayed)", f"{med(warm):.0f}", f"{1e3 / med(warm):.3f}"],
            ],
        )
    )
    print(f"\nwarm vs cold: {med(warm) / med(cold):.0f}x the steps/s")
    total = args.episodes * args.steps
    print(
        f"{args.episodes} concurrent cold episodes vs 1: {med(many) / med(one):.2f}x the wall time "
        f"({med(many):.2f} s vs {med(one):.2f} s; {total / med(many):.0f} steps/s in all)"
    )
    print()
    print(table(["validation of one golden reply", "us per reply"], [[name, f"{us:.0f}"] for name, us in checks]))
    print(
        f"validation as a share of a warm step (bench-kv): {checks[-1][1] / (1e6 / med(warm)):.0%}; "
        f"of a cold step: {checks[-1][1] / (1e6 / med(cold)):.2%}"
    )


if __name__ == "__main__":
    main()
