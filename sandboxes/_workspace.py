"""Host-side access to a sandbox workspace that sandboxed code has written to.

The host process may be more privileged than the sandbox (root, where the sandbox
runs as its own uid), so every path is opened one component at a time with
``O_NOFOLLOW``: a symlink planted by sandboxed code (``out.txt -> /etc/shadow``)
is refused instead of followed, and FIFOs and devices are refused instead of
opened. Archive members that would land outside the workspace are refused before
anything is written.

`snapshot_tar` walks the same way, by directory descriptor, and archives only what
`restore_tar` takes back: regular files, directories, and symlinks that stay inside
the workspace (FIFOs, sockets and devices are left out). An archive past its cap
(`max_archive_bytes`) or holding a path too long to extract is refused with
`SandboxError`: the sizes are added up before any file is read (and checked again
before each one), so sparse files (no quota used, any length) cost the host no
memory past the cap, and none when refused.

Left out: hard links are archived as separate files; the walk is race-free only
while no sandboxed process runs, which the process backend guarantees between runs
when it has a PID namespace (see its docstring).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import posixpath
import stat
import tarfile
from collections.abc import Generator, Iterator

from agentenv.sandboxes.base import Limits, SandboxError, workspace_path
from agentenv.sandboxes.runner import ROOT_TIME_NS, empty_dir, run_xattrs

__all__ = ["max_archive_bytes", "max_inodes", "read_file", "restore_tar", "snapshot_tar", "wipe", "write_file"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_MAX = 4096  # Linux's, with the NUL: extracting a longer path fails
Owner = tuple[int, int] | None


def write_file(root: str, path: str, data: bytes, owner: Owner) -> None:
    """Write ``data`` at workspace-relative ``path``, creating directories owned by ``owner``."""
    rel = workspace_path(path)
    *dirs, name = rel.split("/")
    with _refused("write", path):
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
    with _refused("read", path, keep=FileNotFoundError):  # the absent file `Sandbox.read_file` promises
        parent = _open_parent(root, rel, dirs, create=False, owner=None)
        try:
            fd = _open_leaf(rel, name, parent, os.O_RDONLY)
        finally:
            os.close(parent)
        with os.fdopen(fd, "rb") as f:
            return f.read()


@contextlib.contextmanager
def _refused(verb: str, path: str, *, keep: type[OSError] | None = None) -> Iterator[None]:
    """Any other OSError as `SandboxError`: what a path or the sandboxed code's doing
    causes (a name too long, no permission, a directory gone meanwhile) is the
    caller's to show, not a host failure."""
    try:
        yield
    except OSError as exc:
        if keep is not None and isinstance(exc, keep):
            raise
        raise SandboxError(f"cannot {verb} {path[:200]!r}: {exc.strerror or exc}") from exc


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
    """Remove everything inside ``root``, keeping ``root`` itself (it may be a mount point),
    and what a run can leave on ``root`` itself: the extended attributes it can set
    (``user.*``, POSIX ACLs) go and its atime and mtime become the epoch, as in the
    Docker runner's `settle`. The entries go whole, so only the root needs this."""
    top = os.open(root, _DIR_FLAGS)
    try:
        empty_dir(top)  # by descriptor, iteratively: no planted symlink followed, no nesting too deep
    finally:
        os.close(top)
    for name in run_xattrs(root):
        os.removexattr(root, name, follow_symlinks=False)
    os.utime(root, ns=(ROOT_TIME_NS, ROOT_TIME_NS), follow_symlinks=False)


INODES_PER_MB = 256  # one per 4 KiB page: as many files as the size holds, each with data


def max_inodes(size_mb: int) -> int:
    """The inodes (files, directories, symlinks) a sandbox's tmpfs of ``size_mb`` MiB may hold.
    Empty files and directories take none of a tmpfs's size, but each costs kernel memory
    (1 to 2 KiB with a long name, more with extended attributes), charged to the sandbox:
    unbounded, one run making millions would pin all of its memory, and the runner's next
    operation would be OOM-killed (an infra failure the policy chose)."""
    return size_mb * INODES_PER_MB


def max_archive_bytes(limits: Limits) -> int:
    """The largest workspace archive (or file) a sandbox hands the host: twice the
    workspace leaves room for tar's headers; more would be sparse files or hard links."""
    return 2 * limits.workspace_mb * (1 << 20) + (1 << 20)


def snapshot_tar(root: str, max_bytes: int) -> bytes:
    """The contents of ``root`` as an uncompressed tar (see the module docstring);
    `SandboxError` when they cannot be archived within ``max_bytes`` or extracted again."""
    buf = io.BytesIO()
    top = os.open(root, _DIR_FLAGS)
    max_name = _PATH_MAX - 2 - len(root)
    try:
        with contextlib.closing(_entries(top, max_name)) as listed:  # sizes first: a refusal reads no data
            if sum(st.st_size + 2 * tarfile.BLOCKSIZE for *_, st in listed if stat.S_ISREG(st.st_mode)) > max_bytes:
                raise SandboxError(f"the workspace archive is larger than {max_bytes} bytes; not archived")
        entries = _entries(top, max_name)
        with contextlib.closing(entries), tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel, parent, name, st in entries:
                member = _member(rel, parent, name, st)
                if member is None:
                    continue
                if buf.tell() + member.size + 3 * tarfile.BLOCKSIZE > max_bytes:
                    raise SandboxError(f"the workspace archive is larger than {max_bytes} bytes; not archived")
                if member.isreg():
                    with _open_regular(parent, name, st) as f:
                        tar.addfile(member, f)
                else:
                    tar.addfile(member)
    except OSError as exc:  # below the root: what the sandbox made there (a short read is one too)
        raise SandboxError(f"the workspace cannot be archived: {exc}") from exc
    finally:
        os.close(top)
    if buf.tell() > max_bytes:
        raise SandboxError(f"the workspace archive is larger than {max_bytes} bytes; not archived")
    return buf.getvalue()


def _entries(top: int, max_name: int) -> Generator[tuple[str, int, str, os.stat_result], None, None]:
    """Everything under the directory open at ``top``: (its name in the archive, its
    parent's descriptor, its name there, its lstat), depth first in name order, each
    directory before what it holds. Directories are entered by descriptor with
    O_NOFOLLOW, and iteratively: no symlink is followed, no nesting overflows the stack."""
    stack: list[tuple[int, str, Iterator[str]]] = [(top, "", iter(sorted(os.listdir(top))))]
    try:
        while stack:
            fd, prefix, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                if fd != top:
                    os.close(fd)
                continue
            rel = prefix + name
            if len(rel) > max_name:
                raise SandboxError(f"the workspace holds a path longer than {max_name} characters; not archived")
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            yield rel, fd, name, st
            if stat.S_ISDIR(st.st_mode):
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                stack.append((child, rel + "/", iter(sorted(os.listdir(child)))))
    finally:
        for fd, _, _ in stack:
            if fd != top:
                os.close(fd)


def _member(rel: str, parent: int, name: str, st: os.stat_result) -> tarfile.TarInfo | None:
    """The archive member of one entry; None for what `restore_tar` would refuse
    (FIFOs, sockets, devices, symlinks that lead out of the workspace)."""
    member = tarfile.TarInfo(rel)
    member.mode = stat.S_IMODE(st.st_mode)
    member.mtime = st.st_mtime  # a float: PAX keeps the fraction (make-like tools compare them)
    if stat.S_ISREG(st.st_mode):
        member.size = st.st_size
    elif stat.S_ISDIR(st.st_mode):
        member.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        member.type, member.linkname = tarfile.SYMTYPE, os.readlink(name, dir_fd=parent)
        if not _link_stays_inside(rel, member.linkname):
            return None
    else:
        return None
    return member


def _open_regular(parent: int, name: str, st: os.stat_result) -> io.BufferedReader:
    """The file just listed, opened without following a symlink; OSError if it changed since."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    now = os.fstat(fd)
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
        os.close(fd)
        raise OSError(errno.ESTALE, f"{name!r} changed while the workspace was archived")
    return os.fdopen(fd, "rb")


def _link_stays_inside(rel: str, target: str) -> bool:
    if target.startswith("/"):
        return False
    try:
        workspace_path(posixpath.join(posixpath.dirname(rel), target))
    except SandboxError:
        return False
    return True


def restore_tar(root: str, archive: bytes, owner: Owner) -> None:
    """Replace the contents of ``root`` with ``archive``, refusing members that escape it."""
    try:
        tar = tarfile.open(fileobj=io.BytesIO(archive), mode="r:")
        members = tar.getmembers()  # reads to the end: a truncated archive fails here, before the wipe
    except tarfile.TarError as exc:
        raise SandboxError(f"expected a tar archive from snapshot(), got unreadable bytes: {exc}") from exc
    with tar:
        kinds: dict[str, str] = {}  # what the archive makes at each path, in order
        for member in members:
            _check_member(member, kinds)
        wipe(root)
        try:
            tar.extractall(root, members=[m for m in members if _norm(m.name) != "."], filter=_keep_modes)
            if owner is not None:
                _chown_tree(root, owner)
        except tarfile.FilterError as exc:
            raise SandboxError(f"archive member refused: {exc}") from exc
        except OSError as exc:  # what the archive asks for and the filesystem refuses (a path past PATH_MAX)
            raise SandboxError(f"the archive cannot be restored: {exc.strerror or exc}") from exc


def _keep_modes(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """tarfile's "data" filter, but with the permission bits the snapshot saw (it would
    give directories the default mode and files owner read-write, without group or
    others write): a resumed run finds the modes the original did. Never setuid,
    setgid or sticky bits."""
    checked = tarfile.data_filter(member, dest)
    return checked if member.issym() else checked.replace(mode=stat.S_IMODE(member.mode) & 0o777, deep=False)


def _norm(name: str) -> str:
    return posixpath.normpath(name) if name else "."


def _check_member(member: tarfile.TarInfo, kinds: dict[str, str]) -> None:
    """Refuse ``member`` unless it lands inside the workspace without going through
    anything but a directory of the archive's own: ``kinds`` maps each path the members
    before it make to "dir", "file" or "symlink". A lexical check of a symlink's target
    counts the levels of the member's name, which on disk may go through earlier
    symlinks that lead elsewhere, and tarfile's "data" filter, which resolves them, stops
    resolving past PATH_MAX (CVE-2025-4517, Python < 3.11.13): a hand-edited snapshot
    could write anywhere the host may. An archive from `snapshot_tar` never needs more:
    it walks the real tree, so no name in it goes through a symlink or comes twice."""
    if _norm(member.name) == ".":
        return
    rel = workspace_path(member.name)
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise SandboxError(f"archive member {member.name!r} is not a file, directory or link; refused")
    if member.islnk() and kinds.get(workspace_path(member.linkname)) != "file":
        raise SandboxError(f"archive hard link {member.name!r} -> {member.linkname!r} is not to a file before it")
    if member.issym() and not _link_stays_inside(rel, member.linkname):
        raise SandboxError(f"archive symlink {member.name!r} -> {member.linkname!r} points outside the workspace")
    parts = rel.split("/")
    for i in range(1, len(parts)):
        if kinds.setdefault("/".join(parts[:i]), "dir") != "dir":
            raise SandboxError(f"archive member {member.name!r} goes through a non-directory; refused")
    kind = "dir" if member.isdir() else "symlink" if member.issym() else "file"
    if rel in kinds and (kind, kinds[rel]) != ("dir", "dir"):
        raise SandboxError(f"archive member {member.name!r} comes twice; refused")
    kinds[rel] = kind


def _chown_tree(root: str, owner: tuple[int, int]) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), *owner, follow_symlinks=False)
