"""mount(2) and umount2(2) for the process backend, which needs them as root only.

Python's standard library has no mount call; this is the smallest ctypes wrapper
that gives the backend size-limited tmpfs workspaces. Linux only.
"""

from __future__ import annotations

import ctypes
import os

from agentenv.sandboxes._workspace import max_inodes

__all__ = ["mount_tmpfs", "unmount"]

_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MNT_DETACH = 0x2

_libc = ctypes.CDLL(None, use_errno=True)


def mount_tmpfs(path: str, *, size_mb: int, uid: int, gid: int, mode: int) -> None:
    """Mount a tmpfs of ``size_mb`` MiB and `max_inodes` inodes at ``path``, its root
    owned by ``uid``:``gid`` with ``mode``."""
    options = f"size={size_mb}m,nr_inodes={max_inodes(size_mb)},mode={mode:o},uid={uid},gid={gid}".encode()
    flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV)
    if _libc.mount(b"tmpfs", path.encode(), b"tmpfs", flags, options) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs at {path}: {os.strerror(err)}")


def unmount(path: str) -> None:
    """Detach the mount at ``path`` (lazily, so a busy mount does not block close)."""
    if _libc.umount2(path.encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {path}: {os.strerror(err)}")
