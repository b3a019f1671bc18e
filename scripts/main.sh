#!/usr/bin/env bash
# Set up (idempotent, see setup.sh), then the main job: evaluate the scripted
# oracle on each built-in env, trajectories to runs/<env>.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
for env_id in arithmetic-v0 guess-number-v0; do
    .venv/bin/agentenv eval "$env_id" --policy scripted --episodes 100 --out "runs/$env_id.jsonl"
done
