"""The ReplicaSet controller's shell: read the ReplicaSet and its pods, plan, apply."""

from __future__ import annotations

from app.core.controllers import replicaset
from app.core.controllers.plan import Outcome
from app.core.errors import NotFound
from app.core.kinds import BY_KIND
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

RS = BY_KIND["ReplicaSet"]
POD = BY_KIND["Pod"]


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> Outcome:
    async with rt.locked(key_text("ReplicaSet", namespace, name)):
        store = await rt.store()
        try:
            rs = await store.get(RS, namespace, name)
        except NotFound:
            return Outcome(gone=True)
        pods = await store.owned(POD, namespace, [rs.uid])
        plan = replicaset.reconcile(with_version(rs), [p.obj for p in pods], now)
        return await apply_plan(store, rs, plan, now=now)
