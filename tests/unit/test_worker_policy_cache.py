"""The workers' policy cache: the store is read at most once per TTL, on a fake clock, and a
refusal names the pod's generateName, the policy and the rule, without the API's prefix."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.core.errors import Forbidden, NotFound
from app.core.kinds import BY_KIND
from workers.policy import PolicyCache, police


class Stored:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj


class FakeStore:
    def __init__(self, policies: list[dict[str, Any]], labels: dict[str, str] | None) -> None:
        self.policies, self.labels, self.reads = policies, labels, 0

    async def list_objects(self, kind: Any) -> list[Stored]:
        self.reads += 1
        return [Stored(p) for p in self.policies]

    async def get(self, kind: Any, namespace: str, name: str) -> Stored:
        self.reads += 1
        if self.labels is None:
            raise NotFound("no")
        return Stored({"metadata": {"name": name, "labels": self.labels}})


POLICY = {"metadata": {"name": "strict"},
          "spec": {"namespaceSelector": {"matchLabels": {"tier": "shared"}},
                   "rules": {"denyHostNamespaces": True}}}  # fmt: skip
POD = {"kind": "Pod", "metadata": {"generateName": "web-abc-", "name": "web-abc-x1",
       "namespace": "team"}, "spec": {"hostNetwork": True, "containers": []}}  # fmt: skip


def test_reads_are_cached_for_the_ttl() -> None:
    now = [0.0]
    cache = PolicyCache(ttl=2.0, clock=lambda: now[0])
    store = FakeStore([POLICY], {"tier": "shared"})

    def refuse() -> Forbidden:
        with pytest.raises(Forbidden) as err:
            asyncio.run(police(store, BY_KIND["Pod"], [POD], cache))  # type: ignore[arg-type]
        return err.value

    err = refuse()
    assert err.message == ('violates AdmissionPolicy "strict": denyHostNamespaces '
                           "(hostNetwork=true is not allowed)")  # fmt: skip
    assert err.name == "web-abc-" and store.reads == 2
    now[0] = 1.9
    refuse()
    assert store.reads == 2
    store.policies = []  # the policy goes: seen once the TTL has passed
    now[0] = 2.0
    asyncio.run(police(store, BY_KIND["Pod"], [POD], cache))  # type: ignore[arg-type]
    assert store.reads == 3


def test_other_kinds_and_unselected_or_missing_namespaces_pass() -> None:
    cache = PolicyCache(ttl=2.0, clock=lambda: 0.0)
    store = FakeStore([POLICY], None)
    asyncio.run(police(store, BY_KIND["ReplicaSet"], [POD], cache))  # type: ignore[arg-type]
    assert store.reads == 0
    asyncio.run(police(store, BY_KIND["Pod"], [POD], cache))  # type: ignore[arg-type]
    store.labels = {"tier": "other"}
    asyncio.run(police(store, BY_KIND["Pod"], [POD], PolicyCache(clock=lambda: 0.0)))  # type: ignore[arg-type]
