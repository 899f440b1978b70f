"""The scheduler process: the I/O shell around the scheduling engine.

Three loops share one event loop:

* **watch** lists nodes and pods from the revision log, then tails it, feeding every change to
  the engine (relisting from scratch when the log was compacted past its position). Standbys
  run it too, so a standby that becomes leader already holds a current snapshot.
* **lease** renews (or, on a standby, tries to take) the leader lease in PostgreSQL.
* **schedule** runs engine cycles while this process leads: each cycle's placements are bound
  in one conditional transaction, pipelined so the next cycle is decided while the previous
  batch commits; pods that fit nowhere get their ``PodScheduled=False`` message, an Event,
  and, where allowed, a preemption (victims deleted with their grace period, the node
  nominated).

Each cycle's random choices are seeded with ``cycle_seed(base, n)`` for the process's base
seed (``--seed``, else drawn at start and logged at info) and the cycle's number; cycles that
decide something log their number, seed and the revision their snapshot had reached at debug,
so a decision can be replayed (ADR 0034).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from app.core import metrics as m
from app.core.audit import SCHEDULER, system
from app.core.errors import Gone, NotFound, StatusError
from app.core.kinds import BY_KIND
from app.core.objects import render
from app.core.priority import band
from app.core.scheduling.engine import Config, Engine, Failure, Placement, cycle_seed
from app.core.scheduling.filters import FILTERS
from app.core.scheduling.podinfo import pod_info
from app.core.scheduling.snapshot import node_info
from app.scheduler.binder import Bind, bind_many
from app.scheduler.metrics import serve
from app.scheduler.writes import COMPONENT, PodRef, mark_unschedulable, nominate
from app.store.db import create_pool
from app.store.disruption import PREEMPTION, mark_disruption_targets
from app.store.events import EventNote, ObjectRef, record_events
from app.store.lease import LeaderLease
from app.store.sql import COLS
from app.store.store import Store
from app.stream.informer import Change, LogInformer

log = logging.getLogger(__name__)

LEASE_NAME = "quaymaster-scheduler"
POD = BY_KIND["Pod"]
_PENDING_PRODUCTION = (
    f"SELECT {COLS} FROM pods WHERE node_name IS NULL AND deletion_timestamp IS NULL"
    " AND priority >= $1 AND row_version > $2 ORDER BY row_version LIMIT 2000"
)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
# A pending pod's message is rewritten at most this often, however often it is retried.
CONDITION_REFRESH_SECONDS = 30.0
MAX_BINDS_IN_FLIGHT = 6  # batch bind transactions at once (the pool has 8 connections)


@dataclass
class Settings:
    database_url: str
    stream_url: str
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    leader_elect: bool = True
    batch_size: int = 500
    config: Config = field(default_factory=Config)
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    lease_duration: float = 8.0
    lease_renew: float = 2.0
    # Pending production pods are also read straight from the table this often (0: never),
    # so they are placed even while the revision stream lags behind a burst.
    pending_poll: float = 0.1
    cycle_seconds: float = 0.1  # one cycle decides for at most this long
    seed: int | None = None  # base of the cycles' seeds (None: drawn at start)


def _before(deadline: float) -> Callable[[], bool]:
    return lambda: time.perf_counter() < deadline


class Metrics:
    def __init__(self) -> None:
        self.registry = m.Registry()
        r = self.registry
        self.attempts = r.counter(
            "scheduler_schedule_attempts_total",
            "Scheduling attempts by result (scheduled, unschedulable, conflict).",
            ("result",),
        )
        self.unschedulable = r.counter(
            "scheduler_unschedulable_total",
            "Failed placement attempts by the filter reason that turned nodes away: one per"
            " attempt and reason, however many nodes that reason turned away (a pod refused"
            " for cpu on some nodes and for a taint on others counts once under each).",
            ("reason",),
        )
        for f in FILTERS:  # every reason is a series from the start, at 0
            for reason in f.reasons:
                self.unschedulable.labels(reason.code)
        self.latency = r.histogram(
            "scheduler_pod_scheduling_seconds",
            "Time from the scheduler first seeing a pending pod to its bind committing.",
            ("band",),
            LATENCY_BUCKETS,
        )
        self.queue = r.gauge(
            "scheduler_pending_pods", "Pods waiting, by priority band and queue.", ("band", "queue")
        )
        self.conflicts = r.counter(
            "scheduler_bind_conflicts_total",
            "Binds refused at commit, by reason (stale pod, no room on the node).",
            ("reason",),
        )
        self.cycle = r.histogram(
            "scheduler_cycle_seconds", "Time to decide one cycle.", (), CYCLE_BUCKETS
        )
        self.bind_seconds = r.histogram(
            "scheduler_bind_batch_seconds", "Time to commit one batch of binds.", (), CYCLE_BUCKETS
        )
        self.preemptions = r.counter(
            "scheduler_preemption_victims_total", "Pods evicted to make room for others."
        )
        self.leader = r.gauge("scheduler_is_leader", "1 while this process leads.")
        self.nodes = r.gauge("scheduler_nodes", "Nodes in the snapshot.")


class SchedulerService:
    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.rng = rng or random.Random()
        self.seed_base = (
            settings.seed if settings.seed is not None else random.SystemRandom().getrandbits(64)
        )
        self.cycles = 0  # cycles run; the next one's seed is cycle_seed(seed_base, cycles + 1)
        self.revision = 0  # of the last change applied to the snapshot
        self.engine = Engine(settings.config, self.rng)
        self.metrics = Metrics()
        log.info("scheduler %s: random base seed %d", settings.identity, self.seed_base)
        self.first_seen: dict[str, float] = {}
        self.condition_written: dict[str, tuple[str, float]] = {}
        self.pool: asyncpg.Pool | None = None
        self.lease: LeaderLease | None = None
        self.synced = asyncio.Event()
        self._wake = asyncio.Event()
        self._inflight: set[asyncio.Task[None]] = set()
        self._batch_inflight: dict[asyncio.Task[None], int] = {}  # bind task -> pods
        self._batch_pods = 0

    # -- leadership ----------------------------------------------------------------------------
    def leading(self) -> bool:
        return self.lease is None or self.lease.is_leader()

    def _on_leadership(self, leading: bool) -> None:
        log.info(
            "scheduler %s: %s", self.settings.identity, "leading" if leading else "standing by"
        )
        self.metrics.leader.set(1.0 if leading else 0.0)
        self._wake.set()

    # -- main ----------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        self.pool = await create_pool(s.database_url, min_size=2, max_size=8)
        server = None
        tasks: list[asyncio.Task[Any]] = []
        try:
            if s.metrics_port is not None:
                try:
                    server = await serve(
                        s.metrics_host, s.metrics_port, self.render_metrics, lambda: True
                    )
                except OSError as exc:  # scheduling matters more than its metrics
                    log.warning("metrics endpoint not started on port %s: %s", s.metrics_port, exc)
            if s.leader_elect:
                self.lease = LeaderLease(
                    self.pool,
                    s.identity,
                    name=LEASE_NAME,
                    duration=s.lease_duration,
                    renew_every=s.lease_renew,
                )
                tasks.append(asyncio.create_task(self.lease.run(stop, self._on_leadership)))
            else:
                self.metrics.leader.set(1.0)
            tasks.append(asyncio.create_task(self._watch(stop)))
            if s.pending_poll > 0:
                tasks.append(asyncio.create_task(self._poll_pending(stop)))
            await self._schedule(stop)
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            if self._inflight:
                await asyncio.gather(*self._inflight, return_exceptions=True)
            if self.lease is not None:
                with contextlib.suppress(Exception):
                    await self.lease.release()
            if server is not None:
                server.close()
            await self.pool.close()

    def render_metrics(self) -> str:
        for (b, q), n in self._depth().items():
            self.metrics.queue.labels(b, q).set(n)
        self.metrics.nodes.set(self.engine.snapshot.node_count)
        return self.metrics.registry.render()

    def _depth(self) -> dict[tuple[str, str], int]:
        depth = {(b, q): 0 for b in ("production", "batch", "best-effort") for q in (
            "active", "backoff", "unschedulable")}  # fmt: skip
        depth.update(self.engine.queue.depth())
        return depth

    # -- watch ---------------------------------------------------------------------------------
    async def _watch(self, stop: asyncio.Event) -> None:
        informer = LogInformer(self.settings.stream_url, ("Node", "Pod"))
        while not stop.is_set():
            try:
                rev, items = await informer.list()
                self._reset(items)
                self.revision = rev
                self.synced.set()
                self._wake.set()
                batches = informer.changes(rev)
                try:
                    async for batch in batches:
                        self._apply(batch)
                        if batch:
                            self.revision = max(self.revision, batch[-1].revision)
                        self._wake.set()
                finally:
                    await batches.aclose()  # type: ignore[attr-defined]
            except Gone:
                log.warning("revision log compacted past the scheduler's position: relisting")
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("watch failed (%s); relisting in 1 s", exc)
                await asyncio.sleep(1.0)

    async def _poll_pending(self, stop: asyncio.Event) -> None:
        """Read pending production pods from the table, ahead of the revision stream.

        Under a burst the stream can run seconds behind; a production pod should not wait for
        it. Versions read here and later from the stream are told apart by ``row_version``, so
        the stream's copy of the same version changes nothing."""
        assert self.pool is not None
        threshold = self.settings.config.threshold
        seen = 0
        while not stop.is_set():
            await self._sleep_quietly(stop, self.settings.pending_poll)
            if not self.synced.is_set() or not self.leading():
                continue
            try:
                rows = await self.pool.fetch(_PENDING_PRODUCTION, threshold, seen)
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("reading pending production pods failed: %s", exc)
                continue
            if not rows:
                continue
            now = self.clock()
            for rec in rows:
                row = dict(rec)
                seen = max(seen, int(row["row_version"]))
                pod = pod_info(render(POD, row), int(row["row_version"]), threshold)
                if pod.pending and pod.uid not in self.engine.snapshot.pods:
                    self.first_seen.setdefault(pod.uid, now)
                self.engine.pod_changed(pod, now)
            self._wake.set()

    async def _sleep_quietly(self, stop: asyncio.Event, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)

    def _reset(self, items: list[Change]) -> None:
        self.engine = Engine(self.settings.config, self.rng)
        nodes = [c for c in items if c.kind == "Node"]
        pods = [c for c in items if c.kind == "Pod"]
        self._apply(nodes + pods)
        log.info("snapshot: %d nodes, %d pods", len(nodes), len(pods))

    def _apply(self, batch: list[Change]) -> None:
        now = self.clock()
        e = self.engine
        threshold = self.settings.config.threshold
        for ch in batch:
            if ch.kind == "Pod":
                if ch.op == "D":
                    e.pod_deleted(ch.uid, now)
                    self.first_seen.pop(ch.uid, None)
                    self.condition_written.pop(ch.uid, None)
                    continue
                pod = pod_info(ch.obj, ch.row_version, threshold)
                if pod.pending:
                    self.first_seen.setdefault(pod.uid, now)
                else:
                    self.first_seen.pop(pod.uid, None)
                e.pod_changed(pod, now)
            elif ch.kind == "Node":
                if ch.op == "D":
                    e.node_deleted(ch.name, now)
                else:
                    e.node_changed(node_info(ch.obj, ch.row_version), now)

    # -- schedule ------------------------------------------------------------------------------
    async def _schedule(self, stop: asyncio.Event) -> None:
        s = self.settings
        while not stop.is_set():
            if not self.synced.is_set() or not self.leading():
                await self._sleep(stop, 0.5)
                continue
            now = self.clock()
            started = time.perf_counter()
            until = started + s.cycle_seconds
            self.cycles += 1
            seed = cycle_seed(self.seed_base, self.cycles)
            # Batch pods only as far as the bind pipeline has room; production pods always,
            # so they never wait for a batch bind to commit before they are even decided.
            placements, failures = self.engine.cycle(
                now, s.batch_size, _before(until), seed, max_batch=self._batch_room()
            )
            if placements or failures:
                self.metrics.cycle.observe(time.perf_counter() - started)
                log.debug(
                    "cycle %d seed %d at revision %d: %d placed, %d unschedulable",
                    self.cycles, seed, self.revision, len(placements), len(failures),
                )  # fmt: skip
            production = [p for p in placements if not p.pod.req.batch]
            if production:
                # A small transaction of its own, never queued behind batch binds.
                self._spawn(self._bind(production, self.cycles))
            batch = [p for p in placements if p.pod.req.batch]
            if batch:
                task = self._spawn(self._bind(batch, self.cycles))
                self._batch_inflight[task] = len(batch)
                self._batch_pods += len(batch)
                task.add_done_callback(self._batch_done)
            if failures:
                self._spawn(self._report_failures(failures))
            if not placements and not failures:
                delay = 1.0
                ready = self.engine.queue.next_ready()
                if ready is not None:
                    delay = max(0.0, min(delay, ready - now))
                await self._sleep(stop, delay)
            else:
                await asyncio.sleep(0)  # let the bind send its first statement

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._inflight.add(task)
        task.add_done_callback(self._finished)
        return task

    def _batch_room(self) -> int:
        """Batch pods the next cycle may place: the next cycle is decided while earlier ones
        commit, with at most two full batches' worth of pods in flight (cycles cut short by
        time make smaller batches, and those may pipeline deeper), in at most
        MAX_BINDS_IN_FLIGHT transactions."""
        if len(self._batch_inflight) >= MAX_BINDS_IN_FLIGHT:
            return 0
        return max(0, 2 * self.settings.batch_size - self._batch_pods)

    def _batch_done(self, task: asyncio.Task[None]) -> None:
        self._batch_pods -= self._batch_inflight.pop(task, 0)
        self._wake.set()  # room for the batch pods left waiting

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("scheduler write failed", exc_info=task.exception())

    async def _sleep(self, stop: asyncio.Event, seconds: float) -> None:
        self._wake.clear()
        waits = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _bind(self, placements: list[Placement], cycle: int) -> None:
        assert self.pool is not None
        # higher priority first: the binder admits in this order when a node runs short
        placements.sort(key=lambda p: -p.pod.priority)
        binds = [
            Bind(
                pod_uid=p.pod.uid,
                namespace=p.pod.namespace,
                name=p.pod.name,
                row_version=p.pod.row_version,
                node_uid=p.node_uid,
                node_name=p.node_name,
                cpu_milli=p.pod.req.cpu_milli,
                memory_bytes=p.pod.req.memory_bytes,
                gpu=p.pod.req.gpu,
                batch=p.pod.req.batch,
            )
            for p in placements
        ]
        by_uid = {p.pod.uid: p for p in placements}
        started = time.perf_counter()
        try:
            async with self.pool.acquire() as conn:
                ctx = system(SCHEDULER, request_id=f"{self.settings.identity}:{cycle}")
                result = await bind_many(conn, binds, datetime.now(UTC), ctx)
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("bind of %d pods failed: %s", len(binds), exc)
            now = self.clock()
            for p in placements:
                self.engine.lost(p, now)
            self.metrics.attempts.labels("error").inc(len(placements))
            return
        self.metrics.bind_seconds.observe(time.perf_counter() - started)
        now = self.clock()
        for b in result.bound:
            p = by_uid[b.pod_uid]
            self.engine.bound(p, result.versions.get(b.pod_uid))
            seen = self.first_seen.pop(b.pod_uid, None)
            if seen is not None:
                self.metrics.latency.labels(band(p.pod.priority)).observe(max(0.0, now - seen))
        self.metrics.attempts.labels("scheduled").inc(len(result.bound))
        for reason, lost in (("stale", result.stale), ("no_room", result.no_room)):
            if lost:
                self.metrics.conflicts.labels(reason).inc(len(lost))
                self.metrics.attempts.labels("conflict").inc(len(lost))
            for b in lost:
                self.engine.lost(by_uid[b.pod_uid], now)
        if result.stale or result.no_room:
            self._wake.set()

    async def _report_failures(self, failures: list[Failure]) -> None:
        assert self.pool is not None
        now = self.clock()
        stamp = datetime.now(UTC)
        self.metrics.attempts.labels("unschedulable").inc(len(failures))
        for f in failures:
            for code in f.reasons:
                self.metrics.unschedulable.labels(code).inc()
        conditions: list[tuple[PodRef, str]] = []
        notes: list[EventNote] = []
        nominations: list[tuple[PodRef, str]] = []
        victims: list[tuple[Failure, Any]] = []
        for f in failures:
            ref = PodRef(f.pod.uid, f.pod.namespace, f.pod.name)
            last = self.condition_written.get(f.pod.uid)
            current = f.pod.scheduled_condition
            if (current is None or current[1] != f.message) and (
                last is None or now - last[1] >= CONDITION_REFRESH_SECONDS
            ):
                conditions.append((ref, f.message))
                notes.append(_note(ref, "FailedScheduling", f.message, "Warning"))
                self.condition_written[f.pod.uid] = (f.message, now)
            if f.preemption is not None:
                nominations.append((ref, f.preemption.node_name))
                notes.append(
                    _note(
                        ref,
                        "Nominated",
                        f"preempting {len(f.preemption.victims)} pod(s) on node "
                        f"{f.preemption.node_name}",
                    )
                )
                for v in f.preemption.victims:
                    victims.append((f, v))
                    notes.append(
                        _note(
                            PodRef(v.uid, v.namespace, v.name),
                            "Preempted",
                            f"preempted by {f.pod.namespace}/{f.pod.name} on node "
                            f"{f.preemption.node_name}",
                        )
                    )
        try:
            async with self.pool.acquire() as conn:
                await mark_unschedulable(conn, conditions, stamp)
                await nominate(conn, nominations)
                await record_events(conn, notes, stamp)
                await mark_disruption_targets(
                    conn,
                    [(v.uid, f"preempted by {f.pod.namespace}/{f.pod.name}") for f, v in victims],
                    PREEMPTION,
                    stamp,
                    system(SCHEDULER, reason="preemption"),
                )
            if victims:
                store = Store(self.pool)
                for f, v in victims:
                    with contextlib.suppress(NotFound):
                        await store.delete(
                            POD,
                            v.namespace,
                            v.name,
                            grace_seconds=v.grace_seconds,
                            expected_uid=v.uid,
                            ctx=system(
                                SCHEDULER,
                                reason=(
                                    f"preempted by {f.pod.namespace}/{f.pod.name} on node "
                                    f"{f.preemption.node_name}"
                                )
                                if f.preemption
                                else "preempted",
                            ),
                        )
                    self.metrics.preemptions.inc()
        except (OSError, asyncpg.PostgresError, StatusError) as exc:
            log.warning("recording %d unschedulable pods failed: %s", len(failures), exc)


def _note(ref: PodRef, reason: str, message: str, type_: str = "Normal") -> EventNote:
    return EventNote(
        ObjectRef("Pod", ref.uid, ref.namespace, ref.name), reason, message, type_, COMPONENT
    )
