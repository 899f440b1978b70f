"""Admission policies for the controllers' creates, read from the store.

The applier (``workers.controllers.apply.admit_children``) calls :func:`police` on every pod a
controller is about to create, after admission: the same review the API does
(:func:`app.core.policy.review`), with the policies and the namespace's labels read from the
store and kept ``TTL`` seconds per worker process. A policy created or changed therefore
governs the controllers' next creates within ``TTL`` seconds; the refusal comes back as a
``Forbidden`` the applier reports like a quota's (a ``FailedCreate`` Event on the owner and a
retry). Pod templates of the workloads a controller writes (a Deployment's ReplicaSets, a
CronJob's Jobs) are not reviewed here: only pods are refused, and warnings have nobody to go to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from app.core.errors import NotFound
from app.core.kinds import BY_KIND, Kind
from app.core.policy import Policy, forbidden, review
from app.store.store import Store

TTL = 2.0
POLICY = BY_KIND["AdmissionPolicy"]
NAMESPACE = BY_KIND["Namespace"]

Obj = dict[str, Any]


class PolicyCache:
    """The policies and the namespaces' labels, each read at most once per ``ttl`` seconds."""

    def __init__(self, ttl: float = TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.clock = ttl, clock
        self._policies: tuple[float, list[Policy]] | None = None
        self._labels: dict[str, tuple[float, dict[str, str]]] = {}

    async def policies(self, store: Store) -> list[Policy]:
        now = self.clock()
        if self._policies is None or now - self._policies[0] >= self.ttl:
            stored = await store.list_objects(POLICY)
            self._policies = (now, [Policy.of(s.obj) for s in stored])
        return self._policies[1]

    async def labels(self, store: Store, namespace: str) -> dict[str, str]:
        now = self.clock()
        hit = self._labels.get(namespace)
        if hit is None or now - hit[0] >= self.ttl:
            try:
                ns = await store.get(NAMESPACE, "", namespace)
                labels = dict((ns.obj.get("metadata") or {}).get("labels") or {})
            except NotFound:
                labels = {}
            hit = self._labels[namespace] = (now, labels)
        return hit[1]


CACHE = PolicyCache()


async def police(
    store: Store, kind: Kind, objs: list[Obj], cache: PolicyCache | None = None
) -> None:
    """Raise ``Forbidden`` (naming the policies and rules) for the first of ``objs`` an
    enforcing policy refuses."""
    if kind.kind != "Pod" or not objs:
        return
    cache = cache or CACHE
    policies = await cache.policies(store)
    if not policies:
        return
    for obj in objs:
        meta = obj.get("metadata") or {}
        labels = await cache.labels(store, str(meta.get("namespace", "")))
        verdict = review(policies, kind.kind, obj, labels)
        if verdict.denied:
            name = str(meta.get("generateName") or meta.get("name") or "")
            raise forbidden(kind.plural, name, verdict.denied, prefixed=False)
