"""The namespace controller's shell: empty a namespace being deleted, then let it go.

Enqueued by the dispatcher when the namespace changes (its deletion sets
``deletionTimestamp``) and by the resync. Each reconcile deletes the contents in batches of
``BATCH`` rows per statement (``workers.controllers.sweep``), workloads before pods so their
controllers do not replace what was just deleted, for up to the sweep's time budget; then it
counts what is left and lets the pure core (``app.core.controllers.namespace``) write the
conditions and decide whether the namespace goes or the key is looked at again.
"""

from __future__ import annotations

import contextlib

from app.core.controllers import namespace as core
from app.core.controllers.garbage import Candidate
from app.core.errors import Conflict, NotFound
from app.core.kinds import BY_KIND, KINDS, Kind
from app.store import collect
from app.store.store import Store, Stored
from workers.controllers.sweep import sweep
from workers.runtime import Runtime, key_text

ACTOR = "system:quaymaster-namespace-controller"
NS = BY_KIND["Namespace"]
# Pods last: a ReplicaSet or Job deleted first cannot recreate them.
ORDER: list[Kind] = sorted((k for k in KINDS if k.namespaced), key=lambda k: k.kind == "Pod")


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> float | None:
    async with rt.locked(key_text("Namespace", "", name)):
        store = await rt.store()
        try:
            ns = await store.get(NS, "", name)
        except NotFound:
            return None
        if not ns.deleting or core.NAMESPACE_CONTENTS not in (ns.row["finalizers"] or []):
            return None

        async def read(kind: Kind) -> list[Candidate]:
            return await collect.contents(store.pool, kind, name)

        swept = await sweep(store.pool, ORDER, read, ACTOR)
        by_kind, by_finalizer = await collect.left_in_namespace(store.pool, name)
        contents = core.Contents(dict(by_kind), dict(by_finalizer), swept.more,
                                 tuple(swept.failures))  # fmt: skip
        plan = core.reconcile(ns.obj, contents, now)
        return await _apply(store, ns, plan)


async def _apply(store: Store, ns: Stored, plan: core.NamespacePlan) -> float | None:
    if plan.status is not None:
        with contextlib.suppress(Conflict, NotFound):
            await store.update_status(NS, dict(ns.obj, status=plan.status), ns.row_version)
    if plan.finalize:
        await store.finish_deletion(NS, ns.uid, drop=core.NAMESPACE_CONTENTS, actor=ACTOR)
    return plan.requeue_after
