"""The node lifecycle loop: the shell around ``app.core.controllers.nodelifecycle``, run by the
controller manager while it leads (one instance cluster-wide, ticking every second).

Each tick reads every node lease's row version (one small query), folds the changes into the
renewals seen on this process's monotonic clock, reads in full only the nodes that are silent
or carry this controller's marks, and the pods bound to the silent ones, then applies the plan:

1. fence: bump ``spec.epoch`` of a newly silent node's Lease, conditional on the row version
   read (a node whose lease was renewed meanwhile is not silent: it is left alone this tick);
2. taint and annotate the Node, then its Ready condition, conditional on the version just
   written: one ``apply_plan`` (``workers.controllers.apply``) per node;
3. pods of silent nodes: ``Ready=False`` in one statement;
4. evictions and Events, one ``apply_plan`` per node: ``DisruptionTarget`` in one statement,
   then each pod force-deleted (grace 0, uid precondition), then the node's Events.

The applier's outcomes, and a lost fence as a failure, are merged (``Outcome.merge``) into the
tick's, whose failures the manager's metrics count by kind (``qm_node_lifecycle_failures_total``).
A write that loses a race is dropped; the next tick reads again and asks again.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import asyncpg

from app.core.admission import admit
from app.core.controllers import nodelifecycle as core
from app.core.controllers.plan import (
    Evict,
    Note,
    Outcome,
    Plan,
    format_time,
    is_at_most_one,
    parse_time,
)
from app.core.errors import Failure, NotFound, StatusError
from app.core.kinds import BY_KIND
from app.store import sql
from app.store.disruption import NODE_LIFECYCLE
from app.store.store import Stored
from workers import metrics
from workers.context import write_context
from workers.controllers.apply import apply_plan, with_version
from workers.loops import Context
from workers.outcome import failure_of

log = logging.getLogger(__name__)
NAME = "node-lifecycle-controller"  # its principal: system:controller:<NAME>
COMPONENT = "quaymaster-node-lifecycle"
LEASE_NAMESPACE = "quaymaster-node-lease"
NODE = BY_KIND["Node"]
LEASE = BY_KIND["Lease"]

_LEASES = """SELECT name, row_version, qm_int(spec->>'leaseDurationSeconds') AS seconds
FROM leases WHERE namespace = $1"""

_NODES = f"""SELECT name, uid::text AS uid, coalesce(labels->>'{core.ZONE_LABEL}', '') AS zone,
  coalesce(jsonb_typeof(spec->'taints') = 'array'
           AND spec->'taints' @> '[{{"key": "{core.UNREACHABLE_TAINT}"}}]', false) AS tainted,
  coalesce(jsonb_typeof(status->'conditions') = 'array' AND status->'conditions' @>
    '[{{"type": "Ready", "status": "Unknown", "reason": "{core.NODE_UNKNOWN}"}}]', false)
    AS unknown
FROM nodes"""

_PODS = f"""SELECT namespace, name, uid::text AS uid, node_name, spec,
  deletion_timestamp IS NOT NULL AS deleting, finalizers <> '[]'::jsonb AS held,
  coalesce(jsonb_typeof(status->'conditions') = 'array' AND status->'conditions' @>
    '[{{"type": "Ready", "status": "False", "reason": "{core.POD_UNREACHABLE}"}}]', false)
    AS unready
FROM pods WHERE node_name = ANY($1::text[])"""

# Ready=False on pods of silent nodes, still bound where the plan saw them.
_UNREADY = f"""
UPDATE pods p SET status = jsonb_set(
    CASE WHEN jsonb_typeof(p.status) = 'object' THEN p.status ELSE '{{}}'::jsonb END,
    '{{conditions}}',
    coalesce((SELECT jsonb_agg(c) FROM jsonb_array_elements(
                CASE WHEN jsonb_typeof(p.status->'conditions') = 'array'
                     THEN p.status->'conditions' ELSE '[]'::jsonb END) c
              WHERE c->>'type' IS DISTINCT FROM 'Ready'), '[]'::jsonb)
    || jsonb_build_array(jsonb_build_object(
         'type', 'Ready', 'status', 'False', 'reason', '{core.POD_UNREACHABLE}',
         'message', 'the node this pod runs on stopped renewing its lease',
         'lastTransitionTime', $3::text)))
FROM unnest($1::uuid[], $2::text[]) AS d(uid, node)
WHERE p.uid = d.uid AND p.node_name = d.node AND p.deletion_timestamp IS NULL
  AND {sql.with_context("$4")}
"""


def config_from_env() -> core.Config:
    env = os.environ.get
    return core.Config(
        unreachable_after=float(env("QM_NODE_UNREACHABLE_AFTER", "40")),
        evict_after=float(env("QM_NODE_EVICT_AFTER", "60")),
        lease_duration=float(env("QM_NODE_LEASE_SECONDS", "40")),
        agent_self_kill=float(env("QM_NODE_AGENT_SELF_KILL", "30")),
        margin=float(env("QM_NODE_EVICT_MARGIN", "5")),
        zone_threshold=float(env("QM_NODE_ZONE_THRESHOLD", "0.10")),
        zone_min_silent=int(env("QM_NODE_ZONE_MIN_SILENT", "2")),
        evict_rate=float(env("QM_NODE_EVICT_RATE", "10")),
        trickle_rate=float(env("QM_NODE_TRICKLE_PER_MINUTE", "3")) / 60.0,
        flap_limit=int(env("QM_NODE_FLAP_LIMIT", "3")),
        flap_window=float(env("QM_NODE_FLAP_WINDOW", "3600")),
    )


def silences_of(obj: dict[str, Any]) -> tuple[float, ...]:
    """The silence history from the node's annotation; unreadable entries are dropped."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(core.SILENCES_ANNOTATION)
    try:
        items = json.loads(text) if text else []
    except ValueError:
        return ()
    times = [parse_time(t) for t in items if isinstance(t, str)] if isinstance(items, list) else []
    return tuple(t for t in times if t is not None)


def _has_taint(obj: dict[str, Any], key: str) -> bool:
    taints = (obj.get("spec") or {}).get("taints") or []
    return any(isinstance(t, dict) and t.get("key") == key for t in taints)


@dataclass
class NodeLifecycle:
    cfg: core.Config = field(default_factory=core.Config)
    name: str = "node-lifecycle"
    interval: float = 1.0
    seen: dict[str, core.Seen] = field(default_factory=dict)
    state: core.State = field(default_factory=core.reset_state)

    @classmethod
    def from_env(cls) -> NodeLifecycle:
        interval = float(os.environ.get("QM_NODE_LIFECYCLE_INTERVAL", "1"))
        return cls(config_from_env(), interval=interval)

    def reset(self) -> None:
        """A new term: every node's last renewal becomes the first read of this term."""
        self.seen = {}
        self.state = core.reset_state()

    async def tick(self, ctx: Context) -> None:
        await self.run_once(ctx)

    async def run_once(self, ctx: Context) -> core.NodePlan:
        now, wall = ctx.monotonic(), ctx.wall()
        leases = {r["name"]: r for r in await ctx.pool.fetch(_LEASES, LEASE_NAMESPACE)}
        self.seen = core.track(self.seen, {n: r["row_version"] for n, r in leases.items()}, now)
        views, full = await self._observe(ctx, leases, now)
        known = {v.name for v in views}  # forget nodes and leases that are both gone
        self.seen = {n: s for n, s in self.seen.items() if n in known or n in leases}
        plan = core.reconcile(views, self.state, self.cfg, now, wall.timestamp())
        self.state = plan.state
        metrics.SILENT.set(sum(1 for v in views if core.is_silent(v, self.cfg)))
        metrics.DISRUPTED.set(len(plan.state.disrupted))
        if not plan.empty:
            count(await self._apply(ctx, plan, leases, full, wall))
        return plan

    # -- reading -----------------------------------------------------------------------------
    async def _observe(
        self, ctx: Context, leases: dict[str, asyncpg.Record], now: float
    ) -> tuple[list[core.NodeView], dict[str, Stored]]:
        views: list[core.NodeView] = []
        interesting: list[str] = []
        for r in await ctx.pool.fetch(_NODES):
            seen = self.seen.get(r["name"])
            silence = None if seen is None else now - seen.at
            lease = leases.get(r["name"])
            view = core.NodeView(
                r["name"],
                r["uid"],
                r["zone"],
                silence,
                bool(seen and seen.renewed),
                unreachable_taint=r["tainted"],
                ready_unknown=r["unknown"],
                lease_seconds=float(lease["seconds"]) if lease and lease["seconds"] else None,
            )
            if r["tainted"] or r["unknown"] or core.is_silent(view, self.cfg):
                interesting.append(r["name"])
            views.append(view)
        if not interesting:
            return views, {}
        full = {s.row["name"]: s for s in await self._nodes(ctx, interesting)}
        silent = [v.name for v in views if core.is_silent(v, self.cfg)]
        pods = await self._pods(ctx, silent) if silent else {}
        out = []
        for v in views:
            s = full.get(v.name)
            if s is not None:
                v = replace(
                    v,
                    unreachable_taint=_has_taint(s.obj, core.UNREACHABLE_TAINT),
                    repair_taint=_has_taint(s.obj, core.REPAIR_TAINT),
                    silences=silences_of(s.obj),
                    pods=tuple(pods.get(v.name, ())),
                )
            out.append(v)
        return out, full

    async def _nodes(self, ctx: Context, names: list[str]) -> list[Stored]:
        recs = await ctx.pool.fetch(
            f"SELECT {sql.COLS} FROM nodes WHERE namespace = '' AND name = ANY($1::text[])", names
        )
        return [Stored(NODE, str(r["uid"]), int(r["row_version"]), dict(r)) for r in recs]

    async def _pods(self, ctx: Context, nodes: list[str]) -> dict[str, list[core.PodView]]:
        out: dict[str, list[core.PodView]] = {}
        for r in await ctx.pool.fetch(_PODS, nodes):
            view = core.PodView(
                r["namespace"],
                r["name"],
                r["uid"],
                is_at_most_one({"spec": r["spec"] or {}}),
                unready=r["unready"],
                deleting=r["deleting"],
                finalizers=r["held"],
            )
            out.setdefault(r["node_name"], []).append(view)
        return out

    # -- writing -----------------------------------------------------------------------------
    async def _apply(
        self,
        ctx: Context,
        plan: core.NodePlan,
        leases: dict[str, asyncpg.Record],
        full: dict[str, Stored],
        wall: datetime,
    ) -> Outcome:
        """Fence, then each node's marks through the applier, then the pods: unready in one
        statement, evictions and Events through the applier, node by node."""
        outcome = Outcome()
        skipped: set[str] = set()
        for change in plan.changes:
            fenced = await self._fence(ctx, change.name, leases) if change.bump_epoch else None
            if fenced is not None:
                outcome = outcome.merge(Outcome.failed(fenced))
                skipped.add(change.name)
                continue
            stored = full.get(change.name)
            if stored is not None:
                marks = _node_plan(stored, change, wall)
                outcome = outcome.merge(await self._apply_plan(ctx, stored, marks, wall))
        unready = [a for a in plan.unready if a.node not in skipped]
        if unready:
            await ctx.pool.execute(
                _UNREADY,
                [a.uid for a in unready],
                [a.node for a in unready],
                format_time(wall.timestamp()),
                write_context(NAME, "the node stopped renewing its lease")
                .defaults(verb="update", subresource="status")
                .text(),
            )
        evict: dict[str, list[Evict]] = {}
        for a in plan.evict:
            message = f"node {a.node} silent: pod deleted"
            evict.setdefault(a.node, []).append(
                Evict(a.namespace, a.name, a.uid, message, 0, mark=not a.deleting)
            )
        notes: dict[str, list[Note]] = {}
        for n in plan.notes:
            if n.node not in skipped:
                kind = "Warning" if n.warning else "Normal"
                notes.setdefault(n.node, []).append(Note(n.reason, n.message, kind))
        for name in sorted(evict.keys() | notes.keys()):
            stored = full.get(name)
            if stored is None:  # deleted since it was read: nothing of it left to write about
                continue
            pods = Plan(
                evictions=tuple(evict.get(name, ())),
                eviction_reason=NODE_LIFECYCLE,
                events=tuple(notes.get(name, ())),
            )
            outcome = outcome.merge(await self._apply_plan(ctx, stored, pods, wall))
        if plan.evict:
            log.warning("evicted %d pod(s) from silent nodes", outcome.deleted)
        return outcome

    async def _apply_plan(self, ctx: Context, node: Stored, plan: Plan, wall: datetime) -> Outcome:
        outcome = await apply_plan(
            ctx.store, node, plan, now=wall.timestamp(), controller=NAME, component=COMPONENT,
        )  # fmt: skip
        for f in outcome.failures:  # lost a race, gone, or refused: looked at again next tick
            log.info("node %s: %s: %s", node.row["name"], f.kind.value, f.message)
        return outcome

    async def _fence(
        self, ctx: Context, name: str, leases: dict[str, asyncpg.Record]
    ) -> Failure | None:
        """Increment the lease's epoch if it is still the version read; the failure that keeps
        the node from being marked unreachable, if any (a vanished lease fences nothing and
        does not stand in the way)."""
        lease = leases.get(name)
        if lease is None:
            return None
        try:
            current = await ctx.store.get(LEASE, LEASE_NAMESPACE, name)
            obj = dict(current.obj)
            spec = dict(obj.get("spec") or {})
            epoch = spec.get("epoch")
            spec["epoch"] = (epoch if isinstance(epoch, int) else 0) + 1
            obj["spec"] = spec
            written = await ctx.store.update(
                LEASE, admit(LEASE, obj, current.obj), lease["row_version"],
                write_context(NAME, f"fence the lease of silent node {name}"),
            )  # fmt: skip
        except NotFound:
            return None
        except StatusError as exc:
            log.info("node %s: lease changed while fencing (%s); looking again", name, exc)
            failure = failure_of(exc)
            assert failure is not None  # every StatusError is classified
            return failure
        seen = self.seen.get(name)
        if seen is not None:  # my own write is not a renewal
            self.seen[name] = replace(seen, row_version=written.row_version)
        return None


def count(outcome: Outcome) -> None:
    """Count a tick's evictions, and the writes the next tick asks for again by the kind of
    their failure."""
    if outcome.deleted:
        metrics.EVICTIONS.inc(outcome.deleted)
    for f in outcome.failures:
        metrics.NODE_FAILURES.labels(f.kind.value).inc()


def _node_plan(stored: Stored, change: core.NodeChange, wall: datetime) -> Plan:
    """The node's marks (taints, silence history), then its Ready condition, conditional on
    the version the marks wrote; the condition only if the marks were written."""
    obj = with_version(stored)
    updates: tuple[dict[str, Any], ...] = ()
    if change.taint is not None or change.repair or change.silences is not None:
        updates = (_with_marks(obj, change, wall),)
    status = None
    if change.ready is not None:
        status = _with_ready(obj.get("status") or {}, change.ready, wall)
    return Plan(updates=updates, status=status, status_assumes_writes=True)


def _with_marks(obj: dict[str, Any], change: core.NodeChange, wall: datetime) -> dict[str, Any]:
    """The node with the unreachable taint added or removed, the repair taint added, and the
    silence history written; other taints and annotations untouched."""
    spec = dict(obj.get("spec") or {})
    taints = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
    stamp = format_time(wall.timestamp())
    if change.taint is False:
        taints = [t for t in taints if t.get("key") != core.UNREACHABLE_TAINT]
    wanted = [core.UNREACHABLE_TAINT] if change.taint else []
    wanted += [core.REPAIR_TAINT] if change.repair else []
    for key in wanted:
        if not any(t.get("key") == key for t in taints):
            taints.append({"key": key, "effect": "NoSchedule", "timeAdded": stamp})
    spec["taints"] = taints
    meta = dict(obj.get("metadata") or {})
    if change.silences is not None:
        history = [format_time(t) for t in change.silences]
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            core.SILENCES_ANNOTATION: json.dumps(history, separators=(",", ":")),
        }
    return {**obj, "metadata": meta, "spec": spec}


def _with_ready(status: dict[str, Any], ready: str, wall: datetime) -> dict[str, Any]:
    """The node status with its Ready condition replaced by this controller's verdict."""
    if ready == "Unknown":
        reason, message = core.NODE_UNKNOWN, "the node agent stopped renewing its lease"
    else:
        reason, message = "NodeLeaseRenewed", "the node agent renews its lease again"
    stamp = format_time(wall.timestamp())
    conditions = [
        c
        for c in status.get("conditions") or []
        if not (isinstance(c, dict) and c.get("type") == "Ready")
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": ready,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
    )
    return {**status, "conditions": conditions}
