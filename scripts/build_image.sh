#!/usr/bin/env bash
# Build agentenv's own image (the top-level Dockerfile) without a registry and
# without a package index inside the build:
#
#     bash scripts/build_image.sh [--tag agentenv:latest] [--extras sandbox,services,browser] [--base IMAGE]
#
# 1. makes sure the engine answers and the sandbox image is current (`agentenv
#    sandbox build`: the code env's sandboxes run it, and it leaves the Debian base
#    agentenv-base:bookworm, debootstrapped from the host's apt mirror, behind);
# 2. fetches the Python packages on the host: pip wheel of agentenv's dependencies
#    with EXTRAS, plus pip, setuptools and wheel, into build/image-wheels/ (the
#    host's Python must be the base's minor version: both are 3.11 on Debian 12);
# 3. docker build --build-arg BASE=agentenv-base:bookworm (or --base): the build
#    installs from those wheels with --no-index, and chromium from the base's apt mirror.
#
# A rerun with nothing changed is quick: the wheels come from pip's cache and every
# layer from Docker's. With a registry, `docker build -t agentenv:latest .` needs
# none of this. Needs root when the base must be debootstrapped (scripts/dockerd.sh
# likewise when the engine must be started).
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=agentenv:latest
EXTRAS=sandbox,services,browser
BASE=
WHEELS=build/image-wheels

while (($#)); do
    case "$1" in
        --tag) TAG=$2; shift 2 ;;
        --extras) EXTRAS=$2; shift 2 ;;
        --base) BASE=$2; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/{/^set -euo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
        *) echo "build_image: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
log() { printf 'build_image: %s\n' "$*"; }

[ -x .venv/bin/agentenv ] || bash scripts/setup.sh
bash scripts/dockerd.sh
if [ -z "$BASE" ]; then
    .venv/bin/agentenv sandbox build
    if docker image inspect agentenv-base:bookworm >/dev/null 2>&1; then
        BASE=agentenv-base:bookworm
    else
        BASE=python:3.11-slim # `agentenv sandbox build` found no debootstrap: a registry must serve it
    fi
fi

host_py=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
base_py=$(docker run --rm --network none --entrypoint python3 "$BASE" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$host_py" != "$base_py" ]; then
    echo "build_image: the host's Python is $host_py, $BASE's is $base_py: wheels fetched here would not fit." >&2
    echo "build_image: use a base with Python $host_py, or build with a package index: docker build -t $TAG ." >&2
    exit 1
fi

log "fetching wheels for agentenv[$EXTRAS] into $WHEELS"
rm -rf "$WHEELS"
mkdir -p "$WHEELS"
.venv/bin/python -m pip wheel -q --no-build-isolation --wheel-dir "$WHEELS" pip "setuptools>=77" wheel ".[$EXTRAS]"
rm -f "$WHEELS"/agentenv-*.whl # the image builds agentenv from the source it copies

log "docker build -t $TAG on $BASE"
start=$(date +%s)
docker build --build-arg BASE="$BASE" --build-arg EXTRAS="$EXTRAS" -t "$TAG" .
log "built $TAG in $(($(date +%s) - start)) s"
