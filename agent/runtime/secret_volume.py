"""Secret volume files on memory, never on disk (ADR 0048).

A pod's Secret files live in ``<pod dir>/.secrets``, and the paths its mounts name
(``etc/creds/password``) are relative symlinks into it, so the process runtime (whose working
directory is the pod directory) and runc (which bind-mounts the pod directory, recursively, at
the same place in the container) both find them where ConfigMap files are.

``.secrets`` is memory-backed: as root, a tmpfs of its own mounted there per pod (mode 0700,
``nosuid,nodev,noexec``); otherwise a directory of this user under ``/dev/shm`` (a tmpfs on
every Linux) that ``.secrets`` links to. Files are written 0400 and directories left 0500,
owned by the user the pod's processes run as (the agent's: neither runtime switches user), so
they are readable by the pod and no one else. If no memory-backed place exists the pod does
not start: a Secret never falls back to disk. :func:`release` unmounts or removes it when the
pod goes. Called by the process and runc runtimes (``lay_out`` before each start, ``release``
in ``cleanup``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

DIR = ".secrets"
SHM = Path("/dev/shm")
MEMORY_FS = ("tmpfs", "ramfs")
TMPFS_OPTIONS = b"mode=0700,size=16m"
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MNT_DETACH = 2, 4, 8, 2
_libc = ctypes.CDLL(None, use_errno=True)


class NotMemoryBacked(OSError):
    """No memory-backed place for a pod's Secret files on this node."""


def fs_type(path: Path, mountinfo: str | None = None) -> str:
    """The file system type of the mount holding ``path`` (from ``/proc/self/mountinfo``)."""
    text = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    target, best, kind = str(path.resolve()), "", ""
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        point = fields[4].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, right.split()[0]
    return kind


def _mount_tmpfs(target: Path) -> None:
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    if _libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", flags, TMPFS_OPTIONS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {target}: {os.strerror(err)}")


def _shm_dir(pod_dir: Path) -> Path:
    return SHM / f"quaymaster-secrets-{os.geteuid()}" / pod_dir.name


def _store(pod_dir: Path) -> Path:
    """``<pod dir>/.secrets``, memory-backed, created on first use."""
    store = pod_dir / DIR
    if store.is_dir() and fs_type(store) in MEMORY_FS:
        return store
    pod_dir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0 and not store.is_symlink():
        store.mkdir(mode=0o700, exist_ok=True)
        try:
            _mount_tmpfs(store)
        except OSError:
            store.rmdir()  # no CAP_SYS_ADMIN (in a container): /dev/shm below
    if not store.is_dir():
        shm = _shm_dir(pod_dir)
        if not SHM.is_dir() or fs_type(SHM) not in MEMORY_FS:
            raise NotMemoryBacked(f"no tmpfs for Secret files: cannot mount one and {SHM} is not")
        shm.parent.mkdir(mode=0o700, exist_ok=True)
        shm.mkdir(mode=0o700, exist_ok=True)
        store.symlink_to(shm)
    if fs_type(store) not in MEMORY_FS:
        raise NotMemoryBacked(f"{store} is not memory-backed")
    return store


def _writable(directory: Path) -> None:
    """Open the 0500 directories again for the next write (the owner may, root or not)."""
    for d in [directory, *(p for p in directory.rglob("*") if p.is_dir() and not p.is_symlink())]:
        d.chmod(0o700)


def _seal_modes(directory: Path) -> None:
    for p in sorted(directory.rglob("*"), key=lambda q: -len(q.parts)):
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o500)
    directory.chmod(0o500)


def lay_out(pod_dir: Path, files: Mapping[str, bytes]) -> None:
    """Write ``files`` (path relative to the pod directory -> content) on memory, 0400, and
    link each path of the pod directory to its file. Paths must be checked safe before."""
    if not files:
        return
    store = _store(pod_dir)
    _writable(store)
    try:
        for rel, content in files.items():
            target = store / str(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                target.chmod(0o600)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o400)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            os.chmod(target, 0o400)
            link = pod_dir / str(rel)
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(os.path.relpath(target, link.parent))
    finally:
        _seal_modes(store)


def release(pod_dir: Path) -> None:
    """Unmount or remove the pod's Secret files (before its directory is removed)."""
    store = pod_dir / DIR
    if store.is_symlink():
        shm = _shm_dir(pod_dir)
        if shm.exists():
            _writable(shm)
            shutil.rmtree(shm, ignore_errors=True)
        store.unlink(missing_ok=True)
        return
    if store.is_dir() and os.path.ismount(store):
        with contextlib.suppress(OSError):
            _writable(store)
        _libc.umount2(str(store).encode(), _MNT_DETACH)
    if store.is_dir():
        with contextlib.suppress(OSError):
            _writable(store)
        shutil.rmtree(store, ignore_errors=True)
