"""Hollow nodes: thousands of simulated agents in one process, a load generator for scale tests.

A real agent holds a thread per lease keeper and a synchronous client; ten thousand of those
cannot share a process. A hollow node makes the same API calls a real agent makes, with the
same pure builders and in the same order, from asyncio over a shared transport: the benchmark's
:class:`bench.agents.http_pool.HttpPool` (a fixed pool of keep-alive connections per server,
cheap enough that ten thousand nodes do not saturate the process that simulates them) or an
``httpx.AsyncClient`` (the unit tests' mock transport). The transport only moves bytes: every
request is built and every answer decoded by the shared client
(:class:`app.client.AsyncRestClient`), the same code as the agent's and the CLI's. They
live in ``bench/``, not in the agent: no production process runs them.

* registration as :class:`agent.node.NodeStatusWriter` does it: ``GET`` the node, ``POST`` it
  with :func:`agent.node.labels_for` if missing, then ``GET`` + ``PUT .../status`` with
  :func:`agent.node.desired_status`; then the lease ``POST`` built by :func:`agent.lease.renewed`
  (creating the lease namespace on the first ``404``, as the lease keeper does);
* renewal as :class:`agent.lease.LeaseKeeper` does it: a ``PUT`` of :func:`agent.lease.renewed`
  conditional on the resourceVersion last written, and on a conflict one re-read and retry;
* the 5-minute full status rewrite (``GET`` + conditional ``PUT .../status``);
* the 10 s usage report as :class:`agent.usage.UsageCollector` sends it (``POST`` of
  :func:`agent.usage.sample_body`), for ``usage_pods`` simulated pods whose figures vary;
* pods run by the real :class:`agent.pods.PodWorker` on the ``sim`` runtime, whose status
  writes go through the agent's own :class:`agent.loop.RestPodApi` (a start costs two writes:
  Running, then Ready).

Probes of hollow pods succeed at once (:func:`always_succeeds`): nothing runs to probe.
Who runs the nodes and when is the caller's business (``bench/agents``, the hollow tests);
:func:`due_slots` is the pure schedule that spreads ``n`` periodic calls evenly over a period.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from agent.api import LEASE, NAMESPACE, NODE
from agent.backoff import CrashLoopBackoff
from agent.lease import LEASE_NAMESPACE, LEASE_SECONDS, renewed
from agent.loop import RestPodApi
from agent.machine import Machine, Reserve, Resources
from agent.node import NodeConfig, desired_status, labels_for
from agent.pods import PodWorker
from agent.probe_exec import ProbeContext
from agent.probes import Action, Outcome, ProbeResult
from agent.runtime.sim import SimRuntime
from agent.usage import sample_body
from app.client import AsyncRestClient, QueueTimeout, Transport, Unreachable
from app.client.build import JSON
from app.core.errors import AlreadyExists, Conflict, NotFound

Obj = dict[str, Any]
HOLLOW_VERSION = "quaymaster-agent/1 (hollow)"
GIB = 2**30


class HttpxTransport:
    """Requests through an ``httpx.AsyncClient`` (the unit tests' mock transport, and the
    benchmark's ``--client httpx`` for comparison). At most ``inflight`` requests are handed
    to the client at once: httpcore's pool scans every connection for every queued request, so
    a queue much longer than the pool costs the caller's CPU quadratically; keeping the queue
    here keeps that cost flat. A request that waited ``queue_timeout`` seconds for its turn
    gives up as :class:`QueueTimeout`."""

    def __init__(
        self, client: httpx.AsyncClient, inflight: int = 32, queue_timeout: float = 10.0
    ) -> None:
        self.client = client
        self._gate = asyncio.Semaphore(inflight)
        self.queue_timeout = queue_timeout

    async def send(
        self, method: str, target: str, body: bytes | None = None, content_type: str = JSON
    ) -> tuple[int, bytes]:
        headers = {"Content-Type": content_type} if body is not None else None
        try:
            await asyncio.wait_for(self._gate.acquire(), self.queue_timeout)
        except TimeoutError as exc:
            raise QueueTimeout(f"{method} {target}: no turn within {self.queue_timeout}s") from exc
        try:
            resp = await self.client.request(method, target, content=body, headers=headers)
        except httpx.TransportError as exc:
            raise Unreachable(f"{method} {target}: {exc!r}") from exc
        finally:
            self._gate.release()
        return resp.status_code, resp.content

    async def close(self) -> None:
        await self.client.aclose()


def hollow_api(
    client: httpx.AsyncClient | Transport, inflight: int = 32, queue_timeout: float = 10.0
) -> AsyncRestClient:
    """The shared asynchronous client over ``client``: an :class:`bench.agents.http_pool.HttpPool`
    (the benchmark's) or an ``httpx.AsyncClient`` (wrapped in :class:`HttpxTransport`)."""
    if isinstance(client, httpx.AsyncClient):
        client = HttpxTransport(client, inflight, queue_timeout)
    return AsyncRestClient(client)


def hollow_machine(name: str, cpus: int = 32, memory_gib: int = 128, pods: int = 110) -> Machine:
    """A made-up machine: what a hollow node reports as capacity and nodeInfo."""
    info = {
        "machineID": name,
        "kernelVersion": "hollow",
        "osImage": "hollow",
        "operatingSystem": "linux",
        "architecture": "amd64",
        "agentVersion": HOLLOW_VERSION,
    }
    return Machine(name, Resources(cpus * 1000, memory_gib * GIB, pods), info)


@dataclass
class HollowNode:
    """One simulated agent's node, lease and status; every method is one agent action."""

    cfg: NodeConfig
    api: AsyncRestClient
    machine: Machine
    lease: Obj | None = field(default=None, repr=False)
    node: Obj | None = field(default=None, repr=False)
    renewals: int = 0
    conflicts: int = 0
    status_writes: int = 0
    usage_pods: int = 0  # pods in each usage report
    usage_reports: int = 0

    @property
    def name(self) -> str:
        return self.cfg.name

    async def register(self, wall: float) -> None:
        """Create the node if missing, write its full status, create or read its lease."""
        try:
            self.node = await self.api.get(NODE, None, self.name)
        except NotFound:
            body = {
                "metadata": {"name": self.name, "labels": labels_for(self.cfg)},
                "spec": {},
            }
            try:
                self.node = await self.api.create(NODE, None, body)
            except AlreadyExists:
                self.node = await self.api.get(NODE, None, self.name)
        await self.write_status(wall)
        await self._create_lease(wall)

    async def _create_lease(self, wall: float) -> None:
        body = renewed(None, self.name, wall, LEASE_SECONDS)
        try:
            self.lease = await self.api.create(LEASE, LEASE_NAMESPACE, body)
        except NotFound:  # the lease namespace: the first agent of a cluster makes it
            with contextlib.suppress(AlreadyExists):
                await self.api.create(NAMESPACE, None, {"metadata": {"name": LEASE_NAMESPACE}})
            self.lease = await self.api.create(LEASE, LEASE_NAMESPACE, body)
        except AlreadyExists:
            self.lease = await self.api.get(LEASE, LEASE_NAMESPACE, self.name)

    async def renew(self, wall: float) -> None:
        """One renewal: the conditional PUT, and after a lost race one re-read and retry.
        Raises ``StatusError`` or ``Unreachable`` as the lease keeper sees them."""
        for attempt in range(2):
            if self.lease is None:
                self.lease = await self.api.get(LEASE, LEASE_NAMESPACE, self.name)
            body = renewed(self.lease, self.name, wall, LEASE_SECONDS)
            try:
                self.lease = await self.api.replace(LEASE, LEASE_NAMESPACE, body)
            except Conflict:
                self.conflicts += 1
                self.lease = None  # someone else wrote (the controller): keep their epoch
                if attempt:
                    raise
                continue
            self.renewals += 1
            return

    async def write_status(self, wall: float, retries: int = 5) -> None:
        """The full status rewrite: re-read the node, write Ready=True and capacity on top."""
        for _ in range(retries):
            node = await self.api.get(NODE, None, self.name)
            current = node.get("status") or {}
            status = desired_status(current, self.machine, self.cfg.reserve, wall)
            try:
                self.node = await self.api.replace(NODE, None, {**node, "status": status}, "status")
            except Conflict:
                continue
            self.status_writes += 1
            return
        raise Conflict(f"node {self.name}: status lost {retries} races in a row")

    async def report_usage(self, wall: float) -> None:
        """One usage report, as the agent's collector sends it every 10 s."""
        pods = usage_entries(self.name, self.usage_pods, wall)
        await self.api.report_usage(self.name, sample_body(self.name, wall, pods))
        self.usage_reports += 1


USAGE_NAMESPACE = "hollow"


def usage_entries(node: str, count: int, wall: float) -> list[Obj]:
    """``count`` pod entries as the collector builds them (one container each): a fifth at a
    production priority, the rest batch; CPU moves with the time so samples differ."""
    tick = int(wall // 10)
    entries = []
    for j in range(count):
        cpu = 50 + (tick * 7 + j * 13) % 400
        memory = (64 + j % 8 * 32) << 20
        entries.append({
            "namespace": USAGE_NAMESPACE,
            "name": f"{node}-u{j}",
            "uid": f"00000000-0000-4000-8000-{(zlib.crc32(node.encode()) + j) % 16**12:012x}",
            "priority": 2000 if j < max(1, count // 5) else 100,
            "cpuMillis": cpu,
            "memoryBytes": memory,
            "containers": [{"name": "main", "cpuMillis": cpu, "memoryBytes": memory}],
        })  # fmt: skip
    return entries


def hollow_nodes(
    api: AsyncRestClient,
    prefix: str,
    count: int,
    zones: tuple[str, ...] = ("zone-a", "zone-b", "zone-c"),
) -> list[HollowNode]:
    """``count`` hollow nodes named ``<prefix>-00000`` ..., round-robin over ``zones``."""
    width = max(5, len(str(count - 1)))
    nodes = []
    for i in range(count):
        name = f"{prefix}-{i:0{width}d}"
        cfg = NodeConfig(name, zones[i % len(zones)], "hollow", reserve=Reserve())
        nodes.append(HollowNode(cfg, api, hollow_machine(name)))
    return nodes


# ---------------------------------------------------------------------------- pods


async def always_succeeds(action: Action, timeout: float, ctx: ProbeContext) -> ProbeResult:
    """A hollow pod's probe: nothing runs, so every probe passes."""
    return ProbeResult(Outcome.SUCCESS, "hollow")


def hollow_pod(name: str, node: str, ready_after: int = 1) -> Obj:
    """A pod bound to ``node`` whose readiness probe first runs ``ready_after`` seconds after
    the start: its start costs two status writes, Running and then Ready."""
    probe = {"exec": {"command": ["true"]}, "initialDelaySeconds": ready_after, "periodSeconds": 10}
    container = {
        "name": "app",
        "image": "registry.local/hollow:1",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        "readinessProbe": probe,
    }
    return {
        "metadata": {"name": name, "labels": {"app": "hollow"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [container]},
    }


def pod_worker(pod: Obj, runtime: SimRuntime, api: RestPodApi, host_ip: str) -> PodWorker:
    """The real per-pod worker on the ``sim`` runtime with probes that always pass."""
    return PodWorker(
        pod, runtime, api, CrashLoopBackoff(), prober=always_succeeds, host_ip=host_ip, poll=1.0
    )


# ---------------------------------------------------------------------------- schedule


def due_slots(count: int, period: float, start: float, t0: float, t1: float) -> Iterator[
    tuple[float, int]
]:  # fmt: skip
    """The calls due in ``[t0, t1)`` when each of ``count`` items is called once per
    ``period`` from ``start``, item ``i`` at offset ``i * period / count``: ``(due, item)``
    in time order. Pure, so a driver that wakes late fires everything it owes, in order."""
    if count <= 0 or t1 <= t0:
        return
    step = period / count
    # floor, then the ``due >= t0`` test below: a slot is yielded by the one call whose
    # [t0, t1) holds ``start + slot * step`` as computed here, never by none. (ceil of the
    # quotient skips a slot when an edge lands exactly on it and the division rounds up,
    # which uvloop's millisecond clock makes common.)
    slot = max(0, math.floor((t0 - start) / step))
    while (due := start + slot * step) < t1:
        if due >= t0:
            yield due, slot % count
        slot += 1


def lateness_ok(due: float, done: float, tolerance: float = 1.0) -> bool:
    """Whether a call due at ``due`` and finished at ``done`` kept its schedule."""
    return done - due <= tolerance
