"""A linear layer's float32 products on the CPU: MKL (PyTorch's `F.linear`) vs oneDNN
(`agentenv.trainers.gemm`, which the trainer routes its model's layers through), in one
process.

    .venv/bin/python bench/cpu_gemm.py [--repeats 30] [--shapes 150]

For the layer shapes of the benches' Qwen2 (hidden 256, MLP 1024): a training
micro-batch's 1008 rows (16 completions of 63 tokens) and a decoding step's 64 rows.
Each figure is the median time of the forward product alone and of forward plus
backward (the input's and the weight's gradients), as GFLOP/s, the two backends
alternating so drift hits both alike; the CPU's model name says whose MKL path ran.

With ``--shapes N``: memory instead. oneDNN makes and caches a kernel per shape of a
product, and a multi-turn run's products change shape every turn. Each backend, in a
fresh process, runs one layer forward and backward for N different row counts; the
figure is the growth of the process's resident memory, for MKL, for oneDNN with its
default caches (1024 kernels each) and with agentenv's (`gemm.CACHED_KERNELS`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
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
    p.add_argument("--shapes", type=int, default=0, help="measure memory over this many row counts instead")
    p.add_argument("--child", choices=["mkl", "onednn"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(growth(args.child, args.shapes))
        return
    if args.shapes:
        memory(args.shapes)
        return
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


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def growth(backend: str, shapes: int) -> float:
    """In this process: resident memory growth over ``shapes`` row counts of one layer."""
    import_agentenv()
    import torch
    import torch.nn.functional as F

    from agentenv.trainers import gemm

    fn = gemm.linear if backend == "onednn" else F.linear
    w = torch.randn(1024, 256, requires_grad=True)
    fn(torch.randn(8, 256), w).sum().backward()  # the libraries' own start-up, not counted
    start = rss_mib()
    for rows in range(200, 200 + 7 * shapes, 7):
        x = torch.randn(rows, 256, requires_grad=True)
        fn(x, w).sum().backward()
    return rss_mib() - start


def memory(shapes: int) -> None:
    print(header(f"bench/cpu_gemm.py --shapes {shapes}: memory over a layer's products of {shapes} row counts"))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from agentenv.trainers.gemm import CACHED_KERNELS

    caches = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
    runs = [
        ("MKL", "mkl", {}),
        ("oneDNN, its default caches (1024 kernels)", "onednn", dict.fromkeys(caches, "1024")),
        (f"oneDNN, agentenv's caches ({CACHED_KERNELS} kernels)", "onednn", {}),
    ]
    rows = []
    for label, backend, env in runs:
        clean = {k: v for k, v in os.environ.items() if k not in caches}
        cmd = [sys.executable, __file__, "--child", backend, "--shapes", str(shapes)]
        out = subprocess.run(cmd, env={**clean, **env}, capture_output=True, text=True, check=True).stdout
        rows.append([label, f"{float(out.split()[-1]):.1f}"])
    print(table(["backend", "resident memory growth (MiB)"], rows))


if __name__ == "__main__":
    main()
