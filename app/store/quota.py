"""Quota admission inside the pod create's transaction, and the usage aggregate it shares with
the ResourceQuota controller.

``Store.create`` and ``Store.create_many`` write pods through :func:`admitted`. With no
ResourceQuota in the pods' namespaces that costs one indexed query returning no rows, and the
insert runs as before. Otherwise the applicable quota rows are locked ``FOR UPDATE`` in name
order, usage is summed in one aggregate over ``pods`` (after the lock, so it sees every create
that held the lock before), the new pods' charge is added, and any hard limit that would be
passed refuses the whole write with 403 before anything is inserted. Concurrent creates charged
to the same quota queue on its row, so none of them can overshoot it.

A quota created (or widened in scope) while a create is between its first look and its lock is
not held against that create: the same window Kubernetes has between a quota's creation and its
first status.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from app.core import quota
from app.core.kinds import Kind
from app.core.quota import PodFacts, Usage

Conn = asyncpg.Connection | PoolConnectionProxy
Obj = dict[str, Any]

_QUOTAS = "SELECT namespace, name, spec FROM resourcequotas WHERE namespace = ANY($1::text[])"
_LOCK = """
SELECT namespace, name, spec FROM resourcequotas
WHERE (namespace, name) IN (SELECT * FROM unnest($1::text[], $2::text[]))
ORDER BY namespace, name FOR UPDATE"""

# Live pods of one namespace, grouped by the attributes quota scopes test: a handful of groups
# however many pods there are, from which each quota's usage is summed in Python.
USAGE = """
SELECT priority, quota_priority_class, quota_terminating, quota_best_effort,
       quota_cross_namespace, count(*) AS pods,
       sum(quota_cpu_milli)::bigint AS cpu_milli,
       sum(quota_memory_bytes)::bigint AS memory_bytes,
       sum(quota_gpu)::bigint AS gpu,
       sum(quota_limit_cpu_milli)::bigint AS limit_cpu_milli,
       sum(quota_limit_memory_bytes)::bigint AS limit_memory_bytes
FROM pods
WHERE namespace = $1 AND deletion_timestamp IS NULL
  AND coalesce(phase, '') NOT IN ('Succeeded', 'Failed')
GROUP BY 1, 2, 3, 4, 5"""

Groups = list[tuple[PodFacts, Usage]]


async def usage_groups(conn: Conn | asyncpg.Pool, namespace: str) -> Groups:
    """What the namespace's live pods charge, by scope-relevant attributes."""
    return [
        (
            PodFacts(
                priority=r["priority"],
                priority_class=r["quota_priority_class"],
                terminating=r["quota_terminating"],
                best_effort=r["quota_best_effort"],
                cross_namespace=r["quota_cross_namespace"],
            ),
            Usage(
                pods=r["pods"],
                cpu_milli=r["cpu_milli"],
                memory_bytes=r["memory_bytes"],
                gpu=r["gpu"],
                limit_cpu_milli=r["limit_cpu_milli"],
                limit_memory_bytes=r["limit_memory_bytes"],
            ),
        )
        for r in await conn.fetch(USAGE, namespace)
    ]


def used_by(q: Obj, groups: Groups) -> Usage:
    """The part of ``groups`` that quota ``q`` applies to."""
    total = Usage()
    for facts, usage in groups:
        if quota.applies(q, facts):
            total = total + usage
    return total


async def quota_usage(conn: Conn | asyncpg.Pool, q: Obj) -> Usage:
    """One quota's current usage (what its controller reports)."""
    namespace = str((q.get("metadata") or {}).get("namespace", ""))
    return used_by(q, await usage_groups(conn, namespace))


def _quota_obj(rec: asyncpg.Record) -> Obj:
    return {
        "metadata": {"namespace": rec["namespace"], "name": rec["name"]},
        "spec": rec["spec"] or {},
    }


def _charges(pods: Sequence[Obj]) -> dict[str, list[tuple[PodFacts, Usage]]]:
    """The charge of each new pod that counts, by namespace."""
    by_ns: dict[str, list[tuple[PodFacts, Usage]]] = defaultdict(list)
    for pod in pods:
        if quota.counts(pod):
            ns = str((pod.get("metadata") or {}).get("namespace") or "")
            by_ns[ns].append((quota.pod_facts(pod), quota.pod_charge(pod)))
    return by_ns


def _charged(q: Obj, new: list[tuple[PodFacts, Usage]]) -> Usage:
    total = Usage()
    for facts, charge in new:
        if quota.applies(q, facts):
            total = total + charge
    return total


async def check(conn: Conn, candidates: list[Obj], new: dict[str, list[Any]]) -> None:
    """Lock the quotas the new pods fall under and raise 403 if any would be exceeded."""
    wanted = [
        q
        for q in candidates
        if quota.tracked_hard(q) and _charged(q, new[q["metadata"]["namespace"]]).pods
    ]
    if not wanted:
        return
    recs = await conn.fetch(
        _LOCK,
        [q["metadata"]["namespace"] for q in wanted],
        [q["metadata"]["name"] for q in wanted],
    )
    groups: dict[str, Groups] = {}
    for rec in recs:
        q = _quota_obj(rec)
        ns = rec["namespace"]
        requested = _charged(q, new[ns])
        if not requested.pods:
            continue  # its scope changed before we locked it
        if ns not in groups:
            groups[ns] = await usage_groups(conn, ns)
        used = used_by(q, groups[ns])
        over = quota.exceeded(q, used, requested)
        if over:
            raise quota.refusal(q, used, requested, over)


@contextlib.asynccontextmanager
async def admitted(
    pool: asyncpg.Pool, kind: Kind, objs: Sequence[Obj]
) -> AsyncIterator[Conn | asyncpg.Pool]:
    """Where to run a create of ``objs``: the pool itself when no quota can apply, otherwise a
    connection in a transaction holding the quotas' locks, checked already. Raises 403
    (``Forbidden``) when the pods would exceed a quota."""
    new = _charges(objs) if kind.kind == "Pod" else {}
    if not new:
        yield pool
        return
    rows = await pool.fetch(_QUOTAS, list(new))
    if not rows:
        yield pool
        return
    async with pool.acquire() as conn, conn.transaction():
        await check(conn, [_quota_obj(r) for r in rows], new)
        yield conn
