"""Does GRPO make the agent better? The learning demonstration, on the CPU, over seeds.

`examples/tiny.toml`: a tiny Qwen2 (random init) on ``guess-number-opening-v0``
(secrets 1..16, 4 guesses, feedback naming the interval left). The supervised warm
start imitates an oracle whose successful episodes open with a wasted guess about
60% of the time; binary search from the middle solves 15 of 16 secrets in 4 guesses,
a wasted opening about half. So the warm-started policy executes the search well and
opens well about a third of the time, and only RL can learn which opening pays. The
rewarded behaviour is multi-turn: each guess must read the interval the last
observation names.

For each seed, one warm start, then two arms of GRPO from it: RL, and the control whose
task rewards are permuted across each batch (``shuffle_rewards``). Held-out success
(``eval_episodes`` fixed-seed episodes of task ids never trained on, at the sampling
temperature; the game's 16 secrets are all searched for in training, see
`examples/tiny.toml`) before RL and every ``eval_every`` steps, with its 95% Wilson
interval; RL minus control at the last evaluation, paired over the held-out tasks; and,
as the mechanism, the share of the training episodes that open with the middle guess (8)
at the first and the last step.

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

from agentenv.core.trajectory import Trajectory
from agentenv.eval.evaluation import compare, score
from agentenv.trainers import GRPOConfig, GRPOTrainer

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "tiny.toml"
MEAN_BAR, EACH_BAR = 0.30, 0.20  # RL minus control, the mean over seeds and every seed (3 seeds: +40.7 to +56.8)
CI_SEEDS = (0, 1)  # tests/test_learning.py: two seeds, both arms (about 20 minutes)
GOOD_OPENING = 8


@dataclass
class SeedRun:
    seed: int
    episodes: int  # per evaluation, the fewest any evaluation counted
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, held-out success)
    good_openings: tuple[float, float] = (0.0, 0.0)  # share of training episodes opening at 8: first, last step
    seconds: float = 0.0
    folder: Path | None = None  # the run's directory (evals/step-NNNNNN.jsonl: the held-out episodes)

    @property
    def rise(self) -> float:
        return self.curve[-1][1] - self.curve[0][1]

    def held_out(self, step: int) -> list[Trajectory]:
        assert self.folder is not None
        return Trajectory.load_jsonl(self.folder / "evals" / f"step-{step:06d}.jsonl")


@dataclass
class Gap:
    """RL minus the control at the last evaluation, paired over the held-out tasks."""

    seed: int
    value: float
    low: float
    high: float
    tasks: int


def gap(rl: SeedRun, control: SeedRun) -> Gap:
    """RL minus control on the last evaluation's held-out episodes (the same tasks and
    episode seeds for both arms), with a paired 95% bootstrap interval over tasks."""
    step = rl.curve[-1][0]
    diff = compare(score(control.held_out(step), label="control"), score(rl.held_out(step), label="rl"), k=1)
    d = diff.differences["pass@1"]
    return Gap(rl.seed, d.value or 0.0, d.low or 0.0, d.high or 0.0, d.tasks)


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a success rate ``p`` over ``n`` episodes."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def demo_config(seed: int, output_dir: Path, overrides: dict | None = None) -> GRPOConfig:
    """The demonstration's config (`examples/tiny.toml`) for one seed, a fresh run in
    ``output_dir``, with ``overrides`` (GRPOConfig fields) on top."""
    data = {**GRPOConfig.from_file(CONFIG).to_dict(), "seed": seed, "output_dir": str(output_dir), "resume": False}
    return GRPOConfig.from_dict({**data, "report_to": [], **(overrides or {})})


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


ARMS = ("rl", "control")
"""The RL arm, and its control: the same run with the task rewards permuted across each
batch (``shuffle_rewards``), from the same warm start and seeds."""


def run_seed(seed: int, output_dir: Path, overrides: dict | None = None, *, quiet: bool = False) -> dict[str, SeedRun]:
    """One seed of the demonstration: one warm start, then each arm's GRPO run from it."""
    import contextlib
    import io

    quietly = contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext()
    start = time.perf_counter()
    warm = output_dir / "warm"
    with quietly:
        trainer = GRPOTrainer(
            config=demo_config(seed, output_dir / "warm-run", {**(overrides or {}), "eval_episodes": 0})
        )
        trainer.warm_start()
        trainer.model.save_pretrained(str(warm))
        trainer.tokenizer.save_pretrained(str(warm))
    warm_s = time.perf_counter() - start
    runs = {}
    for arm in ARMS:
        control = arm == "control"
        fields = {**(overrides or {}), "model": str(warm), "sft_steps": 0, "shuffle_rewards": control}
        fields["eval_first"] = not control  # the same start as RL's, measured there
        config = demo_config(seed, output_dir / arm, fields)
        run = SeedRun(seed, config.eval_episodes, folder=output_dir / arm)
        start = time.perf_counter()
        with quietly:
            history = GRPOTrainer(config=config, model=str(warm)).train()
        run.seconds = time.perf_counter() - start + warm_s / len(ARMS)
        run.curve = [(h["step"], h["eval/success_rate"]) for h in history if "eval/success_rate" in h]
        if control:
            run.curve.insert(0, runs["rl"].curve[0])
        # The episodes each rate counted (the env's infra failures are left out), not those asked for.
        run.episodes = min((int(h["eval/episodes"]) for h in history if "eval/episodes" in h), default=0)
        steps = sorted((output_dir / arm / "trajectories").glob("step-*.jsonl"))
        if steps:
            run.good_openings = (_good_openings(steps[0]), _good_openings(steps[-1]))
        runs[arm] = run
    return runs


def _good_openings(path: Path) -> float:
    trajs = Trajectory.load_jsonl(path)
    opens = [t.transitions[0].action for t in trajs if t.transitions]
    good = sum(f'"number": {GOOD_OPENING}}}' in (a if isinstance(a, str) else json.dumps(a)) for a in opens)
    return good / max(1, len(opens))


def report(runs: list[dict[str, SeedRun]]) -> tuple[str, list[Gap]]:
    """The table of every evaluation, a line per seed and arm, and RL minus control."""
    rows = []
    for arms in runs:
        for arm, run in arms.items():
            for step, rate in run.curve:
                low, high = wilson(rate, run.episodes)
                rows.append([run.seed, arm, step, f"{rate:.1%}", f"[{low:.1%}, {high:.1%}]"])
    lines = [table(["seed", "arm", "step", "held-out success", "95% interval"], rows), ""]
    gaps = []
    for arms in runs:
        for arm, run in arms.items():
            first, last = run.good_openings
            lines.append(
                f"seed {run.seed} {arm}: {run.curve[0][1]:.1%} -> {run.curve[-1][1]:.1%} ({run.rise * 100:+.1f} "
                f"points); training episodes opening at {GOOD_OPENING}: {first:.0%} -> {last:.0%}; {run.seconds:.0f} s"
            )
        g = gap(arms["rl"], arms["control"])
        gaps.append(g)
        lines.append(
            f"seed {g.seed}: RL minus control {g.value * 100:+.1f} points [{g.low * 100:+.1f}, {g.high * 100:+.1f}] "
            f"(paired over {g.tasks} held-out tasks)"
        )
    values = [g.value for g in gaps]
    mean = statistics.mean(values)
    met = mean >= MEAN_BAR and min(values) >= EACH_BAR
    lines.append(
        f"RL minus control: mean {mean * 100:+.1f} points (bar +{MEAN_BAR * 100:.0f}), smallest "
        f"{min(values) * 100:+.1f} (bar +{EACH_BAR * 100:.0f}), {runs[0]['rl'].episodes} held-out episodes per "
        f"evaluation: {'met' if met else 'NOT met'}"
    )
    return "\n".join(lines), gaps


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
    print("\n" + report(runs)[0])


if __name__ == "__main__":
    main()
