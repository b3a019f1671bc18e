"""RLPR's cost per episode against the log-prob pass the trainer already runs.

    .venv/bin/python bench/_adapter_rlpr.py [--steps 200]

Same process, same batch: one batch of episodes (2 question-answer tasks x 4
rollouts of the tiny Qwen2, single turn, sampled once; the second case gives them
replies of plain text, as a trained model writes, since a random model's bytes
re-tokenise to about twice as many tokens as it sampled). ``direct_us``: the plain
`policy_logprobs` pass over the batch's training sequences (what the trainer
computes for the loss), micro-batches of 8, without gradients. ``adapter_us``: the
RLPR scores of the same batch (`agentenv.trainers.rlpr.score_trajectories`: the
layouts, one pass over the sequences with the reasoning and one over each distinct
sequence without it). Each figure is the median over ``steps`` rounds of a round's
time over its episodes; the two alternate round by round so drift hits both.
Imported by bench/adapters.py (`measure`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, import_agentenv, table

import_agentenv()

import torch

from agentenv import Env, State, Task, TaskSet
from agentenv.core.trajectory import Trajectory
from agentenv.rollout import rollout
from agentenv.trainers.batch import build_examples, collate
from agentenv.trainers.logprobs import policy_logprobs
from agentenv.trainers.policy import TransformersPolicy
from agentenv.trainers.rlpr import RLPRScorer
from agentenv.trainers.tokens import build_tiny_tokenizer

CAPITALS = {"France": "Paris", "Peru": "Lima"}
GROUP = 4
MICRO_BATCH = 8


class _QA(Env[State]):
    answer_mode = True
    max_turns = 1
    instructions = "Think, then answer as <answer>...</answer>."

    def default_tasks(self) -> TaskSet:
        return TaskSet(
            Task(id=c, prompt=f"What is the capital of {c}?", payload={"reference": city})
            for c, city in CAPITALS.items()
        )

    def verify(self, task: Task) -> float:
        return float(task.payload["reference"] in (self.answer or ""))


def _batch() -> tuple[torch.nn.Module, RLPRScorer, list[Trajectory]]:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tiny_tokenizer([f"capital of {c}? <answer>{x}</answer>" for c, x in CAPITALS.items()] * 4)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tok),
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=True,
            pad_token_id=tok.pad_token_id,
        )
    ).eval()
    policy = TransformersPolicy(model, tok, max_new_tokens=48, max_context_tokens=1024, seed=0)
    tasks = [t for t in _QA().tasks for _ in range(GROUP)]
    trajs = rollout(_QA, policy, tasks=tasks, seeds=[0] * len(tasks))
    return model, RLPRScorer(tok), trajs


def _as_text_replies(trajs: list[Trajectory], scorer: RLPRScorer) -> list[Trajectory]:
    """The same episodes with replies of plain text (a trained model's kind: its text
    re-tokenises to as many tokens as it was sampled in; a random model's bytes do not)."""
    out = []
    for k, t in enumerate(trajs):
        city = t.task.payload["reference"]
        text = f"Let me think step {k}: the country's largest city and seat of government is {city}. <answer>{city}"
        gen = t.generations[-1]
        assert gen is not None
        reply = gen.model_copy(update={"action": text, "token_ids": scorer.encode(text), "logprobs": []})
        out.append(t.model_copy(update={"generations": [*t.generations[:-1], reply]}))
    return out


def _case(name: str, model: torch.nn.Module, scorer: RLPRScorer, trajs: list[Trajectory], steps: int) -> dict[str, Any]:
    examples = build_examples(trajs, [[0.0] * t.turns for t in trajs], max_seq_len=1024)
    batches = [collate(examples[i : i + MICRO_BATCH], 0) for i in range(0, len(examples), MICRO_BATCH)]

    def direct() -> None:
        with torch.no_grad():
            for b in batches:
                policy_logprobs(model, b)

    def adapter() -> None:
        scorer.score(model, trajs, micro_batch_size=MICRO_BATCH, max_seq_len=1024, pad_id=0)

    times: dict[str, list[float]] = {"direct": [], "adapter": []}
    for _ in range(3):  # warm-up
        direct()
        adapter()
    for _ in range(steps):
        for kind, run in (("direct", direct), ("adapter", adapter)):
            start = time.perf_counter()
            run()
            times[kind].append((time.perf_counter() - start) / len(trajs) * 1e6)
    return {
        "adapter": "rlpr",
        "case": name,
        "direct_us": statistics.median(times["direct"]),
        "adapter_us": statistics.median(times["adapter"]),
    }


def measure(steps: int = 200) -> list[dict[str, Any]]:
    torch.set_num_threads(1)
    model, scorer, trajs = _batch()
    return [
        _case("rlpr reward per episode", model, scorer, trajs, steps),
        _case("rlpr reward per episode, text replies", model, scorer, _as_text_replies(trajs, scorer), steps),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="rounds of each (default 200)")
    args = parser.parse_args()
    rows = measure(args.steps)
    print(header("RLPR reward vs the trainer's log-prob pass, per episode (tiny Qwen2, CPU, 1 thread)"))
    print(
        table(
            ["case", "log-prob pass (us)", "RLPR reward (us)", "ratio"],
            [
                [
                    r["case"],
                    f"{r['direct_us']:.0f}",
                    f"{r['adapter_us']:.0f}",
                    f"{r['adapter_us'] / r['direct_us']:.2f}x",
                ]
                for r in rows
            ],
        )
    )


if __name__ == "__main__":
    main()
