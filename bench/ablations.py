"""Which part of the recipe does the work? Ablations on the learning demonstration.

The demonstration of `learn_cpu.py` (`examples/tiny.toml`: warm start, then 50 GRPO
steps on ``guess-number-opening-v0``) run once per condition and seed, with the same
config and the same number of steps except for the one setting a condition names:

- ``task-only``: the demonstration as it is, no step term, A = A_task (plain GRPO),
  uniform sampling;
- ``hybrid (gigpo)``: A = A_task + A_step with GiGPO's step term (each return minus the
  mean of the returns from the same state, in reward units: the trainer's default);
- ``hybrid (gigpo, std)``: the same step term divided by its group's std as well
  (``step_advantage_std``, GiGPO's F_norm = std);
- ``hybrid (per-turn)``: the step term compared among the same turn index instead;
- ``miner``: ``task-only`` with the failure miner choosing the tasks instead of
  uniform sampling.

Per condition and seed: held-out success before RL and at the end (256 fixed-seed
episodes at T=1, 95% Wilson intervals), the rise, and the mean share of informative
groups over the training steps (groups whose task rewards were not all equal:
1 - ``zero_variance_frac``; the groups the task advantage learns from). Then the mean
over seeds per condition.

The warm start depends on none of these settings, so it runs once per seed: every
condition of that seed starts RL from a copy of the same warm-started weights, with
the global random state as the warm start left it: the run it would have been from
scratch (checked: 150 warm-start steps, then 2 miner steps, gave the same metrics to
the last digit both ways; ``--no-share`` repeats the warm start per condition). Step 0
is therefore the same figure for every condition of a seed.

    .venv/bin/python bench/ablations.py        # 5 conditions x 3 seeds, ~37 min on a 2-core machine
    .venv/bin/python bench/ablations.py --seeds 0 --conditions task-only miner --set steps=20

One evaluation of 256 episodes is about ±6 points (95%), and seeds differ by several
points more: differences of a few points between conditions are noise.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, table
from learn_cpu import demo_config, parse_sets, wilson

from agentenv.trainers import GRPOConfig, GRPOTrainer

# From CI's runs of the demonstration (1,000 supervised steps; 50 RL steps with 6
# evaluations of 256 episodes; 338-375 s a seed on 2 cores): for the time printed up front.
WARM_START_S, RL_S = 250.0, 105.0


@dataclass(frozen=True)
class Condition:
    """One arm of the ablation: the two ablated settings, both always named."""

    name: str
    step_advantage: str
    miner: bool
    step_std: bool = False

    @property
    def overrides(self) -> dict[str, Any]:
        return {
            "step_advantage": self.step_advantage,
            "step_advantage_std": self.step_std,
            "miner": {} if self.miner else None,
        }


CONDITIONS = {
    c.name: c
    for c in (
        Condition("task-only", "none", miner=False),
        Condition("hybrid (gigpo)", "gigpo", miner=False),
        Condition("hybrid (gigpo, std)", "gigpo", miner=False, step_std=True),
        Condition("hybrid (per-turn)", "per_turn", miner=False),
        Condition("miner", "none", miner=True),
    )
}
ABLATED = ("step_advantage", "step_advantage_std", "miner")


@dataclass
class Run:
    condition: str
    seed: int
    episodes: int  # per evaluation
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, held-out success)
    informative: list[float] = field(default_factory=list)  # per RL step
    seconds: float = 0.0  # RL alone when the warm start is shared

    @property
    def start(self) -> float:
        return self.curve[0][1]

    @property
    def end(self) -> float:
        return self.curve[-1][1]

    @property
    def rise(self) -> float:
        return self.end - self.start

    @property
    def informative_share(self) -> float:
        return statistics.mean(self.informative)


@dataclass
class WarmStart:
    """A seed's warm-started weights and the global random state right after them."""

    model: torch.nn.Module
    tokenizer: Any
    rng: dict[str, Any]
    seconds: float
    output_dir: Path


def condition_config(condition: Condition, seed: int, output_dir: Path, overrides: dict[str, Any]) -> GRPOConfig:
    """The demonstration's config for ``seed`` with the user's ``overrides`` and then the condition's."""
    clash = sorted(set(overrides) & set(ABLATED))
    if clash:
        raise ValueError(f"--set {', '.join(clash)}: the conditions set these; choose conditions with --conditions")
    return demo_config(seed, output_dir, {**overrides, **condition.overrides})


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["random"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


def warm_start(seed: int, output_dir: Path, overrides: dict[str, Any]) -> WarmStart:
    """The seed's warm start alone, as `GRPOTrainer.train` runs it before RL."""
    config = demo_config(seed, output_dir, overrides)
    start = time.perf_counter()
    trainer = GRPOTrainer(config=config)
    output_dir.mkdir(parents=True, exist_ok=True)
    trainer.warm_start()  # the public warm start: the oracle's episodes, then config.sft_steps steps
    return WarmStart(trainer.model, trainer.tokenizer, _rng_state(), time.perf_counter() - start, output_dir)


def run_condition(
    condition: Condition, seed: int, output_dir: Path, overrides: dict[str, Any], warm: WarmStart | None = None
) -> Run:
    """One condition and seed: from scratch, or RL from a copy of ``warm`` (the same run)."""
    config = condition_config(condition, seed, output_dir, overrides)
    start = time.perf_counter()
    if warm is None:
        trainer = GRPOTrainer(config=config)
    else:
        print(f"RL from the warm start in {warm.output_dir}, shared by this seed's conditions", flush=True)
        config = config.model_copy(update={"sft_steps": 0})  # config.json says so: it ran elsewhere
        trainer = GRPOTrainer(copy.deepcopy(warm.model), warm.tokenizer, config=config)
        _set_rng_state(warm.rng)
    history = trainer.train()
    run = Run(condition.name, seed, config.eval_episodes, seconds=time.perf_counter() - start)
    run.curve = [(h["step"], h["eval/success_rate"]) for h in history if "eval/success_rate" in h]
    run.informative = [1 - h["zero_variance_frac"] for h in history if "zero_variance_frac" in h]
    return run


def _interval(rate: float, n: int) -> str:
    low, high = wilson(rate, n)
    return f"[{low:.1%}, {high:.1%}]"


def summarise(runs: list[Run]) -> list[dict[str, Any]]:
    """Per condition, in the order run: the means over its seeds, and its smallest rise."""
    rows = []
    for name in dict.fromkeys(r.condition for r in runs):
        mine = [r for r in runs if r.condition == name]
        rows.append(
            {
                "condition": name,
                "seeds": len(mine),
                "mean_rise": statistics.mean(r.rise for r in mine),
                "smallest_rise": min(r.rise for r in mine),
                "mean_start": statistics.mean(r.start for r in mine),
                "mean_end": statistics.mean(r.end for r in mine),
                "mean_informative_share": statistics.mean(r.informative_share for r in mine),
            }
        )
    return rows


def report(runs: list[Run]) -> str:
    rows = [
        [
            r.condition,
            r.seed,
            f"{r.start:.1%}",
            _interval(r.start, r.episodes),
            f"{r.end:.1%}",
            _interval(r.end, r.episodes),
            f"{r.rise * 100:+.1f}",
            f"{r.informative_share:.1%}",
            f"{r.seconds:.0f}",
        ]
        for r in runs
    ]
    steps = runs[0].curve[-1][0]
    lines = [
        table(
            [
                "condition",
                "seed",
                "step 0",
                "95% interval",
                f"step {steps}",
                "95% interval",
                "rise (points)",
                "informative groups",
                "s",
            ],
            rows,
        ),
        "",
    ]
    summary = [
        [
            row["condition"],
            row["seeds"],
            f"{row['mean_rise'] * 100:+.1f}",
            f"{row['smallest_rise'] * 100:+.1f}",
            f"{row['mean_end']:.1%}",
            f"{row['mean_informative_share']:.1%}",
        ]
        for row in summarise(runs)
    ]
    headers = ["condition", "seeds", "mean rise (points)", "smallest rise", "mean final success", "informative groups"]
    lines.append(table(headers, summary))
    lines.append(
        f"\n{runs[0].episodes} held-out episodes per evaluation; informative groups: the mean over the "
        f"{len(runs[0].informative)} RL steps of the share of groups whose task rewards were not all equal; "
        "s: the run's own time (RL alone when the warm start is shared)."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a GRPOConfig field (JSON)")
    parser.add_argument("--no-share", action="store_true", help="repeat the warm start for every condition")
    parser.add_argument("--output-dir", default="runs/bench-ablations")
    parser.add_argument("--out", type=Path, help="write every figure here as JSON")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    overrides = parse_sets(args.set)
    conditions = [CONDITIONS[name] for name in dict.fromkeys(args.conditions)]
    for c in conditions:  # an invalid --set fails now, not after the first warm start
        condition_config(c, args.seeds[0], Path(args.output_dir), overrides)
    share = not args.no_share and demo_config(0, Path(args.output_dir), overrides).sft_steps > 0
    torch.set_num_threads(args.threads)

    print(header("ablations on the learning demonstration: held-out success per condition and seed"))
    n_runs = len(conditions) * len(args.seeds)
    if share:
        expected = len(args.seeds) * (WARM_START_S + len(conditions) * RL_S)
        how = "the warm start once per seed, shared by its conditions"
    else:
        expected = n_runs * (WARM_START_S + RL_S)
        how = "each condition from scratch"
    print(
        f"{len(conditions)} conditions x {len(args.seeds)} seeds = {n_runs} runs, {how}; expected ~{expected / 60:.0f} "
        f"min on an idle 2-core machine at the demonstration's settings (~{(WARM_START_S + RL_S) / 60:.0f} min a run "
        f"from scratch, of which the warm start is ~{WARM_START_S / 60:.0f}); trainer output in {args.output_dir}/\n",
        flush=True,
    )
    runs: list[Run] = []
    began = time.perf_counter()
    for seed in args.seeds:
        root = Path(args.output_dir) / f"seed-{seed}"
        warm = None
        if share:
            root.mkdir(parents=True, exist_ok=True)
            with (root / "warm-start.log").open("w") as log, contextlib.redirect_stdout(log):
                warm = warm_start(seed, root / "warm-start", overrides)
            print(f"seed {seed}: warm start {warm.seconds:.0f} s", flush=True)
        for c in conditions:
            out = root / c.name.replace(" ", "-").replace("(", "").replace(")", "").replace(",", "")
            out.mkdir(parents=True, exist_ok=True)
            with (out / "console.log").open("w") as log, contextlib.redirect_stdout(log):
                run = run_condition(c, seed, out, overrides, warm)
            runs.append(run)
            print(
                f"[{len(runs)}/{n_runs}] seed {seed} {c.name:<19}  {run.start:.1%} -> {run.end:.1%} "
                f"({run.rise * 100:+.1f} points), informative groups {run.informative_share:.1%}, "
                f"{run.seconds:.0f} s (total {time.perf_counter() - began:.0f} s)",
                flush=True,
            )
    print("\n" + report(runs))
    if args.out:
        figures = {
            "conditions": {c.name: c.overrides for c in conditions},
            "overrides": overrides,
            "shared_warm_start": share,
            "runs": [
                {
                    **asdict(r),
                    "start_interval": wilson(r.start, r.episodes),
                    "end_interval": wilson(r.end, r.episodes),
                    "rise": r.rise,
                    "informative_share": r.informative_share,
                }
                for r in runs
            ],
            "summary": summarise(runs),
        }
        args.out.write_text(json.dumps(figures, indent=1))
        print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
