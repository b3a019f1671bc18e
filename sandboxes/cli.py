"""``agentenv sandbox ...``: build the sandbox image and check the Docker set-up.

    agentenv sandbox build [--base IMAGE] [--force]
    agentenv sandbox doctor

``doctor`` checks, in order, that the engine answers, that the image is present
and current, and that each limit is in effect inside a real sandbox (no network,
non-root, no capabilities, read-only root, memory, process and CPU limits, the
sizes of the /workspace and /tmp tmpfs mounts), printing one line per check with
the fix for each failure; the exit code is 1 when any check fails. Mounted into
the ``agentenv`` command by `agentenv.cli`; the docker SDK is imported only when a
command runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from agentenv.sandboxes.base import Limits
    from agentenv.sandboxes.docker import DockerSandbox

__all__ = ["Check", "app", "doctor_checks"]

app = typer.Typer(name="sandbox", help="Build and check the Docker sandbox.", no_args_is_help=True)

EXIT_FAILED = 1
MIB = 1024 * 1024
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
def cpu_quota():  # "QUOTA PERIOD" in microseconds; QUOTA is max (v2) or -1 (v1) without a limit
    v2 = first("/sys/fs/cgroup/cpu.max")
    if v2:
        return v2
    v1 = ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct")
    quota = first(*(d + "/cpu.cfs_quota_us" for d in v1))
    period = first(*(d + "/cpu.cfs_period_us" for d in v1))
    return f"{quota} {period}" if quota and period else None
out["cpu"] = cpu_quota()
with open("/proc/self/mounts") as f:
    fstype = {line.split()[1]: line.split()[2] for line in f}  # the last mount on a path wins
for path in ("/workspace", "/tmp"):
    st = os.statvfs(path)
    out[path] = {"type": fstype.get(path), "bytes": st.f_blocks * st.f_frsize}
print(json.dumps(out))
"""


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the doctor's report."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


BASE_HELP = "Base image (default: Debian debootstrapped from the apt mirror: no registry needed)."


@app.command()
def build(
    base: Annotated[str | None, typer.Option(help=BASE_HELP)] = None,
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
    from agentenv.sandboxes.docker import DockerSandbox
    from agentenv.sandboxes.engine import ENGINE_FIX, docker_client

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
    stale = f"was built from other files than this checkout's (want inputs {image_inputs_hash()})"
    yield Check("image", current, f"{image} {'is current' if current else stale}", "agentenv sandbox build --force")
    # Each limit set apart from the others' values and from the defaults, so a mix-up shows.
    limits = Limits(memory_mb=256, pids=32, cpus=0.5, workspace_mb=48, tmp_mb=32)
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
    return [
        Check("runner", True, "answered"),
        *_isolation_checks(seen, host),
        *_resource_checks(seen, host, sandbox.limits),
    ]


# The fix when an option of the container is not in effect.
KEEP_DEFAULTS = "use DockerSandbox's defaults (container_options); do not override them"


def _isolation_checks(seen: dict[str, Any], host: dict[str, Any]) -> list[Check]:
    """Network, identity, capabilities and the read-only root, as the probe saw them."""
    return [
        Check(
            "network",
            host["NetworkMode"] == "none" and not seen["connect"] and seen["interfaces"] == ["lo"],
            f"mode {host['NetworkMode']}, interfaces {seen['interfaces']}, outbound connect "
            + ("succeeded" if seen["connect"] else "refused"),
            KEEP_DEFAULTS,
        ),
        Check(
            "user",
            seen["uid"] != 0 and seen["init_uid"] != seen["uid"],
            f"runs as uid {seen['uid']}, init and the runner as uid {seen['init_uid']}",
            "the image must not override USER or the command; rebuild it",
        ),
        Check(
            "capabilities",
            seen["cap_eff"] == 0 and seen["cap_held"] == 0 and not seen["cap_bnd"] & ~RUNNER_CAPS,
            f"effective {seen['cap_eff']:#x}, held {seen['cap_held']:#x}, bounding {seen['cap_bnd']:#x}",
            KEEP_DEFAULTS,
        ),
        Check("no-new-privileges", seen["no_new_privs"], f"NoNewPrivs {int(seen['no_new_privs'])}", KEEP_DEFAULTS),
        Check(
            "read-only root",
            not seen["root_writable"] and host["ReadonlyRootfs"],
            "writing /etc " + ("succeeded" if seen["root_writable"] else "failed"),
            KEEP_DEFAULTS,
        ),
    ]


def _resource_checks(seen: dict[str, Any], host: dict[str, Any], limits: Limits) -> list[Check]:
    """Memory, processes, CPU and the two tmpfs mounts, each against ``limits``."""
    mem_bytes = limits.memory_mb * MIB
    cores = _cpu_cores(seen["cpu"])
    checks = [
        Check(
            "memory",
            _int(seen["memory"]) == mem_bytes and _int(seen["swap"]) in (mem_bytes, None),
            f"cgroup limit {seen['memory']}, with swap {seen['swap']}",
            "the engine must support memory cgroups (check `docker info` for 'No memory limit support')",
        ),
        Check(
            "pids",
            _int(seen["pids"]) == limits.pids,
            f"cgroup pids.max {seen['pids']}",
            "the engine must support the pids cgroup (check `docker info` for 'No pids limit support')",
        ),
        Check(
            "cpu",
            host.get("NanoCpus") == int(limits.cpus * 1e9) and cores is not None and abs(cores - limits.cpus) < 1e-3,
            f"NanoCpus {host.get('NanoCpus')}, cgroup quota {seen['cpu']} "
            f"({'no limit' if cores is None else f'{cores:g} cores'}, want {limits.cpus:g})",
            "the engine must support the CPU CFS quota (check `docker info` for 'No cpu cfs quota support')",
        ),
    ]
    for path, size_mb in (("/workspace", limits.workspace_mb), ("/tmp", limits.tmp_mb)):
        mount = seen[path]
        checks.append(
            Check(
                path.strip("/"),
                mount["type"] == "tmpfs" and mount["bytes"] == size_mb * MIB,
                f"{path} is {mount['type']} of {mount['bytes'] / MIB:g} MiB (want tmpfs of {size_mb} MiB)",
                KEEP_DEFAULTS,
            )
        )
    return checks


def _cpu_cores(quota_period: str | None) -> float | None:
    """Cores from "QUOTA PERIOD" (microseconds); None without a quota."""
    try:
        quota, period = (quota_period or "").split()
        return int(quota) / int(period) if quota not in ("max", "-1") else None
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _error(message: str) -> None:
    Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
