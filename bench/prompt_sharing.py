"""The update's forward and backward pass with prompts shared three ways, in one process.

    .venv/bin/python bench/prompt_sharing.py            # ~3 min on an idle 2-core machine
    .venv/bin/python bench/prompt_sharing.py --opening 128 --hidden 256 --layers 4

`policy_logprobs` then a backward pass over one micro-batch, as the trainer runs
it, on a random-init Qwen2: ``--prompts`` distinct prompts that open with the same
``--opening`` ids (a system prompt, a tool list) and go on with ``--own`` ids of
their own, ``--group`` rows each, every row ``--reply`` policy ids after its prompt.

- whole: every row runs its prompt (``share_prompts=False``);
- per prompt: each distinct prompt runs once and its rows read its cache;
- per prompt + opening: the opening runs once for all prompts before that.

Each figure is the median over ``--repeats`` timed passes after one warm-up; the
three alternate so that drift hits each alike. The log-probs and gradients are the
same in all three (tests/trainers/test_logprobs.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, import_agentenv, table


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, default, help_ in (
        ("--opening", 512, "ids every prompt opens with"),
        ("--own", 32, "ids of each prompt's own after the opening"),
        ("--prompts", 2, "distinct prompts in the micro-batch"),
        ("--group", 8, "rows per prompt"),
        ("--reply", 64, "policy ids per row"),
        ("--hidden", 512, "hidden size (heads of 64 dims)"),
        ("--layers", 8, "decoder layers"),
        ("--repeats", 5, "timed passes per way"),
    ):
        p.add_argument(flag, type=int, default=default, help=f"{help_} (default {default})")
    args = p.parse_args(argv)
    import_agentenv()
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentenv.trainers import generation
    from agentenv.trainers.batch import Example, collate
    from agentenv.trainers.logprobs import policy_logprobs
    from agentenv.trainers.model import lean_activations

    vocab = 1024
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=max(1, args.hidden // 128),
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).train()
    lean_activations(model)  # as the trainer has it on the CPU
    g = torch.Generator().manual_seed(0)
    opening = torch.randint(1, vocab, (args.opening,), generator=g).tolist()
    examples = []
    for _ in range(args.prompts):
        prompt = opening + torch.randint(1, vocab, (args.own,), generator=g).tolist()
        for _ in range(args.group):
            ids = prompt + torch.randint(1, vocab, (args.reply,), generator=g).tolist()
            mask = [0] * len(prompt) + [1] * args.reply
            examples.append(Example(ids, mask, [0.0] * len(ids), [1.0] * len(ids), [], False))
    batch = collate(examples, pad_id=0)
    ways = {  # name: (share_prompts, shortest opening run once)
        "whole": (False, generation.COMMON_MIN_TOKENS),
        "per prompt": (True, 1 << 30),
        "per prompt + opening": (True, generation.COMMON_MIN_TOKENS),
    }

    def one_pass(share: bool, shortest: int) -> float:
        generation.COMMON_MIN_TOKENS = shortest
        start = time.perf_counter()
        logp, _ = policy_logprobs(model, batch, share_prompts=share)
        (logp * batch.mask).sum().backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    rows = args.prompts * args.group
    print(
        f"{rows} rows of {len(examples[0].ids)} ids ({args.opening} opening + {args.own} own + {args.reply} reply), "
        f"{args.prompts} distinct prompts; {3 * (args.repeats + 1)} passes",
        flush=True,
    )
    times: dict[str, list[float]] = {name: [] for name in ways}
    for r in range(args.repeats + 1):
        for name, way in ways.items() if r % 2 == 0 else reversed(ways.items()):
            t = one_pass(*way)
            if r:
                times[name].append(t)
        print(f"  pass {r + 1}/{args.repeats + 1} done", flush=True)
    fed = {
        "whole": rows * (args.opening + args.own + args.reply),
        "per prompt": args.prompts * (args.opening + args.own) + rows * args.reply,
        "per prompt + opening": args.opening + args.prompts * args.own + rows * args.reply,
    }
    print("\n" + header("bench/prompt_sharing.py: update pass (forward + backward), prompts shared three ways"))
    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"Qwen2 random init, {params:.1f} M params, hidden {args.hidden}, {args.layers} layers")
    base = statistics.median(times["whole"])
    out = []
    for name in ways:
        m = statistics.median(times[name])
        out.append((name, f"{fed[name]}", f"{m:.3f}", f"{m / base:.2f}x"))
    print(table(["prompts run", "ids fed", "pass (s)", "over whole"], out))


if __name__ == "__main__":
    main()
