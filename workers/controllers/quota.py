"""The ResourceQuota controller's shell: read the quota, measure its usage, write its status.

Usage is measured with the aggregate quota admission uses (``app.store.quota``), so the status
shows exactly what the next create will be held to.
"""

from __future__ import annotations

from app.core.controllers import quota
from app.core.controllers.plan import Outcome
from app.core.errors import NotFound
from app.core.kinds import BY_KIND
from app.store.quota import quota_usage
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

RQ = BY_KIND["ResourceQuota"]


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> Outcome:
    async with rt.locked(key_text("ResourceQuota", namespace, name)):
        store = await rt.store()
        try:
            rq = await store.get(RQ, namespace, name)
        except NotFound:
            return Outcome(gone=True)
        used = await quota_usage(store.pool, rq.obj)
        plan = quota.reconcile(with_version(rq), used, now)
        return await apply_plan(store, rq, plan, now=now)
