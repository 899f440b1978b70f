"""The shell of node-pressure eviction: reads the memory signal, evicts, keeps the node's
condition and taint, records Events. The decisions are :mod:`agent.pressure`'s (pure).

The agent's loop calls :meth:`PressureMonitor.tick` every tick; a reading is taken every
``interval`` seconds. The signal is a :class:`MemorySignal`: :class:`MeminfoSignal` reads the
machine's ``MemAvailable``; :class:`PodsSignal` counts only the agent's own pods against the
node's allocatable memory (a machine shared with other work, and tests). Pod workers are seen
through :class:`Evictable`, so this module does not import them.

The monitor writes the node's ``MemoryPressure`` condition and taint itself, only when they
change (the node status writer keeps conditions it does not own, so the two never undo each
other). A failed write is retried at the next reading; a failed Event is dropped. Neither
ever holds up an eviction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agent.api import NODE, AgentApi, Unreachable
from agent.pressure import (
    EvictionConfig,
    PressureState,
    Verdict,
    candidate,
    container_request,
    decide,
    event_body,
    eviction_message,
    with_condition,
    with_taint,
)
from agent.runtime import Runtime
from agent.status import format_time
from app.core.errors import Conflict, StatusError
from app.core.kinds import BY_KIND

log = logging.getLogger(__name__)
Obj = dict[str, Any]
EVENT = BY_KIND["Event"]
CONFLICT_RETRIES = 5

# -- the signal --------------------------------------------------------------------------------


class MemorySignal(Protocol):
    def read(self, pods_usage: int) -> tuple[int, int]:
        """(memory.available, capacity) in bytes; ``pods_usage`` is what the pods use now."""
        ...


def meminfo_field(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == key:
            fields = rest.split()
            return int(fields[0]) * (1024 if len(fields) > 1 and fields[1] == "kB" else 1)
    raise ValueError(f"/proc/meminfo has no {key} line")


@dataclass(frozen=True)
class MeminfoSignal:
    """The whole machine: ``MemAvailable`` of ``MemTotal``."""

    path: Path = Path("/proc/meminfo")

    def read(self, pods_usage: int) -> tuple[int, int]:
        text = self.path.read_text()
        return meminfo_field(text, "MemAvailable"), meminfo_field(text, "MemTotal")


@dataclass(frozen=True)
class PodsSignal:
    """Only this agent's pods, against the node's allocatable memory."""

    allocatable: int

    def read(self, pods_usage: int) -> tuple[int, int]:
        return self.allocatable - pods_usage, self.allocatable


def signal_for(source: str, allocatable: int) -> MemorySignal:
    """``meminfo``: the whole machine; ``pods``: the agent's pods against ``allocatable``."""
    return PodsSignal(allocatable) if source == "pods" else MeminfoSignal()


# -- the shell ---------------------------------------------------------------------------------


class Evictable(Protocol):
    """What the monitor needs of a pod worker (:class:`agent.pods.PodWorker`)."""

    uid: str
    pod: Obj

    @property
    def stopping(self) -> bool: ...

    def evict(self, message: str) -> None: ...


class PressureMonitor:
    """Reads the signal, evicts, and keeps the node's condition and taint; see the module."""

    def __init__(
        self,
        cfg: EvictionConfig,
        signal: MemorySignal,
        api: AgentApi | None,
        node_name: str,
        *,
        mono: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cfg, self.signal, self.api, self.node_name = cfg, signal, api, node_name
        self.mono, self.wall = mono, wall
        self.state = PressureState()
        self.pending: set[str] = set()  # evicted, worker not finished yet
        self.evicted: list[str] = []  # names, in eviction order
        self.last: Verdict | None = None
        self._next: float | None = None
        self._shown: bool | None = None  # what the node's condition and taint are known to say

    async def tick(self, workers: Mapping[str, Evictable], runtime: Runtime) -> Verdict | None:
        """A reading if one is due (else None): evict at most one pod, then bring the node's
        condition and taint in line."""
        now = self.mono()
        if self._next is not None and now < self._next:
            return None
        self._next = now + self.cfg.interval
        self.pending &= workers.keys()
        usage = {uid: _usage(runtime, uid) for uid in workers}
        try:
            available, capacity = await asyncio.to_thread(self.signal.read, sum(usage.values()))
        except (OSError, ValueError) as exc:
            log.warning("memory signal unreadable: %s", exc)
            return None
        pods = [candidate(w.pod, usage[u]) for u, w in workers.items() if not w.stopping]
        self.state, verdict = decide(
            self.state, self.cfg, available, capacity, pods, now, bool(self.pending)
        )
        self.last = verdict
        if verdict.victim is not None:
            await self._evict(workers[verdict.victim.uid], verdict, runtime)
        if self._shown != verdict.under_pressure and self.api is not None:
            try:
                await asyncio.to_thread(self._show, self.api, verdict.under_pressure)
                self._shown = verdict.under_pressure
            except (Unreachable, StatusError) as exc:
                log.info("memory pressure not shown on the node yet: %s", exc)
        return verdict

    async def _evict(self, worker: Evictable, verdict: Verdict, runtime: Runtime) -> None:
        spec = worker.pod.get("spec") or {}
        names = [(str(c.get("name")), container_request(c)) for c in spec.get("containers") or []]
        message = eviction_message(
            verdict, [(n, _usage(runtime, worker.uid, n), r) for n, r in names]
        )
        meta = worker.pod.get("metadata") or {}
        log.warning("evicting pod %s/%s: %s", meta.get("namespace"), meta.get("name"), message)
        worker.evict(message)
        self.pending.add(worker.uid)
        self.evicted.append(str(meta.get("name")))
        if self.api is None:
            return
        body = event_body(worker.pod, message, self.node_name, self.wall())
        try:
            await asyncio.to_thread(self.api.create, EVENT, str(meta.get("namespace")), body)
        except (Unreachable, StatusError) as exc:
            log.info("Evicted event not recorded: %s", exc)

    def _show(self, api: AgentApi, under: bool) -> None:
        """The taint (spec) first, so the scheduler stops placing pods here as soon as it can;
        then the condition (status). Each a conditional write, retried on conflict."""
        for sub in ("", "status"):
            for _ in range(CONFLICT_RETRIES):
                node = api.get(NODE, None, self.node_name)
                body = self._shown_on(node, sub, under)
                if body is None:
                    break
                try:
                    api.replace(NODE, None, body, sub=sub)
                    break
                except Conflict:
                    continue
            else:
                raise Conflict(f"node {self.node_name}: lost {CONFLICT_RETRIES} races in a row")

    def _shown_on(self, node: Obj, sub: str, under: bool) -> Obj | None:
        """``node`` with the taint (``sub=""``) or condition (``"status"``) set; None if set."""
        now = self.wall()
        if sub == "":
            spec = node.get("spec") or {}
            taints = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
            changed = with_taint(taints, under, format_time(now))
            return None if changed is None else {**node, "spec": {**spec, "taints": changed}}
        status = node.get("status") or {}
        conditions = with_condition(status.get("conditions") or [], under, now)
        return (
            None if conditions is None else {**node, "status": {**status, "conditions": conditions}}
        )


def _usage(runtime: Runtime, uid: str, name: str | None = None) -> int:
    try:
        found = runtime.usage(uid, name)
    except (OSError, ValueError):  # a cgroup removed while read
        return 0
    return 0 if found is None else found.memory_bytes
