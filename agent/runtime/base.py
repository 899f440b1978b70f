"""The one interface the agent's loop uses to run containers, whatever runs them.

The loop (and the probes, the status writer and the eviction logic) only ever see
`Runtime`: start a container from a `ContainerSpec`, stop it with a grace period, ask for its
`ContainerState`, read its usage, and clean up a whole pod. The `process` runtime runs host
processes in their own cgroups, the `sim` runtime runs nothing at all (hollow nodes, tests),
and the `runc` runtime runs OCI bundles behind the same calls.

The interface is asyncio: `start`, `stop` and `cleanup` are coroutines because stopping waits
out a grace period and must not block the loop; `state` and `usage` are plain calls that never
block (they read a pid's exit status or a few control files), so the loop may call them on
every tick. Timestamps are timezone-aware UTC datetimes from the runtime's injected clock.
"""

from __future__ import annotations

import datetime as dt
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, TypeAlias

Clock: TypeAlias = Callable[[], dt.datetime]

REASON_COMPLETED: Final = "Completed"
REASON_ERROR: Final = "Error"
REASON_OOM_KILLED: Final = "OOMKilled"
REASON_UNKNOWN: Final = "ContainerStatusUnknown"  # ended while no agent was watching it
Reason: TypeAlias = Literal["Completed", "Error", "OOMKilled", "ContainerStatusUnknown"]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class StartError(Exception):
    """The container could not be started at all (bad spec, missing executable, no cgroup).

    Distinct from a container that starts and then fails: the loop reports this as a waiting
    container with `reason` and this message and retries it on the crash-loop backoff."""

    reason: str = "CreateContainerError"


@dataclass(frozen=True)
class Resources:
    """What the runtime enforces: a hard memory limit, a CPU weight, a CPU quota.

    `None` means unset: no memory limit, the minimum CPU weight, no CPU quota."""

    memory_limit_bytes: int | None = None
    cpu_request_millis: int | None = None
    cpu_limit_millis: int | None = None


@dataclass(frozen=True)
class ContainerSpec:
    """One container of one pod, already resolved from the pod spec by the agent.

    `command` is the full argv (the pod's `command` followed by its `args`). `files` are laid
    out in the pod's directory (path relative to it -> content) before the container starts:
    that is how config maps reach a process; `secret_files` likewise, but on memory, 0400
    (`agent.runtime.secret_volume`)."""

    pod_uid: str
    name: str
    command: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, bytes] = field(default_factory=dict)
    resources: Resources = Resources()
    image: str = ""  # what the runc runtime runs in; the process and sim runtimes ignore it
    secret_files: Mapping[str, bytes] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.pod_uid, self.name)


@dataclass(frozen=True)
class Running:
    pid: int
    started_at: dt.datetime
    state: Literal["running"] = "running"


@dataclass(frozen=True)
class Terminated:
    """How a container ended, in the terms the pod status reports.

    A container killed by a signal has `exit_code` 128 + signal, as container runtimes report
    it, and `signal` set; `reason` is `OOMKilled` only when the cgroup recorded an OOM kill."""

    exit_code: int
    reason: Reason
    started_at: dt.datetime
    finished_at: dt.datetime
    signal: int | None = None
    state: Literal["terminated"] = "terminated"


ContainerState: TypeAlias = Running | Terminated


@dataclass(frozen=True)
class Usage:
    """Resource use of a container or a pod, for metrics and node-pressure decisions."""

    memory_bytes: int
    cpu_usage_ns: int


def exit_reason(exit_code: int, oom_killed: bool) -> Reason:
    """The status reason of an exit: an OOM kill wins over the code, 0 is Completed."""
    if oom_killed:
        return REASON_OOM_KILLED
    return REASON_COMPLETED if exit_code == 0 else REASON_ERROR


def from_returncode(returncode: int) -> tuple[int, int | None]:
    """Popen's returncode (negative for a signal) as (exit code, signal) the way runtimes say it."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


def signal_name(signum: int | None) -> str | None:
    if signum is None:
        return None
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


class Runtime(Protocol):
    """What the agent's loop calls. Containers are keyed by (pod uid, container name).

    Starting a container whose previous run has terminated replaces that run (a restart in
    place); starting one that is still running raises `StartError`."""

    name: str

    async def start(self, spec: ContainerSpec) -> Running: ...

    async def stop(self, pod_uid: str, name: str, grace_seconds: float) -> Terminated | None:
        """SIGTERM, wait up to `grace_seconds`, then SIGKILL; None if there is no such container."""
        ...

    def state(self, pod_uid: str, name: str) -> ContainerState | None: ...

    def usage(self, pod_uid: str, name: str | None = None) -> Usage | None:
        """Usage of one container, or of the whole pod when `name` is None."""
        ...

    def containers(self, pod_uid: str | None = None) -> list[tuple[str, str]]:
        """Keys of the containers the runtime knows (of one pod, or all)."""
        ...

    async def cleanup(self, pod_uid: str) -> None:
        """Kill whatever of the pod still runs and remove its cgroups and directory."""
        ...

    def adopt(self) -> list[tuple[str, str]]:
        """Take over the containers an earlier run of the agent left running (called once,
        before the first `start`); the keys of those still running."""
        ...

    def close(self) -> None:
        """The agent stops: release what the runtime holds for itself (its parent cgroups)
        once no container is left."""
        ...
