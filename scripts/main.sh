#!/usr/bin/env bash
# Set up (idempotent, see setup.sh), then the main job: train a model with GRPO.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Train the tiny model on the CPU: a supervised warm start, then GRPO; prints the
# learning curve and leaves runs/tiny (metrics.jsonl, checkpoints/, final/).
# Extra arguments go to `agentenv train`, e.g. --model PATH for a real model.
exec .venv/bin/agentenv train examples/tiny.toml "$@"
