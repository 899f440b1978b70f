"""Container log files: where they live, how they rotate, and how their tail is read.

Every runtime that runs real processes (``process``, ``runc``) sends a container's stdout and
stderr to one file opened ``O_APPEND``, :func:`log_path`, so the same code serves, tails and
rotates them whatever ran the container (ADR 0019). Per run and per pod directory::

    <pod dir>/<name>.log            the current run (what the process writes to)
    <pod dir>/<name>.log.1 .. .N    the current run's rotated chunks, .1 the newest
    <pod dir>/<name>.previous.log   the previous run (and .previous.log.1 .. .N)

A runtime calls :func:`begin_run` before it starts a run, which turns what is there into the
previous run's files, so ``previous=true`` shows the output of the run before a restart.

Rotation is copy-truncate: the file is copied to ``.1`` and truncated in place, so a process
whose stdout *is* that file keeps writing to it (and to its end, thanks to ``O_APPEND``) across
rotations and agent restarts. The price: lines written between the copy and the truncate are
lost. :class:`ContainerLogs` is the agent's view the HTTP server reads and the loop rotates
through; the decisions themselves (:func:`rotation_due`, :func:`last_lines`) are pure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agent.runtime.base import Runtime, Terminated

log = logging.getLogger(__name__)
DEFAULT_MAX_BYTES = 10 * 2**20
DEFAULT_KEEP = 3
ROTATE_EVERY = 5.0
_BLOCK = 64 * 1024
Obj = dict[str, Any]


def log_path(pod_dir: Path, container: str) -> Path:
    """The file the container's current run writes its stdout and stderr to."""
    return pod_dir / f"{container}.log"


def previous_log_path(pod_dir: Path, container: str) -> Path:
    """The file holding the container's previous run, once it has been restarted."""
    return pod_dir / f"{container}.previous.log"


def rotated(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


def run_files(path: Path, keep: int) -> list[Path]:
    """Every file of one run, oldest first: ``.keep`` .. ``.1`` then ``path`` itself."""
    return [rotated(path, n) for n in range(keep, 0, -1)] + [path]


def rotation_due(size: int, max_bytes: int) -> bool:
    """Whether a file of ``size`` bytes is rotated now (``max_bytes`` <= 0: never)."""
    return max_bytes > 0 and size > max_bytes


def last_lines(data: bytes, n: int | None) -> bytes:
    """The last ``n`` lines of ``data`` (all of it when ``n`` is None); an unterminated last
    line counts as a line."""
    if n is None:
        return data
    if n <= 0 or not data:
        return b""
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    cut = end
    for _ in range(n):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            return data
    return data[cut + 1 :]


def _read_backwards(path: Path, want_newlines: int, end: int | None = None) -> bytes:
    """The end of ``path`` (up to ``end``), read in blocks until it holds ``want_newlines``
    newlines or the file's start is reached."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return b""
    with f:
        size = f.seek(0, os.SEEK_END)
        pos = size if end is None else min(end, size)
        chunks: list[bytes] = []
        found = 0
        while pos > 0 and found < want_newlines:
            step = min(_BLOCK, pos)
            pos -= step
            f.seek(pos)
            chunk = f.read(step)
            chunks.append(chunk)
            found += chunk.count(b"\n")
        return b"".join(reversed(chunks))


def tail(files: Sequence[Path], n: int | None, end: int | None = None) -> bytes:
    """The last ``n`` lines (all when None) across ``files``, oldest first, reading only what
    it needs; the last file is read only up to byte ``end`` when given (where a follow goes
    on from)."""
    data = b""
    for i, path in enumerate(reversed(files)):
        if n is not None and data.count(b"\n") > n:
            break
        want = (1 << 62) if n is None else n + 1 - data.count(b"\n")
        data = _read_backwards(path, want, end if i == 0 else None) + data
    return last_lines(data, n)


def rotate(path: Path, keep: int) -> None:
    """Copy-truncate ``path``: shift ``.1..keep-1`` up one, copy it to ``.1``, truncate it.

    Bytes appended between the copy and the truncate are lost (documented in ADR 0019)."""
    if keep <= 0:
        path.open("r+b").truncate(0)
        return
    rotated(path, keep).unlink(missing_ok=True)
    for n in range(keep - 1, 0, -1):
        with contextlib.suppress(FileNotFoundError):
            rotated(path, n).rename(rotated(path, n + 1))
    shutil.copyfile(path, rotated(path, 1))
    with path.open("r+b") as f:
        f.truncate(0)


def rotate_if_due(path: Path, max_bytes: int, keep: int) -> bool:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if not rotation_due(size, max_bytes):
        return False
    rotate(path, keep)
    return True


def _rotated_of(path: Path) -> dict[int, Path]:
    """The rotated chunks that exist beside ``path``, by number (whatever ``keep`` was)."""
    found = {}
    for p in path.parent.glob(f"{path.name}.*"):
        suffix = p.name[len(path.name) + 1 :]
        if suffix.isdigit():
            found[int(suffix)] = p
    return found


def begin_run(pod_dir: Path, container: str) -> None:
    """Before a run starts: the last run's files (if any) become the previous run's, and the
    run before that is dropped. A runtime calls this right before opening :func:`log_path`."""
    current = log_path(pod_dir, container)
    if not current.exists():
        return
    previous = previous_log_path(pod_dir, container)
    for old in [previous, *_rotated_of(previous).values()]:
        old.unlink(missing_ok=True)
    for n, chunk in _rotated_of(current).items():
        chunk.rename(rotated(previous, n))
    current.rename(previous)


@runtime_checkable
class HasPodDir(Protocol):
    """A runtime whose containers log to files under a per-pod directory."""

    def pod_dir(self, pod_uid: str) -> Path: ...


@dataclass(frozen=True)
class LogTarget:
    """One container's log of one pod, found by the agent: what the server streams."""

    uid: str
    container: str
    files: list[Path]
    previous: bool


class LogLookupError(Exception):
    """The pod, container or run asked for is not on this node; ``code`` is the HTTP code."""

    def __init__(self, message: str, code: int = 404) -> None:
        super().__init__(message)
        self.code = code


def _containers(pod: Obj) -> list[str]:
    spec = pod.get("spec") or {}
    both = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return [str(c.get("name")) for c in both]


class ContainerLogs:
    """The agent's container logs: found by namespace and pod name among the pods it runs,
    rotated on :meth:`rotate_all` (the loop calls it every few seconds)."""

    def __init__(
        self,
        runtime: Runtime,
        pods: Callable[[], Iterable[Obj]],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep: int = DEFAULT_KEEP,
        rotate_every: float = ROTATE_EVERY,
    ) -> None:
        self.runtime, self.pods, self.max_bytes, self.keep = runtime, pods, max_bytes, keep
        self.rotate_every = rotate_every

    def _pod_dir(self, uid: str) -> Path:
        if not isinstance(self.runtime, HasPodDir):
            raise LogLookupError(f"the {self.runtime.name} runtime keeps no container logs")
        return self.runtime.pod_dir(uid)

    def find(self, namespace: str, name: str, container: str, previous: bool) -> LogTarget:
        for pod in self.pods():
            meta = pod.get("metadata") or {}
            if meta.get("namespace") == namespace and meta.get("name") == name:
                break
        else:
            raise LogLookupError(f'pod "{namespace}/{name}" is not running on this node')
        names = _containers(pod)
        if container not in names:
            raise LogLookupError(
                f'container "{container}" is not in pod "{name}": one of {", ".join(names)}'
            )
        uid = str(meta.get("uid"))
        pod_dir = self._pod_dir(uid)
        base = (previous_log_path if previous else log_path)(pod_dir, container)
        if not base.exists():
            what = "previous terminated container" if previous else "container"
            raise LogLookupError(f'{what} "{container}" in pod "{name}" not found', 400)
        return LogTarget(uid, container, run_files(base, self.keep), previous)

    def running(self, target: LogTarget) -> bool:
        """Whether the run ``target`` reads may still write (it is the current one, and it
        has not terminated)."""
        if target.previous:
            return False
        state = self.runtime.state(target.uid, target.container)
        return state is not None and not isinstance(state, Terminated)

    def current_logs(self) -> list[Path]:
        """The current log of every container the runtime holds (read in the loop's thread)."""
        if not isinstance(self.runtime, HasPodDir):
            return []
        return [log_path(self.runtime.pod_dir(u), n) for u, n in self.runtime.containers()]

    def rotate(self, paths: Iterable[Path]) -> int:
        """Rotate each of ``paths`` over the size limit; how many were rotated."""
        count = 0
        for path in paths:
            with contextlib.suppress(OSError):
                count += rotate_if_due(path, self.max_bytes, self.keep)
        return count

    def rotate_all(self) -> int:
        return self.rotate(self.current_logs())


async def keep_rotated(logs: ContainerLogs) -> None:
    """Rotate ``logs`` every ``logs.rotate_every`` seconds until cancelled.

    In the event loop itself, not a thread: a follow (``agent.server``) polling the same file
    then never sees a rotation half done, and the runtime is read from its own thread. A
    rotation costs one file copy of at most ``max_bytes`` plus what came in since."""
    while True:
        try:
            logs.rotate(logs.current_logs())
        except Exception:
            log.exception("log rotation failed")
        await asyncio.sleep(logs.rotate_every)
