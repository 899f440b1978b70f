"""Applying a controller's plan with the store: the same admission and version rules as the API.

Creates of one plan are one statement, so a worker killed mid-reconcile leaves all of them or
none; the next reconcile re-reads the state and sees what is there. Deletes name the uid they
mean. The owner's status is written conditionally on the version the reconcile read; losing
that race just means the next reconcile (already enqueued by the change that won) writes it.
"""

from __future__ import annotations

import contextlib
import random
from datetime import UTC, datetime
from typing import Any

from app.core.admission import admit
from app.core.controllers.plan import Plan, is_at_most_one
from app.core.errors import AlreadyExists, Conflict, Forbidden, NotFound
from app.core.kinds import BY_KIND, Kind
from app.core.names import generate_name, max_name_length
from app.store.events import EventNote, ObjectRef, record_events
from app.store.store import Store, Stored

ACTOR = "system:quaymaster-controller"
_rng = random.SystemRandom()


def _named(kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.setdefault("metadata", {})
    if not meta.get("name"):
        meta["name"] = generate_name(
            meta.get("generateName") or "", _rng, max_length=max_name_length(kind.kind)
        )
    return obj


def with_version(stored: Stored) -> dict[str, Any]:
    """The object as a controller reads it: ``resourceVersion`` is the row version, which is
    what a conditional update of it must name."""
    obj = dict(stored.obj)
    obj["metadata"] = {**obj["metadata"], "resourceVersion": str(stored.row_version)}
    return obj


async def fencing_epoch(store: Store) -> int:
    """A fencing token for at-most-one pods about to be created: a fresh transaction id.

    Transaction ids are handed out in increasing order, and this one is taken after the
    reconcile saw every earlier copy gone, so it exceeds the epoch of any copy created before
    (whose transaction committed earlier still). Ids are 64-bit and never reused."""
    return int(await store.pool.fetchval("SELECT pg_current_xact_id()::text::bigint"))


async def _create(store: Store, owner: Stored, kind: Kind, batch: list[dict[str, Any]]) -> None:
    """Create ``batch`` in one statement. A quota refuses a batch whole, so a refused batch is
    halved until a part fits (the next reconcile asks for the rest), and the refusal is told on
    the owner as a Warning Event ``FailedCreate``, in Kubernetes' words."""
    refused: Forbidden | None = None
    shown = batch[0]["metadata"].get("generateName") or batch[0]["metadata"]["name"]
    while batch:
        try:
            await store.create_many(kind, batch)
            break
        except AlreadyExists:
            break
        except Forbidden as exc:
            refused = refused or exc
            batch = batch[: len(batch) // 2]
    if refused is not None:
        message = f'Error creating: {kind.plural} "{shown}" is forbidden: {refused.message}'
        note = EventNote(ObjectRef.of(owner.obj), "FailedCreate", message, "Warning")
        await record_events(store.pool, [note], datetime.now(UTC))


async def apply_plan(store: Store, owner: Stored, plan: Plan) -> None:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    fenced = [o for o in plan.creates if o["kind"] == "Pod" and is_at_most_one(o)]
    if fenced:
        epoch = await fencing_epoch(store)
        for obj in fenced:
            obj["spec"] = {**obj["spec"], "fencingEpoch": epoch}
    for obj in plan.creates:
        by_kind.setdefault(obj["kind"], []).append(obj)
    for kind_name, objs in by_kind.items():
        kind = BY_KIND[kind_name]
        await _create(store, owner, kind, [admit(kind, _named(kind, dict(o)), None) for o in objs])
    for d in plan.deletes:
        with contextlib.suppress(NotFound, Conflict):
            await store.delete(
                BY_KIND[d.kind], d.namespace, d.name, expected_uid=d.uid, actor=ACTOR
            )
    for obj in plan.updates:
        kind = BY_KIND[obj["kind"]]
        expected = int(obj["metadata"]["resourceVersion"])
        with contextlib.suppress(NotFound, Conflict):
            await store.update(kind, admit(kind, dict(obj), None), expected, actor=ACTOR)
    if plan.status is not None:
        image = dict(owner.obj)
        image["status"] = plan.status
        with contextlib.suppress(NotFound, Conflict):
            await store.update_status(owner.kind, image, owner.row_version)
    if plan.events:
        ref = ObjectRef.of(owner.obj)
        notes = [
            EventNote(ref, n.reason, n.message, n.type, distinct=n.distinct) for n in plan.events
        ]
        await record_events(store.pool, notes, datetime.now(UTC))
