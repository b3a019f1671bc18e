#!/usr/bin/env bash
# Lint, format and types: ruff (lint + format check) over the tree, mypy over the
# agentenv package (its links reach envs/, sandboxes/ and trainers/). Run by .ci/run
# before the tests; `bash scripts/check.sh --fix` applies ruff's safe fixes and formats.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
if [ "${1:-}" = "--fix" ]; then
    "$PY" -m ruff check --fix .
    "$PY" -m ruff format .
fi
echo "check: ruff check"
"$PY" -m ruff check .
echo "check: ruff format --check"
"$PY" -m ruff format --check .
echo "check: mypy"
"$PY" -m mypy
echo "check: all passed"
