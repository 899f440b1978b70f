"""Evicting one pod under its disruption budget, in one transaction.

The eviction subresource and node drains call ``evict``. Correctness does not rest on the
budget's published status, which may lag: the transaction locks the pod, then the budgets that
select it (``FOR UPDATE``, by name), reads the budget's pods with its selector translated to
SQL, and recomputes the numbers with ``app.core.disruption``. Two evictions under one budget
therefore run one after the other, and the second sees the first one's pod already
terminating. Every eviction locks exactly one pod and then budgets in name order, and nothing
else locks a budget before a pod, so evictions cannot deadlock each other.

An allowed eviction marks the pod ``DisruptionTarget=True`` (reason ``EvictionByEvictionAPI``),
deletes it by the store's rules (grace period, finalizers), records it in the budget's
``status.disruptedPods`` and writes an ``Evicted`` Event; a refused one writes a deduplicated
``EvictionBlocked`` Warning on the budget.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from app.core import errors
from app.core.audit import WriteContext, text_of
from app.core.disruption import Budget, compute, live_disrupted, selects, verdict
from app.core.kinds import BY_KIND, Kind
from app.core.labels import from_label_selector
from app.core.objects import format_time
from app.store import sql
from app.store.disruption import EVICTION_API, mark_disruption_targets
from app.store.events import EventNote, ObjectRef, record_events
from app.store.store import Conn, Store, Stored

POD = BY_KIND["Pod"]
PDB = BY_KIND["PodDisruptionBudget"]
COMPONENT = "quaymaster-apiserver"
MANY_BUDGETS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
    "support."
)


@dataclass(frozen=True)
class Outcome:
    """What one eviction did. ``result`` is ``evicted``, ``terminating`` (already going:
    nothing to do) or ``blocked``; ``pod`` is the pod afterwards (``None`` once gone);
    ``message`` says why a budget refused."""

    result: str
    uid: str
    pod: Stored | None = None
    budget: str | None = None
    numbers: Budget | None = None
    message: str = ""


def _stored(kind: Kind, rec: asyncpg.Record) -> Stored:
    row = dict(rec)
    return Stored(kind, str(row["uid"]), int(row["row_version"]), row)


def selector_sql(selector: Any, first: int) -> tuple[str, list[Any]] | None:
    """A SQL predicate on ``labels`` equivalent to a structured label selector, with its
    parameters numbered from ``$first``; ``None`` when the selector selects nothing (absent or
    malformed). Matching is re-checked in Python; the SQL only keeps the read small."""
    try:
        from_label_selector(selector)
    except errors.BadRequest:
        return None
    if selector is None:
        return None
    args: list[Any] = []

    def param(value: Any) -> str:
        args.append(value)
        return f"${first + len(args) - 1}"

    clauses = ["TRUE"]
    if selector.get("matchLabels"):
        clauses.append(f"labels @> {param(dict(selector['matchLabels']))}::jsonb")
    for expr in selector.get("matchExpressions") or []:
        key = param(expr["key"])
        op = expr["operator"]
        if op == "Exists":
            clauses.append(f"labels ? {key}")
        elif op == "DoesNotExist":
            clauses.append(f"NOT labels ? {key}")
        else:
            values = param(list(expr.get("values") or []))
            inside = f"(labels->>{key}) = ANY({values}::text[])"
            clauses.append(inside if op == "In" else f"(NOT labels ? {key} OR NOT {inside})")
    return " AND ".join(clauses), args


async def _budgets_for(conn: Conn, pod: dict[str, Any]) -> list[Stored]:
    """The budgets selecting ``pod``, locked in name order (re-checked once locked, since a
    selector may have changed in between)."""
    ns = pod["metadata"]["namespace"]
    rows = await conn.fetch(f"SELECT {sql.COLS} FROM {PDB.table} WHERE namespace = $1", ns)
    uids = [r["uid"] for r in rows if selects(_stored(PDB, r).obj, pod)]
    if not uids:
        return []
    locked = await conn.fetch(
        f"SELECT {sql.COLS} FROM {PDB.table} WHERE uid = ANY($1::uuid[]) ORDER BY name FOR UPDATE",
        uids,
    )
    return [b for b in (_stored(PDB, r) for r in locked) if selects(b.obj, pod)]


async def _selected_pods(conn: Conn, pdb: Stored) -> list[dict[str, Any]]:
    where = selector_sql((pdb.obj.get("spec") or {}).get("selector"), 2)
    if where is None:
        return []
    clause, args = where
    rows = await conn.fetch(
        f"SELECT {sql.COLS} FROM {POD.table} WHERE namespace = $1 AND {clause}",
        pdb.row["namespace"],
        *args,
    )
    return [p for p in (_stored(POD, r).obj for r in rows) if selects(pdb.obj, p)]


def _controller_uids(objs: list[dict[str, Any]]) -> list[uuid.UUID]:
    found = []
    for obj in objs:
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("controller"):
                try:
                    found.append(uuid.UUID(str(ref.get("uid"))))
                except ValueError:
                    continue
    return found


async def _controllers(conn: Conn, pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The ReplicaSets and Jobs controlling ``pods``, and the Deployments controlling those
    ReplicaSets, by uid: what sizes ``expectedPods``."""
    found: dict[str, dict[str, Any]] = {}
    uids = _controller_uids(pods)
    for kind_name in ("ReplicaSet", "Job"):
        kind = BY_KIND[kind_name]
        for r in await conn.fetch(
            f"SELECT {sql.COLS} FROM {kind.table} WHERE uid = ANY($1::uuid[])", uids
        ):
            s = _stored(kind, r)
            found[s.uid] = s.obj
    parents = _controller_uids(list(found.values()))
    dep = BY_KIND["Deployment"]
    for r in await conn.fetch(
        f"SELECT {sql.COLS} FROM {dep.table} WHERE uid = ANY($1::uuid[])", parents
    ):
        s = _stored(dep, r)
        found[s.uid] = s.obj
    return found


async def _judge(
    conn: Conn, pdb: Stored, pod: dict[str, Any], now: datetime
) -> tuple[Budget, Any, dict[str, str]]:
    pods = await _selected_pods(conn, pdb)
    controllers = await _controllers(conn, pods)
    status = pdb.obj.get("status") or {}
    previous = status.get("disruptedPods") if isinstance(status, dict) else None
    names = {str(p["metadata"]["name"]) for p in pods}
    disrupted = live_disrupted(
        previous if isinstance(previous, dict) else {}, names, now.timestamp()
    )
    budget = compute(pdb.obj, pods, controllers, disrupted)
    return budget, verdict(pdb.obj, pod, budget), disrupted


async def _record_disruption(
    conn: Conn,
    pdb: Stored,
    budget: Budget,
    disrupted: dict[str, str],
    pod_name: str | None,
    decrement: bool,
    now: datetime,
    ctx: WriteContext | None,
) -> None:
    status = dict(pdb.obj.get("status") or {})
    if pod_name is not None:
        disrupted = {**disrupted, pod_name: format_time(now) or ""}
    status["disruptedPods"] = disrupted
    status["currentHealthy"] = budget.current_healthy - (1 if decrement else 0)
    status["desiredHealthy"] = budget.desired_healthy
    status["expectedPods"] = budget.expected_pods
    status["disruptionsAllowed"] = max(0, budget.disruptions_allowed - (1 if decrement else 0))
    await conn.execute(
        sql.update_status(PDB), pdb.row["namespace"], pdb.row["name"], pdb.row_version,
        status, text_of(None if ctx is None else ctx.defaults(verb="update", subresource="status")),
    )  # fmt: skip


async def evict(
    store: Store,
    namespace: str,
    name: str,
    *,
    now: datetime,
    grace_seconds: int | None = None,
    propagation: str = "Background",
    expected_uid: str | None = None,
    expected_row_version: int | None = None,
    ctx: WriteContext | None = None,
    dry_run: bool = False,
    note: str = "Evicted by the eviction API",
) -> Outcome:
    """Evict one pod if its budget allows (see the module docstring). Raises ``NotFound``,
    ``Conflict`` (a precondition failed) or a 500 ``StatusError`` (several budgets)."""
    async with store.pool.acquire() as conn, conn.transaction():
        # The context set here holds for every write of the transaction: the pod's
        # DisruptionTarget, its deletion, the budget's status and the Events.
        rec = await conn.fetchrow(
            sql.select_one(POD) + f" AND {sql.with_context('$3')} FOR UPDATE",
            namespace,
            name,
            text_of(_evicting(ctx)),
        )
        if rec is None:
            raise errors.NotFound(f'pods "{name}" not found', kind="pods", name=name)
        cur = _stored(POD, rec)
        if (expected_uid is not None and expected_uid != cur.uid) or (
            expected_row_version is not None and expected_row_version != cur.row_version
        ):
            raise errors.Conflict(
                f'Operation cannot be fulfilled on pods "{name}": the precondition does not '
                "match the current object",
                kind="pods",
                name=name,
            )
        if cur.deleting:
            return Outcome("terminating", cur.uid, cur)
        pod = cur.obj
        budgets = await _budgets_for(conn, pod)
        if len(budgets) > 1:
            raise errors.StatusError(MANY_BUDGETS, kind="pods", name=name)
        pdb = budgets[0] if budgets else None
        judged = await _judge(conn, pdb, pod, now) if pdb is not None else None
        if pdb is not None and judged is not None and not judged[1].allowed:
            await record_events(
                conn,
                [EventNote(ObjectRef.of(pdb.obj), "EvictionBlocked",
                           f"Cannot evict pod {namespace}/{name}: {judged[1].message}",
                           "Warning", COMPONENT)],
                now,
            )  # fmt: skip
            return Outcome("blocked", cur.uid, cur, pdb.row["name"], judged[0], judged[1].message)
        if dry_run:
            return Outcome("evicted", cur.uid, cur, pdb.row["name"] if pdb else None)
        await mark_disruption_targets(conn, [(cur.uid, note)], EVICTION_API, now)
        marked = await conn.fetchrow(sql.select_one(POD), namespace, name)
        assert marked is not None, "the pod is locked by this transaction"
        after = await store._delete_locked(
            conn, _stored(POD, marked), propagation, grace_seconds, _evicting(ctx)
        )
        if pdb is not None and judged is not None:
            budget, v, disrupted = judged
            gone = after is None
            await _record_disruption(
                conn, pdb, budget, disrupted, None if gone else name, v.decrement, now, ctx
            )
        await record_events(
            conn, [EventNote(ObjectRef.of(pod), "Evicted", note, "Normal", COMPONENT)], now
        )
        return Outcome("evicted", cur.uid, after, pdb.row["name"] if pdb else None)


def _evicting(ctx: WriteContext | None) -> WriteContext | None:
    """An eviction deletes the pod through its ``eviction`` subresource."""
    return None if ctx is None else ctx.defaults(verb="create", subresource="eviction")


@dataclass(frozen=True)
class NodePod:
    namespace: str
    name: str
    uid: str
    terminating: bool


async def pods_on_node(store: Store, node: str) -> list[NodePod]:
    """Every pod bound to ``node``, terminating ones included, in a stable order."""
    rows = await store.pool.fetch(
        "SELECT namespace, name, uid, deletion_timestamp IS NOT NULL AS terminating"
        f" FROM {POD.table} WHERE node_name = $1 ORDER BY namespace, name",
        node,
    )
    return [NodePod(r["namespace"], r["name"], str(r["uid"]), r["terminating"]) for r in rows]
