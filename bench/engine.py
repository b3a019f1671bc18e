"""The rollout engines side by side: the in-house transformers sampler against vLLM in
the trainer's process, on a real model, in one run.

    .venv/bin/python bench/engine.py                 # ~30 min on a 2-core machine
    .venv/bin/python bench/engine.py --no-step       # tokens/s only, ~12 min
    .venv/bin/python bench/engine.py --smoke         # checks the script in a few minutes

Model: SmolLM2-135M-Instruct (``model = "smollm2-135m-instruct"``) in float32, the
trainer's dtype on a CPU, for every engine (the in-house sampler is pathologically slow in
bf16 on a CPU); vLLM also in bf16, its fastest here (its log-probs then differ from the
trainer's by bf16 rounding, which ``sampler_is`` corrects). For scale, transformers'
``generate`` samples the first turn of the same episodes. Work: the
same 64 prompts, each an episode of 4 turns of up to 64 tokens in a small chat env
(any reply is a valid turn; the episode ends after the fourth), so each engine
samples about 16,000 tokens, prompts and observations sent as token ids.

1. Sampling: each engine, warm (a first rollout of 8 episodes untimed), rolls out the
   64 episodes; tokens/s is generated tokens over the seconds spent inside the policy.
   The in-house sampler keeps each episode's KV cache across turns and prefills a
   shared prompt once; vLLM batches continuously and keeps turns in its prefix cache.
2. A whole GRPO step with each (``GRPOTrainer.train_step``, 8 groups of 8, the same
   weights and data order): its seconds and their split (generation, env, update, and
   for vLLM the weight push). The update is the same work for both, so on this CPU,
   where a 135 M model's backward pass is slow, it bounds the step's ratio.

The last line reads ``engine: vllm N.Nx in-house tokens/s, GRPO step M.Mx``, vLLM in
float32 (the like-for-like figure, and the trainer's default on a CPU).
Left out: GPUs (bench/train_gpu.py).
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

import agentenv
from agentenv import Env, State, Task, TaskSet, ToolCall, tool
from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trainers.model import load_model
from agentenv.trainers.policy import TokenPolicy, TransformersPolicy

MODEL = "smollm2-135m-instruct"
TOPICS = [
    "the moon", "rivers", "bread", "owls", "chess", "volcanoes", "tea", "bicycles", "glass", "whales",
    "clocks", "maps", "salt", "bees", "trains", "paper", "ice", "violins", "deserts", "bridges",
    "honey", "comets", "rain", "cotton", "lighthouses", "wolves", "soap", "kites", "coral", "copper",
    "tomatoes", "snow",
]  # fmt: skip


class _Parser:
    """Every reply is a turn: the env only counts and answers."""

    format_hint = "Reply in plain text."

    def parse(self, action: Any) -> list[ToolCall]:
        text = action if isinstance(action, str) else str(action.get("content", ""))
        return [ToolCall(name="say", arguments={"text": text})]


class _TalkState(State):
    words: list[int] = []


class TalkEnv(Env[_TalkState]):
    """Four turns of talk about a topic, rewarded 10 / (10 + the replies' mean word count):
    a reward that varies within any group, so every GRPO step has an update."""

    state_type = _TalkState
    max_turns = 4
    instructions = "Answer in one or two sentences."

    def __init__(self, tasks: TaskSet | None = None, **kwargs: Any) -> None:
        super().__init__(tasks, parser=_Parser(), tool_prompt="none", **kwargs)

    def default_tasks(self) -> TaskSet:
        asks = ["Tell me a fact about {}.", "What is one use of {}?"]
        return TaskSet(
            Task(id=f"{k}-{t.replace(' ', '-')}", prompt=ask.format(t)) for k, ask in enumerate(asks) for t in TOPICS
        )

    @tool
    def say(self, text: str) -> str:
        """Say text."""
        self.state.words.append(len(text.split()))
        return "Tell me one more thing about it."

    def verify(self, task: Task) -> float:
        words = self.state.words
        return 10 / (10 + sum(words) / len(words)) if words else 0.0


class _Timed:
    """The seconds spent inside a policy during a rollout."""

    def __init__(self, inner: TokenPolicy) -> None:
        self.inner, self.seconds = inner, 0.0

    def act(self, conversations: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.inner.act(conversations)
        finally:
            self.seconds += time.perf_counter() - start


def _sampling(policy: TokenPolicy, tasks: list[Task]) -> tuple[int, float]:
    """Generated tokens and seconds for ``tasks``, after a warm-up on 8 of them."""
    agentenv.rollout(TalkEnv, policy, tasks=tasks[:8], seeds=[0] * 8)
    policy.reset()
    timed = _Timed(policy)
    trajs = agentenv.rollout(TalkEnv, timed, tasks=tasks, seeds=[0] * len(tasks))
    policy.reset()
    return sum(len(g.token_ids) for t in trajs for g in t.generations if g is not None), timed.seconds


def _generate_rate(model: torch.nn.Module, tokenizer: Any, tasks: list[Task], max_new_tokens: int) -> float:
    """Tokens/s of transformers' own ``generate`` (sampling, its KV cache) on the first
    turn of every episode, for scale: what "12x HF generate" was measured against."""
    env = TalkEnv()
    prompts = []
    for task in tasks:
        obs, _ = env.reset(options={"task": task})
        prompts.append(tokenizer.apply_chat_template(obs, add_generation_prompt=True, tokenize=False))
    env.close()
    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            **batch, max_new_tokens=max_new_tokens, do_sample=True, pad_token_id=tokenizer.pad_token_id
        )
    seconds = time.perf_counter() - start
    new = out[:, batch["input_ids"].shape[1] :]
    tokens = int((new != tokenizer.pad_token_id).sum())
    print(f"hf generate: {tokens} tokens in {seconds:.1f} s", flush=True)
    return tokens / seconds


def _step(engine: str, model: torch.nn.Module, tokenizer: Any, args: argparse.Namespace, out: str) -> dict[str, float]:
    config = GRPOConfig(
        steps=1, group_size=args.group_size, batch_size=args.prompts, max_new_tokens=args.max_new_tokens,
        max_seq_len=args.max_seq_len, max_turns=args.turns, learning_rate=1e-6, eval_episodes=0,
        micro_batch_size=8, output_dir=out, report_to=[], resume=False, save_trajectories=False,
        rollout_engine=engine, **({"vllm": {"kv_cache_gb": 1.0}} if engine == "vllm" else {}),
    )  # fmt: skip
    trainer = GRPOTrainer(copy.deepcopy(model), tokenizer, envs=[TalkEnv], config=config)
    try:
        metrics = trainer.train_step()
    finally:
        trainer.close()
    split = {k.removeprefix("time/"): float(v) for k, v in metrics.items() if k.startswith("time/")}
    split["total_s"] = sum(split.values())
    split["generated"] = float(metrics["tokens/generated"])
    split["trained"] = float(metrics["tokens/trained"])
    return split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-seq-len", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-step", action="store_true", help="sampling only, no GRPO step")
    parser.add_argument("--smoke", action="store_true", help="8 prompts, 2 turns of 16 tokens: checks the script")
    args = parser.parse_args()
    if args.smoke:
        args.prompts, args.turns, args.max_new_tokens, args.group_size = 8, 2, 16, 4
    torch.set_num_threads(args.threads)
    print(header("bench/engine.py: vLLM against the in-house sampler, SmolLM2-135M-Instruct"))
    model, tokenizer = load_model(MODEL)
    model.eval()
    tasks = list(TalkEnv().tasks)[: args.prompts]
    settings = dict(max_new_tokens=args.max_new_tokens, max_context_tokens=args.max_seq_len)
    print(f"{len(tasks)} prompts, {args.turns} turns of up to {args.max_new_tokens} tokens, {args.threads} threads")

    TalkEnv.max_turns = args.turns
    rates = {"hf generate (first turn)": _generate_rate(model, tokenizer, tasks, args.max_new_tokens)}
    inhouse = _sampling(TransformersPolicy(model, tokenizer, **settings), tasks)
    rates["in-house"] = inhouse[0] / inhouse[1]
    print(f"in-house: {inhouse[0]} tokens in {inhouse[1]:.1f} s", flush=True)
    from agentenv.trainers.vllm_engine import VLLMEngine, VLLMPolicy

    for dtype in ("float32", "bfloat16"):
        start = time.perf_counter()
        engine = VLLMEngine(model, tokenizer, max_model_len=args.max_seq_len, kv_cache_gb=1.0, dtype=dtype)
        started = time.perf_counter() - start
        try:
            tokens, seconds = _sampling(VLLMPolicy(engine, tokenizer, **settings), tasks)
        finally:
            engine.close()
        rates[f"vllm {dtype}"] = tokens / seconds
        print(
            f"vllm {dtype}: {tokens} tokens in {seconds:.1f} s (engine start {started:.0f} s, not counted)", flush=True
        )
    print()
    print(
        table(
            ["sampling", "tokens/s", "over in-house"],
            [[k, f"{v:.1f}", f"{v / rates['in-house']:.2f}x"] for k, v in rates.items()],
        )
    )
    ratio = rates["vllm float32"] / rates["in-house"]
    if args.no_step:
        print(f"\nengine: vllm {ratio:.1f}x in-house tokens/s, GRPO step not run (--no-step)")
        return
    steps = {}
    with tempfile.TemporaryDirectory() as tmp:
        for engine_name in ("transformers", "vllm"):
            steps[engine_name] = _step(engine_name, model, tokenizer, args, f"{tmp}/{engine_name}")
            print(f"GRPO step, {engine_name}: {steps[engine_name]['total_s']:.1f} s", flush=True)
    keys = ["generate_s", "env_s", "train_s", "push_s", "total_s", "generated", "trained"]

    def cells(split: dict[str, float]) -> list[object]:
        return [f"{split.get(k, 0.0):.1f}" if k.endswith("_s") else int(split.get(k, 0)) for k in keys]

    print()
    print(table(["GRPO step", *keys], [[name, *cells(split)] for name, split in steps.items()]))
    step_ratio = steps["transformers"]["total_s"] / steps["vllm"]["total_s"]
    gen_ratio = steps["transformers"]["generate_s"] / max(steps["vllm"]["generate_s"], 1e-9)
    print(
        f"\nin the step: generation {gen_ratio:.1f}x faster with vllm; the update "
        f"{steps['transformers']['train_s']:.0f} s against {steps['vllm']['train_s']:.0f} s (the same work)"
    )
    print(f"engine: vllm {ratio:.1f}x in-house tokens/s, GRPO step {step_ratio:.1f}x")


if __name__ == "__main__":
    main()
