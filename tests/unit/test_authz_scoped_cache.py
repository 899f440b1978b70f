"""The watch cache as a principal of limited reach sees it (``app.api.authz.ScopedCache``),
and the RBAC authorizer staying current with the cache's RBAC objects."""

from __future__ import annotations

import json

from app.api.authz import RBAC, Authorization, ScopedCache
from app.core.authz import Attributes
from app.core.kinds import BY_KIND
from app.store.tokens import User
from app.stream.cache import WatchCache, make_cached
from app.stream.log import LogEntry

POD, NS = BY_KIND["Pod"], BY_KIND["Namespace"]


def _cache(pods: list[tuple[str, str]]) -> WatchCache:
    cache = WatchCache()
    for i, (ns, name) in enumerate(pods, start=1):
        raw = json.dumps({"metadata": {"namespace": ns, "name": name, "uid": f"u{i}"}})
        cache._put(make_cached(POD, raw, i, i))
    for j, ns in enumerate(sorted({ns for ns, _ in pods}), start=100):
        cache._put(make_cached(NS, json.dumps({"metadata": {"name": ns, "uid": f"n{j}"}}), j, j))
    return cache


def test_only_reachable_namespaces_exist() -> None:
    cache = _cache([("a", "p1"), ("a", "p2"), ("b", "p1"), ("c", "p1")])
    scoped = ScopedCache(cache, ["a", "c"])
    assert [(c.namespace, c.name) for c in scoped.iter(POD, None)] == [
        ("a", "p1"), ("a", "p2"), ("c", "p1"),
    ]  # fmt: skip
    assert [(c.namespace, c.name) for c in scoped.iter(POD, None, ("a", "p2"))] == [("c", "p1")]
    assert [(c.namespace, c.name) for c in scoped.iter(POD, None, ("a", "p1"))] == [
        ("a", "p2"), ("c", "p1"),
    ]  # fmt: skip
    assert list(scoped.iter(POD, "b")) == []
    assert scoped.get(POD, "b", "p1") is None and scoped.get(POD, "a", "p1") is not None
    assert [c.name for c in scoped.iter(NS, None)] == ["a", "c"]
    assert scoped.get(NS, "", "b") is None
    assert scoped.revision == cache.revision  # everything else is the cache's own


def test_rbac_follows_bindings_in_the_cache() -> None:
    cache = WatchCache()
    authz = Authorization(RBAC(cache))
    alice = User("alice", ("system:authenticated",))
    get = Attributes("get", "pods", "a", "p")
    assert not authz.authorize(alice, get).allowed
    assert authz.authorize(alice, get).reason.startswith('pods "p" is forbidden')
    binding = {
        "apiVersion": "quaymaster.io/v1", "kind": "RoleBinding",
        "metadata": {"namespace": "a", "name": "b", "uid": "b1"},
        "roleRef": {"kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "User", "name": "alice"}],
    }  # fmt: skip
    rb = BY_KIND["RoleBinding"]
    cache.apply([LogEntry(1, rb, "b1", "a", "b", 1, "A", json.dumps(binding))])
    assert authz.authorize(alice, get).allowed
    assert authz.visible(alice, "a") and not authz.visible(alice, "b")
    cache.apply([LogEntry(2, rb, "b1", "a", "b", 2, "D", json.dumps(binding))])
    assert not authz.authorize(alice, get).allowed


def test_a_watch_filter_never_changes_the_watcher_set_during_delivery() -> None:
    """The namespace filter of a watch runs while the cache iterates its watchers; after a
    reload dropped the RBAC watchers it must not re-register them there and then."""
    from app.stream.cache import Watcher

    cache = WatchCache()
    authz = Authorization(RBAC(cache))
    alice = User("alice", ("system:authenticated",))
    allowed = authz.namespace_filter(alice, Attributes("watch", "pods"))
    assert allowed is not None
    w = Watcher(POD, None, None, lambda f: allowed(f["metadata.namespace"]))
    cache.watchers = {w}  # as a reload leaves them: the RBAC watchers gone
    raw = json.dumps({"metadata": {"namespace": "a", "name": "p", "uid": "u1"}})
    cache.apply([LogEntry(1, POD, "u1", "a", "p", 1, "A", raw)])  # no "set changed size"
    assert w.queue.empty()
    assert not authz.authorize(alice, Attributes("get", "pods", "a", "p")).allowed
    assert len(cache.watchers) == 5  # the next request re-registered the four RBAC watchers
