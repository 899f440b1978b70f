"""The node authorizer's graph moves with the watch cache: a pod bound a moment ago makes its
Secrets readable by its node as soon as the cache applies it, and a pod moved, changed or
deleted stops doing so at the same revision; after a reload the graph rebuilds itself."""

from __future__ import annotations

import json
from typing import Any

from app.api.nodegraph import NodeAuthorizer
from app.core.authz import Attributes
from app.core.kinds import BY_KIND
from app.store.tokens import User
from app.stream.cache import WatchCache
from app.stream.log import LogEntry

POD = BY_KIND["Pod"]
N1 = User("system:node:n1", ("system:nodes",))
SECRET_GET = Attributes("get", "secrets", "a", "db")


class Feed:
    """Log entries for one cache, numbered in order."""

    def __init__(self, cache: WatchCache) -> None:
        self.cache, self.revision = cache, 0

    def pod(self, op: str, name: str, node: str, secret: str = "db", uid: str = "") -> None:
        self.revision += 1
        spec: dict[str, Any] = {"containers": [{"name": "c", "envFrom": [
            {"secretRef": {"name": secret}}]}]}  # fmt: skip
        if node:
            spec["nodeName"] = node
        meta = {"name": name, "namespace": "a", "uid": uid or name,
                "resourceVersion": str(self.revision)}  # fmt: skip
        raw = json.dumps({"kind": "Pod", "metadata": meta, "spec": spec})
        entry = LogEntry(self.revision, POD, uid or name, "a", name, self.revision, op, raw)
        self.cache.apply([entry])


def test_the_graph_follows_binds_moves_changes_and_deletions() -> None:
    cache = WatchCache()
    feed, authz = Feed(cache), NodeAuthorizer(cache)
    authz.graph.current()
    feed.pod("A", "p", "")
    assert not authz(N1, SECRET_GET).allowed  # not bound yet
    feed.pod("M", "p", "n1")
    assert authz(N1, SECRET_GET).allowed
    assert authz(N1, Attributes("update", "pods", "a", "p", "status")).allowed
    feed.pod("M", "p", "n1", secret="other")
    assert not authz(N1, SECRET_GET).allowed  # its new version no longer references it
    assert authz(N1, Attributes("get", "secrets", "a", "other")).allowed
    feed.pod("M", "p", "n2", secret="other")
    assert not authz(N1, Attributes("get", "secrets", "a", "other")).allowed
    assert not authz(N1, Attributes("get", "pods", "a", "p")).allowed
    feed.pod("M", "p", "n1")
    feed.pod("D", "p", "n1")
    assert not authz(N1, SECRET_GET).allowed
    assert not authz(N1, Attributes("list", "services", "a")).allowed
    assert authz.graph.by_node == {} and authz.graph.where == {}


def test_a_reload_that_drops_the_watchers_rebuilds_the_graph() -> None:
    cache = WatchCache()
    feed, authz = Feed(cache), NodeAuthorizer(cache)
    authz.graph.current()
    cache.watchers.clear()  # what a reload does
    feed.pod("A", "q", "n1")  # applied while the graph is not registered
    assert authz(N1, SECRET_GET).allowed
    assert authz.graph in cache.watchers
