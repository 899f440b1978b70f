"""The Deployment controller's shell: read the Deployment, its ReplicaSets and their pods, plan,
apply."""

from __future__ import annotations

from app.core.controllers import deployment
from app.core.errors import NotFound
from app.core.kinds import BY_KIND
from app.store.sql import COLS
from app.store.store import Stored, _stored
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

DEPLOYMENT = BY_KIND["Deployment"]
RS = BY_KIND["ReplicaSet"]
POD = BY_KIND["Pod"]
_OWNED = "SELECT {cols} FROM {table} WHERE namespace = $1 AND owner_references @> $2::jsonb"


async def _owned(rt: Runtime, table: str, kind_uid: str, namespace: str) -> list[Stored]:
    pool = await rt.pool()
    kind = RS if table == "replicasets" else POD
    rows = await pool.fetch(_OWNED.format(cols=COLS, table=table), namespace, [{"uid": kind_uid}])
    return [_stored(kind, r) for r in rows]


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> float | None:
    async with rt.locked(key_text("Deployment", namespace, name)):
        store = await rt.store()
        try:
            dep = await store.get(DEPLOYMENT, namespace, name)
        except NotFound:
            return None
        replicasets = await _owned(rt, "replicasets", dep.uid, namespace)
        pods: list[Stored] = []
        for rs in replicasets:
            pods.extend(await _owned(rt, "pods", rs.uid, namespace))
        plan = deployment.reconcile(
            with_version(dep),
            [with_version(rs) for rs in replicasets],
            [p.obj for p in pods],
            now,
        )
        await apply_plan(store, dep, plan)
        return plan.requeue_after
