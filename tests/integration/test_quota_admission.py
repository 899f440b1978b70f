"""ResourceQuota against real PostgreSQL: the usage aggregate, admission under concurrency and in
batches, what frees a charge, scopes, and status kept by the real worker and dispatcher."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest
from plane import NS as PLANE_NS
from plane import Plane, start_worker
from pools import pool_on

from app.core import quota
from app.core.errors import Forbidden
from app.core.kinds import BY_KIND
from app.core.quota import Usage
from app.store.quota import quota_usage, usage_groups
from app.store.store import Store

POD = BY_KIND["Pod"]
RQ = BY_KIND["ResourceQuota"]
Obj = dict[str, Any]


@pytest.fixture(scope="module")
async def pool(make_database: Callable[[str], str]) -> AsyncIterator[asyncpg.Pool]:
    async with pool_on(make_database("qm_quota"), 24) as p:
        yield p


@pytest.fixture
def store(pool: asyncpg.Pool) -> Store:
    return Store(pool)


def namespace() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def resources(rng: random.Random) -> Obj:
    res: Obj = {}
    requests = {}
    if rng.random() < 0.8:
        requests["cpu"] = rng.choice(["100m", "250m", "1", "1.5", "0.0005"])
    if rng.random() < 0.7:
        requests["memory"] = rng.choice(["64Mi", "1Gi", "1e6", "300k"])
    if rng.random() < 0.2:
        requests["nvidia.com/gpu"] = rng.choice(["1", "2"])
    if requests:
        res["requests"] = requests
    if rng.random() < 0.4:
        res["limits"] = {"cpu": rng.choice(["2", "500m"]), "memory": rng.choice(["2Gi", "128Mi"])}
    return res


def pod(ns: str, name: str | None = None, rng: random.Random | None = None, **spec: Any) -> Obj:
    containers = spec.pop("containers", None)
    if containers is None:
        if rng is None:
            containers = [{"name": "c", "image": "busybox", "resources": {}}]
        else:
            containers = [
                {"name": f"c{i}", "image": "busybox", "resources": resources(rng)}
                for i in range(rng.randint(1, 3))
            ]
    body: Obj = {"containers": containers, **spec}
    if rng is not None and rng.random() < 0.3:
        body["initContainers"] = [{"name": "i", "image": "busybox", "resources": resources(rng)}]
    meta: Obj = {"namespace": ns}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = "p-"
    return {"apiVersion": "quaymaster.io/v1", "kind": "Pod", "metadata": meta, "spec": body}


def cpu_pod(ns: str, cpu: str, **spec: Any) -> Obj:
    c = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
    return pod(ns, containers=[c], **spec)


def named(pods: list[Obj]) -> list[Obj]:
    """Names for a batch (``create_many`` takes names, not generateName)."""
    for p in pods:
        p["metadata"]["name"] = f"p-{uuid.uuid4().hex[:10]}"
    return pods


async def make_quota(store: Store, ns: str, name: str, hard: Obj, **spec: Any) -> Obj:
    obj = {"kind": "ResourceQuota", "metadata": {"namespace": ns, "name": name}}
    obj["spec"] = {"hard": hard, **spec}
    return (await store.create(RQ, obj)).obj


async def count(pool: asyncpg.Pool, ns: str) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM pods WHERE namespace = $1", ns))


async def test_usage_sql_equals_python_over_random_pods(store: Store, pool: asyncpg.Pool) -> None:
    rng = random.Random(20261129)
    ns = namespace()
    pods = []
    for i in range(300):
        spec: Obj = {}
        if rng.random() < 0.5:
            spec["priority"] = rng.choice([-10, 0, 10, 999, 1000, 5000])
        if rng.random() < 0.3:
            spec["priorityClassName"] = rng.choice(["prod", "batch"])
        if rng.random() < 0.2:
            spec["activeDeadlineSeconds"] = 60
        if rng.random() < 0.1:
            term = {"topologyKey": "z", "namespaceSelector": {}}
            spec["affinity"] = {
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            }
        pods.append(pod(ns, f"p{i}", rng, **spec))
    stored = await store.create_many(POD, pods)
    # finish, fail and delete some, so the aggregate's filters are exercised
    for s in stored[:30]:
        phase = rng.choice(["Succeeded", "Failed", "Running"])
        await store.update_status(POD, {**s.obj, "status": {"phase": phase}}, s.row_version)
    for s in stored[30:45]:
        await pool.execute(
            "UPDATE pods SET deletion_timestamp = now() WHERE namespace = $1 AND name = $2",
            ns,
            s.row["name"],
        )
    objs = [s.obj for s in await store.list_objects(POD, ns)]
    quotas = [
        {"metadata": {"namespace": ns}, "spec": {"hard": {"pods": "1"}}},
        {"metadata": {"namespace": ns}, "spec": {"scopes": ["BestEffort"]}},
        {"metadata": {"namespace": ns}, "spec": {"scopes": ["NotBestEffort", "Terminating"]}},
        {"metadata": {"namespace": ns}, "spec": {"scopes": ["CrossNamespacePodAffinity"]}},
        {"metadata": {"namespace": ns}, "spec": {"scopes": ["PriorityClass"]}},
        {
            "metadata": {"namespace": ns},
            "spec": {
                "scopeSelector": {
                    "matchExpressions": [
                        {"scopeName": "PriorityBand", "operator": "In", "values": ["production"]}
                    ]
                }
            },
        },
    ]
    for q in quotas:
        expected = Usage()
        for o in objs:
            if quota.counts(o) and quota.applies(q, quota.pod_facts(o)):
                expected = expected + quota.pod_charge(o)
        assert await quota_usage(pool, q) == expected, q["spec"]
    # one row per combination of scope attributes (at most 6 * 3 * 2 * 2 * 2), not per pod
    assert len(await usage_groups(pool, ns)) <= 144 < len(objs)


async def test_concurrent_creates_never_overshoot(store: Store, pool: asyncpg.Pool) -> None:
    ns = namespace()
    await make_quota(store, ns, "five", {"pods": "5"})

    async def one(i: int) -> bool:
        try:
            await store.create(POD, pod(ns, f"p{i}"))
        except Forbidden as exc:
            assert exc.message.startswith("exceeded quota: five, requested: pods=1, used: pods=5")
            return False
        return True

    results = await asyncio.gather(*(one(i) for i in range(20)))
    assert sum(results) == 5
    assert results.count(False) == 15
    assert await count(pool, ns) == 5


async def test_batch_that_would_exceed_is_refused_whole(store: Store, pool: asyncpg.Pool) -> None:
    ns = namespace()
    await make_quota(store, ns, "cpu", {"requests.cpu": "10"})
    await store.create_many(POD, [cpu_pod(ns, "1") | {"metadata": {"namespace": ns, "name": "a"}}])
    batch = [
        {**cpu_pod(ns, "500m"), "metadata": {"namespace": ns, "name": f"b{i}"}} for i in range(20)
    ]
    with pytest.raises(Forbidden) as refused:
        await store.create_many(POD, batch)
    assert refused.value.message == (
        "exceeded quota: cpu, requested: requests.cpu=10, used: requests.cpu=1, "
        "limited: requests.cpu=10"
    )
    assert await count(pool, ns) == 1
    assert len(await store.create_many(POD, batch[:18])) == 18  # exactly up to the limit


async def test_finished_or_deleted_pod_frees_its_charge(store: Store, pool: asyncpg.Pool) -> None:
    ns = namespace()
    await make_quota(store, ns, "two", {"pods": "2"})
    a = await store.create(POD, pod(ns, "a"))
    await store.create(POD, pod(ns, "b"))
    with pytest.raises(Forbidden):
        await store.create(POD, pod(ns, "c"))
    await store.update_status(POD, {**a.obj, "status": {"phase": "Succeeded"}}, a.row_version)
    await store.create(POD, pod(ns, "c"))
    with pytest.raises(Forbidden):
        await store.create(POD, pod(ns, "d"))
    # bound to a node, so its deletion waits for the grace period: terminating, not counted
    await pool.execute(
        "UPDATE pods SET spec = spec || $2::jsonb WHERE namespace = $1 AND name = 'b'",
        ns,
        {"nodeName": "n1"},
    )
    assert await store.delete(POD, ns, "b") is not None
    await store.create(POD, pod(ns, "d"))
    assert await count(pool, ns) == 4  # a (finished), b (terminating), c, d


async def test_production_band_quota_does_not_charge_batch_pods(store: Store) -> None:
    ns = namespace()
    band = {"scopeName": "PriorityBand", "operator": "In", "values": ["production"]}
    await make_quota(
        store, ns, "prod", {"requests.cpu": "2"}, scopeSelector={"matchExpressions": [band]}
    )
    await store.create_many(POD, named([cpu_pod(ns, "1", priority=10) for _ in range(5)]))
    await store.create(POD, cpu_pod(ns, "2", priority=2000))
    with pytest.raises(Forbidden, match="exceeded quota: prod"):
        await store.create(POD, cpu_pod(ns, "100m", priority=1000))
    await store.create(POD, cpu_pod(ns, "100m", priority=999))  # batch: not charged


async def test_lowering_hard_refuses_new_pods_and_keeps_old(
    store: Store, pool: asyncpg.Pool
) -> None:
    ns = namespace()
    q = await make_quota(store, ns, "q", {"pods": "5"})
    await store.create_many(POD, named([pod(ns) for _ in range(4)]))
    current = await store.get(RQ, ns, "q")
    await store.update(RQ, {**q, "spec": {"hard": {"pods": "2"}}}, current.row_version)
    with pytest.raises(Forbidden, match="used: pods=4, limited: pods=2"):
        await store.create(POD, pod(ns))
    assert await count(pool, ns) == 4


async def test_other_namespaces_and_kinds_are_not_held(store: Store) -> None:
    ns, other = namespace(), namespace()
    await make_quota(store, ns, "zero", {"pods": "0"})
    with pytest.raises(Forbidden):
        await store.create(POD, pod(ns))
    await store.create(POD, pod(other))
    cm = {"kind": "ConfigMap", "metadata": {"namespace": ns, "name": "c"}, "spec": {}}
    await store.create(BY_KIND["ConfigMap"], cm)


def test_status_used_follows_pods_through_worker_and_dispatcher(plane: Plane) -> None:
    hard = {"pods": "10", "requests.cpu": "4"}
    plane.db.execute(
        "INSERT INTO resourcequotas (uid, namespace, name, spec) VALUES (%s, %s, 'q', %s)",
        (str(uuid.uuid4()), PLANE_NS, json.dumps({"hard": hard})),
    )
    start_worker(plane)
    plane.start("-m", "workers.dispatch")

    def used() -> Any:
        row = plane.db.execute(
            "SELECT status->'used' FROM resourcequotas WHERE namespace = %s AND name = 'q'",
            (PLANE_NS,),
        ).fetchone()
        return row[0] if row else None

    plane.wait(lambda: used() == {"pods": "0", "requests.cpu": "0"}, 30, "first status")
    spec = {"containers": [{"name": "c", "image": "b", "resources": {"requests": {"cpu": "1"}}}]}
    for i in range(3):
        plane.db.execute(
            "INSERT INTO pods (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
            (str(uuid.uuid4()), PLANE_NS, f"p{i}", json.dumps(spec)),
        )
    plane.wait(lambda: used() == {"pods": "3", "requests.cpu": "3"}, 30, "usage of 3 pods")
    plane.db.execute(
        "UPDATE pods SET status = '{\"phase\": \"Failed\"}' WHERE namespace = %s AND name = 'p0'",
        (PLANE_NS,),
    )
    plane.wait(lambda: used() == {"pods": "2", "requests.cpu": "2"}, 30, "a failed pod freed")
    status = plane.db.execute(
        "SELECT status->'hard' FROM resourcequotas WHERE name = 'q'"
    ).fetchone()
    assert status is not None and status[0] == hard
