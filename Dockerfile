# agentenv's own image: the framework and its `agentenv` command, with the extras
# that run its environments (EXTRAS, default sandbox,services,browser: the docker
# SDK for Docker sandboxes, the tool-API env's HTTP services, Playwright) and
# Debian's chromium for the browser env. Training is left out: torch alone is GBs
# (a CUDA build more); add it with --build-arg EXTRAS=sandbox,services,browser,train.
#
# With a registry and a package index (the default base is pulled, pip reads PyPI):
#     docker build -t agentenv:latest .
# Without them (this project's machines): scripts/build_image.sh builds it on the
# debootstrapped agentenv-base:bookworm, with the Python packages fetched on the
# host (pip wheel) into build/image-wheels/, which this build installs with --no-index.
# Debian packages come from the apt mirror the base is configured with, either way.
#
# Run (README, "Run agentenv in a container"):
#     docker run --rm agentenv:latest eval arithmetic-v0 --policy scripted --episodes 5
# Docker sandboxes (code-v0) are started on the host's engine through its socket,
# mounted with -v /var/run/docker.sock:/var/run/docker.sock: that makes the
# container root on the host; the README says what it means.
#
# Plain Dockerfile syntax, so the legacy builder (docker.io 20.10, docker-py) builds it.
ARG BASE=python:3.11-slim

# -- build: a virtual environment with agentenv[EXTRAS], from /src ----------------------
FROM ${BASE} AS build
ARG EXTRAS=sandbox,services,browser
COPY . /src
# With wheels in build/image-wheels (scripts/build_image.sh): from them only, pip
# included (Debian's python3 has no ensurepip). Without: pip from the index.
RUN set -eu; \
    wheels=/src/build/image-wheels; \
    if ls "$wheels"/pip-*.whl >/dev/null 2>&1; then \
        python3 -m venv --without-pip /opt/agentenv; \
        pip_wheel=$(ls "$wheels"/pip-*.whl | head -n 1); \
        /opt/agentenv/bin/python "$pip_wheel/pip" install --no-cache-dir --no-index --find-links "$wheels" \
            pip "/src[$EXTRAS]"; \
    else \
        python3 -m venv /opt/agentenv; \
        /opt/agentenv/bin/pip install --no-cache-dir "/src[$EXTRAS]"; \
    fi; \
    /opt/agentenv/bin/agentenv --help >/dev/null

# -- the image: the base, chromium, the environment ------------------------------------
FROM ${BASE}
ARG APT_PACKAGES=chromium
RUN set -eu; \
    if [ -n "$APT_PACKAGES" ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $APT_PACKAGES; \
        rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb; \
    fi; \
    if ! getent passwd 1000 >/dev/null; then \
        echo 'agentenv:x:1000:1000:agentenv:/home/agentenv:/bin/sh' >>/etc/passwd; \
        echo 'agentenv:x:1000:' >>/etc/group; \
    fi; \
    mkdir -p /home/agentenv /work; \
    chown 1000:1000 /home/agentenv /work
COPY --from=build /opt/agentenv /opt/agentenv

ENV PATH=/opt/agentenv/bin:$PATH LANG=C.UTF-8 PYTHONUNBUFFERED=1 HOME=/home/agentenv
# Not root: runs/ and anything else written lands in /work (mount a host folder there).
USER 1000:1000
WORKDIR /work
ENTRYPOINT ["agentenv"]
CMD ["--help"]
