"""The Python a process-sandbox run gets, and the host's Python packages it must not see.

Runs get the base interpreter of this process (never a venv's), first on their
PATH, with ``-I`` for `run_python`; every directory that holds Python packages on
this host (the venv, site-/dist-packages and the non-stdlib ``sys.path`` of each
interpreter on the run's PATH, agentenv's own sources and checkout) is covered in
the run's mount namespace by `agentenv.sandboxes.process`. Each interpreter is
asked where its packages are once per process (``-I -S``, then ``site.main()``, so
``.pth`` additions count). Left out: the covering itself (the launcher mounts).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from agentenv.sandboxes.base import SandboxInfraError

__all__ = ["PRIVATE_TMP_AT", "RUN_PATH", "Python", "covers_for", "host_python", "link_interpreter"]

logger = logging.getLogger("agentenv.sandboxes")

PRIVATE_TMP_AT = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
RUN_PATH = ("/usr/local/bin", "/usr/bin", "/bin")  # after the sandbox's own bin directory
_PYTHON_NAME = re.compile(r"python[0-9.]*")
_CHECKOUT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")

# Never covered (nor anything above them), whatever a host's sys.path holds.
_ESSENTIAL = (
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/bin",
    "/usr/local/lib",
    "/etc",
    "/tmp",
    "/var/tmp",
    "/run",
    "/proc",
    "/dev",
    "/sys",
)


@dataclass(frozen=True)
class Python:
    executable: str
    """The base interpreter of this one (a venv's ``home``), symlinks resolved."""
    dirs: tuple[str, ...]
    """What it needs to see: prefixes, its bin directory, the stdlib; outer ones first (binds nest)."""
    packages: tuple[str, ...]
    """Host directories holding Python packages (none nested in another): the venv,
    site-/dist-packages and the non-stdlib ``sys.path`` of every interpreter on the run's
    PATH and of this process, and agentenv's own source checkout."""
    unasked: tuple[str, ...]
    """Interpreters on the run's PATH that did not say where their packages are."""


@functools.cache
def host_python() -> Python:
    executable = _base_executable()
    asked = _package_dirs_of(executable)
    if asked is None:  # not cached (an exception): the next sandbox asks again
        raise SandboxInfraError(f"the interpreter for sandboxed code, {executable}, does not start")
    stdlib, found = asked
    found.update({sys.prefix, sys.exec_prefix} - {sys.base_prefix, sys.base_exec_prefix})  # a venv
    found.update(p for p in sys.path if p)  # PYTHONPATH, the venv's site-packages, a checkout on the path
    not_packages, unasked = set(stdlib), []
    for interpreter in sorted(_pythons_on(RUN_PATH) - {executable}):
        asked = _package_dirs_of(interpreter)
        if asked is None:
            unasked.append(interpreter)
            continue
        not_packages.update(asked[0])
        found.update(asked[1])
    found.update(_agentenv_sources())
    real = {p for p in map(os.path.realpath, found) if os.path.isdir(p)} - not_packages
    outermost = sorted(p for p in real if not any(q != p and _within(p, q) for q in real))
    dirs = {sys.base_prefix, sys.base_exec_prefix, os.path.dirname(executable), *stdlib}
    return Python(
        executable, tuple(sorted((d for d in dirs if os.path.isdir(d)), key=len)), tuple(outermost), tuple(unasked)
    )


def _base_executable() -> str:
    for candidate in (getattr(sys, "_base_executable", None), sys.executable):
        if candidate and os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    raise SandboxInfraError(f"no Python interpreter to give sandboxed code: {sys.executable!r} is not executable")


def _pythons_on(dirs: Sequence[str]) -> set[str]:
    """The Python interpreters (``python``, ``python3``, ``python3.11``...) in ``dirs``, resolved."""
    found = set()
    for directory in dirs:
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            path = os.path.realpath(os.path.join(directory, name))
            if _PYTHON_NAME.fullmatch(name) and os.path.isfile(path) and os.access(path, os.X_OK):
                found.add(path)
    return found


def _package_dirs_of(interpreter: str) -> tuple[set[str], set[str]] | None:
    """``interpreter``'s stdlib directories and where it finds packages (site dirs, .pth
    additions), asked of it and resolved; None if it would not say."""
    try:
        out = subprocess.run(
            [interpreter, "-I", "-S", "-c", _PACKAGE_DIRS],
            capture_output=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin"},
            stdin=subprocess.DEVNULL,
            check=True,
        )
        found = json.loads(out.stdout)
        stdlib, packages = found["stdlib"], found["packages"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError) as exc:
        logger.warning("process sandbox: cannot ask %s where its packages are (%s)", interpreter, exc)
        return None
    return (
        {os.path.realpath(p) for p in stdlib if isinstance(p, str) and p},
        {os.path.realpath(p) for p in packages if isinstance(p, str) and p},
    )


# Run with -S: sys.path is the stdlib only until site.main() adds the rest.
_PACKAGE_DIRS = (
    "import json, sys\n"
    "stdlib = [p for p in sys.path if p]\n"
    "import site\n"
    "site.main()\n"
    "packages = [p for p in sys.path if p not in stdlib]\n"
    "packages += list(getattr(site, 'getsitepackages', list)()) + [site.getusersitepackages()]\n"
    "print(json.dumps({'stdlib': stdlib, 'packages': packages}))\n"
)


def _agentenv_sources() -> set[str]:
    """agentenv's package directories (the answer keys of its envs among them) and, for a
    source checkout (an editable install), the checkout's root."""
    dirs = {os.path.dirname(os.path.abspath(__file__)), *importlib.import_module("agentenv").__path__}
    spec = importlib.util.find_spec("agentenv.envs")  # found, not imported: sandboxes never import envs
    if spec is not None and spec.submodule_search_locations:
        dirs.update(spec.submodule_search_locations)
    dirs = {os.path.realpath(d) for d in dirs}  # the checkout links src/agentenv and agentenv/envs, ...
    roots = {
        os.path.dirname(d)
        for d in dirs
        if any(os.path.exists(os.path.join(os.path.dirname(d), m)) for m in _CHECKOUT_MARKERS)
    }
    return dirs | roots


def covers_for(python: Python, root: str) -> tuple[list[str], str]:
    """The package directories to cover in the runs of the sandbox at ``root``, and why
    some stay visible ('' when none do): covering one that holds something a run needs
    (its workspace, the stdlib, /usr/lib...) would hide that too."""
    keep = [root, *python.dirs, *_ESSENTIAL]
    covers: list[str] = []
    uncovered: list[str] = []
    for path in python.packages:
        if any(_within(path, tmp) for tmp in PRIVATE_TMP_AT):
            continue  # a run sees its private /tmp there, not the host's (a script's directory, say)
        (uncovered if any(_within(n, path) for n in keep) else covers).append(path)
    why = []
    if uncovered:
        why.append(f"not covered, they hold what runs need: {', '.join(uncovered)}")
    if python.unasked:
        why.append(f"not asked where their packages are (they did not start): {', '.join(python.unasked)}")
    return covers, "; ".join(why)


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def link_interpreter(bindir: str, executable: str) -> None:
    """A bin directory, first on the run's PATH, where ``python`` and ``python3`` are the base interpreter."""
    os.mkdir(bindir, 0o755)
    for name in ("python", f"python{sys.version_info[0]}", f"python{sys.version_info[0]}.{sys.version_info[1]}"):
        os.symlink(executable, os.path.join(bindir, name))
