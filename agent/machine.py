"""What this machine offers: capacity read from the host, allocatable after a system reserve.

The scheduler places pods against ``status.allocatable``, so it must never exceed what the
machine can give pods: the agent itself, the OS and the control plane's helpers keep a
configurable reserve. CPUs come from ``os.cpu_count`` capped by a cgroup CPU quota (an agent
run inside a container sees the host's CPUs but may use only its quota); memory from
``/proc/meminfo`` capped by a cgroup memory limit. The parsers are pure functions over file
text so the arithmetic is unit-tested without the host; :func:`detect` is the thin shell.
"""

from __future__ import annotations

import math
import os
import platform
import socket
from dataclasses import dataclass
from pathlib import Path

from app.core.quantity import cpu_millis, format_bytes, format_millis, to_bytes

DEFAULT_MAX_PODS = 110
# cgroup v1 reports "no limit" as a huge page-aligned number rather than a word.
_V1_UNLIMITED = 1 << 60


@dataclass(frozen=True)
class Resources:
    """An amount of node resources, in exact integer units."""

    cpu_millis: int
    memory_bytes: int
    pods: int = DEFAULT_MAX_PODS

    def to_quantities(self) -> dict[str, str]:
        """The ``status.capacity`` / ``status.allocatable`` map, in canonical quantities."""
        return {
            "cpu": format_millis(self.cpu_millis),
            "memory": format_bytes(self.memory_bytes),
            "pods": str(self.pods),
        }


@dataclass(frozen=True)
class Reserve:
    """What is kept back from pods for the system (kubelet's system-reserved + kube-reserved)."""

    cpu_millis: int = 100
    memory_bytes: int = 256 * 1024 * 1024

    @classmethod
    def parse(cls, cpu: str, memory: str) -> Reserve:
        """From quantities such as ``"500m"`` and ``"1Gi"``; raises ``ValueError``."""
        r = cls(cpu_millis(cpu), to_bytes(memory))
        if r.cpu_millis < 0 or r.memory_bytes < 0:
            raise ValueError("a system reserve cannot be negative")
        return r

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Reserve:
        env = dict(os.environ) if env is None else env
        return cls.parse(
            env.get("QM_AGENT_RESERVE_CPU", "100m"), env.get("QM_AGENT_RESERVE_MEMORY", "256Mi")
        )


def allocatable(capacity: Resources, reserve: Reserve) -> Resources:
    """Capacity minus the reserve, never below zero."""
    return Resources(
        max(0, capacity.cpu_millis - reserve.cpu_millis),
        max(0, capacity.memory_bytes - reserve.memory_bytes),
        capacity.pods,
    )


def meminfo_total(text: str) -> int:
    """``MemTotal`` of ``/proc/meminfo`` in bytes; ``ValueError`` if absent."""
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key.strip() == "MemTotal":
            fields = rest.split()
            unit = fields[1].lower() if len(fields) > 1 else ""
            return int(fields[0]) * (1024 if unit == "kb" else 1)
    raise ValueError("/proc/meminfo has no MemTotal line")


def quota_cpus_v2(cpu_max: str) -> float | None:
    """CPUs allowed by a cgroup v2 ``cpu.max`` (``"max 100000"`` or ``"200000 100000"``)."""
    fields = cpu_max.split()
    if not fields or fields[0] == "max":
        return None
    period = int(fields[1]) if len(fields) > 1 else 100000
    return int(fields[0]) / period if period > 0 else None


def quota_cpus_v1(quota_us: str, period_us: str) -> float | None:
    """CPUs allowed by cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1: none)."""
    quota, period = int(quota_us.strip()), int(period_us.strip())
    if quota <= 0 or period <= 0:
        return None
    return quota / period


def memory_limit(text: str) -> int | None:
    """A cgroup memory limit (v2 ``memory.max`` or v1 ``memory.limit_in_bytes``) in bytes."""
    value = text.strip()
    if not value or value == "max":
        return None
    n = int(value)
    return None if n >= _V1_UNLIMITED else n


def capacity(
    cpu_count: int,
    mem_total: int,
    cpu_quota: float | None = None,
    mem_limit: int | None = None,
    max_pods: int = DEFAULT_MAX_PODS,
) -> Resources:
    """The machine's capacity: the smaller of the host's and the agent's cgroup's."""
    cpus = float(cpu_count) if cpu_quota is None else min(float(cpu_count), cpu_quota)
    memory = mem_total if mem_limit is None else min(mem_total, mem_limit)
    return Resources(math.floor(cpus * 1000), memory, max_pods)


def _read(p: Path) -> str | None:
    try:
        return p.read_text()
    except OSError:
        return None


def _cgroup_quota(root: Path) -> tuple[float | None, int | None]:
    """The CPU quota and memory limit of the agent's cgroup as mounted under ``root``: v2's
    unified files first, then v1's controllers."""
    cg = root / "sys/fs/cgroup"
    v2_cpu, v2_mem = _read(cg / "cpu.max"), _read(cg / "memory.max")
    if v2_cpu is not None or v2_mem is not None:
        return (
            quota_cpus_v2(v2_cpu) if v2_cpu else None,
            memory_limit(v2_mem) if v2_mem else None,
        )
    quota, period = _read(cg / "cpu/cpu.cfs_quota_us"), _read(cg / "cpu/cpu.cfs_period_us")
    mem = _read(cg / "memory/memory.limit_in_bytes")
    return (
        quota_cpus_v1(quota, period) if quota and period else None,
        memory_limit(mem) if mem else None,
    )


@dataclass(frozen=True)
class Machine:
    hostname: str
    capacity: Resources
    node_info: dict[str, str]

    def allocatable(self, reserve: Reserve) -> Resources:
        return allocatable(self.capacity, reserve)


def node_info(root: Path = Path("/")) -> dict[str, str]:
    """``status.nodeInfo``: what an operator asks first about a machine."""
    machine_id = (_read(root / "etc/machine-id") or "").strip()
    os_image = ""
    for line in (_read(root / "etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            os_image = line.split("=", 1)[1].strip().strip('"')
    return {
        "machineID": machine_id,
        "kernelVersion": platform.release(),
        "osImage": os_image,
        "operatingSystem": platform.system().lower(),
        "architecture": platform.machine(),
        "agentVersion": "quaymaster-agent/1",
    }


def detect(root: Path = Path("/"), max_pods: int = DEFAULT_MAX_PODS) -> Machine:
    """Read this host. ``root`` is ``/`` except in tests that lay out a fake ``/proc``."""
    meminfo = _read(root / "proc/meminfo")
    if meminfo is None:
        raise RuntimeError(f"cannot read {root / 'proc/meminfo'}: is this Linux?")
    cpu_quota, mem_limit = _cgroup_quota(root)
    cap = capacity(os.cpu_count() or 1, meminfo_total(meminfo), cpu_quota, mem_limit, max_pods)
    return Machine(socket.gethostname(), cap, node_info(root))
