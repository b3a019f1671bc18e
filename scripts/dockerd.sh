#!/usr/bin/env bash
# Make sure a Docker engine answers: return at once if `docker info` does, else
# start dockerd in the background (CI starts on a clean machine with no service
# manager) and wait up to DOCKERD_WAIT_S seconds (default 30) for it.
#
# Idempotent. Needs root to start the engine. The log goes to DOCKERD_LOG
# (default /var/log/dockerd.log); its tail is printed when the engine fails to come up.
set -euo pipefail

WAIT_S=${DOCKERD_WAIT_S:-30}
LOG=${DOCKERD_LOG:-/var/log/dockerd.log}

log() { printf 'dockerd: %s\n' "$*"; }
answers() { docker info >/dev/null 2>&1; }

if ! command -v docker >/dev/null 2>&1; then
    echo "dockerd: no docker client on PATH; run scripts/setup.sh (installs docker.io)" >&2
    exit 1
fi
if answers; then
    log "engine already answers"
    exit 0
fi
if [ -n "${DOCKER_HOST:-}" ]; then
    # A remote or non-default engine is not ours to start.
    echo "dockerd: DOCKER_HOST=$DOCKER_HOST does not answer; start that engine or unset DOCKER_HOST" >&2
    exit 1
fi
if ! command -v dockerd >/dev/null 2>&1; then
    echo "dockerd: no dockerd on PATH; run scripts/setup.sh (installs docker.io)" >&2
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "dockerd: the engine is not running and starting it needs root (sudo $0)" >&2
    exit 1
fi

log "starting dockerd (log: $LOG)"
# setsid: the engine outlives this script and its terminal; its containers too.
setsid dockerd >"$LOG" 2>&1 </dev/null &
for ((i = 0; i < WAIT_S * 4; i++)); do
    if answers; then
        log "engine answers after ~$((i / 4)) s"
        exit 0
    fi
    sleep 0.25
done
echo "dockerd: the engine did not answer within ${WAIT_S} s; last lines of $LOG:" >&2
tail -n 20 "$LOG" >&2 || true
exit 1
