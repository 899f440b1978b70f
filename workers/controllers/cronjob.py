"""The CronJob controller's shell: read the CronJob and the Jobs it owns, plan, apply, and record
the plan's Events."""

from __future__ import annotations

from datetime import UTC, datetime

from app.core.controllers import cronjob
from app.core.errors import NotFound, StatusError
from app.core.kinds import BY_KIND
from app.store.events import EventNote, ObjectRef, record_events
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

CRONJOB = BY_KIND["CronJob"]
JOB = BY_KIND["Job"]
FORBIDDEN_RETRY_SECONDS = 5.0


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> float | None:
    async with rt.locked(key_text("CronJob", namespace, name)):
        store = await rt.store()
        try:
            stored = await store.get(CRONJOB, namespace, name)
        except NotFound:
            return None
        cj = with_version(stored)
        jobs = await store.owned(JOB, namespace, [stored.uid])
        plan, events = cronjob.reconcile(cj, [with_version(j) for j in jobs], now)
        notes = [EventNote(ObjectRef.of(cj), *e) for e in events]
        requeue = plan.requeue_after
        try:
            await apply_plan(store, stored, plan)
        except StatusError as exc:
            if exc.code != 403:  # a quota refusing the Job: say so and look again soon
                raise
            notes = [EventNote(ObjectRef.of(cj), "FailedCreate", str(exc), "Warning")]
            requeue = FORBIDDEN_RETRY_SECONDS
        await record_events(store.pool, notes, datetime.fromtimestamp(now, UTC))
        return requeue
