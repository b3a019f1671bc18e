"""Build the sandbox image, with or without a registry.

    agentenv sandbox build                  # no registry: debootstrap a Debian base if needed
    agentenv sandbox build --base python:3.11-slim   # with a registry

The image is `sandboxes/image/Dockerfile` built on a context of that Dockerfile,
`sandboxes/runner.py` and `sandboxes/_pipes.py` (`_CONTEXT`: every file the image
gets), so the same Dockerfile serves both ways: with a registry the base is
pulled; without one (CI, this project's machines) the base is a Debian bookworm
root filesystem made by ``debootstrap`` from the apt mirror the host already uses
(so the mirror must answer), imported as `DEBOOTSTRAP_BASE`. A build is skipped
when the image exists and its label holds the hash of the same context files.

Left out: pushing images, multi-arch builds, Python packages in the image (derive
your own image ``FROM agentenv-sandbox:latest``; the runner needs nothing else).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from agentenv.sandboxes.base import SandboxInfraError
from agentenv.sandboxes.engine import docker_client

if TYPE_CHECKING:
    import docker

__all__ = [
    "DEBOOTSTRAP_BASE",
    "IMAGE",
    "INPUTS_LABEL",
    "REGISTRY_BASE",
    "apt_mirror",
    "build_image",
    "image_inputs_hash",
    "image_is_current",
]

IMAGE = "agentenv-sandbox:latest"
DEBOOTSTRAP_BASE = "agentenv-base:bookworm"
REGISTRY_BASE = "python:3.11-slim"  # the Dockerfile's default BASE
INPUTS_LABEL = "agentenv.sandbox.inputs"
BASE_LABEL = "agentenv.sandbox.base"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
_HERE = Path(__file__).resolve().parent
# The build context: every file the image gets (the Dockerfile's COPY lines name
# the others), each hashed into the image's label.
_CONTEXT = {
    "Dockerfile": _HERE / "image" / "Dockerfile",
    "runner.py": _HERE / "runner.py",
    "_pipes.py": _HERE / "_pipes.py",
}

Log = Callable[[str], None]


def image_inputs_hash() -> str:
    """A hash of what goes into the image besides its base: every file of the build context."""
    digest = hashlib.sha256()
    for name, path in sorted(_CONTEXT.items()):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def image_is_current(client: docker.DockerClient, image: str = IMAGE, base: str | None = None) -> bool:
    """The image exists, was built from this checkout's context files, and
    (when ``base`` is given) on that base."""
    import docker.errors

    try:
        labels = client.images.get(image).labels or {}
    except docker.errors.ImageNotFound:
        return False
    if labels.get(INPUTS_LABEL) != image_inputs_hash():
        return False
    return base is None or labels.get(BASE_LABEL) == base


def build_image(
    client: docker.DockerClient | None = None,
    *,
    image: str = IMAGE,
    base: str | None = None,
    force: bool = False,
    mirror: str | None = None,
    log: Log = print,
) -> str:
    """Build ``image`` unless it is current; returns its id.

    ``base`` None picks `DEBOOTSTRAP_BASE`, debootstrapping it first when it is absent
    and ``debootstrap`` is installed, else `REGISTRY_BASE` (which needs a registry).
    """
    import docker
    import docker.errors

    client = client or docker_client()
    if not force and image_is_current(client, image, base):
        log(f"{image} is up to date (inputs {image_inputs_hash()}); --force rebuilds it")
        return str(client.images.get(image).id)
    base = base or _pick_base(client, mirror=mirror, log=log)
    log(f"building {image} on {base}")
    with tempfile.TemporaryDirectory(prefix="agentenv-image-") as ctx:
        for name, path in _CONTEXT.items():
            shutil.copyfile(path, Path(ctx) / name)
        try:
            built, _ = client.images.build(
                path=ctx,
                tag=image,
                buildargs={"BASE": base},
                rm=True,
                forcerm=True,
                labels={INPUTS_LABEL: image_inputs_hash(), BASE_LABEL: base},
            )
        except docker.errors.BuildError as e:
            lines = "".join(str(chunk.get("stream") or chunk.get("error") or "") for chunk in e.build_log)
            raise SandboxInfraError(f"building {image} on {base} failed: {e.msg}\n{lines[-2000:]}") from e
        except docker.errors.APIError as e:
            raise SandboxInfraError(f"building {image} on {base} failed: {e.explanation or e}") from e
    log(f"built {image} ({built.short_id})")
    return str(built.id)


def _pick_base(client: docker.DockerClient, *, mirror: str | None, log: Log) -> str:
    import docker.errors

    try:
        client.images.get(DEBOOTSTRAP_BASE)
        return DEBOOTSTRAP_BASE
    except docker.errors.ImageNotFound:
        pass
    if shutil.which("debootstrap") is None:
        log(f"no {DEBOOTSTRAP_BASE} image and no debootstrap: the base {REGISTRY_BASE} must come from a registry")
        return REGISTRY_BASE
    debootstrap_base(client, mirror=mirror or apt_mirror(), log=log)
    return DEBOOTSTRAP_BASE


def debootstrap_base(
    client: docker.DockerClient, *, mirror: str, name: str = DEBOOTSTRAP_BASE, log: Log = print
) -> None:
    """Make a minimal Debian bookworm with python3 and import it as image ``name``.

    Needs root (debootstrap chroots) and the mirror; about a minute and ~100 MB.
    """
    if os.geteuid() != 0:
        raise SandboxInfraError(f"debootstrap needs root; rerun as root, or build with --base {REGISTRY_BASE}")
    repository, _, tag = name.partition(":")
    # /var/tmp, not /tmp: debootstrap needs a filesystem that allows exec and device nodes.
    with tempfile.TemporaryDirectory(prefix="agentenv-rootfs-", dir="/var/tmp") as work:
        rootfs = Path(work) / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", "--include=python3", "bookworm", str(rootfs), mirror]
        log("$ " + " ".join(cmd))
        _check_call(cmd, what="debootstrap")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / junk).glob("*"):
                if path.is_file():
                    path.unlink()
        archive = Path(work) / "rootfs.tar"
        _check_call(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(archive), "."], what="tar")
        log(f"importing the root filesystem as {name}")
        client.api.import_image_from_file(str(archive), repository=repository, tag=tag or "latest")


def _check_call(cmd: list[str], *, what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise SandboxInfraError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(tail))


def apt_mirror(etc: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt is configured with for bookworm (one-line or deb822 sources)."""
    files = [
        etc / "sources.list",
        *sorted((etc / "sources.list.d").glob("*.list")),
        *sorted((etc / "sources.list.d").glob("*.sources")),
    ]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        found = _deb822_mirror(text) if path.suffix == ".sources" else _one_line_mirror(text)
        if found:
            return found
    return DEFAULT_MIRROR


def _one_line_mirror(text: str) -> str | None:
    for line in text.splitlines():
        fields = re.sub(r"\[[^\]]*\]", "", line.split("#", 1)[0]).split()
        if len(fields) >= 3 and fields[0] == "deb" and fields[2] == "bookworm":
            return fields[1]
    return None


def _deb822_mirror(text: str) -> str | None:
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" in fields.get("types", "").split() and "bookworm" in fields.get("suites", "").split():
            uris = fields.get("uris", "").split()
            if uris:
                return uris[0]
    return None
