"""One test per property a user of a sandbox relies on, each run against every backend.

Each test plays the hostile code and checks the outcome from both sides where it
can: inside the sandbox (what the code could do) and on the host (what it left
behind). A process-backend case is skipped only where the host lacks the feature,
and the skip says which (see `ProcessSandbox.isolation`).
"""

from __future__ import annotations

import errno
import http.server
import json
import os
import resource
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentenv.sandboxes import ExecResult, Sandbox, SandboxError
from tests.sandboxes.conftest import LIMITS, NewSandbox

pytestmark = pytest.mark.slow  # sandboxes on every backend

# Prints, as JSON, the argv of every process the code can see (zombies as "<zombie>").
LIST_PROCESSES = r"""
import json, os
seen = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue
    seen.append("<zombie>" if state == b"Z" else argv)
print(json.dumps(seen))
"""

# Double-fork into a new session with stdio closed: a daemon the run does not wait for.
DAEMONIZE = r"""
import os, sys

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        fd = os.open("/dev/null", os.O_RDWR)
        for std in (0, 1, 2):
            os.dup2(fd, std)
        os.execvp("sleep", ["sleep", sys.argv[1]])
    os._exit(0)
os.wait()
"""


def last_json(result: ExecResult) -> object:
    assert result.stdout.strip(), f"no output; stderr: {result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def marker(seconds: int = 900) -> str:
    """A `sleep` argument (about ``seconds``) that no other process on the machine has in its argv."""
    return f"{seconds}.{secrets.randbelow(10**9):09d}"


def needs(sb: Sandbox, *features: str) -> None:
    """Skip when the process backend could not put a feature in place on this host."""
    iso = getattr(sb, "isolation", None)
    if iso is None:
        return
    missing = [f for f in features if not getattr(iso, f)]
    if missing and len(missing) == len(features):
        why = f": {iso.why_not}" if iso.why_not else ""
        pytest.skip(f"the process backend has no {' / '.join(features)} on this host{why}")


def host_pids_with(text: str) -> list[int]:
    """Host processes whose argv contains ``text`` (the test process sees every PID)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and pid != str(os.getpid()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                continue
    return found


def wait_until_gone(text: str, within_s: float = 10.0) -> list[int]:
    """Host processes still matching after a grace (SIGKILL is delivered asynchronously)."""
    end = time.monotonic() + within_s
    while (left := host_pids_with(text)) and time.monotonic() < end:
        time.sleep(0.05)
    return left


def visible_processes(sb: Sandbox) -> list[str]:
    return last_json(sb.run_python(LIST_PROCESSES))  # type: ignore[return-value]


# --- resources ---------------------------------------------------------------------


def test_fork_bomb_is_contained_and_the_sandbox_works_afterwards(sandbox: Sandbox) -> None:
    code = r"""
import os, time
children = refused = 0
for _ in range(5000):
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        if refused >= 20:
            break
        continue
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children += 1
print(children, refused, flush=True)
"""
    result = sandbox.run_python(code)
    counts = result.stdout.split()
    assert len(counts) == 2, f"the bomb's parent never got to report: {result}"
    children, refused = map(int, counts)
    assert refused > 0, "fork never failed: no process limit"
    assert children < LIMITS.pids
    after = sandbox.run("echo still alive")
    assert after.ok and after.stdout == "still alive\n"


def test_memory_bomb_is_reported_as_oom_not_timeout(sandbox: Sandbox) -> None:
    code = "hog = []\nwhile True:\n    hog.append(bytearray(16 * 1024 * 1024))\n"
    result = sandbox.run_python(code)
    assert result.oom_killed, result
    assert not result.timed_out
    assert not result.ok


def test_cpu_burn_is_killed_at_the_timeout_with_its_process_group(sandbox: Sandbox) -> None:
    tag = marker()
    code = f"""
import subprocess
subprocess.Popen(["sh", "-c", "while :; do :; done # {tag}"])
print("spawned", flush=True)
while True:
    pass
"""
    result = sandbox.run_python(code, timeout_s=1)
    assert result.timed_out
    assert result.exit_code is None and not result.oom_killed
    assert "spawned" in result.stdout, "the output before the kill was lost"
    assert wait_until_gone(tag) == [], "the burner's child survived the timeout"
    assert not any(tag in argv for argv in visible_processes(sandbox))


def test_sleep_is_killed_at_the_timeout(sandbox: Sandbox) -> None:
    result = sandbox.run("echo before; sleep 600", timeout_s=1)
    assert result.timed_out and not result.oom_killed
    assert result.exit_code is None and not result.ok
    assert result.stdout == "before\n"


def test_huge_output_is_capped_without_growing_host_memory(sandbox: Sandbox) -> None:
    code = r"""
import sys
chunk = b"x" * (1 << 20)
for _ in range(256):
    sys.stdout.buffer.write(chunk)
    sys.stderr.buffer.write(chunk)
"""
    peak_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = sandbox.run_python(code, timeout_s=30)
    peak_growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before_kib) / 1024
    assert result.exit_code == 0, "the writer was blocked or killed instead of drained"
    assert result.stdout_truncated and result.stderr_truncated
    assert 0 < len(result.stdout.encode()) <= LIMITS.output_bytes
    assert 0 < len(result.stderr.encode()) <= LIMITS.output_bytes
    assert peak_growth_mib < 64, f"host memory grew {peak_growth_mib:.0f} MiB for 512 MiB of output"


def test_disk_fill_stops_at_the_limit(sandbox: Sandbox) -> None:
    needs(sandbox, "disk_quota")
    code = r"""
import json, os, sys
report = {}
for where in (".", "/tmp"):
    written, error = 0, None
    try:
        for i in range(256):
            with open(os.path.join(where, f"fill{i}"), "wb") as f:
                f.write(b"\1" * (1 << 20))
            written += 1
    except OSError as exc:
        error = exc.strerror
    report[where] = [written, error]
print(json.dumps(report))
"""
    report = last_json(sandbox.run_python(code, timeout_s=20))
    assert isinstance(report, dict)
    workspace_written, workspace_error = report["."]
    tmp_written, tmp_error = report["/tmp"]
    assert workspace_error is not None and workspace_written <= LIMITS.workspace_mb
    assert tmp_error is not None and tmp_written <= LIMITS.tmp_mb


# Past Python's recursion limit: shutil.rmtree (recursive up to Python 3.12) raised
# RecursionError on it, in the runner an error of the sandbox's own (infra).
NEST_PAST_THE_RECURSION_LIMIT = r"""
import os, tempfile
for where in (os.getcwd(), tempfile.gettempdir()):
    os.chdir(where)
    for _ in range(3000):
        os.mkdir("d")
        os.chdir("d")
print("nested")
"""


def test_directories_nested_past_the_recursion_limit_are_still_wiped(sandbox: Sandbox) -> None:
    # /tmp is emptied after the run and the workspace at reset: neither may fail on what a
    # run can make, or the policy could end its episodes as infra at will.
    made = sandbox.run_python(NEST_PAST_THE_RECURSION_LIMIT, timeout_s=20)
    assert made.stdout == "nested\n", made
    after = sandbox.run_python("import os, tempfile; print('d' in os.listdir(tempfile.gettempdir()), os.listdir('.'))")
    assert after.stdout == "False ['d']\n", after
    sandbox.reset()
    assert sandbox.run_python("import os; print(os.listdir('.'))").stdout == "[]\n"


# Empty files with long names: none takes any of the tmpfs's size, each takes kernel memory.
FILL_INODES = r"""
import os
made = 0
try:
    while made < LIMIT:
        os.close(os.open("f" * 200 + str(made), os.O_CREAT | os.O_WRONLY))
        made += 1
except OSError as exc:
    print(made, exc.strerror)
"""


def test_empty_files_cannot_fill_the_sandboxs_memory(sandbox: Sandbox) -> None:
    # The workspace outlives the run: inodes past the memory would leave the sandbox's next
    # operation (the runner's own) out of memory, an infra failure the policy chose.
    needs(sandbox, "disk_quota")
    made = sandbox.run_python(FILL_INODES.replace("LIMIT", str(LIMITS.memory_mb * 1024)), timeout_s=30)
    assert made.ok and made.stdout.endswith("No space left on device\n"), made
    first = "f" * 200 + "0"  # no inode is left for a new file: the host writes an existing one
    sandbox.write_files({first: "x" * (4 << 20)})
    assert len(sandbox.read_file(first)) == 4 << 20
    assert sandbox.run_python("print(1)").stdout == "1\n"


# Empty directories with long names in /dev/shm (scratch every run may write), made until
# no inode is left or the memory is all but full: the run then ends of itself, and the
# clean-up after it (the runner's own, on Docker) needs memory the inodes hold.
FILL_SHM_WITH_DIRECTORIES = r"""
import os
def room():  # what the memory cgroup has left, where the run can read it
    for used, limit in (("memory.usage_in_bytes", "memory.limit_in_bytes"), ("memory.current", "memory.max")):
        for cgroup in ("/sys/fs/cgroup/memory/", "/sys/fs/cgroup/"):
            try:
                return int(open(cgroup + limit).read()) - int(open(cgroup + used).read())
            except (OSError, ValueError):
                pass
    return 1 << 62
os.chdir("/dev/shm")
made = 0
try:
    while made < LIMIT and (made % 500 or room() > 40 << 20):
        os.mkdir("d" * 240 + str(made))
        made += 1
except OSError as exc:
    print(exc.strerror)
"""


def test_directories_in_dev_shm_cannot_fill_the_sandboxs_memory(sandbox: Sandbox) -> None:
    # Docker's own /dev/shm had no inode bound: the container was OOM-killed in the
    # runner's clean-up after the run, an infra failure the policy chose.
    code = FILL_SHM_WITH_DIRECTORIES.replace("LIMIT", str(LIMITS.memory_mb * 1024))
    made = sandbox.run_python(code, timeout_s=30)
    assert made.stdout == "No space left on device\n", made
    after = "import os; print([name for name in os.listdir('/dev/shm') if name.startswith('ddd')])"
    assert sandbox.run_python(after).stdout == "[]\n"


# A daemon (its own session: out of the run's group) that waits until the run has been
# cleaned up after, then fills the sandbox's memory with a SysV segment no process holds.
PIN_MEMORY_AFTER_THE_RUN = r"""
import ctypes, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(1)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        size = MIB << 20
        sid = libc.shmget(0, ctypes.c_size_t(size), 0o600)
        addr = libc.shmat(sid, None, 0) if sid >= 0 else None
        if addr not in (None, ctypes.c_void_p(-1).value):
            ctypes.memset(addr, 1, size)  # OOM-killed midway: the segment stays, full
    os._exit(0)
os.wait()
print("left")
"""


def test_a_daemon_cannot_fill_the_sandboxs_memory_once_its_run_is_over(sandbox: Sandbox) -> None:
    left = sandbox.run_python(PIN_MEMORY_AFTER_THE_RUN.replace("MIB", str(2 * LIMITS.memory_mb)))
    assert left.stdout == "left\n", left
    time.sleep(3)  # the daemon's moment, were it alive
    sandbox.write_files({"after.txt": "x" * (4 << 20)})
    assert len(sandbox.read_file("after.txt")) == 4 << 20
    assert sandbox.run_python("print(1)").stdout == "1\n"


# --- network -----------------------------------------------------------------------


@pytest.fixture
def host_http_server() -> Iterator[int]:
    """An HTTP server on the host's 127.0.0.1; yields its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_network_egress_is_blocked(sandbox: Sandbox, host_http_server: int) -> None:
    needs(sandbox, "network_isolated")
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{host_http_server}/", timeout=5) as reply:
        assert reply.status == 200  # the server is up: a refusal below is the sandbox's doing
    code = f"""
import json, socket, urllib.request
def attempt(fn):
    try:
        fn()
        return "open"
    except Exception as exc:
        return "blocked: " + type(exc).__name__
report = {{
    "host_loopback": attempt(lambda: urllib.request.urlopen("http://127.0.0.1:{host_http_server}/", timeout=2)),
    "external": attempt(lambda: socket.create_connection(("1.1.1.1", 80), timeout=2)),
    "dns": attempt(lambda: socket.getaddrinfo("example.com", 80)),
    "packet_socket": attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW)),
    "raw_icmp": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
}}
print(json.dumps(report))
"""
    report = last_json(sandbox.run_python(code, timeout_s=20))
    assert isinstance(report, dict)
    opened = {what: how for what, how in report.items() if not how.startswith("blocked")}
    assert opened == {}, f"reachable from inside the sandbox: {opened}"


# --- the host's files and secrets ----------------------------------------------------


def test_writes_outside_the_workspace_fail(sandbox: Sandbox) -> None:
    needs(sandbox, "dedicated_uid")
    name = f"agentenv-probe-{secrets.token_hex(4)}"
    targets = [f"/etc/{name}", f"/usr/{name}", f"/usr/bin/{name}", str(Path.home() / name), f"/{name}"]
    code = f"""
import json
report = {{}}
for path in {targets!r}:
    try:
        with open(path, "w") as f:
            f.write("pwned")
        report[path] = "written"
    except OSError as exc:
        report[path] = "refused: " + exc.strerror
print(json.dumps(report))
"""
    try:
        report = last_json(sandbox.run_python(code))
        assert isinstance(report, dict)
        written = [path for path, how in report.items() if not how.startswith("refused")]
        assert written == []
        assert [p for p in targets if os.path.exists(p)] == []
    finally:
        for path in targets:  # never leave a probe behind, even when the test fails
            if os.path.isfile(path):
                os.unlink(path)


def test_host_environment_and_secrets_are_unreachable(new_sandbox: NewSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"s3cret-{secrets.token_hex(8)}"
    monkeypatch.setenv("AGENTENV_TEST_SECRET", secret)
    sb = new_sandbox()  # created after the secret is set: it must not inherit it
    needs(sb, "namespaces", "dedicated_uid")
    code = f"""
import json, os
found = []
if any({secret!r} in v for v in os.environ.values()):
    found.append("os.environ")
for pid in ["self", "1"] + [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        with open(f"/proc/{{pid}}/environ", "rb") as f:
            if {secret!r}.encode() in f.read():
                found.append(pid)
    except OSError:
        pass  # unreadable is unreachable
print(json.dumps({{"found": found, "keys": sorted(os.environ)}}))
"""
    report = last_json(sb.run_python(code))
    assert isinstance(report, dict)
    assert report["found"] == []
    assert "AGENTENV_TEST_SECRET" not in report["keys"]


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../x", "..", ""])
def test_path_traversal_is_refused(sandbox: Sandbox, path: str) -> None:
    with pytest.raises(SandboxError):
        sandbox.write_files({path: "pwned"})
    with pytest.raises(SandboxError):
        sandbox.read_file(path)


def test_symlinks_out_of_the_workspace_are_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    made = sandbox.run(
        f"ln -s /etc/passwd passwd && ln -s {victim} victim && ln -s {tmp_path} outside "
        f"&& ln -s / rootdir && mkdir -p sub && ln -s ../../.. sub/up"
    )
    assert made.ok, made.stderr
    for path in ["passwd", "victim", "outside/victim.txt", "rootdir/etc/passwd", "sub/up/etc/passwd"]:
        with pytest.raises(SandboxError):
            sandbox.read_file(path)
    for path in ["victim", "outside/planted.txt", "sub/up/tmp/planted.txt"]:
        with pytest.raises(SandboxError):
            sandbox.write_files({path: "pwned"})
    assert victim.read_text() == "original"
    assert not (tmp_path / "planted.txt").exists()


# --- processes ---------------------------------------------------------------------


def test_orphans_are_reaped(sandbox: Sandbox) -> None:
    needs(sandbox, "namespaces", "dedicated_uid")
    tag = marker()
    started = sandbox.run_python(DAEMONIZE.replace("sys.argv[1]", repr(tag)))
    assert not started.timed_out, "the run waited for a daemon that closed its output"
    sandbox.reset()
    assert wait_until_gone(tag) == [], "the daemonised grandchild outlived reset"
    inside = visible_processes(sandbox)
    assert not any(tag in argv for argv in inside)
    assert "<zombie>" not in inside
    zombies_of_ours = [p for p in os.listdir("/proc") if p.isdigit() and _is_zombie_child(int(p))]
    assert zombies_of_ours == []


def _is_zombie_child(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    return fields[0] == b"Z" and int(fields[1]) == os.getpid()


def test_no_privilege_escalation(sandbox: Sandbox) -> None:
    code = r"""
import json, os
caps = {k: int(v, 16) for k, v in (line.split(":\t") for line in open("/proc/self/status").read().splitlines()
        if line.startswith("Cap"))}
try:
    os.setuid(0)
    setuid = "succeeded"
except PermissionError:
    setuid = "refused"
print(json.dumps({"uid": os.getuid(), "euid": os.geteuid(), "caps": caps, "setuid": setuid}))
"""
    report = last_json(sandbox.run_python(code))
    assert isinstance(report, dict)
    assert report["uid"] != 0 and report["euid"] != 0
    assert report["caps"]["CapEff"] == 0 and report["caps"]["CapPrm"] == 0
    assert report["setuid"] == "refused"


def test_nothing_survives_reset(sandbox: Sandbox) -> None:
    needs(sandbox, "namespaces")
    tag = marker()
    sandbox.write_files({"given.txt": "from the host"})
    made = sandbox.run_python(
        "open('made.txt', 'w').write('x'); open('/tmp/agentenv-left.txt', 'w').write('x')\n"
        + DAEMONIZE.replace("sys.argv[1]", repr(tag))
    )
    assert made.ok, made.stderr
    sandbox.reset()
    after = sandbox.run_python(
        "import json, os; print(json.dumps([os.listdir('.'), os.path.exists('/tmp/agentenv-left.txt')]))"
    )
    assert last_json(after) == [[], False]
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("given.txt")
    assert wait_until_gone(tag) == []
    assert not any(tag in argv for argv in visible_processes(sandbox))


def test_two_sandboxes_cannot_see_each_other(new_sandbox: NewSandbox) -> None:
    a, b = new_sandbox(), new_sandbox()
    needs(a, "namespaces")
    secret = secrets.token_hex(8)
    a.write_files({"secret.txt": secret})
    a_workspace = a.run("pwd").stdout.strip()
    tag = marker(3)  # long enough for B to look, short enough not to wait for the timeout
    sleeper = threading.Thread(target=a.run, args=(f"sleep {tag}",), kwargs={"timeout_s": 8})
    sleeper.start()
    try:
        _wait_for_host_process(tag)
        code = f"""
import json, os

report = {{}}
try:
    report["listing"] = os.listdir({a_workspace!r})
except OSError as exc:
    report["listing"] = exc.strerror
try:
    report["secret"] = open(os.path.join({a_workspace!r}, "secret.txt")).read()
except OSError as exc:
    report["secret"] = exc.strerror
print(json.dumps(report))
"""
        report = last_json(b.run_python(code))
        seen_by_b = visible_processes(b)
    finally:
        sleeper.join()
    assert isinstance(report, dict)
    # The path may exist in B as B's own workspace (Docker mounts each at the same place): not A's files.
    assert report["secret"] != secret and "secret.txt" not in report["listing"], report
    assert not any(tag in argv for argv in seen_by_b), "B sees A's process"


def _wait_for_host_process(text: str, within_s: float = 10.0) -> None:
    """Wait until the sleeper runs; where the host cannot see it (a VM engine), go on after the wait."""
    end = time.monotonic() + within_s
    while not host_pids_with(text) and time.monotonic() < end:
        time.sleep(0.05)


SHARED_MEMORY = """
import json, os
left = []
for path in ("/dev/shm/agentenv-note", "/dev/mqueue/agentenv-queue"):
    try:
        with open(path, "w") as f:
            f.write("the last episode's state")
        left.append(path)
    except OSError:
        pass
print(json.dumps(left))
"""


def test_shared_memory_and_message_queues_do_not_survive_reset(sandbox: Sandbox) -> None:
    # /dev/shm and /dev/mqueue are writable by every process and live as long as the
    # sandbox: the next episode must not find what the last one left there.
    made = sandbox.run_python(SHARED_MEMORY)
    assert made.ok, made.stderr
    sandbox.reset()
    after = sandbox.run_python(
        "import json, os; print(json.dumps([p for p in ('/dev/shm/agentenv-note', '/dev/mqueue/agentenv-queue')"
        " if os.path.exists(p)]))"
    )
    assert last_json(after) == []


# Leaves SysV shared memory segments (unattached, each holding NOTE), a message queue and a
# semaphore set: objects of the IPC namespace, which outlive the process that made them.
SYSV_IPC_LEAVE = r"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
made = 0
for i in range(MIB):
    sid = libc.shmget(0x5EED0000 + i, ctypes.c_size_t(1 << 20), 0o1666)  # IPC_CREAT | 0666
    if sid < 0:
        break
    address = libc.shmat(sid, None, 0)
    ctypes.memset(address, 0x41, 1 << 20)
    ctypes.memmove(address, b"NOTE", 4)
    libc.shmdt(ctypes.c_void_p(address))
    made += 1
queue = libc.msgget(0x5EED1000, 0o1666)
semaphores = libc.semget(0x5EED2000, 1, 0o1666)
print(json.dumps([made, queue >= 0, semaphores >= 0]))
"""

SYSV_IPC_FIND = r"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
listed = [open(f"/proc/sysvipc/{kind}").read().splitlines()[1:] for kind in ("shm", "msg", "sem")]
sid = libc.shmget(0x5EED0000, 0, 0)
note = ctypes.string_at(libc.shmat(sid, None, 0), 4).decode() if sid >= 0 else None
queue, semaphores = libc.msgget(0x5EED1000, 0), libc.semget(0x5EED2000, 0, 0)
print(json.dumps({"listed": listed, "note": note, "queue": queue, "sem": semaphores}))
"""


def test_sysv_ipc_objects_last_one_run(sandbox: Sandbox) -> None:
    # They belong to the IPC namespace, not to a process: left alone, the next run (and
    # the next episode, after reset) would find what this one wrote.
    made = sandbox.run_python(SYSV_IPC_LEAVE.replace("MIB", "2"))
    assert last_json(made) == [2, True, True], made.stderr
    found = last_json(sandbox.run_python(SYSV_IPC_FIND))
    assert found == {"listed": [[], [], []], "note": None, "queue": -1, "sem": -1}
    sandbox.run_python(SYSV_IPC_LEAVE.replace("MIB", "2"))
    sandbox.reset()
    assert last_json(sandbox.run_python(SYSV_IPC_FIND)) == found


def test_sysv_shared_memory_cannot_starve_later_runs(sandbox: Sandbox) -> None:
    # Unattached segments stay charged to the sandbox's memory: 160 MiB of them must not
    # leave the next run (or the sandbox's own file operations) out of memory.
    pinned = last_json(sandbox.run_python(SYSV_IPC_LEAVE.replace("MIB", "160"), timeout_s=20))
    assert isinstance(pinned, list) and pinned[0] == 160, pinned
    after = sandbox.run_python("hog = bytearray(160 << 20); print(len(hog) >> 20)", timeout_s=20)
    assert after.ok and after.stdout == "160\n", after
    sandbox.write_files({"still.txt": "works"})
    assert sandbox.read_file("still.txt") == b"works"


# --- what a run may do to its own directories ------------------------------------------

# Moves every entry of /tmp it can away and puts a file or a symlink (to TARGET) in its
# place: the process backend's launcher makes the workspace's mount point there.
REPLACE_TMP_ENTRIES = r"""
import json, os
report = {}
for i, name in enumerate(sorted(os.listdir("/tmp"))):
    try:
        os.rename(f"/tmp/{name}", f"/tmp/moved-{i}")
    except OSError as exc:
        report[name] = "refused: " + exc.strerror
        continue
    if PLANT == "symlink":
        os.symlink(TARGET, f"/tmp/{name}")
    else:
        open(f"/tmp/{name}", "w").close()
    report[name] = "replaced"
print(json.dumps(report))
"""


@pytest.mark.parametrize("plant", ["file", "symlink"])
def test_what_a_run_does_to_its_tmp_is_its_own_doing(sandbox: Sandbox, tmp_path: Path, plant: str) -> None:
    # A later run must still start (a setup failure would end the episode as infra, a
    # way to dodge penalties), and nothing may follow the planted symlink to the host.
    target = tmp_path / "host-dir"
    target.mkdir()
    assert sandbox.run("true").ok  # whatever the backend makes in /tmp for a run is there now
    code = REPLACE_TMP_ENTRIES.replace("PLANT", repr(plant)).replace(
        "TARGET", repr(f"/proc/{os.getpid()}/root{target}")
    )
    last_json(sandbox.run_python(code))
    after = sandbox.run_python("import os; print(len(os.listdir('.')))")  # raises SandboxInfraError if it cannot start
    assert after.exit_code in (0, 126), after
    assert list(target.iterdir()) == [], "the host followed the run's symlink"
    sandbox.reset()
    assert sandbox.run("echo fine").stdout == "fine\n"


def test_a_run_cannot_lock_the_next_episode_out_of_its_workspace(sandbox: Sandbox) -> None:
    locked = sandbox.run_python(
        "import os\nos.mkdir('sub')\nfor path in ('sub', '.', '/tmp'):\n"
        "    try:\n        os.chmod(path, 0)\n    except OSError:\n        pass\n"
    )
    assert locked.ok, locked.stderr
    sandbox.reset()
    after = sandbox.run_python(
        "import os; open('mine.txt', 'w').write('x'); open('/tmp/t', 'w').write('x'); print(sorted(os.listdir('.')))"
    )
    assert after.ok and after.stdout == "['mine.txt']\n", after
    sandbox.write_files({"given.txt": "from the host"})
    assert sandbox.run("cat given.txt").stdout == "from the host"


# Marks the workspace and /tmp themselves (not what they hold): an extended attribute or
# chosen times, whichever the run may set there; prints, as JSON, the ones it set.
MARK_ROOTS = r"""
import json, os
done = []
for where in (".", "/tmp"):
    try:
        MARK
        done.append(where)
    except OSError:
        pass
print(json.dumps(done))
"""
# What of those marks each of the two directories shows now.
READ_ROOT_MARKS = r"""
import json, os
seen = {}
for where in (".", "/tmp"):
    st = os.stat(where)
    seen[where] = {
        "xattrs": [name for name in os.listxattr(where) if name.startswith("user.")],
        "times": [st.st_atime_ns // 10**9, st.st_mtime_ns // 10**9],
    }
print(json.dumps(seen))
"""


def test_extended_attributes_on_the_workspace_and_tmp_do_not_survive_reset(sandbox: Sandbox) -> None:
    # Emptying a directory leaves the directory: an attribute set on /workspace itself
    # would carry data to the next episode (a guesser learning hidden answers across verifications).
    made = sandbox.run_python(MARK_ROOTS.replace("MARK", 'os.setxattr(where, "user.mark", b"secret")'))
    assert "." in last_json(made), made.stderr
    sandbox.reset()
    seen = last_json(sandbox.run_python(READ_ROOT_MARKS))
    assert [seen[where]["xattrs"] for where in (".", "/tmp")] == [[], []]


def test_times_of_the_workspace_and_tmp_do_not_survive_reset(sandbox: Sandbox) -> None:
    made = sandbox.run_python(MARK_ROOTS.replace("MARK", "os.utime(where, (123456789, 987654321))"))
    assert "." in last_json(made), made.stderr
    sandbox.reset()
    seen = last_json(sandbox.run_python(READ_ROOT_MARKS))
    for where in (".", "/tmp"):
        atime, mtime = seen[where]["times"]
        assert atime != 123456789 and mtime != 987654321, (where, seen)


# add_key(2) on the uid's user keyring (@u): as the repro of a keyring that outlived reset.
ADD_KEY = r"""
import ctypes, os
ADD_KEY = {"x86_64": 248, "aarch64": 217}[os.uname().machine]
libc = ctypes.CDLL(None, use_errno=True)
made = libc.syscall(ADD_KEY, b"user", b"agentenv-key", b"secret", 6, ctypes.c_int(-4))
print(made, ctypes.get_errno())
"""


def test_kernel_keyrings_are_refused(sandbox: Sandbox) -> None:
    # A uid's keyrings belong to the kernel, not to a run: a key added by one episode
    # would be there for the next, after any reset. Docker's default seccomp profile refuses them.
    needs(sandbox, "userns_denied")  # the process backend's seccomp filter
    result = sandbox.run_python(ADD_KEY)
    assert result.ok and result.stdout.split() == ["-1", str(errno.EPERM)], result


def test_tmp_lasts_one_run_as_a_snapshot_keeps_only_the_workspace(new_sandbox: NewSandbox) -> None:
    # A resume from a snapshot must find what the original episode found at that turn:
    # /tmp, which no snapshot keeps, holds nothing from an earlier run either.
    write = (
        "import os, tempfile\nfor d in ('.', tempfile.gettempdir()):\n    open(os.path.join(d, 'k'), 'w').write('k')"
    )
    read = "import os, tempfile\nprint([os.path.exists(os.path.join(d, 'k')) for d in ('.', tempfile.gettempdir())])"
    original = new_sandbox()
    assert original.run_python(write).ok
    archive = original.snapshot()
    resumed = new_sandbox()
    resumed.restore(archive)
    assert original.run_python(read).stdout == resumed.run_python(read).stdout == "[True, False]\n"


# What a resumed run can see of the workspace: each entry's permission bits and mtime.
STAT_WORKSPACE = r"""
import json, os
seen = {}
for top, dirs, files in os.walk("."):
    for name in dirs + files:
        st = os.lstat(os.path.join(top, name))
        seen[os.path.join(top, name)] = [oct(st.st_mode), round(st.st_mtime, 3)]
print(json.dumps(seen, sort_keys=True))
"""


def test_a_restored_workspace_has_the_modes_and_times_the_original_had(new_sandbox: NewSandbox) -> None:
    # The design promises the exact state: a directory made read-only, a file others may
    # write, one nobody may read, or the order of two mtimes within one second (what make
    # compares) must read the same after a resume, or the resumed episode runs differently.
    original = new_sandbox()
    made = original.run_python(
        "import os\nos.mkdir('ro', 0o500); os.mkdir('priv', 0o700)\n"
        "for name, mode in (('shared', 0o666), ('mine', 0o400)):\n"
        "    open(name, 'w').write(name); os.chmod(name, mode)\n"
        "os.utime('shared', (1e9 + 0.25, 1e9 + 0.25)); os.utime('mine', (1e9 + 0.75, 1e9 + 0.75))\n"
    )
    assert made.ok, made.stderr
    resumed = new_sandbox()
    resumed.restore(original.snapshot())
    assert last_json(resumed.run_python(STAT_WORKSPACE)) == last_json(original.run_python(STAT_WORKSPACE))


def test_a_snapshot_keeps_every_name_of_a_hard_linked_file(new_sandbox: NewSandbox) -> None:
    # Restore takes no hard links, so the snapshot must not leave the second name out:
    # `os.link("draft.py", "solution.py")` would make the resumed episode lose its solution.
    original = new_sandbox()
    assert original.run_python("import os; open('draft.py', 'w').write('x = 1'); os.link('draft.py', 'sol.py')").ok
    resumed = new_sandbox()
    resumed.restore(original.snapshot())
    assert resumed.read_file("sol.py") == resumed.read_file("draft.py") == b"x = 1"


def test_restore_gives_the_workspace_back_its_mode(sandbox: Sandbox) -> None:
    # Restoring into a sandbox whose last run made its workspace read-only (a miner
    # restarting at an earlier turn): the resumed run must be able to write, as the original could.
    archive = sandbox.snapshot()
    assert sandbox.run_python("import os; os.chmod('.', 0o500)").ok
    sandbox.restore(archive)
    written = sandbox.run_python("open('new.txt', 'w').write('x')")
    assert written.ok, written.stderr


# --- snapshots of what a run made ------------------------------------------------------

LEAVE_IN_WORKSPACE = {
    # archived once, refused on restore: every resume from that snapshot would fail
    "a fifo": "import os; os.mkfifo('pipe'); open('kept.txt', 'w').write('kept')",
    # 20 levels of 250-character names: the path is past PATH_MAX
    "a path too long": "import os\nfor _ in range(20):\n    os.mkdir('d' * 250); os.chdir('d' * 250)\n",
    "a symlink out": "import os; os.symlink('/etc/passwd', 'out'); open('kept.txt', 'w').write('kept')",
}


@pytest.mark.parametrize("left", LEAVE_IN_WORKSPACE)
def test_a_snapshot_restores_or_is_refused_as_the_runs_doing(sandbox: Sandbox, left: str) -> None:
    # A snapshot is kept after every step for the failure miner: one that raises anything but
    # SandboxError, or that restore refuses, would make the episode (or its resumes) infra.
    made = sandbox.run_python(LEAVE_IN_WORKSPACE[left])
    assert made.ok, made.stderr
    try:
        archive = sandbox.snapshot()
    except SandboxError:
        assert left == "a path too long", f"a workspace with {left} can be archived"
        return
    sandbox.reset()
    sandbox.restore(archive)
    assert sandbox.read_file("kept.txt") == b"kept"


def test_sparse_files_cannot_make_a_snapshot_outgrow_its_cap(sandbox: Sandbox) -> None:
    # Each file may be as long as RLIMIT_FSIZE while holding no page of the quota: without a
    # cap checked before each file is read, whoever builds the archive pays for their full
    # length in memory (the host, or the container's runner: past its memory, infra).
    files = 2 * LIMITS.memory_mb // LIMITS.workspace_mb
    made = sandbox.run_python(
        f"import os\nos.mkdir('sub')\nfor i in range({files}):\n"
        f"    open(f'sub/s{{i}}', 'wb').truncate({LIMITS.workspace_mb} << 20)\n"
    )
    assert made.ok, made.stderr
    peak_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(SandboxError, match="larger than"):
        sandbox.snapshot()
    peak_growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before_kib) / 1024
    assert peak_growth_mib < 3 * LIMITS.workspace_mb, f"host memory grew {peak_growth_mib:.0f} MiB"
