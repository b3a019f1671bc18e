#!/usr/bin/env bash
# TRL in an environment of its own (.venv-bench), for bench/train_vs_trl.py only: the
# project never depends on it. torch and transformers at the versions of .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
versions=$(.venv/bin/python -c "import torch, transformers; print(torch.__version__.split('+')[0], transformers.__version__)")
read -r torch_version transformers_version <<<"$versions"
python3.11 -m venv .venv-bench
.venv-bench/bin/pip install -q "torch==$torch_version" "transformers==$transformers_version" "trl==1.16.0"
.venv-bench/bin/python -c "import trl; print('TRL', trl.__version__, 'in .venv-bench')"
