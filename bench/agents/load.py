"""The hollow-node load: ten thousand simulated agents' API traffic from one asyncio loop.

:class:`Load` owns the hollow nodes (:mod:`bench.agents.hollow`) and, per API server, one
:class:`bench.agents.http_pool.HttpPool` of ``connections`` keep-alive connections for the nodes and
a small one for pod status writes (``client="httpx"`` puts ``httpx.AsyncClient`` pools there
instead, the load generator measured before); node ``i`` talks to server ``i % servers``, as
agents behind a load balancer would. Once registered, the lease loop renews every node once per
``--renew-every`` seconds on an evenly spread schedule and never stops until the benchmark
ends; node status rewrites run on the same kind of schedule (every 5 minutes per node), and so
do usage reports (every ``usage_every`` seconds per node, 0 for none, each naming
``usage_pods`` pods).
A measurement window only switches on recording (:class:`Recorder`) and starts pods:
``status_rate / 2`` pod starts a second on the ``sim`` runtime, each by the real per-pod
worker, each costing two status writes (Running, then Ready) before its worker is retired.

:meth:`Load.stop` cancels everything outstanding and aborts every connection; it returns
within seconds whatever state the servers are in.

A renewal still in flight when its node's next one falls due is not doubled up (the real
lease keeper renews one at a time): it is counted as ``missed``. A renewal that finishes more
than ``LATE_AFTER`` seconds after it was due is ``late``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx

from agent.api import NAMESPACE, POD
from agent.loop import RestPodApi
from agent.pods import PodWorker
from agent.runtime.sim import SimRuntime
from app.client import AsyncRestClient, Transport, Unreachable
from app.core.errors import AlreadyExists, StatusError
from bench.agents.hollow import (
    HollowNode,
    HttpxTransport,
    due_slots,
    hollow_nodes,
    hollow_pod,
    lateness_ok,
    pod_worker,
)
from bench.agents.http_pool import HttpPool

Obj = dict[str, Any]
LATE_AFTER = 1.0
TICK = 0.005
NS = "hollow"
POD_CONNECTIONS = 4
STOP_WAIT = 5.0


@dataclass
class Recorder:
    """What one measurement window saw."""

    renew_latency: list[float] = field(default_factory=list)
    renew_ok: int = 0
    renew_failed: int = 0
    late: int = 0
    fired: int = 0  # renewals that fell due in the window
    tick_lag_max: float = 0.0  # the longest the event loop was late for a tick: saturation
    missed: int = 0
    status_latency: list[float] = field(default_factory=list)
    node_status_latency: list[float] = field(default_factory=list)
    node_status_failed: int = 0
    usage_latency: list[float] = field(default_factory=list)
    usage_failed: int = 0
    pods_started: int = 0
    pods_ready: int = 0
    failures: Counter[str] = field(default_factory=Counter)


class TimedPodApi(RestPodApi):
    """The hollow pod API, timing each status write into the current recorder."""

    def __init__(self, api: AsyncRestClient, load: Load) -> None:
        super().__init__(api)
        self.load = load

    async def write_status(self, pod: Obj, new_status: Obj) -> Obj:
        t = time.perf_counter()
        out = await super().write_status(pod, new_status)
        if (rec := self.load.rec) is not None:
            rec.status_latency.append(time.perf_counter() - t)
        return out


async def bounded(calls: list[Callable[[], Awaitable[Any]]], width: int) -> None:
    gate = asyncio.Semaphore(width)

    async def one(call: Callable[[], Awaitable[Any]]) -> None:
        async with gate:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


async def retried(call: Callable[[], Awaitable[Any]], attempts: int = 5) -> Any:
    """Setup calls retried on a broken connection or a server error, as an agent would."""
    for attempt in range(attempts):
        try:
            return await call()
        except (Unreachable, StatusError) as exc:
            if attempt == attempts - 1 or (isinstance(exc, StatusError) and exc.code < 500):
                raise
            await asyncio.sleep(0.5 * (attempt + 1))


class Load:
    def __init__(self, token: str, count: int, *, connections: int, renew_every: float,
                 node_status_every: float, prefix: str = "hollow", client: str = "raw",
                 pool: int = 4, usage_every: float = 0.0,
                 usage_pods: int = 10) -> None:  # fmt: skip
        self.token, self.connections, self.client, self.pool = token, connections, client, pool
        self.renew_every, self.node_status_every = renew_every, node_status_every
        self.usage_every, self.usage_pods = usage_every, usage_pods
        self.transports: list[Transport] = []
        self.apis: list[list[AsyncRestClient]] = []  # per server: the nodes' shards
        self.pod_apis: list[list[AsyncRestClient]] = []
        self.nodes: list[HollowNode] = []
        self.count, self.prefix = count, prefix
        self.rec: Recorder | None = None
        self.inflight: set[int] = set()
        self.runtime = SimRuntime()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self.active = 0

    # -- servers ----------------------------------------------------------------------------
    def _api(self, url: str, connections: int) -> AsyncRestClient:
        headers = {"Authorization": f"Bearer {self.token}", "User-Agent": "hollow/1"}
        transport: Transport
        if self.client == "raw":
            transport = HttpPool(url, headers, connections)
        else:
            limits = httpx.Limits(
                max_connections=connections, max_keepalive_connections=connections
            )
            client = httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30)
            transport = HttpxTransport(client, connections)
        self.transports.append(transport)
        return AsyncRestClient(transport)

    def use_servers(self, urls: list[str]) -> None:
        """Talk to ``urls`` from now on: node ``i`` to ``urls[i % len(urls)]``. Each server
        gets ``connections`` keep-alive connections: one pool of them, or with ``httpx`` clients
        of ``pool`` each (httpcore checks every connection of a pool on every request, so small
        pools cost it less CPU)."""
        for url in urls[len(self.apis) :]:
            raw = self.client == "raw"
            shards = 1 if raw else max(1, self.connections // self.pool)
            size = self.connections if raw else self.pool
            self.apis.append([self._api(url, size) for _ in range(shards)])
            # Pod status writes get connections of their own: one agent's write never waits in
            # this process behind other agents' renewals (each real agent has its own socket).
            self.pod_apis.append([self._api(url, POD_CONNECTIONS)])
        if not self.nodes:
            self.nodes = hollow_nodes(self.apis[0][0], self.prefix, self.count)
            for node in self.nodes:
                node.usage_pods = self.usage_pods
        self.active = len(urls)
        for i, node in enumerate(self.nodes):
            node.api = self.api_for(i)

    def api_for(self, i: int) -> AsyncRestClient:
        shards = self.apis[i % self.active]
        return shards[(i // self.active) % len(shards)]

    def sent(self) -> int:
        """Requests sent so far (``raw`` pools only; 0 with ``httpx``)."""
        return sum(t.sent for t in self.transports if isinstance(t, HttpPool))

    def codes(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for shards in [*self.apis, *self.pod_apis]:
            for api in shards:
                total.update(api.codes)
        return total

    # -- setup (not timed) ------------------------------------------------------------------
    async def register(self, width: int = 200) -> float:
        t = time.monotonic()

        async def one(node: HollowNode) -> None:
            await retried(lambda: node.register(time.time()))

        await bounded([partial(one, n) for n in self.nodes], width)
        with contextlib.suppress(StatusError):
            await self.apis[0][0].create(NAMESPACE, None, {"metadata": {"name": NS}})
        return time.monotonic() - t

    async def create_pods(self, tag: str, count: int, width: int = 100) -> list[Obj]:
        """``count`` pods bound round-robin to the hollow nodes, through the API."""
        pods: list[Obj] = []

        async def one(i: int) -> None:
            node = self.nodes[i % len(self.nodes)]
            body = hollow_pod(f"{tag}-{i:05d}", node.name)
            try:
                pods.append(await retried(lambda: node.api.create(POD, NS, body)))
            except AlreadyExists:  # an attempt that broke after the server had created it
                pods.append(await node.api.get(POD, NS, body["metadata"]["name"]))

        await bounded([partial(one, i) for i in range(count)], width)
        return pods

    # -- the endless loops ------------------------------------------------------------------
    def start(self) -> None:
        self._loops = [
            asyncio.create_task(self._periodic(self.renew_every, self._renew)),
            asyncio.create_task(self._periodic(self.node_status_every, self._node_status)),
        ]
        if self.usage_every > 0:
            self._loops.append(asyncio.create_task(self._periodic(self.usage_every, self._usage)))

    async def stop(self) -> int:
        """Cancel the loops and every request and pod in flight, then abort every
        connection; wait at most ``STOP_WAIT`` seconds for the cancelled tasks. Returns how
        many tasks had not finished by then (left to die with the event loop)."""
        tasks = [*self._loops, *self._tasks]
        for task in tasks:
            task.cancel()
        # Closing first fails every outstanding request at once, so no task waits on a socket.
        for transport in self.transports:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(transport.close(), STOP_WAIT)
        if not tasks:
            return 0
        _, pending = await asyncio.wait(tasks, timeout=STOP_WAIT)
        return len(pending)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _periodic(self, period: float, fire: Callable[[float, int], Awaitable[None]]) -> None:
        loop = asyncio.get_running_loop()
        start = t = loop.time()
        while True:
            now = loop.time()
            for due, i in due_slots(len(self.nodes), period, start, t, now):
                self._spawn(fire(due, i))
            t = now
            await asyncio.sleep(TICK)

    async def _renew(self, due: float, i: int) -> None:
        rec = self.rec
        if rec is not None:
            rec.fired += 1
        if i in self.inflight:
            if rec is not None:
                rec.missed += 1
            return
        self.inflight.add(i)
        t = time.perf_counter()
        try:
            await self.nodes[i].renew(time.time())
        except (StatusError, Unreachable) as exc:
            if rec is not None and self.rec is rec:
                rec.renew_failed += 1
                rec.failures[f"renew:{type(exc).__name__}"] += 1
            return
        finally:
            self.inflight.discard(i)
        if rec is not None and self.rec is rec:
            rec.renew_latency.append(time.perf_counter() - t)
            rec.renew_ok += 1
            rec.late += not lateness_ok(due, asyncio.get_running_loop().time(), LATE_AFTER)

    async def _node_status(self, due: float, i: int) -> None:
        await self._timed(self.nodes[i].write_status, "node_status")

    async def _usage(self, due: float, i: int) -> None:
        await self._timed(self.nodes[i].report_usage, "usage")

    async def _timed(self, call: Callable[[float], Awaitable[None]], what: str) -> None:
        """One request; its latency into ``Recorder.<what>_latency``, a failure into
        ``<what>_failed`` and ``failures``."""
        rec = self.rec
        t = time.perf_counter()
        try:
            await call(time.time())
        except (StatusError, Unreachable) as exc:
            if rec is not None:
                setattr(rec, f"{what}_failed", getattr(rec, f"{what}_failed") + 1)
                rec.failures[f"{what.replace('_', '-')}:{type(exc).__name__}"] += 1
            return
        if rec is not None and self.rec is rec:
            getattr(rec, f"{what}_latency").append(time.perf_counter() - t)

    # -- one window -------------------------------------------------------------------------
    async def window(self, seconds: float, pods: list[Obj]) -> Recorder:
        """Record for ``seconds`` while starting ``pods`` evenly over the window."""
        rec = self.rec = Recorder()
        loop = asyncio.get_running_loop()
        start = loop.time()
        workers: list[PodWorker] = []
        running: list[asyncio.Future[None]] = []
        step = seconds / len(pods) if pods else seconds
        api = [TimedPodApi(shards[0], self) for shards in self.pod_apis[: self.active]]
        by_node = {n.name: i for i, n in enumerate(self.nodes)}
        last = start
        while (now := loop.time()) < start + seconds:
            rec.tick_lag_max = max(rec.tick_lag_max, now - last - TICK)
            last = now
            while pods and len(workers) < min(len(pods), int((now - start) / step) + 1):
                pod = pods[len(workers)]
                i = by_node[pod["spec"]["nodeName"]]
                worker = pod_worker(pod, self.runtime, api[i % self.active], "10.0.0.1")
                workers.append(worker)
                rec.pods_started += 1
                running.append(asyncio.ensure_future(self._run_pod(worker, rec)))
            await asyncio.sleep(TICK)
        self.rec = None
        # The last pods' Ready writes land just after the window: wait for them (unrecorded).
        await asyncio.wait(running, timeout=10) if running else None
        return rec

    async def _run_pod(self, worker: PodWorker, rec: Recorder) -> None:
        """Run the worker until its two writes are done, then retire it (its sim container
        stops without an API write): a pod that runs on costs the load generator, not the
        API."""
        task = asyncio.ensure_future(worker.run())
        self._tasks.add(task)  # cancelled by stop() if the benchmark ends first
        task.add_done_callback(self._tasks.discard)
        try:
            while worker.writes < 2 and not task.done():
                await asyncio.sleep(0.25)
            rec.pods_ready += worker.writes >= 2
        finally:
            worker.request_stop(confirm=False)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
