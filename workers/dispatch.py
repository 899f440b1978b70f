"""The dispatcher: turns the revision stream into deduplicated reconcile tasks.

``python -m workers.dispatch`` tails the revision log for the kinds controllers watch and maps
each change to the keys it concerns: the object's own key when a controller owns its kind, and
its controlling owner's key (a pod's change wakes its ReplicaSet), and for a pod, every object
in its namespace that selects pods by label rather than owning them (disruption budgets,
quotas: see ``NamespaceIndex``), and the Services whose selector picks it, or picked it
(``ServiceSelectors``); for a ConfigMap or Secret, the Deployments whose template references
it (``ConfigReferences``). A deleted object that may own others, or one marked deleting,
enqueues the garbage collector's key for it
(``garbage_key``); a namespace's change enqueues the namespace controller. Each batch of changes
enqueues each key once, and a key already pending is not enqueued again. Several dispatchers
may run: the pending markers make their duplicates harmless.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from app.core.controllers.deployment.config import references
from app.core.controllers.endpointslice import ServiceSelectors
from app.core.controllers.garbage import FOREGROUND, key_name
from app.core.errors import Gone
from app.core.kinds import KINDS
from app.process import configure_logging, run_until_stopped
from app.store.db import database_url, stream_database_url
from app.store.schema_revision import require_known_schema
from app.stream.informer import Change, LogInformer
from workers import metrics
from workers.controllers import CONTROLLERS, TICKED
from workers.controllers.garbage import KIND as GARBAGE

log = logging.getLogger(__name__)
# Kinds whose objects select pods by label: any pod change in a namespace wakes all of them there.
SELECTING = ("PodDisruptionBudget", "ResourceQuota")
# Kinds whose content a Deployment's template may reference: a change wakes those Deployments.
CONFIG_KINDS = ("ConfigMap", "Secret")
# Kinds that own nothing here: a pod's deletion needs no collection (and a 100,000-pod Job
# would otherwise be 100,000 keys), and Leases and Events are the busiest tables.
NOT_OWNERS = ("Pod", "Event", "Lease")
# Every kind but Events and Leases: any object may be an owner the collector must follow.
WATCHED = tuple(k.kind for k in KINDS if k.kind not in ("Event", "Lease"))
Key = tuple[str, str, str]


def garbage_key(ch: Change) -> Key | None:
    """The garbage collector's key for this change, if it concerns the collector: a possible
    owner deleted or marked deleting (a pod only when it waits in foreground deletion)."""
    if ch.op != "D":
        meta = ch.obj.get("metadata") or {}
        if not meta.get("deletionTimestamp"):
            return None
        if ch.kind in NOT_OWNERS and FOREGROUND not in (meta.get("finalizers") or []):
            return None
    elif ch.kind in NOT_OWNERS:
        return None
    return (GARBAGE, ch.namespace, key_name(ch.kind, ch.uid))


class ConfigReferences:
    """Which Deployments' templates reference each ConfigMap and Secret, kept from the stream:
    a change of one wakes them (config rollouts, ADR 0047)."""

    def __init__(self) -> None:
        self._users: dict[Key, set[str]] = {}  # (kind, namespace, name) -> Deployment names
        self._refs: dict[tuple[str, str], set[Key]] = {}  # (namespace, Deployment) -> refs

    def observe(self, ch: Change) -> None:
        dep = (ch.namespace, ch.name)
        for ref in self._refs.pop(dep, set()):
            users = self._users.get(ref)
            if users is not None:
                users.discard(ch.name)
                if not users:
                    del self._users[ref]
        if ch.op == "D":
            return
        template = (ch.obj.get("spec") or {}).get("template") or {}
        refs = {(kind, ch.namespace, name) for kind, name in references(template)}
        if refs:
            self._refs[dep] = refs
            for ref in refs:
                self._users.setdefault(ref, set()).add(ch.name)

    def users(self, ch: Change) -> list[Key]:
        names = self._users.get((ch.kind, ch.namespace, ch.name), ())
        return [("Deployment", ch.namespace, n) for n in sorted(names)]


class NamespaceIndex:
    """The names of the pod-selecting objects in each namespace, kept from the stream."""

    def __init__(self) -> None:
        self._by_ns: dict[str, dict[Key, None]] = {}
        self.services = ServiceSelectors()  # Services wake only for the pods they select
        self.configs = ConfigReferences()  # ConfigMaps and Secrets wake the Deployments using them

    def observe(self, ch: Change) -> None:
        if ch.kind == "Service":
            self.services.observe_service(ch.namespace, ch.name, None if ch.op == "D" else ch.obj)
        if ch.kind == "Deployment":
            self.configs.observe(ch)
        if ch.kind not in SELECTING:
            return
        keys = self._by_ns.setdefault(ch.namespace, {})
        key = (ch.kind, ch.namespace, ch.name)
        if ch.op == "D":
            keys.pop(key, None)
        else:
            keys[key] = None

    def selecting(self, namespace: str) -> list[Key]:
        return [k for k in self._by_ns.get(namespace, {}) if k[0] in CONTROLLERS]

    def services_of(self, ch: Change) -> list[Key]:
        """The Services a pod change concerns: those selecting it now or before."""
        labels = (ch.obj.get("metadata") or {}).get("labels")
        names = self.services.observe_pod(ch.namespace, ch.name, labels, ch.op == "D")
        return [("Service", ch.namespace, n) for n in names] if "Service" in CONTROLLERS else []


def keys_of(
    changes: Iterable[Change], index: NamespaceIndex | None = None, *, listed: bool = False
) -> list[Key]:
    """The distinct keys a batch of changes concerns, in first-seen order. ``listed``: the
    changes are a list of everything there is, not changes, so the kinds a tick covers in
    bulk (``TICKED``) are left to it."""
    seen: dict[Key, None] = {}
    skip = TICKED if listed else ()
    changes = list(changes)
    if listed and index is not None:  # Services first, so each pod's selectors are known
        for ch in changes:
            if ch.kind == "Service":
                index.observe(ch)
    for ch in changes:
        if index is not None:
            index.observe(ch)
            if ch.kind == "Pod":
                seen.update(dict.fromkeys(index.selecting(ch.namespace)))
                seen.update(dict.fromkeys(index.services_of(ch)))
            elif ch.kind in CONFIG_KINDS and "Deployment" in CONTROLLERS:
                seen.update(dict.fromkeys(index.configs.users(ch)))
        if ch.kind in CONTROLLERS and ch.kind not in skip:
            seen[(ch.kind, ch.namespace, ch.name)] = None
        if (gc := garbage_key(ch)) is not None:
            seen[gc] = None
        meta = ch.obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") in CONTROLLERS:
                seen[(str(ref["kind"]), ch.namespace, str(ref.get("name", "")))] = None
    return list(seen)


async def run(stop: asyncio.Event) -> None:
    from workers.tasks import enqueue  # loads the Celery app (broker settings) here only

    informer = LogInformer(stream_database_url(), WATCHED)
    while not stop.is_set():
        try:
            rev, items = await informer.list()
            index = NamespaceIndex()
            metrics.RELISTS.inc()
            for kind, namespace, name in keys_of(items, index, listed=True):  # all there is, once
                _count(enqueue(kind, namespace, name))
            batches = informer.changes(rev)
            try:
                async for batch in batches:
                    metrics.CHANGES.inc(len(batch))
                    for kind, namespace, name in keys_of(batch, index):
                        _count(enqueue(kind, namespace, name))
                    if stop.is_set():
                        break
            finally:
                await batches.aclose()  # type: ignore[attr-defined]
        except Gone:
            log.warning("revision log compacted past the dispatcher's position: relisting")
        except OSError as exc:
            log.warning("dispatcher: %s; retrying in 1 s", exc)
            await asyncio.sleep(1.0)


def _count(enqueued: bool) -> None:
    (metrics.ENQUEUED if enqueued else metrics.SKIPPED).inc()


def main() -> None:
    configure_logging()
    require_known_schema(database_url(), "the dispatcher")
    run_until_stopped(_serve_and_run, grace=0)  # blocked on the stream, with nothing to put away


async def _serve_and_run(stop: asyncio.Event) -> None:
    await metrics.serve_registry("QM_DISPATCH_METRICS_PORT", metrics.DISPATCH)
    await run(stop)


if __name__ == "__main__":
    main()
