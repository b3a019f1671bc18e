"""Single-turn GRPO on the CPU: agentenv's GRPOTrainer vs TRL's, step time and peak memory.

    bash bench/setup_trl.sh                    # once: TRL in its own environment, .venv-bench
    .venv/bin/python bench/train_vs_trl.py     # ~6 min on an idle 2-core machine

The same geometry for both: a random-init Qwen2 (hidden 256, 4 layers, the tiny
tokenizer) saved once and loaded by each; 8 prompts a step (a ~130-token system
prompt and a short task), 8 completions each, up to 64 new tokens at temperature 1,
micro-batches of 16, one optimiser step of AdamW per step, no KL term, the same
reward function (a hash of the completion's text, so groups differ and every step
updates). A random model almost never ends its turn, so each completion runs to 64
tokens in both. Each trainer runs in a subprocess of its own (TRL's with
``.venv-bench/bin/python``), over ``--rounds``: each compared pair runs back to back,
and every other round runs the roles in reverse order, so a host's drift hits both alike.
Each trainer runs with activation checkpointing off and on (TRL's default is on,
agentenv's off), and the ratios compare like with like, then default with default.

Step time: the median over measured steps of a whole step (generation, rewards,
update). Peak memory: the process's peak resident set during the steps, minus its
resident set before the first step (the libraries each imports differ; the model
and data are the same), and, beside it, the whole peak.

Left out: multi-turn episodes (TRL has none; bench/train_cpu.py measures the cache
kept across turns), GPUs, LoRA.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH_PYTHON = ROOT / ".venv-bench" / "bin" / "python"
TARGET_TIME, TARGET_MEMORY = 0.5, 0.7  # agentenv over TRL
ROLES = {  # name: (python, what it is), in the order a round runs them (like-for-like pairs adjacent)
    "agentenv": ("", "agentenv GRPOTrainer, defaults (KV reuse on, no activation checkpointing)"),
    "trl-matched": ("bench", "TRL GRPOTrainer, activation checkpointing off, as agentenv"),
    "trl": ("bench", "TRL GRPOTrainer, defaults (activation checkpointing on)"),
    "agentenv-ckpt": ("", "agentenv GRPOTrainer, activation checkpointing on, as TRL's defaults"),
}
PAIRS = [  # (agentenv role, TRL role): like for like, then each trainer's defaults
    ("agentenv", "trl-matched"),
    ("agentenv-ckpt", "trl"),
    ("agentenv", "trl"),
]
SYSTEM = (
    "You are a careful assistant that answers arithmetic questions. Read the question, "
    "work out the value step by step in your head, and reply with the final integer only: "
    "no words, no units, no punctuation. If the question is ambiguous, answer the most "
    "natural reading. Negative results are written with a leading minus sign."
)
PROMPTS = 8
GROUP = 8
MAX_NEW_TOKENS = 64
MICRO_BATCH = 16


def reward_of(text: str) -> float:
    """The same arbitrary but deterministic score on both sides: groups get different rewards."""
    return (zlib.crc32(text.encode()) % 5) / 4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3, help="measured steps per round (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="steps run first each round, not measured (default 1)")
    p.add_argument("--rounds", type=int, default=2, help="rounds, each running both trainers (default 2)")
    p.add_argument("--threads", type=int, default=0, help="torch threads in each trainer (0: torch's default)")
    p.add_argument("--role", choices=list(ROLES), help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def prompts() -> list[list[dict[str, str]]]:
    return [
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Compute {3 + i} * {7 + 2 * i} - {i}."}]
        for i in range(4 * PROMPTS)
    ]


def prepare(folder: Path) -> None:
    """The model and tokenizer both trainers load."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from train_cpu import build_model

    from agentenv.trainers.tokens import build_tiny_tokenizer

    corpus = [m["content"] for conv in prompts() for m in conv] * 4
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=512)
    model = build_model(tokenizer, hidden=256, layers=4)
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


# -- the two trainers, each run in a child process -------------------------------------


def run_agentenv(args: argparse.Namespace, folder: Path, checkpointing: bool) -> dict[str, Any]:
    import agentenv
    from agentenv import Env, Task
    from agentenv.trainers import GRPOConfig, GRPOTrainer
    from agentenv.trainers.model import load_model

    class Answer(Env):
        """A single-turn task whose reply is the answer, scored like TRL's reward function."""

        answer_mode = True
        max_turns = 1
        instructions = SYSTEM

        def verify(self, task: Task) -> float:
            return reward_of(self.answer or "")

    tasks = [Task(id=f"t{i}", prompt=conv[1]["content"]) for i, conv in enumerate(prompts())]
    model, tokenizer = load_model(str(folder / "model"))
    config = GRPOConfig(
        model=str(folder / "model"),
        envs={"answer": 1.0},
        output_dir=str(folder / "agentenv-run"),
        device="cpu",
        steps=args.warmup + args.steps,
        batch_size=PROMPTS * GROUP,
        group_size=GROUP,
        max_new_tokens=MAX_NEW_TOKENS,
        max_seq_len=1024,
        micro_batch_size=MICRO_BATCH,
        eval_episodes=0,
        test_fraction=0.01,
        report_to=[],
        learning_rate=1e-6,
        gradient_checkpointing=checkpointing,
    )
    trainer = GRPOTrainer(
        model, tokenizer, envs=[lambda: Answer(agentenv.TaskSet(tasks), tool_prompt="none")], config=config
    )
    base = rss_bytes()
    times, completion_tokens = [], []
    for i in range(args.warmup + args.steps):
        trainer.step = i
        start = time.perf_counter()
        m = trainer.train_step()
        times.append(time.perf_counter() - start)
        completion_tokens.append(m["gen_tokens_per_s"] * m["time/generate_s"])
    return {"times": times[args.warmup :], "base": base, "peak": peak_rss_bytes(), "tokens": completion_tokens}


def run_trl(args: argparse.Namespace, folder: Path, checkpointing: bool) -> dict[str, Any]:
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    model = AutoModelForCausalLM.from_pretrained(folder / "model")
    tokenizer = AutoTokenizer.from_pretrained(folder / "model")
    data = Dataset.from_list([{"prompt": conv} for conv in prompts()])

    def reward(completions: list[Any], **_: Any) -> list[float]:
        return [reward_of(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    times: list[float] = []
    base: list[int] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            if not base:
                base.append(rss_bytes())
            self.start = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            times.append(time.perf_counter() - self.start)

    config = trl.GRPOConfig(
        output_dir=str(folder / "trl-run"),
        per_device_train_batch_size=MICRO_BATCH,
        gradient_accumulation_steps=PROMPTS * GROUP // MICRO_BATCH,
        num_generations=GROUP,
        max_completion_length=MAX_NEW_TOKENS,
        temperature=1.0,
        learning_rate=1e-6,
        beta=0.0,
        loss_type="grpo",
        max_steps=args.warmup + args.steps,
        use_cpu=True,
        bf16=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
        gradient_checkpointing=checkpointing,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[Clock()],
    )
    transformers.logging.set_verbosity_error()
    trainer.train()
    return {"times": times[args.warmup :], "base": base[0], "peak": peak_rss_bytes(), "version": trl.__version__}


def child(args: argparse.Namespace) -> None:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    folder = Path(args.dir)
    if args.role.startswith("agentenv"):
        result = run_agentenv(args, folder, args.role == "agentenv-ckpt")
    else:
        result = run_trl(args, folder, args.role == "trl")
    print("RESULT " + json.dumps(result), flush=True)


# -- the parent: prepare, run both, report ------------------------------------------------


def run_child(python: Path | str, role: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    cmd = [str(python), __file__, "--role", role, "--dir", str(folder)]
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"the {role} trainer failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def main() -> None:
    args = parse_args()
    if args.role:
        child(args)
        return
    if not BENCH_PYTHON.exists():
        sys.exit(f"TRL's environment is missing: run `bash bench/setup_trl.sh` first (it makes {BENCH_PYTHON})")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import header

    runs = args.rounds * len(ROLES)
    print(
        f"{runs} runs of {args.warmup + args.steps} steps each, about 10-30 s a run on an idle 2-core machine",
        flush=True,
    )
    results: dict[str, list[dict[str, Any]]] = {role: [] for role in ROLES}
    with tempfile.TemporaryDirectory(prefix="train_vs_trl_") as tmp:
        folder = Path(tmp)
        prepare(folder)
        for r in range(args.rounds):
            order = list(ROLES) if r % 2 == 0 else list(reversed(ROLES))  # ABBA: a linear drift cancels
            for role in order:
                venv = ROLES[role][0]
                python = BENCH_PYTHON if venv == "bench" else sys.executable
                start = time.perf_counter()
                results[role].append(run_child(python, role, args, folder))
                steps = ", ".join(f"{t:.1f}" for t in results[role][-1]["times"])
                print(
                    f"round {r} {role}: steps {steps} s ({time.perf_counter() - start:.0f} s with start-up)", flush=True
                )
    report(args, results, header)


def report(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]], header: Any) -> None:
    from _common import table

    step = {k: statistics.median(t for r in rs for t in r["times"]) for k, rs in results.items()}
    grown = {k: max(r["peak"] - r["base"] for r in rs) / 2**20 for k, rs in results.items()}
    peak = {k: max(r["peak"] for r in rs) / 2**20 for k, rs in results.items()}
    print("\n" + header("bench/train_vs_trl.py: single-turn GRPO step, agentenv vs TRL, same geometry"))
    print(
        f"TRL {results['trl'][0]['version']}; {PROMPTS} prompts x {GROUP} completions of up to {MAX_NEW_TOKENS} "
        f"tokens, micro-batch {MICRO_BATCH}; median of {args.steps} steps x {args.rounds} rounds each"
    )
    for role, (_, what) in ROLES.items():
        print(f"  {role}: {what}")
    rows = [(role, f"{step[role]:.2f}", f"{grown[role]:.0f}", f"{peak[role]:.0f}") for role in ROLES]
    print(table(["trainer", "step (s)", "peak over pre-step RSS (MiB)", "peak RSS (MiB)"], rows))
    for ours, theirs in PAIRS:
        t, m = step[ours] / step[theirs], grown[ours] / grown[theirs]
        verdict = {True: "met", False: "MISSED"}
        print(
            f"{ours} / {theirs}: step time {t:.2f}x (target <= {TARGET_TIME}: {verdict[t <= TARGET_TIME]}); "
            f"peak memory {m:.2f}x (target <= {TARGET_MEMORY}: {verdict[m <= TARGET_MEMORY]})"
        )
    # A round's runs follow one another within a couple of minutes: on a shared host the
    # ratio within each round shows how far the pooled one moves with the host's load.
    print("step time per round (median over median, rounds in order):")
    for ours, theirs in PAIRS:
        ratios = [
            statistics.median(a["times"]) / statistics.median(b["times"])
            for a, b in zip(results[ours], results[theirs], strict=True)
        ]
        print(f"  {ours} / {theirs}: " + " ".join(f"{x:.2f}" for x in ratios) + f" (largest {max(ratios):.2f}x)")


if __name__ == "__main__":
    main()
