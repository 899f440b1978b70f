"""Per-container cgroups on cgroup v1 or v2: limits in, OOM kills and usage out.

The process runtime puts every container in its own cgroup under `<parent>/pod<uid>/<name>`
so that a memory hog is OOM-killed alone, CPU is shared by request, and the kernel's own
counters tell an OOM kill apart from any other SIGKILL. Two layouts exist in the wild:
cgroup v2 (one unified hierarchy with `cgroup.controllers`) and cgroup v1 (a hierarchy per
controller: `memory`, `cpu`, `cpuacct`, possibly co-mounted). `detect()` reads the mount
table and picks one; everything else speaks in terms of a relative cgroup path.

The value mappings follow Kubernetes (shares = millicores * 1024 / 1000, min 2; v2 weight
from shares; quota = millicores * period / 1000, min 1 ms) and are pure functions, as are
the parsers of the control files, so both are unit-tested without a kernel.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agent.runtime.base import Resources, Usage

MIN_SHARES = 2
MAX_SHARES = 262_144
CFS_PERIOD_US = 100_000
MIN_QUOTA_US = 1_000
V1_CONTROLLERS = ("memory", "cpu", "cpuacct")


class CgroupsUnavailable(Exception):
    """This host gives the agent no writable memory and cpu cgroups (not root, read-only...)."""


# ---- pure: values written ----


def cpu_shares(request_millis: int | None) -> int:
    """v1 `cpu.shares` for a CPU request, as Kubernetes computes it."""
    if not request_millis:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, request_millis * 1024 // 1000))


def cpu_weight(shares: int) -> int:
    """v2 `cpu.weight` (1..10000) for v1 shares (2..262144), Kubernetes' linear map."""
    shares = max(MIN_SHARES, min(MAX_SHARES, shares))
    return 1 + ((shares - 2) * 9999) // 262_142


def cfs_quota_us(limit_millis: int | None, period_us: int = CFS_PERIOD_US) -> int:
    """v1 `cpu.cfs_quota_us` for a CPU limit; -1 is unlimited."""
    if not limit_millis:
        return -1
    return max(MIN_QUOTA_US, limit_millis * period_us // 1000)


def cpu_max(limit_millis: int | None, period_us: int = CFS_PERIOD_US) -> str:
    """v2 `cpu.max` for a CPU limit."""
    quota = cfs_quota_us(limit_millis, period_us)
    return f"{'max' if quota < 0 else quota} {period_us}"


def memory_limit(limit_bytes: int | None, v2: bool) -> str:
    """`memory.max` (v2) or `memory.limit_in_bytes` (v1) for a limit; unset is unlimited."""
    if limit_bytes is None:
        return "max" if v2 else "-1"
    return str(limit_bytes)


# ---- pure: values read ----


def parse_flat_keyed(text: str) -> dict[str, int]:
    """`key value` lines (`memory.oom_control`, `memory.events`, `memory.stat`, `cpu.stat`)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


@dataclass(frozen=True)
class Mount:
    root: str  # the hierarchy's directory shown at the mount point
    mountpoint: Path
    fstype: str
    options: frozenset[str]  # super options: v1 names its controllers here


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup mounts of `/proc/self/mountinfo`."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append(Mount(fields[3], Path(fields[4]), tail[0], frozenset(tail[2].split(","))))
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """`/proc/self/cgroup` as controller -> path; the v2 entry is keyed by the empty string."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                out[controller] = parts[2]
    return out


def _within(mount: Mount, own: str | None) -> Path:
    """Directory of cgroup path `own` (None: the hierarchy root) under this mount."""
    if own is None:
        return mount.mountpoint
    rel = os.path.relpath(own, mount.root)
    return mount.mountpoint if rel == "." else mount.mountpoint / rel


# ---- the driver ----


class Cgroups:
    """Creates, fills, reads and removes cgroups below one parent, on v1 or v2.

    `bases` maps each controller to the parent directory in its hierarchy (all the same
    directory on v2). Cgroups are named by a path relative to the parent."""

    def __init__(self, version: int, bases: dict[str, Path]) -> None:
        self.version = version
        self.bases = bases

    def dirs(self, rel: str) -> list[Path]:
        """The directories of `rel`, one per distinct hierarchy."""
        return list(dict.fromkeys(base / rel for base in self.bases.values()))

    def _dir(self, controller: str, rel: str) -> Path:
        return self.bases[controller] / rel

    def create(self, rel: str, resources: Resources | None = None) -> None:
        """Create `rel` (and its ancestors) and, when given, apply the limits."""
        for directory in self.dirs(rel):
            if self.version == 2:
                self._enable_v2_controllers(directory.parent)
            directory.mkdir(parents=True, exist_ok=True)
        if resources is not None:
            self.apply(rel, resources)

    def _enable_v2_controllers(self, directory: Path) -> None:
        # v2 hands a controller to children only when every ancestor delegates it.
        chain = [directory, *directory.parents]
        for ancestor in reversed(chain):
            control = ancestor / "cgroup.subtree_control"
            if control.exists() and ancestor.is_relative_to(_mount_of(self.bases["memory"])):
                with contextlib.suppress(OSError):
                    control.write_text("+memory +cpu")

    def apply(self, rel: str, resources: Resources) -> None:
        v2 = self.version == 2
        mem, cpu = self._dir("memory", rel), self._dir("cpu", rel)
        limit = memory_limit(resources.memory_limit_bytes, v2)
        shares = cpu_shares(resources.cpu_request_millis)
        if v2:
            _write(mem / "memory.max", limit)
            if (mem / "memory.swap.max").exists():
                _write(mem / "memory.swap.max", "0")  # a limit that swap could dodge is no limit
            _write(cpu / "cpu.weight", str(cpu_weight(shares)))
            _write(cpu / "cpu.max", cpu_max(resources.cpu_limit_millis))
        else:
            _write(mem / "memory.limit_in_bytes", limit)
            _write(cpu / "cpu.shares", str(shares))
            _write(cpu / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            _write(cpu / "cpu.cfs_quota_us", str(cfs_quota_us(resources.cpu_limit_millis)))

    def procs_files(self, rel: str) -> list[Path]:
        """Where a process writes its own pid to enter `rel` in every hierarchy."""
        return [directory / "cgroup.procs" for directory in self.dirs(rel)]

    def oom_killed(self, rel: str, sigkilled: bool) -> bool:
        """Whether the kernel OOM-killed anything in `rel` since it was created."""
        mem = self._dir("memory", rel)
        if self.version == 2:
            return parse_flat_keyed(_read(mem / "memory.events")).get("oom_kill", 0) > 0
        control = parse_flat_keyed(_read(mem / "memory.oom_control"))
        if "oom_kill" in control:  # kernels since 4.13
            return control["oom_kill"] > 0
        # Older kernels: the limit was hit and the process died of SIGKILL.
        return sigkilled and int(_read(mem / "memory.failcnt") or 0) > 0

    def usage(self, rel: str) -> Usage:
        """Working-set memory (usage minus inactive file cache, as the kubelet counts it)
        and cumulative CPU time."""
        mem = self._dir("memory", rel)
        if self.version == 2:
            current = int(_read(mem / "memory.current") or 0)
            inactive = parse_flat_keyed(_read(mem / "memory.stat")).get("inactive_file", 0)
            cpu_ns = parse_flat_keyed(_read(self._dir("cpu", rel) / "cpu.stat"))
            cpu = cpu_ns.get("usage_usec", 0) * 1000
        else:
            current = int(_read(mem / "memory.usage_in_bytes") or 0)
            inactive = parse_flat_keyed(_read(mem / "memory.stat")).get("total_inactive_file", 0)
            cpu = int(_read(self._dir("cpuacct", rel) / "cpuacct.usage") or 0)
        return Usage(memory_bytes=max(0, current - inactive), cpu_usage_ns=cpu)

    def pids(self, rel: str) -> set[int]:
        """Every process in `rel` and the cgroups below it."""
        found: set[int] = set()
        for directory in self.dirs(rel):
            for sub in _walk(directory):
                found.update(int(p) for p in _read(sub / "cgroup.procs").split())
        return found

    def remove(self, rel: str, timeout: float = 5.0) -> None:
        """SIGKILL whatever is left in `rel`, then remove it and everything below it."""
        deadline = time.monotonic() + timeout
        while pids := self.pids(rel):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise TimeoutError(f"cgroup {rel} still holds pids {sorted(pids)}")
            time.sleep(0.01)
        for directory in self.dirs(rel):
            remove_tree(directory, deadline)

    def exists(self, rel: str) -> bool:
        return any(directory.is_dir() for directory in self.dirs(rel))


def _mount_of(path: Path) -> Path:
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def _walk(directory: Path) -> Iterator[Path]:
    """`directory` and its descendant cgroups, parents first."""
    if not directory.is_dir():
        return
    yield directory
    for child in sorted(p for p in directory.iterdir() if p.is_dir()):
        yield from _walk(child)


def remove_tree(directory: Path, deadline: float) -> None:
    """rmdir `directory` and its child cgroups, bottom-up, by `deadline` (monotonic)."""
    for sub in reversed(list(_walk(directory))):
        _rmdir(sub, deadline)


def _rmdir(directory: Path, deadline: float) -> None:
    # A cgroup whose last task is still exiting refuses rmdir with EBUSY for a moment.
    while True:
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def detect(
    parent: str = "quaymaster",
    *,
    relative_to_self: bool = False,
    proc: Path = Path("/proc/self"),
) -> Cgroups:
    """The cgroups of this host with `parent` created and writable, or `CgroupsUnavailable`.

    With `relative_to_self` the parent is placed under this process's own cgroup in each
    hierarchy instead of under the hierarchy roots (v1 only: v2 forbids a cgroup that holds
    processes from also delegating controllers to children)."""
    mounts = parse_mountinfo(_read(proc / "mountinfo"))
    own = parse_proc_cgroup(_read(proc / "cgroup"))
    unified = [m for m in mounts if m.fstype == "cgroup2"]
    for mount in unified:
        controllers = _read(mount.mountpoint / "cgroup.controllers").split()
        if {"memory", "cpu"} <= set(controllers):
            if relative_to_self:
                raise CgroupsUnavailable("relative_to_self is not possible on cgroup v2")
            return _ready(Cgroups(2, {c: mount.mountpoint / parent for c in ("memory", "cpu")}))
    bases: dict[str, Path] = {}
    for controller in V1_CONTROLLERS:
        found = next((m for m in mounts if m.fstype == "cgroup" and controller in m.options), None)
        if found is None:
            raise CgroupsUnavailable(f"no cgroup v1 '{controller}' hierarchy and no usable v2")
        bases[controller] = _within(found, own.get(controller) if relative_to_self else None)
        bases[controller] = bases[controller] / parent
    return _ready(Cgroups(1, bases))


def _ready(cgroups: Cgroups) -> Cgroups:
    try:
        cgroups.create("")
        probe = f".probe-{os.getpid()}"
        cgroups.create(probe)
        cgroups.remove(probe)
    except OSError as exc:
        raise CgroupsUnavailable(f"cannot create cgroups under {cgroups.bases}: {exc}") from exc
    return cgroups
