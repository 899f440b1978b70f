"""The reclaim controller's shell: read a node, the pods holding room on it and an hour of its
usage samples, plan (``app.core.controllers.reclaim``), apply.

Two ways in. The tick: every ``QM_RECLAIM_SECONDS`` (10 s, the agents' sample interval) beat
runs ``reclaim_sweep``, which splits the node names into chunks of ``QM_RECLAIM_CHUNK`` (500)
and queues one ``reconcile_nodes`` task per chunk: a chunk costs one lock statement, one read
of its nodes, one of their pods and one Redis round trip for their histories, where a task per
node cost a task, three reads and a lock each (1,000 tasks/s at 10,000 nodes). And per key,
``("Node", "", name)``: the dispatcher enqueues a node whenever its object changes, and a node
that had to evict is looked at again 2 s later. Samples come from the usage store in Redis
(``app.store.usage``) at ``QM_USAGE_REDIS_URL`` (default: the broker's URL).

Applying goes through the one applier (``workers.controllers.apply``, ``Plan.status_first``),
in this order so the scheduler stops using room before it is taken back:

1. ``status.batchAllocatable`` (only that field differs from the status read), conditional on
   the node's row version; a lost race re-reads at once instead of evicting from stale facts;
2. evictions, as preemption and the node lifecycle do them: ``DisruptionTarget=True`` (reason
   ``EvictionByReclaim``) in one statement, then each pod deleted with its own grace period,
   guarded by its uid;
3. Events: ``Evicted`` (Warning) on each pod, ``Reclaimed`` (Warning) on the node.
"""

from __future__ import annotations

import logging
import os

import asyncpg
import redis.asyncio as aioredis

from app.core.controllers import reclaim as core
from app.core.controllers.plan import Outcome, Plan, parse_time
from app.core.errors import CONFLICT_RETRY_SECONDS, NotFound
from app.core.kinds import BY_KIND
from app.core.priority import PRODUCTION_THRESHOLD
from app.store.store import Store, Stored
from app.store.usage import UsageStore
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

log = logging.getLogger(__name__)
NODE = BY_KIND["Node"]
NAME = "reclaim-controller"  # its principal: system:controller:<NAME>
COMPONENT = "quaymaster-reclaim"
REASON = "EvictionByReclaim"  # the DisruptionTarget condition's reason
RACE_RETRY_SECONDS = CONFLICT_RETRY_SECONDS  # the lost race is a conflict, retried this soon
# After evicting, look again soon: a batch pod bound against the old figure while this
# reconcile ran is not in what it read.
AFTER_EVICTION_SECONDS = 2.0

_PODS_OF_NODES = """
SELECT node_name, namespace, name, uid::text AS uid, coalesce(priority, 0) AS priority,
       req_cpu_milli, req_memory_bytes, deletion_timestamp IS NOT NULL AS deleting,
       status->>'startTime' AS start_time, creation_timestamp
  FROM pods
 WHERE node_name = ANY($1::text[]) AND coalesce(phase, '') NOT IN ('Succeeded', 'Failed')
"""

_usage: UsageStore | None = None


def config_from_env() -> core.Config:
    env = os.environ.get
    return core.Config(
        threshold=int(env("QM_PRODUCTION_THRESHOLD", str(PRODUCTION_THRESHOLD))),
        window_seconds=float(env("QM_RECLAIM_WINDOW_SECONDS", "3600")),
        stale_seconds=float(env("QM_RECLAIM_STALE_SECONDS", "120")),
        margin=float(env("QM_RECLAIM_MARGIN", "0.10")),
        hysteresis=float(env("QM_RECLAIM_HYSTERESIS", "0.02")),
    )


def usage_store() -> UsageStore:
    """One client per worker process (created on the runtime's loop, which outlives tasks)."""
    global _usage
    if _usage is None:
        url = os.environ.get("QM_USAGE_REDIS_URL") or os.environ.get(
            "QM_BROKER_URL", "redis://127.0.0.1:6379/0"
        )
        _usage = UsageStore(aioredis.Redis.from_url(url))
    return _usage


def room_of(r: asyncpg.Record) -> core.PodRoom:
    started = parse_time(r["start_time"])
    return core.PodRoom(
        r["namespace"],
        r["name"],
        r["uid"],
        int(r["priority"]),
        core.Resources(int(r["req_cpu_milli"]), int(r["req_memory_bytes"])),
        started if started is not None else r["creation_timestamp"].timestamp(),
        bool(r["deleting"]),
    )


async def rooms_of(pool: asyncpg.Pool, nodes: list[str]) -> dict[str, list[core.PodRoom]]:
    """The pods holding room on each of ``nodes``, with the requests the allocation triggers
    count, in one query."""
    out: dict[str, list[core.PodRoom]] = {n: [] for n in nodes}
    for r in await pool.fetch(_PODS_OF_NODES, nodes):
        out[r["node_name"]].append(room_of(r))
    return out


async def rooms(pool: asyncpg.Pool, node: str) -> list[core.PodRoom]:
    return (await rooms_of(pool, [node]))[node]


async def node_names(rt: Runtime) -> list[str]:
    pool = await rt.pool()
    return [r[0] for r in await pool.fetch("SELECT name FROM nodes ORDER BY name")]


async def reconcile_nodes(rt: Runtime, names: list[str], now: float) -> dict[str, float]:
    """One tick over many nodes. Returns the nodes to look at again, with the seconds until
    then. A node another reconcile holds is skipped: that reconcile reads the same facts."""
    keys = {key_text("Node", "", n): n for n in names}
    async with rt.locked_many(list(keys)) as held:
        if not held:
            return {}
        store = await rt.store()
        nodes = await store.get_many(NODE, "", sorted(keys[k] for k in held))
        outcomes = await _plan_and_apply(store, nodes, now)
    return {n: o.next_look for n, o in outcomes.items() if o.next_look is not None}


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> Outcome:
    del namespace  # nodes are cluster-scoped
    async with rt.locked(key_text("Node", "", name)):
        store = await rt.store()
        try:
            node = await store.get(NODE, "", name)
        except NotFound:
            return Outcome(gone=True)
        outcomes = await _plan_and_apply(store, [node], now)
        return outcomes.get(name, Outcome())


async def _plan_and_apply(store: Store, nodes: list[Stored], now: float) -> dict[str, Outcome]:
    """Read the nodes' pods and usage in bulk, plan each node, apply the plans that change
    something; what applying did, by node."""
    cfg = config_from_env()
    names = [n.row["name"] for n in nodes]
    pods = await rooms_of(store.pool, names)
    series = await usage_store().production(names, now - cfg.window_seconds, cfg.threshold)
    out: dict[str, Outcome] = {}
    for node, name in zip(nodes, names, strict=True):
        plan = core.reconcile(with_version(node), pods[name], series[name], now, cfg)
        if not plan.empty:
            out[name] = await apply_reclaim(store, node, plan, now)
    return out


def plan_of(plan: core.ReclaimPlan) -> Plan:
    """The reclaim plan as the applier takes it: the figure first, and nothing evicted if it
    is not written."""
    return Plan(
        status=plan.status,
        events=plan.events,
        evictions=plan.evictions,
        eviction_reason=REASON,
        eviction_event=core.EVICTED,
        status_first=True,
        requeue_after=AFTER_EVICTION_SECONDS if plan.evictions else None,
    )


async def apply_reclaim(store: Store, node: Stored, plan: core.ReclaimPlan, now: float) -> Outcome:
    """Write the figure, then evict (``workers.controllers.apply``); a lost race comes back as
    a conflict, retried in ``RACE_RETRY_SECONDS``."""
    outcome = await apply_plan(
        store, node, plan_of(plan), now=now, controller=NAME, component=COMPONENT
    )
    name = node.row["name"]
    if outcome.status_written:
        log.info("node %s: batch-allocatable %s", name, plan.figure)
    if plan.evictions and (outcome.status_written or plan.status is None):
        log.warning("node %s: evicted %d batch pod(s)", name, len(plan.evictions))
    for f in outcome.failures:
        log.info("node %s: %s: %s", name, f.kind.value, f.message)
    return outcome


async def apply(store: Store, node: Stored, plan: core.ReclaimPlan, now: float) -> float | None:
    """Apply ``plan``; the seconds until the node should be looked at again, if ever."""
    return (await apply_reclaim(store, node, plan, now)).next_look
