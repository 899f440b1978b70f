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
from app.core.controllers.plan import Outcome, Plan
from app.core.errors import AlreadyExists, NotFound
from app.core.kinds import BY_KIND, KINDS, Kind
from app.store import collect
from app.store.store import Store
from workers.context import write_context
from workers.controllers.apply import apply_plan
from workers.controllers.sweep import sweep
from workers.runtime import Runtime, key_text

NAME = "namespace-controller"  # its principal: system:controller:<NAME>
NS = BY_KIND["Namespace"]
SA = BY_KIND["ServiceAccount"]
DEFAULT_ACCOUNT = "default"
# Pods last: a ReplicaSet or Job deleted first cannot recreate them.
ORDER: list[Kind] = sorted((k for k in KINDS if k.namespaced), key=lambda k: k.kind == "Pod")


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> Outcome:
    async with rt.locked(key_text("Namespace", "", name)):
        store = await rt.store()
        try:
            ns = await store.get(NS, "", name)
        except NotFound:
            return Outcome(gone=True)
        if not ns.deleting:
            await ensure_default_account(store, name)
            return Outcome()
        if core.NAMESPACE_CONTENTS not in (ns.row["finalizers"] or []):
            return Outcome()

        async def read(kind: Kind) -> list[Candidate]:
            return await collect.contents(store.pool, kind, name)

        swept = await sweep(store.pool, ORDER, read, write_context(NAME, f"empty namespace {name}"))
        by_kind, by_finalizer = await collect.left_in_namespace(store.pool, name)
        contents = core.Contents(dict(by_kind), dict(by_finalizer), swept.more, swept.messages)
        plan = core.reconcile(ns.obj, contents, now)
        status = Plan(status=plan.status, requeue_after=plan.requeue_after)
        outcome = await apply_plan(store, ns, status, now=now, controller=NAME)
        if plan.finalize and outcome.ok:
            done = write_context(NAME, f"namespace {name} is empty")
            await store.finish_deletion(NS, ns.uid, drop=core.NAMESPACE_CONTENTS, ctx=done)
        return outcome.merge(Outcome(failures=tuple(swept.failures)))


async def ensure_default_account(store: Store, namespace: str) -> None:
    """Every active namespace has the ServiceAccount ``default``, as Kubernetes' do; one
    deleted by hand comes back at the next resync."""
    try:
        await store.get(SA, namespace, DEFAULT_ACCOUNT)
    except NotFound:
        with contextlib.suppress(AlreadyExists, NotFound):
            await store.create(
                SA,
                {"metadata": {"name": DEFAULT_ACCOUNT, "namespace": namespace}},
                ctx=write_context(NAME, "every active namespace has a default account"),
            )
