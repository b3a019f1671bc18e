#!/usr/bin/env bash
# Build the Docker sandbox image agentenv-sandbox:latest without a registry (arguments
# go to `agentenv sandbox build`, e.g. --force, or --base python:3.11-slim with one).
#
# With no --base and no agentenv-base:bookworm image yet, this runs
#     debootstrap --variant=minbase --include=python3 bookworm ROOTFS MIRROR
# (MIRROR: the Debian mirror in /etc/apt/sources.list{,.d}), imports ROOTFS as
# agentenv-base:bookworm (tar | docker import), then builds
# sandboxes/image/Dockerfile with --build-arg BASE=agentenv-base:bookworm. The same
# Dockerfile builds unchanged on python:3.11-slim for a user with a registry.
# Skipped when the image exists and its label matches the hash of the files it is
# built from: the Dockerfile, runner.py and _pipes.py (sandboxes/build.py has the
# logic; this script only makes sure it can run). Needs root for debootstrap, the apt
# mirror to answer, and a running engine (scripts/dockerd.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/agentenv ] || bash scripts/setup.sh
bash scripts/dockerd.sh
exec .venv/bin/agentenv sandbox build "$@"
