"""The PodDisruptionBudget status controller's shell: read the budget, the pods of its namespace
and the controllers that size them, plan, apply.

The dispatcher wakes every budget of a namespace when any pod there changes; a change of a
ReplicaSet's or Job's scale alone is picked up by the periodic resync.
"""

from __future__ import annotations

from app.core.controllers import disruption
from app.core.controllers.plan import Outcome
from app.core.errors import NotFound
from app.core.kinds import BY_KIND
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

PDB = BY_KIND["PodDisruptionBudget"]
POD = BY_KIND["Pod"]
SCALERS = tuple(BY_KIND[k] for k in ("ReplicaSet", "Deployment", "Job"))


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> Outcome:
    async with rt.locked(key_text("PodDisruptionBudget", namespace, name)):
        store = await rt.store()
        try:
            pdb = await store.get(PDB, namespace, name)
        except NotFound:
            return Outcome(gone=True)
        pods = [p.obj for p in await store.list_objects(POD, namespace)]
        controllers = {
            s.uid: s.obj for kind in SCALERS for s in await store.list_objects(kind, namespace)
        }
        plan = disruption.reconcile(with_version(pdb), pods, controllers, now)
        return await apply_plan(store, pdb, plan, now=now)
