"""``agentenv sandbox ...``: build the sandbox image and check the Docker set-up.

    agentenv sandbox build [--base IMAGE] [--force]
    agentenv sandbox doctor

``doctor`` checks, in order, that the engine answers, that the image is present
and current, and that each limit is in effect inside a real sandbox (no network,
non-root, no capabilities, read-only root, memory and process limits), printing
one line per check with the fix for each failure; the exit code is 1 when any
check fails. Mounted into the ``agentenv`` command by `agentenv.cli`; the docker
SDK is imported only when a command runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from agentenv.sandboxes.docker import DockerSandbox

__all__ = ["Check", "app", "doctor_checks"]

app = typer.Typer(name="sandbox", help="Build and check the Docker sandbox.", no_args_is_help=True)

EXIT_FAILED = 1
# CAP_SETGID (6) and CAP_SETUID (7): the runner's, left in the runs' bounding set
# (dropping them needs CAP_SETPCAP); runs hold neither and no-new-privileges keeps it so.
RUNNER_CAPS = (1 << 6) | (1 << 7)

# Run inside the sandbox by `doctor`: one JSON object of what the limits look like from inside.
PROBE = r"""
import json, os, socket
out = {"uid": os.getuid()}
with open("/proc/self/status") as f:
    status = dict(line.split(":", 1) for line in f)
out["cap_eff"] = int(status["CapEff"].strip(), 16)
out["cap_held"] = int(status["CapPrm"], 16) | int(status["CapInh"], 16) | int(status.get("CapAmb", "0"), 16)
out["cap_bnd"] = int(status["CapBnd"].strip(), 16)
with open("/proc/1/status") as f:
    out["init_uid"] = int(next(line for line in f if line.startswith("Uid:")).split()[1])
out["no_new_privs"] = status.get("NoNewPrivs", "0").strip() == "1"
try:
    open("/etc/agentenv-probe", "w")
    out["root_writable"] = True
except OSError:
    out["root_writable"] = False
out["interfaces"] = sorted(os.listdir("/sys/class/net"))
try:
    socket.create_connection(("1.1.1.1", 53), timeout=1).close()
    out["connect"] = True
except OSError:
    out["connect"] = False
def first(*paths):
    for p in paths:
        try:
            return open(p).read().strip()
        except OSError:
            pass
out["memory"] = first("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
out["swap"] = first("/sys/fs/cgroup/memory.swap.max", "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
out["pids"] = first("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max")
print(json.dumps(out))
"""


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the doctor's report."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


@app.command()
def build(
    base: Annotated[str | None, typer.Option(help="Base image (default: offline Debian via debootstrap).")] = None,
    force: Annotated[bool, typer.Option(help="Rebuild even when the image is current.")] = False,
    image: Annotated[str, typer.Option(help="Tag of the image to build.")] = "agentenv-sandbox:latest",
) -> None:
    """Build the sandbox image (skipped when it is current)."""
    from agentenv.sandboxes.base import SandboxInfraError
    from agentenv.sandboxes.build import build_image

    try:
        build_image(image=image, base=base, force=force, log=lambda line: typer.echo(line))
    except SandboxInfraError as e:
        _error(str(e))
        raise typer.Exit(EXIT_FAILED) from None


@app.command()
def doctor(
    image: Annotated[str, typer.Option(help="The sandbox image to check.")] = "agentenv-sandbox:latest",
) -> None:
    """Check the engine, the image and every limit; print a fix for each failure."""
    console = Console(highlight=False)
    failed = False
    for check in doctor_checks(image):
        mark = "[green]ok  [/]" if check.ok else "[red]FAIL[/]"
        console.print(f"{mark} {check.name}: {escape(check.detail)}", soft_wrap=True)
        if not check.ok:
            failed = True
            console.print(f"     fix: {escape(check.fix)}", soft_wrap=True)
    if failed:
        raise typer.Exit(EXIT_FAILED)


def doctor_checks(image: str = "agentenv-sandbox:latest") -> Iterator[Check]:
    """Each check as it completes; stops early when a later one cannot run."""
    from agentenv.sandboxes.base import Limits, SandboxInfraError
    from agentenv.sandboxes.build import image_inputs_hash, image_is_current
    from agentenv.sandboxes.docker import ENGINE_FIX, DockerSandbox, docker_client

    try:
        client = docker_client()
        yield Check("engine", True, f"Docker {client.version().get('Version', '?')} answers")
    except SandboxInfraError as e:
        yield Check("engine", False, str(e).split("; fix:")[0], ENGINE_FIX)
        return
    import docker.errors

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        yield Check("image", False, f"{image} is absent", "agentenv sandbox build")
        return
    current = image_is_current(client, image)
    yield Check(
        "image",
        current,
        f"{image} "
        + ("is current" if current else f"was built from another Dockerfile or runner (want {image_inputs_hash()})"),
        "agentenv sandbox build --force",
    )
    limits = Limits(memory_mb=256, pids=32)
    try:
        sandbox = DockerSandbox(image, limits, client=client)
    except SandboxInfraError as e:
        yield Check("start", False, str(e), "agentenv sandbox build --force; see the message above")
        return
    with sandbox:
        yield from _limit_checks(sandbox)


def _limit_checks(sandbox: DockerSandbox) -> list[Check]:
    import json

    result = sandbox.run_python(PROBE, timeout_s=20)
    if not result.ok:
        return [
            Check(
                "probe", False, f"the probe failed: {result.stderr[-300:] or result}", "agentenv sandbox build --force"
            )
        ]
    seen = json.loads(result.stdout)
    host = sandbox.container.attrs["HostConfig"]
    mem_bytes = sandbox.limits.memory_mb * 1024 * 1024
    rebuild = "use DockerSandbox's defaults (container_options); do not override them"
    rows: list[tuple[str, Callable[[], bool], str, str]] = [
        ("runner", lambda: True, "answered", ""),
        (
            "network",
            lambda: host["NetworkMode"] == "none" and not seen["connect"] and seen["interfaces"] == ["lo"],
            f"mode {host['NetworkMode']}, interfaces {seen['interfaces']}, outbound connect "
            + ("succeeded" if seen["connect"] else "refused"),
            rebuild,
        ),
        (
            "user",
            lambda: seen["uid"] != 0 and seen["init_uid"] != seen["uid"],
            f"runs as uid {seen['uid']}, init and the runner as uid {seen['init_uid']}",
            "the image must not override USER or the command; rebuild it",
        ),
        (
            "capabilities",
            lambda: seen["cap_eff"] == 0 and seen["cap_held"] == 0 and not seen["cap_bnd"] & ~RUNNER_CAPS,
            f"effective {seen['cap_eff']:#x}, held {seen['cap_held']:#x}, bounding {seen['cap_bnd']:#x}",
            rebuild,
        ),
        ("no-new-privileges", lambda: seen["no_new_privs"], f"NoNewPrivs {int(seen['no_new_privs'])}", rebuild),
        (
            "read-only root",
            lambda: not seen["root_writable"] and host["ReadonlyRootfs"],
            "writing /etc " + ("succeeded" if seen["root_writable"] else "failed"),
            rebuild,
        ),
        (
            "memory",
            lambda: _int(seen["memory"]) == mem_bytes and _int(seen["swap"]) in (mem_bytes, None),
            f"cgroup limit {seen['memory']}, with swap {seen['swap']}",
            "the engine must support memory cgroups (check `docker info` for 'No memory limit support')",
        ),
        (
            "pids",
            lambda: _int(seen["pids"]) == sandbox.limits.pids,
            f"cgroup pids.max {seen['pids']}",
            "the engine must support the pids cgroup (check `docker info` for 'No pids limit support')",
        ),
    ]
    return [Check(name, test(), detail, fix) for name, test, detail, fix in rows]


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _error(message: str) -> None:
    Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
