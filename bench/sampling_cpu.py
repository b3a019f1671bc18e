"""Drawing one token per row on the CPU: agentenv's sampler (`generation.draw`, the
inverse of each row's running sum) vs ``torch.multinomial``, in one process.

    .venv/bin/python bench/sampling_cpu.py [--rows 64] [--repeats 15]

Each figure is the median time of one draw of ``--rows`` tokens from softmax
probabilities over the vocabulary, after warm-up; the two samplers alternate.
Vocabularies: the benches' tiny tokenizer (512), a Llama-2-sized one (32000) and
Qwen2.5's (151936). A decoding step draws once, so this is added to every step.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, import_agentenv, table

VOCABS = (512, 32000, 151936)


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=64, help="rows drawn at once (default 64: the benches' batch)")
    p.add_argument("--repeats", type=int, default=15, help="timed draws per sampler and vocabulary (default 15)")
    args = p.parse_args(argv)
    import_agentenv()
    import torch

    from agentenv.trainers.generation import draw

    print(header("bench/sampling_cpu.py: one token per row on the CPU"))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rows} rows")
    rows = []
    for vocab in VOCABS:
        probs = torch.softmax(torch.randn(args.rows, vocab, generator=torch.Generator().manual_seed(0)), -1)
        g = torch.Generator().manual_seed(1)
        samplers = {
            "agentenv": functools.partial(draw, probs, g),
            "multinomial": functools.partial(torch.multinomial, probs, 1, generator=g),
        }
        for fn in samplers.values():  # warm-up
            fn()
        times: dict[str, list[float]] = {name: [] for name in samplers}
        for _ in range(3):  # alternate so drift hits both alike
            for name, fn in samplers.items():
                times[name].append(median_ms(fn, args.repeats))
        ours, theirs = statistics.median(times["agentenv"]), statistics.median(times["multinomial"])
        rows.append([vocab, f"{ours:.3f}", f"{theirs:.3f}", f"{theirs / ours:.1f}x"])
    print(table(["vocabulary", "agentenv (ms)", "torch.multinomial (ms)", "speed-up"], rows))


if __name__ == "__main__":
    main()
