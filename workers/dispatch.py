"""The dispatcher: turns the revision stream into deduplicated reconcile tasks.

``python -m workers.dispatch`` tails the revision log for the kinds controllers watch and maps
each change to the keys it concerns: the object's own key when a controller owns its kind, and
its controlling owner's key (a pod's change wakes its ReplicaSet), and for a pod, every object
in its namespace that selects pods by label rather than owning them (disruption budgets,
quotas: see ``NamespaceIndex``). Each batch of changes
enqueues each key once, and a key already pending is not enqueued again. Several dispatchers
may run: the pending markers make their duplicates harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Iterable

from app.core.errors import Gone
from app.store.db import stream_database_url
from app.stream.informer import Change, LogInformer
from workers import metrics
from workers.controllers import CONTROLLERS

log = logging.getLogger(__name__)
# Kinds whose objects select pods by label: any pod change in a namespace wakes all of them there.
SELECTING = ("PodDisruptionBudget", "ResourceQuota")
WATCHED = tuple(dict.fromkeys(("Deployment", "ReplicaSet", "Pod", *CONTROLLERS, *SELECTING)))
Key = tuple[str, str, str]


class NamespaceIndex:
    """The names of the pod-selecting objects in each namespace, kept from the stream."""

    def __init__(self) -> None:
        self._by_ns: dict[str, dict[Key, None]] = {}

    def observe(self, ch: Change) -> None:
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


def keys_of(changes: Iterable[Change], index: NamespaceIndex | None = None) -> list[Key]:
    """The distinct keys a batch of changes concerns, in first-seen order."""
    seen: dict[Key, None] = {}
    for ch in changes:
        if index is not None:
            index.observe(ch)
            if ch.kind == "Pod":
                seen.update(dict.fromkeys(index.selecting(ch.namespace)))
        if ch.kind in CONTROLLERS:
            seen[(ch.kind, ch.namespace, ch.name)] = None
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
            for kind, namespace, name in keys_of(items, index):  # everything there now, once
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
    logging.basicConfig(
        level=os.environ.get("QM_LOG_LEVEL", "warning").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    async def go() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await metrics.serve_registry("QM_DISPATCH_METRICS_PORT", metrics.DISPATCH)
        task = asyncio.create_task(run(stop))
        await stop.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())


if __name__ == "__main__":
    main()
