"""Does GRPO raise held-out success on the CPU? The tiny model on guess-the-number.

A tiny Qwen2 (random init, a tokenizer built from the env's text) is warm-started
by a supervised pass on the oracle's episodes, then trained with GRPO; the
held-out success rate is printed before and after. The task set is 320
difficulty-0 tasks (secrets 1..16), so the 20% held-out split covers every secret.

    .venv/bin/python bench/learn_cpu.py                        # the defaults below
    .venv/bin/python bench/learn_cpu.py --set learning_rate=1e-3 --set steps=40

Any `GRPOConfig` field can be set with --set NAME=VALUE (JSON values).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import agentenv
from agentenv.envs.guess_number import GuessNumberEnv, make_tasks, oracle
from agentenv.trainers import GRPOConfig, GRPOTrainer

DEFAULTS = dict(
    model="tiny",
    envs={"guess16-v0": 1.0},
    seed=0,
    max_new_tokens=32,
    stop=["</tool_call>"],
    max_seq_len=1024,
    steps=30,
    group_size=8,
    batch_size=64,
    learning_rate=5e-4,
    micro_batch_size=16,
    sft_steps=100,
    sft_learning_rate=3e-3,
    eval_every=10,
    eval_episodes=64,
    eval_temperature=0.0,
    tensorboard=False,
    resume=False,
    output_dir="runs/bench-learn",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    overrides = {}
    for item in args.set:
        name, _, value = item.partition("=")
        try:
            overrides[name] = json.loads(value)
        except json.JSONDecodeError:
            overrides[name] = value
    torch.set_num_threads(args.threads)
    agentenv.register(
        "guess16-v0",
        GuessNumberEnv,
        tasks=make_tasks(320, seed=1, difficulties=(0,)),
        max_turns=10,
        tool_prompt="compact",
        oracle=oracle,
    )
    config = GRPOConfig(**{**DEFAULTS, **overrides})
    start = time.perf_counter()
    history = GRPOTrainer(config=config).train()
    evals = [(h["step"], h["eval/success_rate"]) for h in history if "eval/success_rate" in h]
    train = [h["success_rate"] for h in history if "success_rate" in h]
    k = max(1, len(train) // 5)
    print(
        f"\nheld-out success (T={config.eval_temperature}, {config.eval_episodes} episodes): "
        + ", ".join(f"step {s}: {v:.1%}" for s, v in evals)
    )
    print(
        f"train success, mean of the first {k} steps: {sum(train[:k]) / k:.1%}; "
        f"of the last {k}: {sum(train[-k:]) / k:.1%}"
    )
    print(
        f"change in held-out success: {evals[-1][1] - evals[0][1]:+z.1%} (the issue's bar: +15 points); "
        f"{time.perf_counter() - start:.0f} s, {args.threads} threads"
    )


if __name__ == "__main__":
    main()
