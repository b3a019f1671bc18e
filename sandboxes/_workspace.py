"""Host-side access to a sandbox workspace that sandboxed code has written to.

The host process may be more privileged than the sandbox (root, where the sandbox
runs as its own uid), so every path is opened one component at a time with
``O_NOFOLLOW``: a symlink planted by sandboxed code (``out.txt -> /etc/shadow``)
is refused instead of followed, and FIFOs and devices are refused instead of
opened. Archive members that would land outside the workspace are refused before
anything is written.

Left out: `snapshot`'s tar walk goes by path; it is race-free only while no
sandboxed process runs, which the process backend guarantees between runs when
it has a PID namespace (see its docstring).
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
import shutil
import stat
import tarfile

from agentenv.sandboxes.base import SandboxError, workspace_path

__all__ = ["read_file", "restore_tar", "snapshot_tar", "wipe", "write_file"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
Owner = tuple[int, int] | None


def write_file(root: str, path: str, data: bytes, owner: Owner) -> None:
    """Write ``data`` at workspace-relative ``path``, creating directories owned by ``owner``."""
    rel = workspace_path(path)
    *dirs, name = rel.split("/")
    parent = _open_parent(root, rel, dirs, create=True, owner=owner)
    try:
        fd = _open_leaf(rel, name, parent, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(data)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise SandboxError(f"cannot write {path!r}: the workspace is full ({exc.strerror})") from exc
            raise
        finally:
            os.close(fd)
    finally:
        os.close(parent)


def read_file(root: str, path: str) -> bytes:
    """The bytes of the regular file at workspace-relative ``path``."""
    rel = workspace_path(path)
    *dirs, name = rel.split("/")
    parent = _open_parent(root, rel, dirs, create=False, owner=None)
    try:
        fd = _open_leaf(rel, name, parent, os.O_RDONLY)
    finally:
        os.close(parent)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _open_parent(root: str, rel: str, dirs: list[str], *, create: bool, owner: Owner) -> int:
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in dirs:
            if create:
                _make_dir(fd, part, owner)
            nxt = _open_component(fd, part, rel)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _make_dir(parent: int, name: str, owner: Owner) -> None:
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
    except FileExistsError:
        return
    if owner is not None:
        os.chown(name, *owner, dir_fd=parent, follow_symlinks=False)


def _open_component(parent: int, name: str, rel: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(parent, name):
            raise SandboxError(f"path {rel!r} goes through a symlink ({name!r}); refused") from exc
        if exc.errno == errno.ENOTDIR:
            raise SandboxError(f"path {rel!r}: {name!r} is not a directory") from exc
        raise


def _open_leaf(rel: str, name: str, parent: int, flags: int) -> int:
    # O_NONBLOCK: opening a FIFO planted by the sandbox must not hang the host.
    flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o644, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SandboxError(f"path {rel!r} is a symlink; refused") from exc
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            raise SandboxError(f"path {rel!r} is not a regular file") from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SandboxError(f"path {rel!r} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def _is_symlink(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def wipe(root: str) -> None:
    """Remove everything inside ``root``, keeping ``root`` itself (it may be a mount point)."""
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)  # fd-based on Linux: does not follow planted symlinks
            else:
                os.unlink(entry.path)


def snapshot_tar(root: str) -> bytes:
    """The contents of ``root`` as an uncompressed tar (symlinks stored, not followed)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar, os.scandir(root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            tar.add(entry.path, arcname=entry.name, recursive=True)
    return buf.getvalue()


def restore_tar(root: str, archive: bytes, owner: Owner) -> None:
    """Replace the contents of ``root`` with ``archive``, refusing members that escape it."""
    try:
        tar = tarfile.open(fileobj=io.BytesIO(archive), mode="r:")
    except tarfile.TarError as exc:
        raise SandboxError(f"expected a tar archive from snapshot(), got unreadable bytes: {exc}") from exc
    with tar:
        members = tar.getmembers()
        for member in members:
            _check_member(member)
        wipe(root)
        try:
            tar.extractall(root, members=[m for m in members if _norm(m.name) != "."], filter="data")
        except tarfile.FilterError as exc:
            raise SandboxError(f"archive member refused: {exc}") from exc
    if owner is not None:
        _chown_tree(root, owner)


def _norm(name: str) -> str:
    return posixpath.normpath(name) if name else "."


def _check_member(member: tarfile.TarInfo) -> None:
    if _norm(member.name) == ".":
        return
    rel = workspace_path(member.name)
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise SandboxError(f"archive member {member.name!r} is not a file, directory or link; refused")
    if member.islnk():
        workspace_path(member.linkname)
    if member.issym():
        target = member.linkname
        if target.startswith("/"):
            raise SandboxError(f"archive symlink {member.name!r} -> {target!r} points outside the workspace")
        workspace_path(posixpath.join(posixpath.dirname(rel), target))


def _chown_tree(root: str, owner: tuple[int, int]) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), *owner, follow_symlinks=False)
