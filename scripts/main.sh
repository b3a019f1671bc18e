#!/usr/bin/env bash
# Set up (idempotent, see setup.sh), then the main job: multi-turn GRPO.
#
#   bash scripts/main.sh                 the learning demonstration: tiny Qwen2 on the CPU, examples/tiny.toml
#   bash scripts/main.sh --model PATH    a real model (local path or hub id) on the GPU, examples/gpu.toml
#
# Either prints a progress line per step and the learning curve at the end, and leaves
# the run directory (metrics.jsonl, trajectories/, checkpoints/, final/). Rerunning the
# same command resumes from the last checkpoint. Other arguments go to `agentenv train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
config=examples/tiny.toml
for arg in "$@"; do
    case "$arg" in --model|--model=*) config=examples/gpu.toml ;; esac
done
if [ "$config" = examples/tiny.toml ]; then
    echo "main job: the learning demonstration (examples/tiny.toml), about 4 minutes on an idle 2-core machine:"
    echo "a supervised warm start, then 50 GRPO steps; held-out success is printed every 10 steps."
fi
exec .venv/bin/agentenv train "$config" "$@"
