#!/usr/bin/env bash
# Set up (idempotent, see setup.sh) and run the test suite; arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
