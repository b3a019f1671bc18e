"""`DockerSandbox`: untrusted code in a hardened, long-lived Docker container.

    from agentenv.sandboxes import DockerSandbox, Limits
    with DockerSandbox(limits=Limits(timeout_s=5)) as sb:
        sb.write_files({"main.py": "print(6 * 7)"})
        print(sb.run("python3 main.py").stdout)

One container per sandbox, started once; `sandboxes/runner.py` runs inside it and
answers requests over the container's attached stdin/stdout, so each run costs a
fork inside the container (a few ms), not a ``docker exec`` or a new container.
Build the image first: ``agentenv sandbox build`` (``agentenv sandbox doctor``
checks the whole set-up).

What it protects against, by default:
  - network access: no network at all (``network_mode="none"``, loopback only);
  - privilege: runs execute as uid 1000 with no capability, ``no-new-privileges``,
    Docker's default seccomp profile;
  - the control channel: init and the runner (the only holders of the host's
    channel and of each request) are root with nothing but CAP_SETUID/CAP_SETGID
    and non-dumpable, so a run can neither signal, ptrace nor read them, nor open
    their descriptors; runs are forked from a zygote that never held a request
    (see `sandboxes/runner.py`); the host bounds every frame it reads, so a
    broken runner cannot flood its memory;
  - changing the image or the host's files: read-only root; writable only the
    size-capped tmpfs mounts /workspace, /tmp and /dev/shm, gone with the container; no host
    mounts, no host environment variables;
  - exhaustion: memory (no swap), process count, CPU quota, output bytes per run,
    a wall-clock timeout per run that kills its whole process group; a workspace
    snapshot is refused (`SandboxError`) past twice the workspace size, checked
    before each file is read, so sparse files cannot fill the runner's memory;
  - leftovers: every process of a run, even one that left its group, is killed
    when the run ends (a daemon could otherwise fill the container's memory
    with what no process holds, once the run was cleaned up after, and have
    the runner OOM-killed); ``reset`` kills every process but init and the runner and wipes
    /workspace, /tmp, /dev/shm and /dev/mqueue, with the extended attributes and
    times a run can set on those directories themselves; init (``--init``) reaps
    orphans. /tmp, /dev/shm and /dev/mqueue last one run (emptied after each), as
    a `snapshot` keeps /workspace only: a resume finds what the original found.
    SysV IPC objects (shared memory segments, message queues, semaphore sets)
    last one run: the runner removes them after every run and in ``reset``, so
    they carry no data to the next run and pin no memory past it. The tmpfs
    mounts have a bound on their inodes as well as their size (`max_inodes`):
    empty files and directories take no size, but each costs kernel memory
    charged to the container, and /workspace outlives the run that fills it.

What it does not protect against: kernel exploits and container escapes (the
kernel is shared with the host: use gVisor/Kata or VMs for hostile code at scale),
CPU/cache side channels and timing between sandboxes, disk I/O bandwidth, the
Docker daemon itself (whoever reaches its socket is root on the host). Code inside
can see how the host's kernel is configured (``/proc``, ``uname``).

A container that dies or stops answering raises `SandboxInfraError`; an
unreachable engine too, with the fix in its message.
"""

from __future__ import annotations

import json
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentenv.sandboxes._workspace import max_archive_bytes, max_inodes
from agentenv.sandboxes.base import ExecResult, Limits, SandboxError, SandboxInfraError, workspace_path
from agentenv.sandboxes.build import IMAGE
from agentenv.sandboxes.engine import docker_client, engine_unreachable, error_line  # docker_client: re-exported
from agentenv.sandboxes.runner import FRAME, PROTOCOL

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

__all__ = ["DockerSandbox", "container_options", "docker_client", "reap_stale_containers"]

SANDBOX_LABEL = "agentenv.sandbox"
OWNER_PID_LABEL = "agentenv.owner.pid"
OWNER_HOST_LABEL = "agentenv.owner.host"
OWNER_STARTED_LABEL = "agentenv.owner.started"  # tells a live owner from a reused pid
USER = "0:0"  # init and the runner; runs drop to RUN_UID
RUN_UID = 1000
# The runner keeps these two, to fork runs and drop them to RUN_UID; nothing else.
CAPABILITIES = ["SETUID", "SETGID"]
COMMAND = ["python3", "/opt/agentenv/runner.py", "--kill-all", "--run-uid", str(RUN_UID)]
START_TIMEOUT_S = 30.0
# Beyond a run's own timeout: killing the group, draining pipes, a loaded host.
ANSWER_SLACK_S = 15.0
FILE_OP_TIMEOUT_S = 60.0
# Docker relays output in chunks of at most 32 KiB; anything far past that is not Docker.
MAX_CHUNK_BYTES = 1 << 20


# -- containers this process owns ----------------------------------------------------


def owner_labels() -> dict[str, str]:
    """Labels that let `reap_stale_containers` find containers whose owner died."""
    return {
        SANDBOX_LABEL: "1",
        OWNER_PID_LABEL: str(os.getpid()),
        OWNER_HOST_LABEL: socket.gethostname(),
        OWNER_STARTED_LABEL: _process_start(os.getpid()) or "",
    }


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (/proc/PID/stat field 22)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_alive(labels: Mapping[str, str]) -> bool:
    try:
        pid = int(labels.get(OWNER_PID_LABEL, ""))
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, someone else's
    started = labels.get(OWNER_STARTED_LABEL)
    return not started or _process_start(pid) in (None, started)


def reap_stale_containers(client: docker.DockerClient | None = None) -> list[str]:
    """Remove sandbox containers made on this host by processes that have exited;
    returns their ids. Containers of live owners, and of other hosts, are left alone."""
    import docker.errors

    client = client or docker_client()
    host_filter = [f"{SANDBOX_LABEL}=1", f"{OWNER_HOST_LABEL}={socket.gethostname()}"]
    removed = []
    try:
        candidates = client.containers.list(all=True, filters={"label": host_filter}, ignore_removed=True)
    except docker.errors.APIError as e:
        raise SandboxInfraError(f"listing sandbox containers failed: {error_line(e)}") from e
    except Exception as e:
        raise engine_unreachable(e) from e
    for container in candidates:
        if _owner_alive(container.labels):
            continue
        try:
            container.remove(force=True)
            removed.append(container.id)
        except docker.errors.NotFound:
            pass
    return removed


def max_header_bytes(limits: Limits) -> int:
    """The largest answer header the host accepts: a run's stdout and stderr, each
    up to ``output_bytes``, JSON-escaped (at worst 6 bytes a byte), and the rest."""
    return 12 * limits.output_bytes + (1 << 20)


def max_blob_bytes(limits: Limits) -> int:
    """The largest blob the host accepts (a file or a workspace archive); the runner
    refuses to send more, and checks before reading each file it would archive."""
    return max_archive_bytes(limits)


def container_options(limits: Limits, image: str = IMAGE, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The arguments of ``client.containers.create``: every hardening option in one place."""
    from docker.types import LogConfig, Ulimit

    memory = f"{limits.memory_mb}m"
    return {
        "image": image,
        "command": COMMAND,
        "user": USER,
        "working_dir": "/workspace",
        "hostname": "sandbox",
        "environment": {},  # never the host's
        "network_mode": "none",
        "cap_drop": ["ALL"],
        "cap_add": CAPABILITIES,
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": {
            # exec: Docker mounts tmpfs noexec unless told; agents build and run programs here.
            "/workspace": (
                f"rw,exec,nosuid,nodev,size={limits.workspace_mb}m,nr_inodes={max_inodes(limits.workspace_mb)},"
                f"uid={RUN_UID},gid={RUN_UID},mode=0755"
            ),
            "/tmp": (
                f"rw,nosuid,nodev,noexec,size={limits.tmp_mb}m,nr_inodes={max_inodes(limits.tmp_mb)},"
                f"uid={RUN_UID},gid={RUN_UID},mode=1777"
            ),
            # Docker's own /dev/shm (--shm-size) has no inode bound: a run's empty directories
            # there pinned the container's memory, and the runner's clean-up was OOM-killed.
            "/dev/shm": f"rw,nosuid,nodev,noexec,size={limits.tmp_mb}m,nr_inodes={max_inodes(limits.tmp_mb)},mode=1777",
        },
        "mem_limit": memory,
        "memswap_limit": memory,  # equal: no swap
        "pids_limit": limits.pids,
        "nano_cpus": int(limits.cpus * 1e9),
        "ulimits": [Ulimit(name="core", soft=0, hard=0)],
        "init": True,  # reaps orphans; the runner is its only child
        "stdin_open": True,
        "tty": False,
        # The protocol runs over stdout: a logging driver would copy every byte to disk.
        "log_config": LogConfig(type=LogConfig.types.NONE),
        "labels": {**owner_labels(), **(labels or {})},
    }


# -- the channel to the runner -------------------------------------------------------


class _Channel:
    """Frames to and from the runner over the attached socket.

    Without a TTY, Docker multiplexes the attached output: each chunk comes behind
    an 8-byte header (stream type, 3 zero bytes, big-endian length). Only stdout
    (type 1) carries frames; anything else is dropped.

    Every length read is checked before anything is buffered: a frame whose header
    or blob is past the bounds, a chunk past `MAX_CHUNK_BYTES` or a header that is
    not a JSON object raises `SandboxInfraError` (the caller marks the sandbox
    broken), so nothing in the container can make the host read without bound.
    """

    def __init__(self, attached: Any, *, max_header_bytes: int, max_blob_bytes: int) -> None:
        self._attached = attached  # keeps the HTTP response (and so the socket) alive
        self._sock: socket.socket = getattr(attached, "_sock", attached)
        self._raw = bytearray()
        self._stdout = bytearray()
        self.max_header_bytes = max_header_bytes
        self.max_blob_bytes = max_blob_bytes

    def send(self, header: Mapping[str, Any], blob: bytes = b"") -> None:
        data = json.dumps(header, separators=(",", ":")).encode()
        self._sock.settimeout(FILE_OP_TIMEOUT_S)
        self._sock.sendall(FRAME.pack(len(data), len(blob)) + data + blob)

    def receive(self, deadline: float) -> tuple[dict[str, Any], bytes]:
        header_len, blob_len = FRAME.unpack(self._take(FRAME.size, deadline))
        if header_len > self.max_header_bytes or blob_len > self.max_blob_bytes:
            raise SandboxInfraError(
                f"the runner sent a frame of {header_len} + {blob_len} bytes, past the bounds "
                f"({self.max_header_bytes} + {self.max_blob_bytes}); the channel is closed"
            )
        body = self._take(header_len + blob_len, deadline)
        try:
            header = json.loads(body[:header_len])
        except (ValueError, RecursionError) as e:
            raise SandboxInfraError(f"the runner sent an unreadable header ({type(e).__name__})") from None
        if not isinstance(header, dict):
            raise SandboxInfraError(f"the runner sent a header that is not an object ({type(header).__name__})")
        return header, body[header_len:]

    def _take(self, n: int, deadline: float) -> bytes:
        while len(self._stdout) < n:
            self._demux(deadline)
        out = bytes(self._stdout[:n])
        del self._stdout[:n]
        return out

    def _demux(self, deadline: float) -> None:
        while len(self._raw) < 8:
            self._recv(deadline)
        stream, size = self._raw[0], int.from_bytes(self._raw[4:8], "big")
        if size > MAX_CHUNK_BYTES:
            raise SandboxInfraError(f"the container sent an output chunk of {size} bytes; the channel is closed")
        while len(self._raw) < 8 + size:
            self._recv(deadline)
        if stream == 1:
            self._stdout += self._raw[8 : 8 + size]
        del self._raw[: 8 + size]

    def _recv(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self._sock.settimeout(remaining)
        chunk = self._sock.recv(1 << 20)
        if not chunk:
            raise EOFError
        self._raw += chunk

    def quiet(self) -> bool:
        """Whether nothing is waiting on the socket, without blocking: the runner speaks
        only when asked, so data here means a broken stream, and end of file a dead container."""
        if self._raw or self._stdout:
            return False
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def close(self) -> None:
        for closeable in (self._sock, self._attached):
            try:
                closeable.close()
            except Exception:  # noqa: BLE001, S110 - closing a dead socket
                pass


# -- the sandbox ---------------------------------------------------------------------


class DockerSandbox:
    """A hardened container with the runner inside; see the module docstring.

    ``client`` defaults to the engine of ``DOCKER_HOST`` (or the default socket);
    ``labels`` are added to the container's (the owner labels are always set).
    Safe to share between threads: calls on one sandbox run one at a time.
    """

    def __init__(
        self,
        image: str = IMAGE,
        limits: Limits | None = None,
        *,
        client: docker.DockerClient | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        if limits is not None and not isinstance(limits, Limits):
            raise SandboxError(f"expected limits to be a Limits, got {type(limits).__name__}")
        self.limits = limits or Limits()
        self.image = image
        self._client = client if client is not None else docker_client()
        self._lock = threading.Lock()
        self._closed = False
        self._broken: str | None = None
        self._dirty = False  # anything a reset would have to undo since the last one
        self._container = self._create(labels)
        # Remove the container even if close() is never called (also at interpreter exit).
        self._finalizer = weakref.finalize(self, _remove_quietly, self._container)
        try:
            self._channel = self._attach_and_start()
        except BaseException:
            self._finalizer()
            raise

    # -- life cycle

    @property
    def id(self) -> str:
        """The container's id."""
        return str(self._container.id)

    @property
    def container(self) -> Container:
        """The docker SDK's container object (for inspection; do not start or stop it)."""
        return self._container

    @property
    def alive(self) -> bool:
        """Not closed, and no call has found the container dead or mute."""
        return not self._closed and self._broken is None

    def _create(self, labels: Mapping[str, str] | None) -> Container:
        import docker.errors

        try:
            return self._client.containers.create(**container_options(self.limits, self.image, labels))
        except docker.errors.ImageNotFound as e:
            raise SandboxInfraError(
                f"image {self.image!r} not found; build it with `agentenv sandbox build` "
                "(or scripts/build_sandbox_image.sh)"
            ) from e
        except docker.errors.APIError as e:
            raise SandboxInfraError(f"creating a sandbox container failed: {e.explanation or e}") from e
        except Exception as e:
            raise engine_unreachable(e) from e

    def _attach_and_start(self) -> _Channel:
        # Attach before start: the runner writes only when asked, and nothing is lost.
        try:
            attached = self._client.api.attach_socket(self._container.id, params={"stdin": 1, "stdout": 1, "stream": 1})
            self._container.start()
        except Exception as e:
            raise SandboxInfraError(f"starting the sandbox container failed: {error_line(e)}") from e
        channel = _Channel(
            attached, max_header_bytes=max_header_bytes(self.limits), max_blob_bytes=max_blob_bytes(self.limits)
        )
        try:
            channel.send({"op": "ping"})
            answer, _ = channel.receive(time.monotonic() + START_TIMEOUT_S)
        except (OSError, EOFError) as e:
            channel.close()
            raise SandboxInfraError(f"the sandbox runner did not start: {self._death_note(e)}") from e
        if answer.get("protocol") != PROTOCOL:
            channel.close()
            raise SandboxInfraError(
                f"image {self.image!r} runs runner protocol {answer.get('protocol')}, this agentenv speaks "
                f"{PROTOCOL}: rebuild it with `agentenv sandbox build`"
            )
        return channel

    def close(self) -> None:
        """Remove the container; idempotent. A call in progress on another thread
        ends with `SandboxInfraError` (its container is gone) rather than delaying this."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()  # outside the lock: it is what ends a call in progress
        with self._lock:
            self._channel.close()

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("broken" if self._broken else "alive")
        return f"DockerSandbox(id={self.id[:12]}, image={self.image!r}, {state})"

    # -- requests

    def _call(self, header: dict[str, Any], blob: bytes = b"", *, wait_s: float) -> tuple[dict[str, Any], bytes]:
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox is closed")
            if self._broken is not None:
                raise SandboxInfraError(f"the sandbox is unusable: {self._broken}")
            try:
                self._channel.send(header, blob)
                return self._channel.receive(time.monotonic() + wait_s)
            except TimeoutError as e:
                self._broken = f"the runner did not answer {header['op']!r} within {wait_s:.0f} s"
                raise SandboxInfraError(self._broken) from e
            except SandboxInfraError as e:  # an answer out of bounds or unreadable
                self._broken = str(e)
                raise
            except (OSError, EOFError) as e:
                note = "the sandbox was closed" if self._closed else self._death_note(e)
                self._broken = f"the container died during {header['op']!r}: {note}"
                raise SandboxInfraError(self._broken) from e
            except BaseException:
                # Interrupted (or a garbled frame) between request and answer: the
                # stream is out of step, so no later answer could be trusted.
                self._broken = f"a {header['op']!r} call was interrupted; the channel is out of step"
                raise

    def _death_note(self, error: BaseException) -> str:
        """What the engine says about the container, for an error message."""
        try:
            self._container.reload()
            state = self._container.attrs.get("State", {})
            return (
                f"container {state.get('Status')}, exit code {state.get('ExitCode')}, "
                f"OOM-killed {state.get('OOMKilled')}"
            )
        except Exception:  # noqa: BLE001 - gone entirely, or the engine is
            return error_line(error) if str(error) else f"{type(error).__name__} (connection closed)"

    def _checked(self, answer: dict[str, Any], path: str | None = None) -> dict[str, Any]:
        if answer.get("ok"):
            return answer
        kind, message = answer.get("kind"), answer.get("message", "")
        if kind == "not_found":
            raise FileNotFoundError(f"no file {path!r} in the workspace" if path else message)
        if kind == "refused":
            raise SandboxError(message)
        raise SandboxError(f"the sandbox refused the request: {message}")

    def _timeout(self, timeout_s: float | None) -> float:
        if timeout_s is None:
            return self.limits.timeout_s
        if not isinstance(timeout_s, int | float) or isinstance(timeout_s, bool) or not timeout_s > 0:
            raise SandboxError(f"expected timeout_s > 0 seconds, got {timeout_s!r}")
        return float(timeout_s)

    def _exec(self, request: dict[str, Any], timeout_s: float | None, stdin: str | None) -> ExecResult:
        if stdin is not None and not isinstance(stdin, str):
            raise SandboxError(f"expected stdin as str, got {type(stdin).__name__}")
        timeout = self._timeout(timeout_s)
        header = {
            "op": "run",
            **request,
            "timeout_s": timeout,
            "stdin": stdin,
            "output_bytes": self.limits.output_bytes,
        }
        self._dirty = True  # until the runner says otherwise
        answer, _ = self._call(header, wait_s=timeout + ANSWER_SLACK_S)
        if not answer.get("ok"):
            raise SandboxInfraError(f"the runner failed to run the code: {answer.get('message')}")
        self._dirty = answer.get("clean") is not True
        return ExecResult(**{k: answer[k] for k in ExecResult.model_fields})

    def run_python(self, code: str, *, timeout_s: float | None = None, stdin: str | None = None) -> ExecResult:
        """Run ``code`` as a fresh Python process (a fork of the warm runner) in /workspace."""
        if not isinstance(code, str):
            raise SandboxError(f"expected code as str, got {type(code).__name__}")
        return self._exec({"python": code}, timeout_s, stdin)

    def run(
        self, command: str | Sequence[str], *, timeout_s: float | None = None, stdin: str | None = None
    ) -> ExecResult:
        """Run a command in /workspace; a string goes to ``sh -c``."""
        if isinstance(command, str):
            argv = ["sh", "-c", command]
        elif isinstance(command, Sequence) and command and all(isinstance(a, str) for a in command):
            argv = list(command)
        else:
            raise SandboxError(f"expected a command string or a non-empty list of str, got {command!r}")
        return self._exec({"argv": argv}, timeout_s, stdin)

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Write files into /workspace, creating directories; symlinks out of it are refused."""
        if not isinstance(files, Mapping):
            raise SandboxError(f"expected a mapping of path -> str | bytes, got {type(files).__name__}")
        entries, blobs = [], []
        for path, content in files.items():
            rel = workspace_path(path)
            if isinstance(content, str):
                content = content.encode()
            elif not isinstance(content, bytes | bytearray):
                raise SandboxError(f"expected str or bytes for {path!r}, got {type(content).__name__}")
            entries.append([rel, len(content)])
            blobs.append(bytes(content))
        self._dirty = True
        self._checked(self._call({"op": "write_files", "files": entries}, b"".join(blobs), wait_s=FILE_OP_TIMEOUT_S)[0])

    def read_file(self, path: str) -> bytes:
        """A file of /workspace; `FileNotFoundError` when absent."""
        answer, blob = self._call(
            {"op": "read_file", "path": workspace_path(path), "max_bytes": max_blob_bytes(self.limits)},
            wait_s=FILE_OP_TIMEOUT_S,
        )
        self._checked(answer, path)
        return blob

    def snapshot(self) -> bytes:
        """/workspace as a tar archive (not /tmp: it lasts one run)."""
        answer, blob = self._call(
            {"op": "snapshot", "max_bytes": max_blob_bytes(self.limits)}, wait_s=FILE_OP_TIMEOUT_S
        )
        self._checked(answer)
        return blob

    def restore(self, archive: bytes) -> None:
        """Replace /workspace with a `snapshot`."""
        if not isinstance(archive, bytes | bytearray):
            raise SandboxError(f"expected a tar archive as bytes, got {type(archive).__name__}")
        self._dirty = True
        self._checked(self._call({"op": "restore"}, bytes(archive), wait_s=FILE_OP_TIMEOUT_S)[0])

    def reset(self) -> None:
        """Kill every process from earlier runs, remove every SysV IPC object and wipe
        /workspace, /tmp, /dev/shm and /dev/mqueue. Nothing to do (and no round trip) when the last call was a run after
        which the runner found the sandbox clean, as a verification run leaves it."""
        if not self._dirty and self._broken is None and not self._closed:
            if self._channel.quiet():
                return
            with self._lock:  # the container died (or the stream broke) since the last run
                self._broken = f"the container stopped answering between calls: {self._death_note(EOFError())}"
            raise SandboxInfraError(self._broken)
        answer, _ = self._call({"op": "reset"}, wait_s=FILE_OP_TIMEOUT_S)
        if not answer.get("ok"):
            with self._lock:
                self._broken = f"reset failed: {answer.get('message')}"
            raise SandboxInfraError(self._broken)
        self._dirty = False


def _remove_quietly(container: Container) -> None:
    try:
        container.remove(force=True)
    except Exception:  # noqa: BLE001, S110 - already gone, or the engine is; the reaper gets it later
        pass
