"""Does GRPO make the agent better? The learning demonstration, on the CPU, over seeds.

`examples/tiny.toml`: a tiny Qwen2 (random init) on ``guess-number-opening-v0``
(secrets 1..16, 4 guesses, feedback naming the interval left). The supervised warm
start imitates an oracle whose successful episodes open with a wasted guess about
60% of the time; binary search from the middle solves 15 of 16 secrets in 4 guesses,
a wasted opening about half. So the warm-started policy executes the search well and
opens well about a third of the time, and only RL can learn which opening pays. The
rewarded behaviour is multi-turn: each guess must read the interval the last
observation names.

For each seed: held-out success (``eval_episodes`` fixed-seed episodes of held-out
tasks, at the sampling temperature) before RL and every ``eval_every`` steps, with its
95% Wilson interval; and, as the mechanism, the share of the training episodes that
open with the middle guess (8) at the first and the last step.

    .venv/bin/python bench/learn_cpu.py                     # 3 seeds, about 6 minutes each
    .venv/bin/python bench/learn_cpu.py --seeds 0 --set steps=20
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table

from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trajectory import Trajectory

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "tiny.toml"
MEAN_BAR, EACH_BAR = 0.15, 0.10  # the demonstration's bar: mean rise over seeds, and every seed's
GOOD_OPENING = 8


@dataclass
class SeedRun:
    seed: int
    episodes: int  # per evaluation, the fewest any evaluation counted
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, held-out success)
    good_openings: tuple[float, float] = (0.0, 0.0)  # share of training episodes opening at 8: first, last step
    seconds: float = 0.0

    @property
    def rise(self) -> float:
        return self.curve[-1][1] - self.curve[0][1]


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a success rate ``p`` over ``n`` episodes."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def demo_config(seed: int, output_dir: Path, overrides: dict | None = None) -> GRPOConfig:
    """The demonstration's config (`examples/tiny.toml`) for one seed, a fresh run in
    ``output_dir``, with ``overrides`` (GRPOConfig fields) on top."""
    data = {**GRPOConfig.from_file(CONFIG).to_dict(), "seed": seed, "output_dir": str(output_dir), "resume": False}
    return GRPOConfig.from_dict({**data, "tensorboard": False, **(overrides or {})})


def parse_sets(items: list[str]) -> dict:
    """``--set NAME=VALUE`` items as GRPOConfig fields: each value read as JSON, else kept as a string."""
    overrides = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            overrides[name] = json.loads(value)
        except json.JSONDecodeError:
            overrides[name] = value
    return overrides


def run_seed(seed: int, output_dir: Path, overrides: dict | None = None, *, quiet: bool = False) -> SeedRun:
    """One seed of the demonstration, from scratch (warm start, then RL)."""
    config = demo_config(seed, output_dir, overrides)
    run = SeedRun(seed, config.eval_episodes)
    start = time.perf_counter()
    trainer = GRPOTrainer(config=config)
    if quiet:
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            history = trainer.train()
    else:
        history = trainer.train()
    run.seconds = time.perf_counter() - start
    run.curve = [(h["step"], h["eval/success_rate"]) for h in history if "eval/success_rate" in h]
    # The episodes each rate counted (the env's infra failures are left out), not those asked for.
    run.episodes = min((int(h["eval/episodes"]) for h in history if "eval/episodes" in h), default=0)
    steps = sorted((output_dir / "trajectories").glob("step-*.jsonl"))
    if steps:
        run.good_openings = (_good_openings(steps[0]), _good_openings(steps[-1]))
    return run


def _good_openings(path: Path) -> float:
    trajs = Trajectory.load_jsonl(path)
    opens = [t.transitions[0].action for t in trajs if t.transitions]
    good = sum(f'"number": {GOOD_OPENING}}}' in (a if isinstance(a, str) else json.dumps(a)) for a in opens)
    return good / max(1, len(opens))


def report(runs: list[SeedRun]) -> str:
    rows = []
    for run in runs:
        for step, rate in run.curve:
            low, high = wilson(rate, run.episodes)
            rows.append([run.seed, step, f"{rate:.1%}", f"[{low:.1%}, {high:.1%}]"])
    lines = [table(["seed", "step", "held-out success", "95% interval"], rows), ""]
    for run in runs:
        first, last = run.good_openings
        lines.append(
            f"seed {run.seed}: {run.curve[0][1]:.1%} -> {run.curve[-1][1]:.1%} ({run.rise * 100:+.1f} points); "
            f"training episodes opening at {GOOD_OPENING}: {first:.0%} -> {last:.0%}; {run.seconds:.0f} s"
        )
    rises = [r.rise for r in runs]
    mean = statistics.mean(rises)
    met = mean >= MEAN_BAR and min(rises) >= EACH_BAR
    lines.append(
        f"mean rise {mean * 100:+.1f} points (bar +{MEAN_BAR * 100:.0f}), smallest {min(rises) * 100:+.1f} "
        f"(bar +{EACH_BAR * 100:.0f}), {runs[0].episodes} held-out episodes per evaluation: "
        f"{'met' if met else 'NOT met'}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a GRPOConfig field (JSON)")
    parser.add_argument("--output-dir", default="runs/bench-learn")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    overrides = parse_sets(args.set)
    torch.set_num_threads(args.threads)
    print(header("learning demonstration: held-out success before and after GRPO, per seed"))
    runs = []
    for seed in args.seeds:
        print(f"\n== seed {seed} ==", flush=True)
        runs.append(run_seed(seed, Path(args.output_dir) / f"seed-{seed}", overrides))
    print("\n" + report(runs))


if __name__ == "__main__":
    main()
