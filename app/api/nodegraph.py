"""The node authorizer's graph, kept from the API server's watch cache.

:func:`app.core.authz.node.authorize` asks three questions of a request by a node: which node
a pod is bound to, whether the node has pods in a namespace, and which ConfigMaps and Secrets
its pods there reference. :class:`PodIndex` answers them from the watch cache: it registers as
a watcher of pods, so the cache hands it every change synchronously in ``apply`` (the index is
always at the cache's revision: no queue, no lag), and keeps ``node -> namespace -> pod
names``. A pod's references are parsed from its JSON only when asked, and remembered per
version. The index is built when the server starts (about 1 s per 100,000 pods, in the
lifespan, before the server serves); after the cache reloads (it drops every watcher), the
next question rebuilds it from the cache.

:class:`NodeAuthorizer` is the authorizer the API's chain holds (``app.api.authz``).
"""

from __future__ import annotations

from collections.abc import Set

from app.core.authz import Attributes, Decision
from app.core.authz import node as node_authz
from app.core.kinds import BY_KIND
from app.store.tokens import User
from app.stream.cache import Cached, Event, WatchCache, Watcher

POD = BY_KIND["Pod"]
_NODE_FIELD = "spec.nodeName"


class PodIndex(Watcher):
    """Pods by node, kept in step with one watch cache (see the module)."""

    def __init__(self, cache: WatchCache) -> None:
        super().__init__(POD, None, None, None)
        self.cache = cache
        self.by_node: dict[str, dict[str, set[str]]] = {}
        self.where: dict[str, tuple[str, str, str]] = {}  # uid -> (node, namespace, name)
        self.refs: dict[str, tuple[int, frozenset[node_authz.Ref]]] = {}  # uid -> by version

    # -- kept by the cache -----------------------------------------------------------------
    def offer(self, ev: Event) -> None:
        if ev.new.kind is not POD:
            return
        self._forget(ev.new.uid)
        if ev.type != "DELETED":
            self._add(ev.new)

    def _add(self, c: Cached) -> None:
        node = c.fields.get(_NODE_FIELD) or ""
        if not node:
            return
        self.by_node.setdefault(node, {}).setdefault(c.namespace, set()).add(c.name)
        self.where[c.uid] = (node, c.namespace, c.name)

    def _forget(self, uid: str) -> None:
        self.refs.pop(uid, None)
        was = self.where.pop(uid, None)
        if was is None:
            return
        node, namespace, name = was
        spaces = self.by_node.get(node, {})
        names = spaces.get(namespace)
        if names is not None:
            names.discard(name)
            if not names:
                del spaces[namespace]
        if not spaces:
            self.by_node.pop(node, None)

    def current(self) -> None:
        """Register with the cache (again, after a reload dropped every watcher)."""
        if self in self.cache.watchers:
            return
        self.by_node.clear()
        self.where.clear()
        self.refs.clear()
        for c in self.cache.iter(POD, None):
            self._add(c)
        self.cache.watchers.add(self)

    # -- the graph the authorizer asks -----------------------------------------------------
    def pod_node(self, namespace: str, name: str) -> str | None:
        c = self.cache.get(POD, namespace, name)
        return (c.fields.get(_NODE_FIELD) or None) if c is not None else None

    def has_pods(self, node: str, namespace: str) -> bool:
        self.current()
        return bool(self.by_node.get(node, {}).get(namespace))

    def references(self, node: str, namespace: str) -> Set[node_authz.Ref]:
        self.current()
        out: set[node_authz.Ref] = set()
        for name in self.by_node.get(node, {}).get(namespace, ()):
            c = self.cache.get(POD, namespace, name)
            if c is not None:
                out |= self._refs(c)
        return out

    def _refs(self, c: Cached) -> frozenset[node_authz.Ref]:
        hit = self.refs.get(c.uid)
        if hit is not None and hit[0] == c.row_version:
            return hit[1]
        found = frozenset(node_authz.references(c.obj()))
        self.refs[c.uid] = (c.row_version, found)
        return found


class NodeAuthorizer:
    """The node authorizer over one API server's watch cache."""

    def __init__(self, cache: WatchCache) -> None:
        self.graph = PodIndex(cache)

    def __call__(self, user: User, attrs: Attributes) -> Decision:
        return node_authz.authorize(user, attrs, self.graph)
