"""The process backend's isolation from the host it runs on, one property per test.

Each test plays the policy: code written to reach the answer key that ships inside
the installed ``agentenv`` package, or the kernel surface a run has no use for,
runs inside a real `ProcessSandbox` run and reports what it managed. A case is
skipped only where the host lacks the feature, and the skip says which (see
`ProcessSandbox.isolation`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import site
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentenv
from agentenv.sandboxes import ExecResult, ProcessSandbox
from tests.sandboxes.conftest import LIMITS

pytestmark = pytest.mark.slow  # process sandboxes

# Every device node and link a run's /dev holds (less the nodes the host lacks).
DEV_NODES = {"null", "zero", "full", "random", "urandom", "tty"}
DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}
CLONE_NEWUSER = 0x10000000


@pytest.fixture
def sb() -> Iterator[ProcessSandbox]:
    with ProcessSandbox(LIMITS) as sandbox:
        yield sandbox


def needs(sb: ProcessSandbox, feature: str) -> None:
    if not getattr(sb.isolation, feature):
        pytest.skip(f"the process backend has no {feature} on this host: {sb.isolation.why_not}")


def report_of(result: ExecResult) -> dict:
    assert result.ok and result.stdout.strip(), f"the probe failed: {result}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert isinstance(report, dict)
    return report


# --- the host's Python packages ------------------------------------------------------


def test_host_packages_cannot_be_imported_by_any_python_on_the_path(sb: ProcessSandbox) -> None:
    needs(sb, "host_python_hidden")
    # agentenv (its envs hold the answer key), a dependency from the venv, a package of the base interpreter.
    code = r"""
import json, os, re, subprocess, sys
PROBE = '''
import json
found = []
for name in ("agentenv", "agentenv.envs.code.tasks", "pydantic", "pip"):
    try:
        __import__(name)
        found.append(name)
    except ImportError:
        pass
print(json.dumps(found))
'''
report = {}
out = subprocess.run([sys.executable, "-I", "-c", PROBE], capture_output=True, text=True)
report["run_python: " + sys.executable] = json.loads(out.stdout) if out.returncode == 0 else out.stderr[-300:]
for directory in os.environ["PATH"].split(":"):
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if re.fullmatch(r"python[0-9.]*", name):
            path = os.path.join(directory, name)
            out = subprocess.run([path, "-c", PROBE], capture_output=True, text=True)
            report[path] = json.loads(out.stdout) if out.returncode == 0 else out.stderr[-300:]
print(json.dumps(report))
"""
    report = report_of(sb.run_python(code, timeout_s=30))
    assert any(path.endswith("/python3") for path in report), f"no python3 on the run's PATH: {report}"
    assert all(isinstance(found, list) for found in report.values()), report
    assert {path: found for path, found in report.items() if found} == {}


def host_python_files() -> tuple[list[str], list[str]]:
    """Concrete files of the venv and the checkout, and package directories, as the host sees them."""
    envs = importlib.util.find_spec("agentenv.envs")  # found, not imported
    assert envs is not None and envs.submodule_search_locations
    answer_key = Path(next(iter(envs.submodule_search_locations)), "code", "tasks.py")
    assert answer_key.is_file(), "the code env's tasks (hidden tests, reference solutions) moved"
    package = Path(agentenv.__file__).parent
    files = [
        str(answer_key),
        agentenv.__file__,
        str(Path(__file__).resolve()),
        str(Path(sys.modules[ProcessSandbox.__module__].__file__ or "").resolve()),
    ]
    files += [str(p) for p in (package.parent / "pyproject.toml", Path(sys.prefix) / "pyvenv.cfg") if p.is_file()]
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    system = ["/usr/lib/python3/dist-packages", f"/usr/local/lib/{version}/dist-packages"]  # Debian's python3
    dirs = [
        *site.getsitepackages(),
        *site.getsitepackages([sys.base_prefix]),
        *system,
        sys.prefix,
        str(package),
        str(package.parent),
    ]
    for directory in site.getsitepackages():
        files += [str(p) for p in Path(directory).glob("__editable__*agentenv*")][:2]
        files += [str(p) for p in Path(directory).glob("pydantic/__init__.py")]
    return sorted(set(files)), sorted({d for d in dirs if os.path.isdir(d)})


def test_no_file_of_the_venv_or_the_checkout_is_readable(sb: ProcessSandbox) -> None:
    needs(sb, "host_python_hidden")
    files, dirs = host_python_files()
    assert files and dirs
    code = f"""
import json, os
report = {{}}
for path in {files!r}:
    try:
        with open(path, "rb") as f:
            report[path] = "read %d bytes" % len(f.read())
    except OSError as exc:
        report[path] = "refused: " + type(exc).__name__
for path in {dirs!r}:
    found = next((os.path.join(d, names[0]) for d, _, names in os.walk(path) if names), None)
    report[path] = "refused: nothing there" if found is None else "files, e.g. " + found
print(json.dumps(report))
"""
    report = report_of(sb.run_python(code))
    assert {path: how for path, how in report.items() if not how.startswith("refused")} == {}
    assert set(report) == {*files, *dirs}


# --- /dev --------------------------------------------------------------------------


def test_fuse_tun_and_kernel_devices_are_absent(sb: ProcessSandbox) -> None:
    needs(sb, "minimal_dev")
    block = [f"/dev/{name}" for name in sorted(os.listdir("/sys/block"))][:4] if os.path.isdir("/sys/block") else []
    targets = [
        "/dev/fuse",
        "/dev/net/tun",
        "/dev/kmsg",
        "/dev/mem",
        "/dev/kvm",
        "/dev/console",
        "/dev/ptmx",
        "/dev/userfaultfd",
        *block,
    ]
    code = f"""
import json
report = {{}}
for path in {targets!r}:
    try:
        with open(path, "r+b", buffering=0):
            report[path] = "opened"
    except OSError as exc:
        report[path] = type(exc).__name__
print(json.dumps(report))
"""
    report = report_of(sb.run_python(code))
    # Absent, not merely forbidden: the host's modes (0666 on many distributions) do not matter.
    assert {path: how for path, how in report.items() if how != "FileNotFoundError"} == {}


def test_dev_holds_only_the_expected_entries(sb: ProcessSandbox) -> None:
    needs(sb, "minimal_dev")
    code = r"""
import json, os, stat
entries = {}
for name in sorted(os.listdir("/dev")):
    st = os.lstat("/dev/" + name)
    kind = ("char" if stat.S_ISCHR(st.st_mode) else "link -> " + os.readlink("/dev/" + name)
            if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "other")
    entries[name] = kind
with open("/dev/null", "wb") as f:
    f.write(b"x")
with open("/dev/urandom", "rb") as f:
    random_bytes = len(f.read(16))
try:
    open("/dev/planted", "w").close()
    planted = "created"
except OSError as exc:
    planted = type(exc).__name__
with open("/dev/shm/x", "w") as f:
    f.write("shared memory is private tmp")
print(json.dumps({"entries": entries, "random": random_bytes, "planted": planted}))
"""
    report = report_of(sb.run_python(code))
    expected = {name: "char" for name in DEV_NODES if os.path.exists(f"/dev/{name}")}
    expected |= {name: f"link -> {target}" for name, target in DEV_LINKS.items()}
    expected["shm"] = "dir"
    assert report["entries"] == expected
    assert report["random"] == 16
    assert report["planted"] != "created"


# --- namespaces ----------------------------------------------------------------------


def test_new_user_namespaces_are_refused(sb: ProcessSandbox) -> None:
    needs(sb, "userns_denied")
    # Each attempt starts from a process outside any new namespace: the ones that change
    # the calling process (unshare) run in a forked child.
    code = rf"""
import ctypes, errno, json, os, platform, shutil, subprocess
libc = ctypes.CDLL(None, use_errno=True)
report = {{}}
def outcome(ret):
    return "succeeded" if ret >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
def in_child(attempt):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, attempt().encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    return os.read(r, 100).decode()
def os_unshare():
    try:
        os.unshare(os.CLONE_NEWUSER)
        return "succeeded"
    except OSError as exc:
        return errno.errorcode[exc.errno]
if shutil.which("unshare"):
    out = subprocess.run(["unshare", "-U", "true"], capture_output=True, text=True)
    report["unshare -U"] = "succeeded" if out.returncode == 0 else "failed: " + out.stderr.strip()[-80:]
if hasattr(os, "unshare"):
    report["os.unshare"] = in_child(os_unshare)
report["unshare(2)"] = in_child(lambda: outcome(libc.unshare({CLONE_NEWUSER})))
clone = {{"x86_64": 56, "aarch64": 220}}.get(platform.machine())
if clone is not None:
    pid = libc.syscall(clone, {CLONE_NEWUSER} | 17, 0, 0, 0, 0)  # SIGCHLD; no stack: like fork
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    report["clone(2)"] = outcome(pid)
report["clone3(2)"] = outcome(libc.syscall(435, 0, 0))
if platform.machine() == "x86_64":  # the i386 ABI (int 0x80) has its own syscall numbers
    import mmap
    code = bytes.fromhex("b836010000" "bb00000010" "cd80" "c3")  # eax = unshare(CLONE_NEWUSER); ret
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    int80 = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    def i386_unshare():
        ret = int80()  # the kernel's return value: -errno on failure
        return "succeeded" if ret >= 0 else errno.errorcode.get(-ret, "?")
    report["i386 unshare(2)"] = in_child(i386_unshare)
    report["x32 unshare(2)"] = in_child(lambda: outcome(libc.syscall(0x40000000 | 272, {CLONE_NEWUSER})))
print(json.dumps(report))
"""
    report = report_of(sb.run_python(code))
    for call in ("os.unshare", "unshare(2)", "clone(2)", "x32 unshare(2)"):
        assert report.get(call, "EPERM") == "EPERM", report
    assert report.get("i386 unshare(2)", "EPERM") in ("EPERM", "ENOSYS"), report  # ENOSYS: no ia32 emulation
    assert report["clone3(2)"] == "ENOSYS", report  # so libc falls back to clone, whose flags are checked
    assert not report.get("unshare -U", "failed").startswith("succeeded"), report


# --- the private /tmp -------------------------------------------------------------------


@pytest.mark.parametrize("plant", ["file", "symlink"])
def test_the_launcher_never_follows_what_is_in_the_runs_tmp(sb: ProcessSandbox, tmp_path: Path, plant: str) -> None:
    # As root, runs cannot rename what the launcher made in their /tmp (it is root's, sticky);
    # without root they share its uid and can. Played here from the host: the launcher
    # (root) must neither follow a symlink planted in place of the workspace's mount point
    # nor fail as infra: the next run fails as data, and a reset clears it.
    # /tmp is emptied after every run, so what is planted here stands for what a run's stray
    # (or a run without root) put there since.
    needs(sb, "namespaces")
    name = Path(sb._root).name
    made = sb.run(f"test -d /tmp/{name}")  # the mount point's directory, seen from inside a run
    if not made.ok:
        pytest.skip("this sandbox's workspace is not under a private /tmp: no mount point is made there")
    entry = Path(sb._tmp) / name
    assert not entry.exists()  # emptied after the run
    target = tmp_path / "host-dir"
    target.mkdir()
    if plant == "symlink":
        entry.symlink_to(f"/proc/{os.getpid()}/root{target}")
    else:
        entry.write_text("")
    blocked = sb.run("pwd")  # no SandboxInfraError
    assert blocked.exit_code == 126 and "reset the sandbox" in blocked.stderr, blocked
    assert list(target.iterdir()) == [], "the launcher followed the planted symlink"
    sb.reset()
    assert sb.run("pwd").stdout == f"{sb.workspace}\n"


# --- what must keep working ------------------------------------------------------------


def test_ordinary_python_still_works(sb: ProcessSandbox) -> None:
    has_sqlite = importlib.util.find_spec("_sqlite3") is not None  # same stdlib as the runs' interpreter
    code = r"""
import ctypes, json, multiprocessing, os, subprocess, sys, tempfile, threading

report = {"venv": sys.prefix != sys.base_prefix, "user_site": sys.flags.no_user_site == 0}
report["site_packages_on_path"] = [p for p in sys.path if "-packages" in p and os.path.isdir(p) and os.listdir(p)]
try:
    import sqlite3
    report["sqlite3"] = sqlite3.connect(":memory:").execute("select 6 * 7").fetchone()[0]
except ImportError:
    report["sqlite3"] = None
results = []
thread = threading.Thread(target=lambda: results.append(json.loads("[1, 2]")))
thread.start()
thread.join()
report["thread"] = results
with multiprocessing.Pool(2) as pool:  # forks, and semaphores in /dev/shm
    report["pool"] = pool.map(abs, [-1, -2, -3])
for name in ("python3", "python"):
    out = subprocess.run([name, "-c", "import sys, json; print(json.dumps(sys.prefix != sys.base_prefix))"],
                         capture_output=True, text=True)
    report[name] = out.stdout.strip() or out.stderr[-200:]
with tempfile.NamedTemporaryFile() as f:
    report["tmp"] = f.name.startswith("/tmp/") or f.name
report["urandom"] = len(os.urandom(8))
report["ctypes"] = ctypes.sizeof(ctypes.c_int)
print(json.dumps(report))
"""
    report = report_of(sb.run_python(code, timeout_s=20))
    assert report["venv"] is False, "runs must get the base interpreter, not the host's venv"
    assert report["site_packages_on_path"] == [] or not sb.isolation.host_python_hidden, report
    assert report["sqlite3"] == (42 if has_sqlite else None)
    assert report["thread"] == [[1, 2]] and report["pool"] == [1, 2, 3]
    assert (report["python3"], report["python"]) == ("false", "false"), report
    assert report["tmp"] is True and report["urandom"] == 8 and report["ctypes"] == 4
