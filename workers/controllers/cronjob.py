"""The CronJob controller's shell: read the CronJob and the Jobs it owns, plan, apply.

The plan's Events go through the applier with its writes, so a run whose Job was refused is
told as ``FailedCreate`` (not ``SuccessfulCreate``), leaves ``lastScheduleTime`` where it was,
and is retried by the outcome's delay: the next reconcile finds the same run due again.
"""

from __future__ import annotations

import dataclasses

from app.core.controllers import cronjob
from app.core.controllers.plan import Note, Outcome
from app.core.errors import NotFound
from app.core.kinds import BY_KIND
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

CRONJOB = BY_KIND["CronJob"]
JOB = BY_KIND["Job"]


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> Outcome:
    async with rt.locked(key_text("CronJob", namespace, name)):
        store = await rt.store()
        try:
            stored = await store.get(CRONJOB, namespace, name)
        except NotFound:
            return Outcome(gone=True)
        jobs = await store.owned(JOB, namespace, [stored.uid])
        plan, events = cronjob.reconcile(with_version(stored), [with_version(j) for j in jobs], now)
        plan = dataclasses.replace(plan, events=(*plan.events, *(Note(*e) for e in events)))
        return await apply_plan(store, stored, plan, now=now)
