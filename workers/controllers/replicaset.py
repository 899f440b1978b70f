"""The ReplicaSet controller's shell: read the ReplicaSet and its pods, plan, apply."""

from __future__ import annotations

from app.core.controllers import replicaset
from app.core.errors import NotFound
from app.core.kinds import BY_KIND
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

RS = BY_KIND["ReplicaSet"]
POD = BY_KIND["Pod"]


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> float | None:
    async with rt.locked(key_text("ReplicaSet", namespace, name)):
        store = await rt.store()
        try:
            rs = await store.get(RS, namespace, name)
        except NotFound:
            return None
        pods = await store.owned(POD, namespace, [rs.uid])
        plan = replicaset.reconcile(with_version(rs), [p.obj for p in pods], now)
        await apply_plan(store, rs, plan)
        return plan.requeue_after
