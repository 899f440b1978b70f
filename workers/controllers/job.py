"""The Job controller's shell: summarise the Job's pods in SQL, plan, create pods fast, apply.

Reading: one aggregate query (``app.store.jobs.summarise``) instead of the Job's pods, and
only the few pods the plan deletes. Writing pods: thousands per reconcile, so admission is paid
once per plan, not once per pod. The first pod goes through full admission; the others are
stamped from the admitted result and differ from it only in what the controller generated
itself (the name, from a valid prefix, and an Indexed pod's index label and annotation, a
decimal number), so admitting them again could not find anything new. A quota refusal (403) is
recorded as a ``FailedCreate`` Event and retried a few seconds later.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
from datetime import UTC, datetime
from typing import Any

from app.core.admission import admit
from app.core.controllers import job as core
from app.core.errors import NotFound, StatusError
from app.core.kinds import BY_KIND
from app.core.names import generate_name, max_name_length
from app.store import jobs as job_reads
from app.store.events import EventNote, ObjectRef, record_events
from app.store.store import Store
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

log = logging.getLogger(__name__)
JOB = BY_KIND["Job"]
POD = BY_KIND["Pod"]
FORBIDDEN_RETRY_SECONDS = 5.0
# The worker's pool has 4 connections and the key's advisory lock holds one.
CREATE_STREAMS = 3
MIN_CHUNK = 250
NAME_ATTEMPTS = 4  # generated names that collide are drawn again, a few times
_rng = random.SystemRandom()


def limits() -> core.Limits:
    return core.Limits(
        create_batch=int(os.environ.get("QM_JOB_CREATE_BATCH", core.CREATE_BATCH)),
        pending_window=int(os.environ.get("QM_JOB_PENDING_WINDOW", core.PENDING_WINDOW)),
    )


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> float | None:
    async with rt.locked(key_text("Job", namespace, name)):
        store = await rt.store()
        try:
            stored = await store.get(JOB, namespace, name)
        except NotFound:
            return None
        job = with_version(stored)
        if core.is_deleting(job):
            return None
        template_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
        summary = await job_reads.summarise(
            store.pool,
            namespace,
            stored.uid,
            restarts=template_spec.get("restartPolicy") == "OnFailure",
            indexed=core.is_indexed(job),
        )
        wanted = min(core.deletions_wanted(job, summary, now), limits().create_batch)
        candidates = await job_reads.deletion_candidates(store.pool, namespace, stored.uid, wanted)
        plan = core.reconcile(job, summary, [c.obj for c in candidates], now, limits())
        notes = [EventNote(ObjectRef.of(job), *e) for e in core.events(job, plan)]
        requeue = plan.requeue_after
        try:
            await create_pods(store, plan.creates)
        except StatusError as exc:
            if exc.code != 403:
                raise
            notes = [EventNote(ObjectRef.of(job), "FailedCreate", str(exc), "Warning")]
            plan = dataclasses.replace(plan, status=None)  # counts assumed the creates
            requeue = FORBIDDEN_RETRY_SECONDS
        await apply_plan(store, stored, dataclasses.replace(plan, creates=()))
        await record_events(store.pool, notes, datetime.fromtimestamp(now, UTC))
        return requeue


def stamp(admitted: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """A copy of the admitted pod with ``pod``'s generated name and its own labels and
    annotations (which differ from the admitted pod's only by an index number)."""
    meta = pod["metadata"]
    name = generate_name(meta["generateName"], _rng, max_length=max_name_length("Pod"))
    out = dict(admitted)
    out["metadata"] = {
        **admitted["metadata"],
        "name": name,
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
    }
    return out


async def create_pods(store: Store, pods: tuple[dict[str, Any], ...]) -> int:
    """Create the plan's pods; returns how many were created.

    Most of an insert's time is spent in PostgreSQL (the pods table's row triggers), so the
    batch is cut into up to ``CREATE_STREAMS`` statements that run at once on separate
    connections: each commits on its own, which is harmless since the next reconcile counts
    whatever was created."""
    if not pods:
        return 0
    size = max(MIN_CHUNK, -(-len(pods) // CREATE_STREAMS))
    chunks = [pods[i : i + size] for i in range(0, len(pods), size)]
    return sum(await asyncio.gather(*(_create_chunk(store, c) for c in chunks)))


async def _create_chunk(store: Store, pods: tuple[dict[str, Any], ...]) -> int:
    first = dict(pods[0])
    first["metadata"] = {**first["metadata"], "name": "x"}  # any valid name: replaced below
    admitted = admit(POD, first, None)
    admitted["metadata"].pop("generateName", None)
    todo = list(pods)
    created = 0
    for _ in range(NAME_ATTEMPTS):
        objs = [stamp(admitted, p) for p in todo]
        made = await store.create_many(POD, objs)
        created += len(made)
        taken = {s.row["name"] for s in made}
        todo = [p for p, o in zip(todo, objs, strict=True) if o["metadata"]["name"] not in taken]
        if not todo:
            break
    if todo:
        log.info("%d pod names kept colliding; the next reconcile adds them", len(todo))
    return created
