"""The `sim` runtime: containers that run in memory only, for hollow nodes and tests.

A hollow node must cost almost nothing (thousands share one process in the scale benchmark)
yet drive the same API calls, leases and status writes as a real agent, so its runtime keeps
a small record per container and nothing else. A container "runs" from `start` until it is
stopped or told to end with `exit()` (an exit code, or an OOM kill); its usage is whatever a
test or the benchmark sets. Times come from the injected clock; pids are made up and unique
within one runtime.
"""

from __future__ import annotations

import itertools
import signal
from dataclasses import dataclass

from agent.runtime.base import (
    Clock,
    ContainerSpec,
    ContainerState,
    Running,
    StartError,
    Terminated,
    Usage,
    exit_reason,
    utc_now,
)

SIGTERM_EXIT = 128 + signal.SIGTERM


@dataclass
class _SimContainer:
    spec: ContainerSpec
    state: ContainerState
    usage: Usage


class SimRuntime:
    name = "sim"

    def __init__(self, clock: Clock = utc_now, *, graceful_exit_code: int = 0) -> None:
        """`graceful_exit_code` is how a stopped container ends: 0 (it handled SIGTERM) or
        `SIGTERM_EXIT` (it died of the signal)."""
        self._clock = clock
        self._graceful = graceful_exit_code
        self._pids = itertools.count(1000)
        self._containers: dict[tuple[str, str], _SimContainer] = {}
        self.fail_next_start: dict[tuple[str, str], str] = {}

    async def start(self, spec: ContainerSpec) -> Running:
        current = self._containers.get(spec.key)
        if current is not None and isinstance(current.state, Running):
            raise StartError(f"container {spec.name} of pod {spec.pod_uid} is already running")
        if (message := self.fail_next_start.pop(spec.key, None)) is not None:
            raise StartError(message)
        running = Running(pid=next(self._pids), started_at=self._clock())
        self._containers[spec.key] = _SimContainer(spec, running, Usage(0, 0))
        return running

    def exit(self, pod_uid: str, name: str, exit_code: int, *, oom: bool = False) -> Terminated:
        """End a running container as if its process had exited (or been OOM-killed)."""
        container = self._containers[(pod_uid, name)]
        if not isinstance(container.state, Running):
            raise ValueError(f"container {name} of pod {pod_uid} is not running")
        signum = signal.SIGKILL if oom else None
        code = 128 + signal.SIGKILL if oom else exit_code
        return self._end(container, code, signum, oom)

    def _end(self, c: _SimContainer, code: int, signum: int | None, oom: bool) -> Terminated:
        assert isinstance(c.state, Running)
        c.state = Terminated(
            exit_code=code,
            reason=exit_reason(code, oom),
            started_at=c.state.started_at,
            finished_at=self._clock(),
            signal=signum,
        )
        return c.state

    def set_usage(self, pod_uid: str, name: str, usage: Usage) -> None:
        self._containers[(pod_uid, name)].usage = usage

    async def stop(self, pod_uid: str, name: str, grace_seconds: float) -> Terminated | None:
        container = self._containers.get((pod_uid, name))
        if container is None:
            return None
        if isinstance(container.state, Terminated):
            return container.state
        if grace_seconds <= 0 or self._graceful == SIGTERM_EXIT:
            signum = signal.SIGKILL if grace_seconds <= 0 else signal.SIGTERM
            return self._end(container, 128 + signum, signum, False)
        return self._end(container, self._graceful, None, False)

    def state(self, pod_uid: str, name: str) -> ContainerState | None:
        container = self._containers.get((pod_uid, name))
        return None if container is None else container.state

    def usage(self, pod_uid: str, name: str | None = None) -> Usage | None:
        found = [
            c.usage
            for key, c in self._containers.items()
            if key[0] == pod_uid and (name is None or key[1] == name)
        ]
        if not found:
            return None
        return Usage(sum(u.memory_bytes for u in found), sum(u.cpu_usage_ns for u in found))

    def containers(self, pod_uid: str | None = None) -> list[tuple[str, str]]:
        return [key for key in self._containers if pod_uid is None or key[0] == pod_uid]

    def adopt(self) -> list[tuple[str, str]]:
        return []  # nothing outlives a simulated agent

    def close(self) -> None:
        pass

    async def cleanup(self, pod_uid: str) -> None:
        for key in self.containers(pod_uid):
            await self.stop(*key, grace_seconds=0)
            del self._containers[key]
