"""Per-step overhead of the TextArena adapter: TextArena's own loop vs `TextArenaEnv.step`.

    .venv/bin/python bench/_adapter_arena.py [--steps 200]

Same process, same moves. Direct: the game's raw env (``textarena.make(ID + "-raw")``)
stepped with ``env.step(move)`` then ``env.get_observation()``, and in the two-player
case also the opponent's turn (its ``get_observation``, the same scripted opponent, its
``step``) and the agent's ``get_observation``. Adapter: ``TextArenaEnv.step`` with the
same text reply, which parses it, validates the move, keeps the game's randomness
apart, runs the opponent, renders the observation and records the transition. Resets
are timed apart (the ``reset`` case: ``make`` + ``reset`` + the first observation vs
`TextArenaEnv.reset`). Figures: the median microseconds per step. `bench/adapters.py`
imports `measure`.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

from _common import header, import_agentenv, table

import_agentenv()

import textarena

from agentenv.envs.adapters.textarena_games import TextArenaEnv

DIRECTIONS = ("[up]", "[left]", "[down]", "[right]")


def first_free(order: tuple[int, ...]) -> Callable[[str], str]:
    """A TicTacToe player: the first cell of ``order`` the latest board lists as free."""

    def play(observation: str) -> str:
        free = set(re.findall(r"'\[(\d)\]'", observation.rsplit("Available Moves:", 1)[-1]))
        return next((f"[{c}]" for c in order if str(c) in free), "[0]")

    return play


AGENT = first_free((4, 0, 2, 6, 8, 1, 3, 5, 7))
OPPONENT = first_free((0, 1, 2, 3, 4, 5, 6, 7, 8))


def _text(messages: list[Any]) -> str:
    return "\n".join(str(m[1]) for m in messages)


def _direct_2048(steps: int) -> list[float]:
    times: list[float] = []
    seed = 0
    while len(times) < steps:
        env = textarena.make("2048-v0-raw")
        env.reset(num_players=1, seed=seed)
        env.get_observation()
        done = False
        while not done and len(times) < steps:
            move = DIRECTIONS[len(times) % 4]
            start = time.perf_counter()
            done, _ = env.step(move)
            env.get_observation()
            times.append(time.perf_counter() - start)
        seed += 1
    return times


def _adapter_2048(steps: int) -> list[float]:
    times: list[float] = []
    env = TextArenaEnv(game="2048-v0", max_turns=10**6)
    seed = 0
    while len(times) < steps:
        env.reset(options={"task": env.tasks[seed]})
        done = False
        while not done and len(times) < steps:
            move = DIRECTIONS[len(times) % 4]
            start = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(move)
            times.append(time.perf_counter() - start)
            done = terminated or truncated
        seed += 1
    return times


def _direct_tictactoe(steps: int) -> list[float]:
    times: list[float] = []
    while len(times) < steps:
        env = textarena.make("TicTacToe-v0-raw")
        env.reset(num_players=2, seed=0)
        _, messages = env.get_observation()
        observation, done = _text(messages), False
        while not done and len(times) < steps:
            move = AGENT(observation)
            start = time.perf_counter()
            done, _ = env.step(move)
            if not done:
                _, messages = env.get_observation()
                done, _ = env.step(OPPONENT(_text(messages)))
            _, messages = env.get_observation()
            times.append(time.perf_counter() - start)
            observation = _text(messages)
    return times


def _adapter_tictactoe(steps: int, lean: bool = False) -> list[float]:
    times: list[float] = []
    env = TextArenaEnv(game="TicTacToe-v0", opponent=OPPONENT, lean=lean)
    while len(times) < steps:
        obs, _ = env.reset(options={"task": env.tasks[0]})
        observation, done = obs[-1]["content"], False
        while not done and len(times) < steps:
            move = AGENT(observation)
            start = time.perf_counter()
            obs, _, terminated, truncated, _ = env.step(move)
            times.append(time.perf_counter() - start)
            observation, done = obs[-1]["content"], terminated or truncated
    return times


def _resets(steps: int) -> tuple[list[float], list[float]]:
    direct: list[float] = []
    adapter: list[float] = []
    env = TextArenaEnv(game="TicTacToe-v0", opponent=OPPONENT)
    for _ in range(max(steps // 4, 10)):
        start = time.perf_counter()
        raw = textarena.make("TicTacToe-v0-raw")
        raw.reset(num_players=2, seed=0)
        raw.get_observation()
        direct.append(time.perf_counter() - start)
        start = time.perf_counter()
        env.reset(options={"task": env.tasks[0]})
        adapter.append(time.perf_counter() - start)
    return direct, adapter


def _us(times: list[float]) -> float:
    return round(statistics.median(times) * 1e6, 1)


def measure(steps: int = 200) -> list[dict[str, Any]]:
    """The median microseconds per step, direct and through the adapter, per case."""
    rows = []
    for case, direct, adapter in (
        ("2048-v0 (1 player)", _direct_2048, _adapter_2048),
        ("TicTacToe-v0 (2 players, scripted opponent)", _direct_tictactoe, _adapter_tictactoe),
        ("TicTacToe-v0, lean=True (no state diff)", _direct_tictactoe, lambda n: _adapter_tictactoe(n, lean=True)),
    ):
        direct(min(steps, 20))  # warm: imports, caches
        adapter(min(steps, 20))
        rows.append(
            {"adapter": "textarena", "case": case, "direct_us": _us(direct(steps)), "adapter_us": _us(adapter(steps))}
        )
    direct_resets, adapter_resets = _resets(steps)
    rows.append(
        {"adapter": "textarena", "case": "reset", "direct_us": _us(direct_resets), "adapter_us": _us(adapter_resets)}
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    print(header("TextArena adapter: median microseconds per step, direct vs through TextArenaEnv"))
    rows = measure(args.steps)
    print(
        table(
            ["case", "direct us", "adapter us", "ratio"],
            [[r["case"], r["direct_us"], r["adapter_us"], f"{r['adapter_us'] / r['direct_us']:.2f}x"] for r in rows],
        )
    )


if __name__ == "__main__":
    main()
