"""The Job controller's shell: summarise the Job's pods in SQL, plan, create pods fast, apply.

Reading: one aggregate query (``app.store.jobs.summarise``) instead of the Job's pods, and
only the few pods the plan deletes. Writing pods: thousands per reconcile, so admission is paid
once per plan, not once per pod. The first pod goes through full admission; the others are
stamped from the admitted result and differ from it only in what the controller generated
itself (the name, from a valid prefix, and an Indexed pod's index label and annotation, a
decimal number), so admitting them again could not find anything new. Errors take the one
path every controller's do (``workers.controllers.apply``): a quota refusal (403) becomes a
``FailedCreate`` Event, no status write, and a retry a few seconds later.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
from typing import Any

from app.core.audit import WriteContext
from app.core.controllers import job as core
from app.core.controllers.plan import Note, Outcome
from app.core.errors import NotFound, StatusError
from app.core.kinds import BY_KIND, Kind
from app.core.names import generate_name, max_name_length
from app.store import jobs as job_reads
from app.store.store import Store
from workers.controllers.apply import Created, admit_children, apply_plan, insert, with_version
from workers.outcome import failure_of
from workers.runtime import Runtime, key_text

log = logging.getLogger(__name__)
JOB = BY_KIND["Job"]
POD = BY_KIND["Pod"]
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


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> Outcome:
    async with rt.locked(key_text("Job", namespace, name)):
        store = await rt.store()
        try:
            stored = await store.get(JOB, namespace, name)
        except NotFound:
            return Outcome(gone=True)
        job = with_version(stored)
        if core.is_deleting(job):
            return Outcome()
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
        notes = tuple(Note(*e) for e in core.events(job, plan))
        plan = dataclasses.replace(plan, events=(*plan.events, *notes))
        return await apply_plan(store, stored, plan, now=now, creators={"Pod": create_pods})


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


async def create_pods(
    store: Store, kind: Kind, pods: list[dict[str, Any]], ctx: WriteContext
) -> Created:
    """The Job's ``Creator``: the plan's pods in up to ``CREATE_STREAMS`` statements at once.

    Most of an insert's time is spent in PostgreSQL (the pods table's row triggers), so the
    batch is cut into chunks that run at once on separate connections. Each commits on its
    own, which cannot overshoot: the next reconcile counts whatever was created, and it reads
    only once every chunk has ended (the chunks' connections hold the key's apply lock, see
    ``workers.runtime``; here, every chunk is awaited even when one fails)."""
    if not pods:
        return Created(0)
    size = max(MIN_CHUNK, -(-len(pods) // CREATE_STREAMS))
    chunks = [pods[i : i + size] for i in range(0, len(pods), size)]
    results = await asyncio.gather(*(_create_chunk(store, kind, c, ctx) for c in chunks),
                                   return_exceptions=True)  # fmt: skip
    for r in results:
        if isinstance(r, BaseException):
            raise r  # outside the taxonomy, or the connection died: after every chunk ended
    done = [r for r in results if isinstance(r, Created)]
    failure = next((r.failure for r in done if r.failure is not None), None)
    return Created(sum(r.made for r in done), failure)


async def _create_chunk(
    store: Store, kind: Kind, pods: list[dict[str, Any]], ctx: WriteContext
) -> Created:
    first = dict(pods[0])
    first["metadata"] = {**first["metadata"], "name": "x"}  # any valid name: replaced below
    try:
        (admitted,) = await admit_children(store, kind, [first])  # the chunk's pods are alike
    except StatusError as exc:
        return Created(0, failure_of(exc))
    admitted["metadata"].pop("generateName", None)
    todo = list(pods)
    created = 0
    for _ in range(NAME_ATTEMPTS):
        objs = [stamp(admitted, p) for p in todo]
        made, failure = await insert(store, kind, objs, ctx)
        created += len(made)
        if failure is not None:
            return Created(created, failure)
        taken = {s.row["name"] for s in made}
        todo = [p for p, o in zip(todo, objs, strict=True) if o["metadata"]["name"] not in taken]
        if not todo:
            break
    if todo:
        log.info("%d pod names kept colliding; the next reconcile adds them", len(todo))
    return Created(created)
