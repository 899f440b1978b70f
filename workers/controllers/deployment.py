"""The Deployment controller's shell: read the Deployment, its ReplicaSets and their pods, plan,
apply."""

from __future__ import annotations

from app.core.controllers import deployment
from app.core.controllers.plan import Outcome
from app.core.errors import NotFound
from app.core.kinds import BY_KIND
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

DEPLOYMENT = BY_KIND["Deployment"]
RS = BY_KIND["ReplicaSet"]
POD = BY_KIND["Pod"]


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> Outcome:
    async with rt.locked(key_text("Deployment", namespace, name)):
        store = await rt.store()
        try:
            dep = await store.get(DEPLOYMENT, namespace, name)
        except NotFound:
            return Outcome(gone=True)
        replicasets = await store.owned(RS, namespace, [dep.uid])
        pods = await store.owned(POD, namespace, [rs.uid for rs in replicasets])
        plan = deployment.reconcile(
            with_version(dep),
            [with_version(rs) for rs in replicasets],
            [p.obj for p in pods],
            now,
        )
        return await apply_plan(store, dep, plan, now=now)
