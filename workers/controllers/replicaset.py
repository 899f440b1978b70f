"""The ReplicaSet controller's shell: read the ReplicaSet and its pods, plan, apply."""

from __future__ import annotations

from app.core.controllers import replicaset
from app.core.errors import NotFound
from app.core.kinds import BY_KIND
from app.store.sql import COLS
from app.store.store import Stored, _stored
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

RS = BY_KIND["ReplicaSet"]
POD = BY_KIND["Pod"]
_OWNED_PODS = f"SELECT {COLS} FROM pods WHERE namespace = $1 AND owner_references @> $2::jsonb"


async def owned_pods(rt: Runtime, rs: Stored) -> list[Stored]:
    pool = await rt.pool()
    # the pool's jsonb codec encodes the Python value itself
    rows = await pool.fetch(_OWNED_PODS, rs.row["namespace"], [{"uid": rs.uid}])
    return [_stored(POD, r) for r in rows]


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> float | None:
    async with rt.locked(key_text("ReplicaSet", namespace, name)):
        store = await rt.store()
        try:
            rs = await store.get(RS, namespace, name)
        except NotFound:
            return None
        pods = await owned_pods(rt, rs)
        plan = replicaset.reconcile(with_version(rs), [p.obj for p in pods], now)
        await apply_plan(store, rs, plan)
        return plan.requeue_after
