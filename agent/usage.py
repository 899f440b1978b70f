"""Per-pod CPU and memory usage, read from the runtime every 10 s and pushed to the API.

The kernel keeps a cumulative CPU counter (nanoseconds) and a memory figure per container
cgroup; the runtime hands both out as :class:`~agent.runtime.Usage`. CPU use is a rate, so
:class:`CpuRates` (pure, fed the time) turns successive counter readings into millicores: the
first reading of a container run, or one after the counter went back to zero (the container
was restarted in place in a fresh cgroup), is averaged over the run so far, from its start time.

:class:`UsageCollector` reads every running container of the pods the agent runs, builds the
sample body (``POST /apis/metrics.quaymaster.io/v1/nodes/{node}/samples``, see
``app.api.usage``), sends it from a thread and keeps it for the agent's ``/metrics``. Usage is
best effort: a failed send is logged and dropped, the next sample replaces it, and nothing here
ever waits on or stops a pod.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agent.runtime import Running, Runtime
from app.core.metrics import escape_label_value as esc
from app.process import Wait, wait_or_stop

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Key = tuple[str, str]  # (pod uid, container name)
GROUP_VERSION = "metrics.quaymaster.io/v1"
DEFAULT_INTERVAL = 10.0


@dataclass(frozen=True)
class _Reading:
    at: float
    started: float
    cpu_ns: int


class CpuRates:
    """Cumulative CPU counters in, millicores out, one counter per container run."""

    def __init__(self) -> None:
        self._last: dict[Key, _Reading] = {}

    def rate(self, key: Key, at: float, cpu_ns: int, started: float) -> int:
        """Millicores used since the previous reading of `key` (unix seconds `at`), or since
        `started` when this is the run's first reading or its counter was reset."""
        prev = self._last.get(key)
        self._last[key] = _Reading(at, started, cpu_ns)
        if prev is None or prev.started != started or cpu_ns < prev.cpu_ns:
            base_at, base_ns = started, 0
        else:
            base_at, base_ns = prev.at, prev.cpu_ns
        elapsed = at - base_at
        if elapsed <= 0:
            return 0
        return max(0, round((cpu_ns - base_ns) / elapsed / 1e6))

    def retain(self, keys: set[Key]) -> None:
        """Forget containers that are gone, so the map stays the size of the node."""
        for key in self._last.keys() - keys:
            del self._last[key]


def _meta(pod: Obj) -> Obj:
    return pod.get("metadata") or {}


def priority_of(pod: Obj) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def timestamp(at: float) -> str:
    """RFC 3339 in UTC with milliseconds, as the API parses it."""
    moment = dt.datetime.fromtimestamp(at, dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def sample_body(node: str, at: float, pods: list[Obj], window_s: float = DEFAULT_INTERVAL) -> Obj:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "NodeUsageSample",
        "metadata": {"name": node},
        "timestamp": timestamp(at),
        "window": f"{window_s:g}s",
        "pods": pods,
    }


def prometheus_text(body: Obj | None) -> str:
    """The sample as Prometheus gauges, per pod and per container."""
    if body is None:
        return ""
    lines = [
        "# HELP qm_pod_cpu_usage_millicores CPU used by the pod over the last sample interval.",
        "# TYPE qm_pod_cpu_usage_millicores gauge",
    ]
    mem = [
        "# HELP qm_pod_memory_usage_bytes Working-set memory of the pod.",
        "# TYPE qm_pod_memory_usage_bytes gauge",
    ]
    ctr_cpu = ["# TYPE qm_container_cpu_usage_millicores gauge"]
    ctr_mem = ["# TYPE qm_container_memory_usage_bytes gauge"]
    for p in body["pods"]:
        labels = f'namespace="{esc(p["namespace"])}",pod="{esc(p["name"])}"'
        lines.append(f"qm_pod_cpu_usage_millicores{{{labels}}} {p['cpuMillis']}")
        mem.append(f"qm_pod_memory_usage_bytes{{{labels}}} {p['memoryBytes']}")
        for c in p["containers"]:
            cl = f'{labels},container="{esc(c["name"])}"'
            ctr_cpu.append(f"qm_container_cpu_usage_millicores{{{cl}}} {c['cpuMillis']}")
            ctr_mem.append(f"qm_container_memory_usage_bytes{{{cl}}} {c['memoryBytes']}")
    return "\n".join([*lines, *mem, *ctr_cpu, *ctr_mem]) + "\n"


class UsageCollector:
    """Reads the node's pods' usage every `interval` seconds and hands it to `send`.

    `send` is synchronous (the REST client) and runs in a thread; it may raise anything."""

    def __init__(
        self,
        runtime: Runtime,
        node: str,
        send: Callable[[Obj], object],
        *,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.time,
        wait: Wait = wait_or_stop,
    ) -> None:
        self.runtime, self.node, self.send = runtime, node, send
        self.interval, self.clock, self.wait = interval, clock, wait
        self.rates = CpuRates()
        self.last: Obj | None = None  # the newest sample body, for /metrics
        self.sent = 0
        self.failed = 0

    def read(self, pods: Iterable[Obj]) -> Obj:
        """One sample of the running containers of `pods` (pod objects the agent runs)."""
        at = self.clock()
        seen: set[Key] = set()
        entries = []
        for pod in pods:
            uid = str(_meta(pod).get("uid") or "")
            containers = []
            for _, name in self.runtime.containers(uid):
                state, used = self.runtime.state(uid, name), self.runtime.usage(uid, name)
                if not isinstance(state, Running) or used is None:
                    continue
                seen.add((uid, name))
                started = state.started_at.timestamp()
                cpu = self.rates.rate((uid, name), at, used.cpu_usage_ns, started)
                containers.append(
                    {"name": name, "cpuMillis": cpu, "memoryBytes": used.memory_bytes}
                )
            if containers:
                entries.append(self._pod_entry(pod, uid, containers))
        self.rates.retain(seen)
        self.last = sample_body(self.node, at, entries, self.interval)
        return self.last

    @staticmethod
    def _pod_entry(pod: Obj, uid: str, containers: list[Obj]) -> Obj:
        return {
            "namespace": str(_meta(pod).get("namespace") or ""),
            "name": str(_meta(pod).get("name") or ""),
            "uid": uid,
            "priority": priority_of(pod),
            "cpuMillis": sum(c["cpuMillis"] for c in containers),
            "memoryBytes": sum(c["memoryBytes"] for c in containers),
            "containers": containers,
        }

    def metrics_text(self) -> str:
        return prometheus_text(self.last)

    async def push(self, body: Obj) -> bool:
        try:
            await asyncio.to_thread(self.send, body)
        except Exception as exc:  # best effort: any failure drops this sample only
            self.failed += 1
            log.info("usage sample not sent: %s", exc)
            return False
        self.sent += 1
        return True

    async def run(self, stop: asyncio.Event, pods: Callable[[], Iterable[Obj]]) -> None:
        """Sample, send, wait out the interval; until `stop`."""
        while not stop.is_set():
            await self.push(self.read(pods()))
            await self.wait(stop, self.interval)
