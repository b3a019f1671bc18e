"""A linear layer's float32 products on the CPU: MKL (PyTorch's `F.linear`) vs oneDNN
(`agentenv.trainers.gemm`, which the trainer routes its model's layers through), in one
process.

    .venv/bin/python bench/cpu_gemm.py [--repeats 30]

For the layer shapes of the benches' Qwen2 (hidden 256, MLP 1024): a training
micro-batch's 1008 rows (16 completions of 63 tokens) and a decoding step's 64 rows.
Each figure is the median time of the forward product alone and of forward plus
backward (the input's and the weight's gradients), as GFLOP/s, the two backends
alternating so drift hits both alike; the CPU's model name says whose MKL path ran.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, import_agentenv, table

SHAPES = [  # (rows, in, out): the layer
    (1008, 256, 1024),  # MLP gate or up, training
    (1008, 1024, 256),  # MLP down, training
    (1008, 256, 256),  # attention output, training
    (64, 256, 2048),  # gate and up fused, decoding
    (64, 1024, 256),  # MLP down, decoding
]


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown")
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=30, help="timed runs per backend and shape (default 30)")
    args = p.parse_args(argv)
    import_agentenv()
    import torch
    import torch.nn.functional as F

    from agentenv.trainers import gemm

    print(header("bench/cpu_gemm.py: float32 linear layers on the CPU, MKL vs oneDNN"))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU {cpu_name()}")
    if not gemm.available():
        print("this PyTorch has no oneDNN linear kernel: the trainer keeps MKL's")
        return
    backends: dict[str, Callable[..., torch.Tensor]] = {"mkl": F.linear, "onednn": gemm.linear}
    rows = []
    for m, k, n in SHAPES:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(m, k, generator=g, requires_grad=True)
        w = torch.randn(n, k, generator=g, requires_grad=True)
        upstream = torch.randn(m, n, generator=g)
        times: dict[tuple[str, str], list[float]] = {}
        for i in range(args.repeats + 3):
            for name in backends if i % 2 else reversed(list(backends)):
                fn = backends[name]
                with torch.no_grad():
                    start = time.perf_counter()
                    fn(x, w)
                    forward = time.perf_counter() - start
                start = time.perf_counter()
                torch.autograd.grad(fn(x, w), [x, w], upstream)
                both = time.perf_counter() - start
                if i >= 3:  # warm-up
                    times.setdefault((name, "fwd"), []).append(forward)
                    times.setdefault((name, "fwd+bwd"), []).append(both)
        flops = 2 * m * k * n
        rate = {key: (flops * (1 if key[1] == "fwd" else 3)) / statistics.median(v) / 1e9 for key, v in times.items()}
        rows.append(
            [
                f"{m} x {k} -> {n}",
                f"{rate['mkl', 'fwd']:.0f}",
                f"{rate['onednn', 'fwd']:.0f}",
                f"{rate['onednn', 'fwd'] / rate['mkl', 'fwd']:.2f}x",
                f"{rate['mkl', 'fwd+bwd']:.0f}",
                f"{rate['onednn', 'fwd+bwd']:.0f}",
                f"{rate['onednn', 'fwd+bwd'] / rate['mkl', 'fwd+bwd']:.2f}x",
            ]
        )
    print(
        table(
            ["rows x in -> out", "fwd MKL", "fwd oneDNN", "ratio", "fwd+bwd MKL", "fwd+bwd oneDNN", "ratio"],
            rows,
        )
    )
    print("GFLOP/s, median of", args.repeats, "runs each")


if __name__ == "__main__":
    main()
