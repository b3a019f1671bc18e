#!/usr/bin/env bash
# The GPU checks as one prepared command, for a machine with one NVIDIA GPU, no network,
# and this repository copied there without a venv or an install. Its python3 is expected
# to hold torch and transformers (and pytest); what agentenv needs beyond them and such
# an image may lack (pydantic, gymnasium and their own needs) travels as wheels:
#
#   bash bench/gpu_check.sh --fetch-wheels   # where PyPI is reachable: those wheels, for CPython 3.12
#                                            # on x86-64 Linux, into .whl/ (git ignores it locally)
#   bash bench/gpu_check.sh                  # on the GPU machine, .whl/ copied along: 407 s on an H200
#   bash bench/gpu_check.sh --smoke          # anywhere: the same steps at smoke sizes on the CPU
#
# Steps, each under its own timeout so that the whole stays under 10 minutes: the GPU
# (nvidia-smi), bench/train_gpu.py (1 warm-up + 3 measured steps), bench/gpu_e2e.py (its
# defaults) and the CUDA test of tests/trainers/test_gpu_scripts.py (when pytest is
# there). What each prints, and the scripts' JSON figures, go to $OUT (default
# ./gpu_out): gpu.txt, train_gpu.txt, train_gpu.json, gpu_e2e.txt, gpu_e2e.json,
# pytest.txt. Every step runs even when one before it failed; the exit status is 0
# when all passed, 1 when one failed, 2 when a package is missing (named).
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELS=.whl
# What agentenv imports that a CUDA image with torch and transformers may lack, and
# what those need in turn (at the versions of the local venv at --fetch-wheels).
WHEEL_PACKAGES=(pydantic pydantic-core annotated-types typing-inspection typing-extensions gymnasium farama-notifications)
# The modules the scripts import, checked before anything runs.
MODULES=(torch transformers tokenizers jinja2 numpy yaml httpx pydantic gymnasium)
TRAIN_GPU_TIMEOUT_S=180
GPU_E2E_TIMEOUT_S=270
PYTEST_TIMEOUT_S=90

if [ "${1:-}" = "--fetch-wheels" ]; then
    PY=${PYTHON:-.venv/bin/python}
    mapfile -t pins < <("$PY" -c '
import importlib.metadata as md, sys
print("\n".join(f"{name}=={md.version(name)}" for name in sys.argv[1:]))' "${WHEEL_PACKAGES[@]}") || exit 1
    echo "gpu_check: fetching ${pins[*]} into $WHEELS/"
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$WHEELS" "${pins[@]}" || exit 1
    exclude=$(git rev-parse --git-path info/exclude)
    grep -qxF "/$WHEELS/" "$exclude" 2>/dev/null || echo "/$WHEELS/" >>"$exclude"
    ls -1 "$WHEELS"
    exit 0
fi

PY=${PYTHON:-python3}
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
TRAIN_GPU_SIZE=(--warmup 1 --steps 3) # a first reading, leaving gpu_e2e.py its time
GPU_E2E_SIZE=()
if [ "${1:-}" = "--smoke" ]; then
    TRAIN_GPU_SIZE=(--smoke --device cpu)
    GPU_E2E_SIZE=(--smoke --device cpu)
elif [ $# -gt 0 ]; then
    echo "gpu_check: unknown argument $1; expected --fetch-wheels, --smoke or nothing" >&2
    exit 2
fi

missing() {
    "$PY" -c '
import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))' "${MODULES[@]}"
}
lacking=$(missing)
if [ -n "$lacking" ] && compgen -G "$WHEELS/*.whl" >/dev/null; then
    site=${TMPDIR:-/tmp}/agentenv-site
    echo "gpu_check: $PY lacks $lacking; installing $WHEELS/*.whl into $site"
    "$PY" -m pip install -q --root-user-action=ignore --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$site" "$WHEELS"/*.whl || exit 2
    export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
    lacking=$(missing)
fi
if [ -n "$lacking" ]; then
    echo "gpu_check: $PY lacks the Python packages: $lacking. Install them; without network, pydantic and" \
        "gymnasium travel as wheels: 'bash bench/gpu_check.sh --fetch-wheels' where PyPI is reachable, then" \
        "bring $WHEELS/ along." >&2
    exit 2
fi

failed=()
step() { # step NAME TIMEOUT_S COMMAND...: run it, its output to the screen and $OUT/NAME.txt
    local name=$1 limit=$2
    shift 2
    echo
    echo "== $name (timeout ${limit} s): $*"
    local start=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.txt"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $((SECONDS - start)) s$([ "$rc" = 124 ] && echo ' (timed out)')"
    [ "$rc" = 0 ] || failed+=("$name")
}

{
    date -u
    "$PY" -c 'import sys, torch, transformers
print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}")
print("torch sees:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device")'
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi -L
        nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.max.sm,power.limit --format=csv
    else
        echo "no nvidia-smi on this machine"
    fi
} 2>&1 | tee "$OUT/gpu.txt"

step train_gpu "$TRAIN_GPU_TIMEOUT_S" "$PY" bench/train_gpu.py "${TRAIN_GPU_SIZE[@]}" --out "$OUT/train_gpu.json"
step gpu_e2e "$GPU_E2E_TIMEOUT_S" "$PY" bench/gpu_e2e.py "${GPU_E2E_SIZE[@]}" --out "$OUT/gpu_e2e.json"
if "$PY" -c 'import pytest' 2>/dev/null; then
    # No conftest: the root one imports the test envs, which this test does not need.
    step pytest "$PYTEST_TIMEOUT_S" "$PY" -m pytest -q --noconftest -p no:cacheprovider \
        tests/trainers/test_gpu_scripts.py -k cuda
else
    echo "no pytest for $PY: the CUDA test is not run" | tee "$OUT/pytest.txt"
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu_check: failed: ${failed[*]} (outputs in $OUT/)"
    exit 1
fi
echo "gpu_check: all steps passed in $SECONDS s (outputs in $OUT/)"
