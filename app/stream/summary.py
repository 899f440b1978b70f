"""The cluster summary the web UI's overview renders, kept current from the watch cache.

The API server holds every object in its watch cache (:mod:`app.stream.cache`). A
:class:`ClusterSummary` reads the Nodes and Pods there once, then follows their changes through
one :class:`~app.stream.cache.Watcher`, adding and subtracting each changed object in a
:class:`~app.core.cluster_tally.Tally` (the arithmetic, pure). A page view then costs a copy of
a dozen zone totals, not a walk over 300,000 pods.

* Start: the watcher is registered and the cache's objects listed in the same step, so every
  change after the listing arrives through the watcher. The listing is read in chunks that
  yield to the event loop (the server keeps answering) into a *new* tally, which replaces the
  current one only when complete: readers never see half a cluster.
* Overflow (the watcher's queue filled up) or a reload of the cache from the log (its
  ``loads`` moves): the same again, from the current objects.
* Every ``interval`` seconds (15) of the injected clock a :class:`Sample` is taken: pending
  pods, and p50/p99 of the scheduling latency of pods bound in the interval; an hour of them is
  kept. Latency is the PodScheduled=True ``lastTransitionTime`` (written by the scheduler's
  bind) minus ``creationTimestamp``, for pods this summary saw go from unbound to bound.

Lease ages (the agents' ``quaymaster-node-lease/<node>`` Leases) are read from the cache for
the rows shown only, and observed usage from the usage store (:func:`observed_usage`): neither
is copied here. Started and stopped by the API server's lifespan (``app.state.summary``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace

import msgspec

from app.core.capacity import node_facts, pod_facts, timestamp
from app.core.cluster_tally import NodePage, NodeRow, NodeSort, Sample, Tally, Totals, ZoneSummary
from app.core.kinds import BY_KIND, Kind
from app.store.usage import PREFIX as USAGE_PREFIX
from app.store.usage import UsageStore, decode
from app.stream.cache import Cached, WatchCache, Watcher

log = logging.getLogger(__name__)

NODE = BY_KIND["Node"]
POD = BY_KIND["Pod"]
LEASE = BY_KIND["Lease"]
NODE_LEASE_NAMESPACE = "quaymaster-node-lease"
INTERVAL_S = 15.0
KEEP_S = 3600.0
OBSERVED_SLICE = 500  # nodes' usage samples read and decoded per round trip
CHUNK = 1000  # objects read between yields to the event loop (~10 ms)

__all__ = [
    "ClusterSnapshot", "ClusterSummary", "NodePage", "NodeRow", "Observed", "Sample", "Totals",
    "ZoneSummary", "observed_usage",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """The overview at ``at``. ``complete`` is False until the first full read is done."""

    at: float
    complete: bool
    totals: Totals
    zones: tuple[ZoneSummary, ...]
    phases: dict[str, int]  # every pod by status.phase
    pending: int
    oldest_pending_created: float | None  # seconds since the epoch
    pending_reasons: dict[str, int]  # PodScheduled=False reason -> pods ("": not tried yet)
    missing_node_pods: int  # pods bound to a node name with no Node object
    samples: tuple[Sample, ...]  # oldest first, one per interval, up to an hour


@dataclass(frozen=True, slots=True)
class Observed:
    """A node's latest fresh usage sample from its agent."""

    cpu_millis: int
    memory_bytes: int
    at: float


class _Renewal(msgspec.Struct):
    renewTime: str | None = None


class _Lease(msgspec.Struct):
    spec: _Renewal = msgspec.field(default_factory=_Renewal)


_lease_dec = msgspec.json.Decoder(_Lease)


@dataclass(eq=False)
class _KindsWatcher(Watcher):
    """A watcher of several kinds at once, so their changes come in commit order."""

    kinds: tuple[Kind, ...] = ()

    def matches(self, c: Cached | None) -> bool:
        return c is not None and c.kind in self.kinds


@dataclass(eq=False)
class ClusterSummary:
    """Node and pod totals for the overview; see the module docstring."""

    cache: WatchCache
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep
    interval: float = INTERVAL_S
    queue_size: int = 50_000
    chunk: int = CHUNK
    tally: Tally = field(default_factory=Tally)
    complete: bool = False  # a full read has been done (the tally is the whole cluster)
    building: bool = False  # a read is in progress (the tally shown is the previous one)
    rebuilds: int = 0
    samples: deque[Sample] = field(init=False)
    _watcher: _KindsWatcher | None = field(default=None, init=False)
    _loads: int = field(default=-1, init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)
    _observed: tuple[float, dict[str, tuple[int, int]]] | None = field(default=None, init=False)
    _observed_lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    def __post_init__(self) -> None:
        self.samples = deque(maxlen=max(1, round(KEEP_S / self.interval)))

    # -- running -------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [asyncio.create_task(self.follow()), asyncio.create_task(self.ticks())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def follow(self) -> None:
        """Build, then apply changes; build again after an overflow. Runs until cancelled."""
        while True:
            w = _KindsWatcher(NODE, None, None, None, asyncio.Queue(self.queue_size),
                              kinds=(NODE, POD))  # fmt: skip
            self.cache.watchers.add(w)
            self._watcher = w
            try:
                await self.rebuild(list(self.cache.objects[NODE.kind].values()),
                                   list(self.cache.objects[POD.kind].values()))  # fmt: skip
                while (item := await w.queue.get()) is not None:
                    self.apply(*item)
            finally:
                self.cache.unwatch(w)
            log.warning("the cluster summary's watcher overflowed; reading the cache again")

    async def rebuild(self, nodes: list[Cached], pods: list[Cached]) -> None:
        """A new tally from these objects (listed as the watcher was registered), in chunks."""
        self._loads = self.cache.loads
        self.building = True
        fresh = Tally()
        for i, c in enumerate(nodes):
            fresh.node_changed(c.name, node_facts(c.raw))
            if i % self.chunk == self.chunk - 1:
                await asyncio.sleep(0)
        for i, c in enumerate(pods):
            fresh.pod_changed(c.uid, pod_facts(c.raw))
            if i % self.chunk == self.chunk - 1:
                await asyncio.sleep(0)
        self.tally = fresh
        self.complete, self.building = True, False
        self.rebuilds += 1

    def apply(self, change: str, c: Cached) -> None:
        deleted = change == "DELETED"
        if c.kind is NODE:
            self.tally.node_changed(c.name, None if deleted else node_facts(c.raw))
        else:
            self.tally.pod_changed(c.uid, None if deleted else pod_facts(c.raw))

    async def ticks(self) -> None:
        """A sample every ``interval`` seconds of the clock, on its multiples."""
        while True:
            await self.sleep(self.interval - self.clock() % self.interval)
            self.tick()

    def tick(self) -> Sample:
        """Take this interval's sample. A cache that reloaded since the last read (its objects
        came back without events) ends the watcher, so :meth:`follow` reads it again."""
        if self.complete and self.cache.loads != self._loads and self._watcher is not None:
            self._loads = self.cache.loads
            self._watcher.overflowed = True
            with contextlib.suppress(asyncio.QueueFull):
                self._watcher.queue.put_nowait(None)
        sample = self.tally.sample(self.clock())
        self.samples.append(sample)
        return sample

    # -- reading -------------------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        t = self.tally
        return ClusterSnapshot(
            at=self.clock(),
            complete=self.complete,
            totals=t.totals(),
            zones=t.zones(),
            phases=t.phases(),
            pending=t.pending,
            oldest_pending_created=t.oldest_pending(),
            pending_reasons=t.reasons(),
            missing_node_pods=t.missing_node_pods(),
            samples=tuple(self.samples),
        )

    def nodes(
        self,
        sort: NodeSort = "name",
        *,
        descending: bool = False,
        zone: str | None = None,
        ready: bool | None = None,
        unschedulable: bool | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> NodePage:
        """A page of nodes, with the lease age of each row on it."""
        page = self.tally.node_page(
            sort,
            descending=descending,
            zone=zone,
            ready=ready,
            unschedulable=unschedulable,
            offset=offset,
            limit=limit,
        )
        return NodePage(page.total, tuple(self._with_lease(r) for r in page.items))

    def node(self, name: str) -> NodeRow | None:
        row = self.tally.node(name)
        return self._with_lease(row) if row is not None else None

    async def observed_by_zone(self, usage: UsageStore | None) -> dict[str, tuple[int, int]]:
        """Observed (CPU millicores, memory bytes) per zone: the nodes' fresh usage samples
        summed. Read from the usage store at most once per ``interval`` (page views in between
        share it), in slices of ``OBSERVED_SLICE`` nodes so decoding 10,000 samples does not
        hold the event loop. Empty without a usage store."""
        if usage is None:
            return {}
        async with self._observed_lock:
            now = self.clock()
            if self._observed is not None and now - self._observed[0] < self.interval:
                return self._observed[1]
            zones = self.tally.node_zones()
            names = list(zones)
            out: dict[str, tuple[int, int]] = {}
            for i in range(0, len(names), OBSERVED_SLICE):
                seen = await observed_usage(usage, names[i : i + OBSERVED_SLICE])
                for name, o in seen.items():
                    cpu, mem = out.get(zones[name], (0, 0))
                    out[zones[name]] = (cpu + o.cpu_millis, mem + o.memory_bytes)
            self._observed = (now, out)
            return out

    def lease_age(self, node: str) -> float | None:
        """Seconds since the node's agent last renewed its Lease (None: no Lease, or no time)."""
        c = self.cache.get(LEASE, NODE_LEASE_NAMESPACE, node)
        if c is None:
            return None
        try:
            renewed = timestamp(_lease_dec.decode(c.raw).spec.renewTime)
        except msgspec.ValidationError:
            return None
        return max(0.0, self.clock() - renewed) if renewed else None

    def _with_lease(self, row: NodeRow) -> NodeRow:
        age = self.lease_age(row.name)
        return row if age is None else replace(row, lease_age_s=age)


async def observed_usage(usage: UsageStore | None, names: Iterable[str]) -> dict[str, Observed]:
    """The latest fresh usage sample of each named node (a page's worth) in one round trip;
    nodes without one are left out, and so is everything when usage is not configured."""
    wanted = list(names)
    if usage is None or not wanted:
        return {}
    raws = await usage.redis.mget([USAGE_PREFIX + "latest:" + n for n in wanted])
    oldest = usage.clock() - usage.stale_s
    out: dict[str, Observed] = {}
    for name, raw in zip(wanted, raws, strict=True):
        if raw is None:
            continue
        s = decode(raw)
        if s.at >= oldest:
            out[name] = Observed(s.cpu_millis, s.memory_bytes, s.at)
    return out
