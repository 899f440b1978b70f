"""The one plan applier: every controller shell turns its plan into writes here, with the same
admission and version rules as the API, and gets back an ``Outcome`` instead of an exception it
would have to sort out itself.

Order and rules:

1. **Creates**, one statement per kind (a worker killed mid-apply leaves all of a kind's
   children or none; the next reconcile re-reads and sees what is there). A refused batch
   (quota, 403) is halved until a part fits, so the refusal costs the plan only what does not
   fit; the next try asks for the rest. A shell with a faster way to create (the Job's
   parallel pod streams) passes its own ``Creator``, which reports through the same types.
2. **Deletes** name the uid they mean; one already gone, or replaced by a namesake, is done.
3. **Updates**, conditional on the ``resourceVersion`` read.
4. **The owner's status**, conditional on the version the reconcile read (or the one an update
   of the owner itself wrote in step 3). A status that counts
   the plan's writes as done (``Plan.status_assumes_writes``: a CronJob's
   ``lastScheduleTime``, a Job's counts) is written only when every other write of the plan
   happened; the next reconcile, which the failure's retry brings soon, writes the status of
   what exists then. A status of what the reconcile observed (a ReplicaSet's replicas) is
   written whatever the other writes did. With ``Plan.status_first`` the status is written
   before step 1 instead, and a status that fails to be written (a lost race, the owner gone)
   stops the plan: the rest was planned from facts that are no longer true (reclaim: a node's
   batch figure must be in force before pods are evicted to fit it).
5. **Evictions** (``Plan.evictions``), as the scheduler's preemption takes pods:
   ``DisruptionTarget=True`` with the plan's reason in one statement
   (``app.store.disruption``), then each pod deleted with its grace period, guarded by its uid;
   one gone already is done.
6. **Events**: the plan's, except that ``SuccessfulCreate`` is kept only when every child it
   announces exists, plus one Event per failure worth telling (``workers.outcome``), and the
   evicted pods' Events if the plan asks for them; one statement.

Every write carries the controller's write context (``workers.context``): principal
``system:controller:<name>``, the reconcile's id, and what the step does as its reason.

Every failure on the way is classified by ``workers.outcome.failure_of`` and carried in the
outcome; only errors outside the taxonomy (bugs) propagate. The task
(``workers.tasks.reconcile``) turns the outcome into a retry, a timed look and metrics.

The barrier in ``workers.runtime.Runtime.locked`` keeps a crash from overshooting: a statement
still running in the database for a killed worker holds the key's apply lock until it ends, so
the next reconcile reads only after it committed or rolled back.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from app.core.admission import admit
from app.core.audit import WriteContext
from app.core.controllers.plan import Note, Outcome, Plan, is_at_most_one
from app.core.errors import AlreadyExists, Conflict, Failure, NotFound, StatusError
from app.core.kinds import BY_KIND, Kind
from app.core.names import generate_name, max_name_length
from app.store.disruption import mark_disruption_targets
from app.store.events import EventNote, ObjectRef, record_events
from app.store.store import Store, Stored
from workers.context import write_context
from workers.outcome import failure_note, failure_of
from workers.policy import police
from workers.runtime import creating, creating_store

# The principal name (``system:controller:<name>``) of each owner kind's controller.
NAMES = {
    "ReplicaSet": "replicaset-controller",
    "Deployment": "deployment-controller",
    "PodDisruptionBudget": "disruption-controller",
    "Job": "job-controller",
    "CronJob": "cronjob-controller",
    "ResourceQuota": "resourcequota-controller",
    "Node": "reclaim-controller",
    "Namespace": "namespace-controller",
    "Service": "endpointslice-controller",
}
COMPONENT = "quaymaster-controller"  # the Events' source when the shell names none
POD = BY_KIND["Pod"]
CREATED = "SuccessfulCreate"
_rng = random.SystemRandom()

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Created:
    """What one create step did: children created, and the failure that stopped the rest."""

    made: int
    failure: Failure | None = None


# Creates the plan's children of one kind under a write context; must not raise a StatusError
# (report it instead).
Creator = Callable[[Store, Kind, list[Obj], WriteContext], Awaitable[Created]]


def named(kind: Kind, obj: Obj) -> Obj:
    meta = obj.setdefault("metadata", {})
    if not meta.get("name"):
        meta["name"] = generate_name(
            meta.get("generateName") or "", _rng, max_length=max_name_length(kind.kind)
        )
    return obj


def with_version(stored: Stored) -> Obj:
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


async def insert(
    store: Store, kind: Kind, batch: list[Obj], ctx: WriteContext | None = None
) -> tuple[list[Stored], Failure | None]:
    """Insert admitted ``batch`` in one statement. A quota refuses a batch whole, so a refused
    batch is halved until a part fits; returns what was made and the first refusal. Names
    that exist already are skipped by the store (a replay creates nothing twice)."""
    refused: Failure | None = None
    while batch:
        try:
            return await store.create_many(kind, batch, ctx), refused
        except AlreadyExists:
            return [], refused
        except StatusError as exc:
            failure = failure_of(exc)
            assert failure is not None  # every StatusError is classified
            refused = refused or failure
            if failure.kind != "refused":
                return [], refused
            batch = batch[: len(batch) // 2]
    return [], refused


async def admit_children(store: Store, kind: Kind, objs: list[Obj]) -> list[Obj]:
    """Admission of every child, then the admission policies (``workers.policy``), as the API
    does for its writes; raises the first refusal."""
    admitted = [admit(kind, o, None) for o in objs]
    await police(store, kind, admitted)
    return admitted


async def create_children(store: Store, kind: Kind, objs: list[Obj], ctx: WriteContext) -> Created:
    """The default ``Creator``: full admission of every child, then one statement."""
    try:
        admitted = await admit_children(store, kind, [named(kind, dict(o)) for o in objs])
    except StatusError as exc:  # a template admission rejects: no child of it can be made
        return Created(0, failure_of(exc))
    made, failure = await insert(store, kind, admitted, ctx)
    return Created(len(made), failure)


async def apply_plan(
    store: Store,
    owner: Stored,
    plan: Plan,
    *,
    now: float | None = None,
    creators: dict[str, Creator] | None = None,
    controller: str | None = None,
    component: str = COMPONENT,
) -> Outcome:
    """Apply ``plan`` for ``owner``; what happened, failures included (see the module).
    ``controller`` names the writer (default: the owner kind's controller, ``NAMES``);
    ``component`` signs the Events."""
    who = controller or NAMES.get(owner.kind.kind, f"{owner.kind.kind.lower()}-controller")
    of = f"{owner.kind.kind} {_key(owner)}"
    wall = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    failures: list[Failure] = []
    notes: list[Note] = []
    status_written, gone = False, False
    if plan.status_first and plan.status is not None:
        ctx = write_context(who, f"status of {of}")
        status_written, gone = await _status(store, owner, plan, ctx, failures, notes)
        if not status_written:  # lost a race or gone: the rest was planned from stale facts
            await _record(store, owner, notes, wall, component)
            return Outcome(failures=tuple(failures), gone=gone)
    created = 0
    await _fence(store, plan.creates)
    for kind_name, objs in _by_kind(plan.creates).items():
        kind = BY_KIND[kind_name]
        create = (creators or {}).get(kind_name, create_children)
        ctx = write_context(who, f"create {len(objs)} {kind.plural} for {of}")
        with creating():
            step = await create(await creating_store(store), kind, objs, ctx)
        created += step.made
        if step.failure is not None:
            failures.append(step.failure)
            notes += _note("create", kind, _shown(objs[0]), step.failure)
    deleted = 0
    for d in plan.deletes:
        try:
            ctx = write_context(who, f"delete {d.kind} {d.namespace}/{d.name} planned for {of}")
            await store.delete(BY_KIND[d.kind], d.namespace, d.name, expected_uid=d.uid, ctx=ctx)
            deleted += 1
        except (NotFound, Conflict):
            pass  # gone already, or the name is another object's now: nothing of ours to delete
        except StatusError as exc:
            failures += _failed(exc, notes, "delete", BY_KIND[d.kind], d.name)
    for obj in plan.updates:
        kind = BY_KIND[obj["kind"]]
        expected = int(obj["metadata"]["resourceVersion"])
        try:
            ctx = write_context(who, f"update {kind.kind} {obj['metadata']['name']} for {of}")
            written = await store.update(kind, admit(kind, dict(obj), None), expected, ctx)
        except StatusError as exc:
            failures += _failed(exc, notes, "update", kind, obj["metadata"]["name"])
            continue
        if written.kind == owner.kind and written.uid == owner.uid:
            owner = written  # the status is conditional on the version this update wrote
    if not plan.status_first and not (failures and plan.status_assumes_writes):
        ctx = write_context(who, f"status of {of}")
        status_written, gone = await _status(store, owner, plan, ctx, failures, notes)
    ctx = write_context(who, f"evict for {of}: {plan.eviction_reason}")
    deleted_pods, pod_notes = await _evict(store, plan, wall, ctx, failures, notes, component)
    deleted += deleted_pods
    wanted = len(plan.creates)
    events = [n for n in plan.events if n.reason != CREATED or (created == wanted and wanted)]
    if 0 < created < wanted:
        events.append(Note(CREATED, f"Created {created} of {wanted} {_plural(plan)}"))
    await _record(store, owner, [*events, *notes], wall, component, pod_notes)
    return Outcome(
        wanted, created, deleted, status_written, tuple(failures), plan.requeue_after, gone
    )


async def _status(
    store: Store,
    owner: Stored,
    plan: Plan,
    ctx: WriteContext,
    failures: list[Failure],
    notes: list[Note],
) -> tuple[bool, bool]:
    """Write the owner's status, conditional on its version; (written, owner gone)."""
    if plan.status is None:
        return False, False
    image = dict(owner.obj)
    image["status"] = plan.status
    try:
        await store.update_status(owner.kind, image, owner.row_version, ctx)
    except NotFound:
        return False, True
    except StatusError as exc:
        failures += _failed(exc, notes, "update status of", owner.kind, owner.row["name"])
        return False, False
    return True, False


async def _evict(
    store: Store,
    plan: Plan,
    wall: datetime,
    ctx: WriteContext,
    failures: list[Failure],
    notes: list[Note],
    component: str,
) -> tuple[int, list[EventNote]]:
    """Take the plan's pods away as the scheduler's preemption does: ``DisruptionTarget`` in
    one statement, then each pod deleted with its grace period, guarded by its uid; the pods
    deleted, and the Events on them."""
    if not plan.evictions:
        return 0, []
    marks = [(e.uid, e.message) for e in plan.evictions if e.mark]
    await mark_disruption_targets(store.pool, marks, plan.eviction_reason, wall, ctx)
    deleted = 0
    for e in plan.evictions:
        try:
            await store.delete(
                POD, e.namespace, e.name, grace_seconds=e.grace_seconds, expected_uid=e.uid,
                ctx=ctx,
            )  # fmt: skip
            deleted += 1
        except (NotFound, Conflict):
            pass  # gone already, or the name is another pod's now
        except StatusError as exc:
            failures += _failed(exc, notes, "delete", POD, e.name)
    if plan.eviction_event is None:
        return deleted, []
    return deleted, [
        EventNote(ObjectRef("Pod", e.uid, e.namespace, e.name), plan.eviction_event, e.message,
                  "Warning", component)
        for e in plan.evictions
    ]  # fmt: skip


def _failed(exc: StatusError, notes: list[Note], verb: str, kind: Kind, name: str) -> list[Failure]:
    failure = failure_of(exc)
    assert failure is not None
    notes += _note(verb, kind, name, failure)
    return [failure]


def _note(verb: str, kind: Kind, shown: str, failure: Failure) -> list[Note]:
    note = failure_note(verb, kind, shown, failure)
    return [] if note is None else [note]


def _by_kind(objs: tuple[Obj, ...]) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = {}
    for obj in objs:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def _key(owner: Stored) -> str:
    ns, name = owner.row["namespace"], owner.row["name"]
    return f"{ns}/{name}" if ns else name


def _shown(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("generateName") or meta.get("name") or "")


def _plural(plan: Plan) -> str:
    kinds = {o["kind"] for o in plan.creates}
    return BY_KIND[kinds.pop()].plural if len(kinds) == 1 else "objects"


async def _fence(store: Store, creates: tuple[Obj, ...]) -> None:
    fenced = [o for o in creates if o["kind"] == "Pod" and is_at_most_one(o)]
    if fenced:
        epoch = await fencing_epoch(store)
        for obj in fenced:
            obj["spec"] = {**obj["spec"], "fencingEpoch": epoch}


async def _record(
    store: Store,
    owner: Stored,
    notes: list[Note],
    wall: datetime,
    component: str,
    others: list[EventNote] | None = None,
) -> None:
    """The Events of one apply in one statement: ``others`` (on other objects), then the
    owner's."""
    ref = ObjectRef.of(owner.obj)
    out = [*(others or []), *(EventNote(ref, n.reason, n.message, n.type, component, n.distinct)
                              for n in notes)]  # fmt: skip
    if out:
        await record_events(store.pool, out, wall)
