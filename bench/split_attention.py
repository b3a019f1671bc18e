"""The update's attention after a shared prompt on the CPU: one flash pass with the full
``[rows, 1, own, prompt + own]`` mask vs the prompt and each row's own keys apart
(`model.prefix_then_causal_mask`), forward and backward, in one process.

    .venv/bin/python bench/split_attention.py [--rows 16] [--prompt 165] [--repeats 9]

Four query heads over two key/value heads of 64 dims, as the trainer benches' models;
the prompt has a little padding. Each figure is the median of ``--repeats`` forward and
backward passes of one layer's attention, the two forms alternating. Where the split
form wins is where `logprobs.SPLIT_ATTENTION_MIN_REST` puts its threshold.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, import_agentenv, table

OWN = (64, 128, 256, 384, 512, 640, 768)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=16, help="rows in the pass (default 16: a micro-batch)")
    p.add_argument("--prompt", type=int, default=165, help="prompt positions before each row's own (default 165)")
    p.add_argument("--repeats", type=int, default=9, help="timed passes per form and length (default 9)")
    args = p.parse_args(argv)
    import_agentenv()
    import torch

    from agentenv.trainers.logprobs import SPLIT_ATTENTION_MIN_REST
    from agentenv.trainers.model import _grouped_sdpa, prefix_then_causal_mask

    module = torch.nn.Module()
    module.num_key_value_groups = 2
    print(header("bench/split_attention.py: attention after a shared prompt, one masked pass vs split"))
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads; {args.rows} rows, a {args.prompt}-position prompt")
    rows_out = []
    g = torch.Generator().manual_seed(0)
    for own in OWN:
        b, width = args.rows, args.prompt
        query = torch.randn(b, 4, own, 64, generator=g, requires_grad=True)
        key = torch.randn(b, 2, width + own, 64, generator=g, requires_grad=True)
        value = torch.randn(b, 2, width + own, 64, generator=g, requires_grad=True)
        prefix = torch.ones(b, width, dtype=torch.bool)
        prefix[:, width // 2 : width // 2 + 3] = False
        causal = torch.ones(own, own, dtype=torch.bool).tril()
        full = torch.cat([prefix[:, None, :].expand(b, own, width), causal.expand(b, own, own)], -1)[:, None]
        masks = {"masked": full, "split": prefix_then_causal_mask(prefix, torch.float32)}
        upstream = torch.randn(b, own, 4, 64, generator=g)
        times: dict[str, list[float]] = {name: [] for name in masks}
        for i in range(args.repeats + 1):
            for name, mask in masks.items():
                start = time.perf_counter()
                out, _ = _grouped_sdpa(module, query, key, value, mask, scaling=0.125)
                (out * upstream).sum().backward()
                if i:  # the first is warm-up
                    times[name].append(time.perf_counter() - start)
        one, split = (statistics.median(times[n]) * 1e3 for n in ("masked", "split"))
        rows_out.append([own, f"{one:.1f}", f"{split:.1f}", f"{one / split:.2f}x"])
    print(table(["own positions", "one masked pass (ms)", "split (ms)", "split's speed-up"], rows_out))
    print(f"the trainer splits from {SPLIT_ATTENTION_MIN_REST} own positions on")


if __name__ == "__main__":
    main()
