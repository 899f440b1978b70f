"""The garbage collector's shell: an owner's dependents, once the owner is gone or waits for
them in foreground deletion.

Keys are ``("Garbage", owner namespace, "<owner kind>:<owner uid>")``, enqueued by the
dispatcher when an object that may own others is deleted or marked deleting, and by the
resync for every deletion still waiting (foreground owners, objects with no finalizer left).
The pure core (``app.core.controllers.garbage``) decides; the dependents go in batches of
``BATCH`` per statement (``workers.controllers.sweep``), each by the usual rules: finalizers
and a pod's grace period are waited for, and a dependent with another owner that exists only
loses the reference. A dependent deleted here is in turn an owner gone, and its own
dependents get a key of their own from the stream.
"""

from __future__ import annotations

from app.core.controllers import garbage as core
from app.core.controllers.plan import Outcome
from app.core.errors import Failure
from app.core.kinds import BY_KIND, KINDS, Kind
from app.store import collect, sql
from app.store.store import Stored
from workers.context import write_context
from workers.controllers.sweep import sweep
from workers.runtime import Runtime, key_text

NAME = "garbage-collector"  # its principal: system:controller:<NAME>
KIND = "Garbage"
NAMESPACED: list[Kind] = [k for k in KINDS if k.namespaced]


def view(owner: Stored | None) -> core.OwnerView | None:
    if owner is None:
        return None
    phase = (owner.row["status"] or {}).get("phase")
    grace = core.graceful_seconds(owner.kind.kind, owner.row["spec"], phase, None)
    return core.OwnerView(owner.deleting, tuple(owner.row["finalizers"] or ()), grace)


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> Outcome:
    kind_name, uid = core.parse_key_name(name)
    kind = BY_KIND.get(kind_name)
    if kind is None:
        return Outcome()
    async with rt.locked(key_text(KIND, namespace, name)):
        store = await rt.store()
        owner = await store.get_by_uid(kind, uid)
        what = core.intent(view(owner))
        swept = core.Swept(more=False, left=0)
        failures: tuple[Failure, ...] = ()
        if what in (core.Intent.COLLECT, core.Intent.FOREGROUND):
            scope = namespace if kind.namespaced else None

            async def read(k: Kind) -> list[core.Candidate]:
                return await collect.dependents(store.pool, k, uid, scope)

            ctx = write_context(NAME, f"dependents of {kind.kind} {uid} ({what.name.lower()})")
            out = await sweep(store.pool, NAMESPACED if scope is not None else KINDS, read,
                              ctx, owner_uid=uid)  # fmt: skip
            left = 0 if out.more or what is core.Intent.COLLECT else None
            if left is None:
                left = await collect.dependents_left(store.pool, uid)
            swept = core.Swept(out.more, left, missed=out.missed > 0)
            failures = tuple(out.failures)
        plan = core.after_sweep(what, swept)
        if plan.finish:
            done = write_context(NAME, f"dependents of {kind.kind} {uid} are gone")
            await store.finish_deletion(kind, uid, ctx=done)
        return Outcome(failures=failures, requeue_after=plan.requeue_after)


async def waiting_keys(rt: Runtime) -> list[tuple[str, str, str]]:
    """The keys of every deletion waiting for the garbage collector (for the resync)."""
    pool = await rt.pool()
    keys = []
    for kind in KINDS:
        for r in await pool.fetch(sql.waiting_deletions(kind)):
            keys.append((KIND, r["namespace"], core.key_name(kind.kind, r["uid"])))
    return keys
