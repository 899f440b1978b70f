"""Committing the scheduler's placement decisions: many binds in one conditional transaction.

The scheduler decides from a snapshot that is already old when the decision is made: other
schedulers bind pods at the same moment, pods end or are deleted, nodes are cordoned. A bind
therefore re-checks at commit time, under row locks, the two things that may have moved:

* the pod: still at the row version the decision was made from, unbound and not being deleted;
* the node: still there, not cordoned, and with room for the pod given what ``nodes_allocated``
  (kept exact by triggers on ``pods``) says is already placed on it.

Pods are locked before ``nodes_allocated`` rows, each set in uid order, so two schedulers
binding overlapping batches queue behind each other instead of deadlocking, and neither can
over-allocate a node: the capacity check and the write that uses the room happen under the
same node lock.

One call is one READ COMMITTED transaction of five round trips, whatever the batch size:
``BEGIN``, lock the pods, lock the nodes' allocation rows, write every admitted pod in one
``UPDATE`` (whose triggers add the pods' requests to the nodes), ``COMMIT``. That ``UPDATE``
also sets ``qm.contexts``, each pod's write context (the scheduler's principal, the cycle's id
and the node it chose) for the history triggers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from app.core.audit import WriteContext, contexts_text
from app.core.objects import format_time
from app.store.sql import with_context

Conn = asyncpg.Connection | PoolConnectionProxy

# A deadlock or serialization failure (possible against writers that lock pods in another
# order, such as batched status writes) rolls the whole batch back; it is tried once more.
ATTEMPTS = 2

# $1 pod uids, $2 the row versions decided from. Returns the 1-based positions of the binds
# whose pods are still bindable, with the requests the allocation triggers will add.
LOCK_PODS = """
SELECT v.i, p.req_cpu_milli, p.req_memory_bytes, p.req_gpu
  FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS v(uid, row_version, i)
  JOIN pods AS p ON p.uid = v.uid
 WHERE p.row_version = v.row_version
   AND p.node_name IS NULL
   AND p.deletion_timestamp IS NULL
 ORDER BY p.uid
   FOR UPDATE OF p
"""

# $1 node uids. A node without a row here (deleted meanwhile) is simply absent.
LOCK_NODES = """
SELECT v.i, n.name, n.unschedulable,
       n.alloc_cpu_milli, n.alloc_memory_bytes, n.alloc_gpu, n.alloc_pods,
       n.batch_cpu_milli, n.batch_memory_bytes,
       a.cpu_milli, a.memory_bytes, a.gpu, a.pods
  FROM unnest($1::uuid[]) WITH ORDINALITY AS v(uid, i)
  JOIN nodes_allocated AS a ON a.node_uid = v.uid
  JOIN nodes AS n ON n.uid = a.node_uid
 ORDER BY a.node_uid
   FOR UPDATE OF a
"""

# The pod's conditions without PodScheduled, in their order.
_OTHER_CONDITIONS = """
coalesce((SELECT jsonb_agg(c.value ORDER BY c.ordinality)
            FROM jsonb_array_elements(CASE jsonb_typeof(p.status->'conditions')
                                      WHEN 'array' THEN p.status->'conditions'
                                      ELSE '[]'::jsonb END) WITH ORDINALITY AS c
           WHERE c.value->>'type' IS DISTINCT FROM 'PodScheduled'), '[]'::jsonb)"""

# $1 pod uids (locked by LOCK_PODS), $2 node names, $3 the transition time (RFC 3339), $4 the
# pods' write contexts (``qm.contexts``). row_version and generation are moved by the table's
# own trigger.
BIND = f"""
UPDATE pods AS p
   SET spec = jsonb_set(p.spec, '{{nodeName}}', to_jsonb(v.node_name)),
       status = jsonb_set(
         p.status - 'nominatedNodeName', '{{conditions}}',
         {_OTHER_CONDITIONS.strip()}
         || jsonb_build_array(jsonb_build_object(
              'type', 'PodScheduled', 'status', 'True', 'lastTransitionTime', $3::text)))
  FROM unnest($1::uuid[], $2::text[]) AS v(uid, node_name)
 WHERE p.uid = v.uid AND {with_context("$4", "qm.contexts")}
RETURNING p.uid, p.row_version
"""


@dataclass(frozen=True, slots=True)
class Bind:
    """One placement decision: this pod, as read at ``row_version``, onto this node."""

    pod_uid: str
    namespace: str
    name: str
    row_version: int  # the pod's row_version the decision was made from
    node_uid: str
    node_name: str
    cpu_milli: int
    memory_bytes: int
    gpu: int
    batch: bool  # True: limited by the node's batch-allocatable; False: by allocatable


@dataclass
class BindResult:
    """What became of each bind of a ``bind_many`` call (every bind is in exactly one list).

    ``stale``: decide again from a fresh read of the pod (it is gone, being deleted, already
    bound, or was written after the decision). ``no_room``: the pod is untouched and still
    pending; decide again against a fresh view of the nodes (the node is gone or cordoned, the
    room was taken first, or the transaction lost a deadlock twice)."""

    bound: list[Bind] = field(default_factory=list)
    stale: list[Bind] = field(default_factory=list)
    no_room: list[Bind] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)  # pod uid -> row_version once bound


@dataclass(slots=True)
class _Node:
    """A locked ``nodes_allocated`` row with its node's limits; admits pods while they fit."""

    name: str
    unschedulable: bool
    alloc_cpu: int | None
    alloc_memory: int | None
    alloc_gpu: int | None
    alloc_pods: int | None
    batch_cpu: int | None
    batch_memory: int | None
    cpu: int
    memory: int
    gpu: int
    pods: int

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> _Node:
        return cls(
            name=row["name"],
            unschedulable=bool(row["unschedulable"]),
            alloc_cpu=row["alloc_cpu_milli"],
            alloc_memory=row["alloc_memory_bytes"],
            alloc_gpu=row["alloc_gpu"],
            alloc_pods=row["alloc_pods"],
            batch_cpu=row["batch_cpu_milli"],
            batch_memory=row["batch_memory_bytes"],
            cpu=row["cpu_milli"],
            memory=row["memory_bytes"],
            gpu=row["gpu"],
            pods=row["pods"],
        )

    def admit(self, bind: Bind, cpu: int, memory: int, gpu: int) -> bool:
        """Take the room for one pod if it fits, counting what was admitted before it."""
        if self.unschedulable or self.alloc_cpu is None or self.alloc_memory is None:
            return False
        if bind.node_name != self.name:
            return False
        cpu_limit, memory_limit = self.alloc_cpu, self.alloc_memory
        if bind.batch:
            cpu_limit = self.alloc_cpu if self.batch_cpu is None else self.batch_cpu
            memory_limit = self.alloc_memory if self.batch_memory is None else self.batch_memory
        fits = (
            self.cpu + cpu <= cpu_limit
            and self.memory + memory <= memory_limit
            and self.gpu + gpu <= (self.alloc_gpu or 0)
            and (self.alloc_pods is None or self.pods + 1 <= self.alloc_pods)
        )
        if fits:
            self.cpu += cpu
            self.memory += memory
            self.gpu += gpu
            self.pods += 1
        return fits


async def bind_many(
    conn: Conn, binds: Sequence[Bind], now: datetime, ctx: WriteContext | None = None
) -> BindResult:
    """Bind every pod that is still bindable onto its node while the node has room.

    ``conn`` must not be inside a transaction: the call is its own transaction. Binds are
    admitted per node in the order given (put higher priority first); one that does not fit
    is refused without stopping later, smaller ones. A pod's room is the larger of the
    decided requests and those stored on the pod. A pod named twice is bound at most once;
    the repeats are ``stale``. ``now`` (timezone-aware) becomes the PodScheduled condition's
    ``lastTransitionTime``. ``ctx``: the cycle's write context; each pod's adds the node.

    After a deadlock or serialization failure the transaction is rolled back and run once
    more; if that fails too, nothing is bound and every bind is returned as ``no_room``."""
    if conn.is_in_transaction():
        raise RuntimeError("bind_many runs its own transaction; call it outside one")
    seen: set[str] = set()
    unique: list[Bind] = []
    repeats: list[Bind] = []
    for bind in binds:
        (repeats if bind.pod_uid in seen else unique).append(bind)
        seen.add(bind.pod_uid)
    if not unique:
        return BindResult(stale=repeats)
    when = format_time(now)
    assert when is not None
    for attempt in range(ATTEMPTS):
        try:
            result = await _bind_once(conn, unique, when, ctx)
        except (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError):
            if attempt + 1 < ATTEMPTS:
                continue
            result = BindResult(no_room=list(unique))
        result.stale.extend(repeats)
        return result
    raise AssertionError("unreachable")


async def _bind_once(
    conn: Conn, binds: list[Bind], when: str, ctx: WriteContext | None
) -> BindResult:
    result = BindResult()
    async with conn.transaction(isolation="read_committed"):
        rows = await conn.fetch(
            LOCK_PODS, [b.pod_uid for b in binds], [b.row_version for b in binds]
        )
        stored = {
            int(r["i"]) - 1: (r["req_cpu_milli"], r["req_memory_bytes"], r["req_gpu"]) for r in rows
        }
        live: list[tuple[Bind, tuple[int, int, int]]] = []
        for i, bind in enumerate(binds):
            if i in stored:
                live.append((bind, stored[i]))
            else:
                result.stale.append(bind)
        if not live:
            return result
        node_uids = sorted({bind.node_uid for bind, _ in live})
        nodes = {
            node_uids[int(r["i"]) - 1]: _Node.from_row(r)
            for r in await conn.fetch(LOCK_NODES, node_uids)
        }
        for bind, (cpu, memory, gpu) in live:
            node = nodes.get(bind.node_uid)
            room = (max(bind.cpu_milli, cpu), max(bind.memory_bytes, memory), max(bind.gpu, gpu))
            if node is not None and node.admit(bind, *room):
                result.bound.append(bind)
            else:
                result.no_room.append(bind)
        if result.bound:
            written = await conn.fetch(
                BIND,
                [b.pod_uid for b in result.bound],
                [b.node_name for b in result.bound],
                when,
                _contexts(result.bound, ctx),
            )
            if len(written) != len(result.bound):
                raise RuntimeError("a pod locked for binding was not written")
            result.versions = {str(r["uid"]): int(r["row_version"]) for r in written}
    return result


def _contexts(binds: list[Bind], ctx: WriteContext | None) -> str:
    """``qm.contexts`` of a bind statement: each pod's context names the node chosen."""
    if ctx is None:
        return ""
    bound = ctx.defaults(verb="create", subresource="binding")
    return contexts_text(
        (b.namespace, b.name, bound.using(reason=f"scheduled onto node {b.node_name}"))
        for b in binds
    )
