"""Commit-time capacity: the triggers that keep ``nodes_allocated`` equal to the requests of the
pods holding room on each node, and the scheduler's batched conditional bind built on them."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from app.core.kinds import BY_KIND
from app.scheduler import binder
from app.scheduler.binder import Bind, BindResult, bind_many
from app.store.db import create_pool
from app.store.sql import COLS
from app.store.store import Store, Stored

NS = "scheduler-binds"
NODE = BY_KIND["Node"]
POD = BY_KIND["Pod"]
NOW = datetime(2026, 11, 29, 12, 30, 45, 987654, tzinfo=UTC)
GI = 1024**3


@pytest.fixture(scope="module")
async def pool(pg_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(pg_url, min_size=1, max_size=8)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture(scope="module")
def store(pool: asyncpg.Pool) -> Store:
    return Store(pool)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def node_obj(
    name: str,
    cpu: str | None = "4",
    memory: str | None = "8Gi",
    pods: str | None = "110",
    gpu: str | None = None,
    batch: dict[str, str] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    alloc = {k: v for k, v in (("cpu", cpu), ("memory", memory), ("pods", pods)) if v}
    if gpu is not None:
        alloc["nvidia.com/gpu"] = gpu
    status: dict[str, Any] = {
        "allocatable": alloc,
        "capacity": dict(alloc),
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    if batch is not None:
        status["batchAllocatable"] = batch
    spec: dict[str, Any] = {"unschedulable": True} if unschedulable else {}
    return {"kind": "Node", "metadata": {"name": name}, "spec": spec, "status": status}


def pod_obj(
    name: str,
    cpu: str = "500m",
    memory: str = "1Gi",
    gpu: str | None = None,
    node: str | None = None,
    phase: str | None = None,
    status: dict[str, Any] | None = None,
    finalizers: list[str] | None = None,
) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    if gpu is not None:
        requests["nvidia.com/gpu"] = gpu
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "busybox:1.36", "resources": {"requests": requests}}]
    }
    if node is not None:
        spec["nodeName"] = node
    st = dict(status or {})
    if phase is not None:
        st["phase"] = phase
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": st}


async def allocated(pool: asyncpg.Pool, node: Stored) -> tuple[int, int, int, int] | None:
    row = await pool.fetchrow(
        "SELECT cpu_milli, memory_bytes, gpu, pods FROM nodes_allocated WHERE node_uid = $1",
        uuid.UUID(node.uid),
    )
    return None if row is None else (row[0], row[1], row[2], row[3])


async def fetch_pod(pool: asyncpg.Pool, uid: str) -> asyncpg.Record:
    row = await pool.fetchrow(
        "SELECT uid, row_version, generation, node_name, spec, status FROM pods WHERE uid = $1",
        uuid.UUID(uid),
    )
    assert row is not None
    return row


def decide(
    pod: Stored | asyncpg.Record, node: Stored, *, batch: bool = False, row_version: int = 0
) -> Bind:
    if isinstance(pod, Stored):
        uid, version, ns, name = pod.uid, pod.row_version, pod.row["namespace"], pod.row["name"]
        cpu, mem, gpu = pod.row["req_cpu_milli"], pod.row["req_memory_bytes"], pod.row["req_gpu"]
    else:
        uid, version, ns, name = str(pod["uid"]), pod["row_version"], NS, pod["name"]
        cpu, mem, gpu = pod["req_cpu_milli"], pod["req_memory_bytes"], pod["req_gpu"]
    return Bind(
        pod_uid=uid,
        namespace=ns,
        name=name,
        row_version=row_version or version,
        node_uid=node.uid,
        node_name=node.row["name"],
        cpu_milli=cpu,
        memory_bytes=mem,
        gpu=gpu,
        batch=batch,
    )


async def with_requests(store: Store, pods: list[Stored]) -> list[Stored]:
    """The pods as stored, with the request columns their trigger computed."""
    rows = await store.pool.fetch(
        f"SELECT {COLS}, req_cpu_milli, req_memory_bytes, req_gpu"
        " FROM pods WHERE uid = ANY($1::uuid[])",
        [uuid.UUID(p.uid) for p in pods],
    )
    by_uid = {str(r["uid"]): dict(r) for r in rows}
    return [Stored(POD, p.uid, by_uid[p.uid]["row_version"], by_uid[p.uid]) for p in pods]


async def run_binds(pool: asyncpg.Pool, binds: list[Bind]) -> BindResult:
    async with pool.acquire() as conn:
        return await bind_many(conn, binds, NOW)


async def set_phase(pool: asyncpg.Pool, uid: str, phase: str) -> None:
    await pool.execute(
        "UPDATE pods SET status = jsonb_set(status, '{phase}', to_jsonb($2::text)) WHERE uid = $1",
        uuid.UUID(uid),
        phase,
    )


async def direct_sums(pool: asyncpg.Pool, node_uids: list[str]) -> dict[str, tuple[int, ...]]:
    """Requests of the pods holding room on each node, summed straight from ``pods``."""
    rows = await pool.fetch(
        """
SELECT n.uid, coalesce(sum(p.req_cpu_milli), 0)::bigint AS cpu,
       coalesce(sum(p.req_memory_bytes), 0)::bigint AS memory,
       coalesce(sum(p.req_gpu), 0)::bigint AS gpu, count(p.uid)::int AS pods
  FROM nodes AS n
  LEFT JOIN pods AS p
    ON p.node_name = n.name AND coalesce(p.phase, '') NOT IN ('Succeeded', 'Failed')
 WHERE n.uid = ANY($1::uuid[])
 GROUP BY n.uid""",
        [uuid.UUID(u) for u in node_uids],
    )
    return {str(r["uid"]): (r["cpu"], r["memory"], r["gpu"], r["pods"]) for r in rows}


async def kept(pool: asyncpg.Pool, node_uids: list[str]) -> dict[str, tuple[int, ...]]:
    rows = await pool.fetch(
        "SELECT node_uid, cpu_milli, memory_bytes, gpu, pods FROM nodes_allocated"
        " WHERE node_uid = ANY($1::uuid[])",
        [uuid.UUID(u) for u in node_uids],
    )
    return {str(r[0]): (r[1], r[2], r[3], r[4]) for r in rows}


# -- accounting triggers -------------------------------------------------------------------


async def test_bind_adds_room_and_the_end_of_a_pod_releases_it(
    pool: asyncpg.Pool, store: Store
) -> None:
    node = await store.create(NODE, node_obj(unique("acct")))
    assert await allocated(pool, node) == (0, 0, 0, 0)
    a, b = await with_requests(
        store,
        [
            await store.create(POD, pod_obj(unique("a"), cpu="1", memory="1Gi")),
            await store.create(POD, pod_obj(unique("b"), cpu="250m", memory="512Mi")),
        ],
    )
    result = await run_binds(pool, [decide(a, node), decide(b, node)])
    assert len(result.bound) == 2
    assert await allocated(pool, node) == (1250, GI + GI // 2, 0, 2)

    await set_phase(pool, a.uid, "Running")
    assert await allocated(pool, node) == (1250, GI + GI // 2, 0, 2)
    await set_phase(pool, a.uid, "Succeeded")
    assert await allocated(pool, node) == (250, GI // 2, 0, 1)
    await set_phase(pool, b.uid, "Failed")
    assert await allocated(pool, node) == (0, 0, 0, 0)


async def test_deleting_a_bound_pod_releases_its_room(pool: asyncpg.Pool, store: Store) -> None:
    node = await store.create(NODE, node_obj(unique("del")))
    name = node.row["name"]
    pod = await store.create(POD, pod_obj(unique("p"), cpu="2", memory="3Gi", node=name))
    done = await store.create(POD, pod_obj(unique("d"), cpu="1", node=name, phase="Succeeded"))
    assert await allocated(pool, node) == (2000, 3 * GI, 0, 1)
    await pool.execute("DELETE FROM pods WHERE uid = $1", uuid.UUID(done.uid))
    assert await allocated(pool, node) == (2000, 3 * GI, 0, 1)
    await pool.execute("DELETE FROM pods WHERE uid = $1", uuid.UUID(pod.uid))
    assert await allocated(pool, node) == (0, 0, 0, 0)


async def test_a_change_of_requests_adjusts_the_room(pool: asyncpg.Pool, store: Store) -> None:
    node = await store.create(NODE, node_obj(unique("req"), gpu="4"))
    pod = await store.create(
        POD, pod_obj(unique("p"), cpu="1", memory="1Gi", gpu="1", node=node.row["name"])
    )
    assert await allocated(pool, node) == (1000, GI, 1, 1)
    spec = pod_obj("x", cpu="1500m", memory="2Gi", gpu="2", node=node.row["name"])["spec"]
    await store.update(POD, dict(pod.obj, spec=spec), pod.row_version)
    assert await allocated(pool, node) == (1500, 2 * GI, 2, 1)


async def test_a_node_created_after_its_pods_counts_them(pool: asyncpg.Pool, store: Store) -> None:
    name = unique("late")
    await store.create(POD, pod_obj(unique("p"), cpu="1", memory="1Gi", node=name))
    await store.create(POD, pod_obj(unique("q"), cpu="2", memory="1Gi", node=name, phase="Running"))
    await store.create(POD, pod_obj(unique("r"), cpu="3", node=name, phase="Failed"))
    node = await store.create(NODE, node_obj(name))
    assert await allocated(pool, node) == (3000, 2 * GI, 0, 2)
    # Deleted and created again under the same name: the new node inherits the pods.
    await pool.execute("DELETE FROM nodes WHERE uid = $1", uuid.UUID(node.uid))
    assert await allocated(pool, node) is None
    again = await store.create(NODE, node_obj(name))
    assert await allocated(pool, again) == (3000, 2 * GI, 0, 2)


async def test_status_writes_that_keep_the_phase_do_not_touch_the_allocation(
    pool: asyncpg.Pool, store: Store
) -> None:
    node = await store.create(NODE, node_obj(unique("quiet")))
    pod = await store.create(
        POD, pod_obj(unique("p"), cpu="1", node=node.row["name"], phase="Running")
    )
    pending = await store.create(POD, pod_obj(unique("u"), phase="Pending"))
    query = "SELECT xmin::text, ctid::text FROM nodes_allocated WHERE node_uid = $1"
    before = await pool.fetchrow(query, uuid.UUID(node.uid))
    cur = pod
    for ready in ("True", "False", "True"):
        status = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": ready}],
            "podIP": "10.0.0.7",
        }
        cur = await store.update_status(POD, dict(cur.obj, status=status), cur.row_version)
    cur = await store.update(
        POD, dict(cur.obj, metadata={**cur.obj["metadata"], "labels": {"x": "y"}}), cur.row_version
    )
    await set_phase(pool, pending.uid, "Running")  # not bound: holds no room either way
    assert await pool.fetchrow(query, uuid.UUID(node.uid)) == before
    assert await allocated(pool, node) == (1000, GI, 0, 1)


async def test_recount_agrees_with_the_triggers_after_random_writes(
    pool: asyncpg.Pool, store: Store
) -> None:
    rng = random.Random(20261129)
    nodes = [await store.create(NODE, node_obj(unique("mix"), gpu="8")) for _ in range(4)]
    names = [n.row["name"] for n in nodes] + [unique("absent")]
    pods: list[Stored] = []
    for _ in range(300):
        op = rng.random()
        if op < 0.35 or not pods:
            node = rng.choice([*names, None])
            phase = rng.choice([None, "Pending", "Running", "Succeeded"])
            obj = pod_obj(
                unique("m"),
                cpu=f"{rng.randint(1, 900)}m",
                memory=f"{rng.randint(1, 512)}Mi",
                gpu=rng.choice([None, "1"]),
                node=node,
                phase=phase,
            )
            pods.append(await store.create(POD, obj))
            continue
        victim = rng.choice(pods)
        row = await pool.fetchrow(
            "SELECT row_version FROM pods WHERE uid = $1", uuid.UUID(victim.uid)
        )
        if row is None:
            continue
        if op < 0.55:
            await set_phase(pool, victim.uid, rng.choice(["Running", "Succeeded", "Failed", "X"]))
        elif op < 0.7:
            await pool.execute(
                "UPDATE pods SET spec = jsonb_set(spec, '{nodeName}', to_jsonb($2::text))"
                " WHERE uid = $1",
                uuid.UUID(victim.uid),
                rng.choice(names),
            )
        elif op < 0.85:
            await pool.execute(
                "UPDATE pods SET spec = jsonb_set(spec, '{containers,0,resources,requests,cpu}',"
                " to_jsonb($2::text)) WHERE uid = $1",
                uuid.UUID(victim.uid),
                f"{rng.randint(1, 900)}m",
            )
        elif op < 0.95:
            await pool.execute("DELETE FROM pods WHERE uid = $1", uuid.UUID(victim.uid))
        else:
            await pool.execute(
                'UPDATE pods SET status = status || \'{"podIP": "10.1.1.1"}\' WHERE uid = $1',
                uuid.UUID(victim.uid),
            )
    uids = [n.uid for n in nodes]
    incremental = await kept(pool, uids)
    assert incremental == await direct_sums(pool, uids)
    assert any(v[3] > 0 for v in incremental.values())
    assert await pool.fetchval("SELECT qm_recount_allocations()") == 0
    assert await kept(pool, uids) == incremental

    # A row edited by hand is put right.
    await pool.execute(
        "UPDATE nodes_allocated SET cpu_milli = cpu_milli + 7 WHERE node_uid = $1",
        uuid.UUID(nodes[0].uid),
    )
    assert await pool.fetchval("SELECT qm_recount_allocations()") == 1
    assert await kept(pool, uids) == incremental


# -- bind_many -----------------------------------------------------------------------------


async def test_a_decision_from_an_older_version_is_stale(pool: asyncpg.Pool, store: Store) -> None:
    node = await store.create(NODE, node_obj(unique("stale")))
    old, fresh = await with_requests(
        store, [await store.create(POD, pod_obj(unique("p"))) for _ in range(2)]
    )
    moved = await store.update_status(
        POD, dict(old.obj, status={"phase": "Pending"}), old.row_version
    )
    assert moved.row_version != old.row_version
    result = await run_binds(pool, [decide(old, node), decide(fresh, node)])
    assert [b.pod_uid for b in result.stale] == [old.uid]
    assert [b.pod_uid for b in result.bound] == [fresh.uid]
    assert (await fetch_pod(pool, old.uid))["node_name"] is None
    assert await allocated(pool, node) == (500, GI, 0, 1)


async def test_bound_deleted_and_terminating_pods_are_stale(
    pool: asyncpg.Pool, store: Store
) -> None:
    node = await store.create(NODE, node_obj(unique("gone")))
    other = await store.create(NODE, node_obj(unique("other")))
    bound, deleted, terminating, twice = await with_requests(
        store,
        [
            await store.create(POD, pod_obj(unique("b"))),
            await store.create(POD, pod_obj(unique("d"))),
            await store.create(POD, pod_obj(unique("t"), finalizers=["example.com/hold"])),
            await store.create(POD, pod_obj(unique("w"))),
        ],
    )
    first = await run_binds(pool, [decide(bound, other)])
    assert len(first.bound) == 1
    await pool.execute("DELETE FROM pods WHERE uid = $1", uuid.UUID(deleted.uid))
    await pool.execute(
        "UPDATE pods SET deletion_timestamp = now() WHERE uid = $1", uuid.UUID(terminating.uid)
    )
    term = (await with_requests(store, [terminating]))[0]
    binds = [
        decide(bound, node),
        decide(deleted, node),
        decide(term, node),
        decide(twice, node),
        decide(twice, other),
    ]
    result = await run_binds(pool, binds)
    assert result.bound == [binds[3]]
    assert result.stale == [binds[0], binds[1], binds[2], binds[4]]
    assert result.no_room == []
    assert (await fetch_pod(pool, bound.uid))["node_name"] == other.row["name"]
    assert (await fetch_pod(pool, twice.uid))["node_name"] == node.row["name"]
    assert await allocated(pool, node) == (500, GI, 0, 1)


async def test_cordoned_missing_and_silent_nodes_have_no_room(
    pool: asyncpg.Pool, store: Store
) -> None:
    cordoned = await store.create(NODE, node_obj(unique("cordon"), unschedulable=True))
    silent = await store.create(NODE, node_obj(unique("silent"), cpu=None, memory=None))
    deleted = await store.create(NODE, node_obj(unique("deleted")))
    await pool.execute("DELETE FROM nodes WHERE uid = $1", uuid.UUID(deleted.uid))
    missing = Stored(NODE, str(uuid.uuid4()), 1, {"name": unique("missing")})
    pods = await with_requests(
        store,
        [await store.create(POD, pod_obj(unique("p"), cpu="0", memory="0")) for _ in range(4)],
    )
    binds = [decide(p, n) for p, n in zip(pods, [cordoned, silent, deleted, missing], strict=True)]
    result = await run_binds(pool, binds)
    assert result.no_room == binds
    assert result.bound == result.stale == []
    for p in pods:
        assert (await fetch_pod(pool, p.uid))["node_name"] is None


async def test_a_node_admits_binds_in_order_while_they_fit(
    pool: asyncpg.Pool, store: Store
) -> None:
    node = await store.create(NODE, node_obj(unique("fill"), cpu="4", memory="8Gi"))
    pods = await with_requests(
        store,
        [await store.create(POD, pod_obj(unique("p"), cpu="1", memory="1Gi")) for _ in range(6)],
    )
    binds = [decide(p, node) for p in pods]
    result = await run_binds(pool, binds)
    assert result.bound == binds[:4]
    assert result.no_room == binds[4:]
    assert await allocated(pool, node) == (4000, 4 * GI, 0, 4)
    # Room left for memory but not cpu: a cpu-free pod still fits, a cpu pod does not.
    small, big = await with_requests(
        store,
        [
            await store.create(POD, pod_obj(unique("s"), cpu="0", memory="4Gi")),
            await store.create(POD, pod_obj(unique("b"), cpu="1m", memory="1")),
        ],
    )
    result = await run_binds(pool, [decide(big, node), decide(small, node)])
    assert [b.pod_uid for b in result.bound] == [small.uid]
    assert [b.pod_uid for b in result.no_room] == [big.uid]


async def test_batch_pods_are_limited_by_batch_allocatable(
    pool: asyncpg.Pool, store: Store
) -> None:
    node = await store.create(
        NODE, node_obj(unique("batch"), cpu="4", memory="8Gi", batch={"cpu": "2", "memory": "4Gi"})
    )
    plain = await store.create(NODE, node_obj(unique("plain"), cpu="4", memory="8Gi"))
    row = await pool.fetchrow(
        "SELECT batch_cpu_milli, batch_memory_bytes, alloc_pods FROM nodes WHERE uid = $1",
        uuid.UUID(node.uid),
    )
    assert row is not None and tuple(row) == (2000, 4 * GI, 110)
    prod, batch1, batch2, prod2 = await with_requests(
        store,
        [
            await store.create(POD, pod_obj(unique("prod"), cpu="1500m", memory="1Gi")),
            await store.create(POD, pod_obj(unique("b1"), cpu="500m", memory="1Gi")),
            await store.create(POD, pod_obj(unique("b2"), cpu="500m", memory="1Gi")),
            await store.create(POD, pod_obj(unique("prod2"), cpu="2", memory="1Gi")),
        ],
    )
    result = await run_binds(
        pool,
        [
            decide(prod, node),
            decide(batch1, node, batch=True),  # 2000m of 2000m batch ceiling
            decide(batch2, node, batch=True),  # 2500m: over the batch ceiling
            decide(prod2, node),  # 4000m of 4000m allocatable
        ],
    )
    assert [b.name for b in result.bound] == [
        prod.row["name"],
        batch1.row["name"],
        prod2.row["name"],
    ]
    assert [b.name for b in result.no_room] == [batch2.row["name"]]
    # Without batchAllocatable a batch pod gets the node's allocatable.
    filler = (
        await with_requests(
            store, [await store.create(POD, pod_obj(unique("f"), cpu="3", memory="1Gi"))]
        )
    )[0]
    assert len((await run_binds(pool, [decide(filler, plain)])).bound) == 1
    batch2 = (await with_requests(store, [batch2]))[0]
    assert len((await run_binds(pool, [decide(batch2, plain, batch=True)])).bound) == 1
    assert await allocated(pool, plain) == (3500, 2 * GI, 0, 2)


async def test_gpu_and_pod_count_limits(pool: asyncpg.Pool, store: Store) -> None:
    no_gpu = await store.create(NODE, node_obj(unique("nogpu")))
    gpus = await store.create(NODE, node_obj(unique("gpu"), gpu="2"))
    few = await store.create(NODE, node_obj(unique("few"), pods="2"))
    unlimited = await store.create(NODE, node_obj(unique("unl"), pods=None, cpu="100"))
    gpu_pods = await with_requests(
        store, [await store.create(POD, pod_obj(unique("g"), gpu="1")) for _ in range(4)]
    )
    result = await run_binds(pool, [decide(gpu_pods[0], no_gpu)])
    assert result.no_room and not result.bound
    binds = [decide(p, gpus) for p in gpu_pods[1:]]
    result = await run_binds(pool, binds)
    assert result.bound == binds[:2] and result.no_room == binds[2:]
    assert await allocated(pool, gpus) == (1000, 2 * GI, 2, 2)

    plain = await with_requests(
        store,
        [await store.create(POD, pod_obj(unique("c"), cpu="10m", memory="1Mi")) for _ in range(6)],
    )
    binds = [decide(p, few) for p in plain[:3]]
    result = await run_binds(pool, binds)
    assert result.bound == binds[:2] and result.no_room == binds[2:]
    binds = [decide(p, unlimited) for p in plain[2:]]
    assert (await run_binds(pool, binds)).bound == binds


async def test_the_bound_pod_names_its_node_and_is_scheduled(
    pool: asyncpg.Pool, store: Store
) -> None:
    node = await store.create(NODE, node_obj(unique("write")))
    status = {
        "phase": "Pending",
        "nominatedNodeName": "elsewhere",
        "conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
            {"type": "ContainersReady", "status": "False"},
        ],
    }
    pod = (
        await with_requests(store, [await store.create(POD, pod_obj(unique("p"), status=status))])
    )[0]
    before = await fetch_pod(pool, pod.uid)
    result = await run_binds(pool, [decide(pod, node)])
    assert len(result.bound) == 1
    after = await fetch_pod(pool, pod.uid)
    assert after["node_name"] == node.row["name"]
    assert after["spec"]["nodeName"] == node.row["name"]
    assert after["spec"]["containers"] == before["spec"]["containers"]
    assert "nominatedNodeName" not in after["status"]
    assert after["status"]["phase"] == "Pending"
    assert after["status"]["conditions"] == [
        {"type": "Initialized", "status": "True"},
        {"type": "ContainersReady", "status": "False"},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T12:30:45Z"},
    ]
    assert after["row_version"] > before["row_version"]
    assert after["generation"] == before["generation"] + 1

    bare = (await with_requests(store, [await store.create(POD, pod_obj(unique("bare")))]))[0]
    assert len((await run_binds(pool, [decide(bare, node)])).bound) == 1
    assert (await fetch_pod(pool, bare.uid))["status"]["conditions"] == [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T12:30:45Z"}
    ]


async def test_an_empty_batch_and_a_transaction_in_progress(pool: asyncpg.Pool) -> None:
    assert await run_binds(pool, []) == BindResult()
    async with pool.acquire() as conn, conn.transaction():
        with pytest.raises(RuntimeError):
            await bind_many(conn, [], NOW)


async def test_a_pod_takes_the_larger_of_its_decided_and_stored_requests(
    pool: asyncpg.Pool, store: Store
) -> None:
    node = await store.create(NODE, node_obj(unique("under"), cpu="1", memory="8Gi"))
    pod = (await with_requests(store, [await store.create(POD, pod_obj(unique("p"), cpu="2"))]))[0]
    understated = dataclasses.replace(decide(pod, node), cpu_milli=100)
    assert (await run_binds(pool, [understated])).no_room == [understated]
    small = (await with_requests(store, [await store.create(POD, pod_obj(unique("s"), cpu="1"))]))[
        0
    ]
    overstated = dataclasses.replace(decide(small, node), cpu_milli=1500)
    assert (await run_binds(pool, [overstated])).no_room == [overstated]


async def test_a_deadlock_is_retried_once_then_reported_as_no_room(
    pool: asyncpg.Pool, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await store.create(NODE, node_obj(unique("dl")))
    pod = (await with_requests(store, [await store.create(POD, pod_obj(unique("p")))]))[0]
    real = binder._bind_once
    failures = [2]

    async def flaky(conn: Any, binds: list[Bind], when: str, ctx: Any) -> BindResult:
        if failures[0]:
            failures[0] -= 1
            raise asyncpg.exceptions.DeadlockDetectedError("deadlock detected")
        return await real(conn, binds, when, ctx)

    monkeypatch.setattr(binder, "_bind_once", flaky)
    bind = decide(pod, node)
    assert await run_binds(pool, [bind, bind]) == BindResult(no_room=[bind], stale=[bind])
    failures[0] = 1
    result = await run_binds(pool, [bind])
    assert (result.bound, result.stale, result.no_room) == ([bind], [], [])
    written = await fetch_pod(pool, pod.uid)
    assert written["node_name"] == node.row["name"]
    assert result.versions == {pod.uid: written["row_version"]}


# -- concurrent schedulers -----------------------------------------------------------------


async def test_concurrent_schedulers_never_over_allocate(
    pool: asyncpg.Pool, store: Store, pg_url: str
) -> None:
    rng = random.Random(7)
    nodes = [
        await store.create(
            NODE,
            node_obj(
                unique("race"),
                cpu="4",
                memory="8Gi",
                pods="12",
                batch={"cpu": "3"} if i % 3 == 0 else None,
            ),
        )
        for i in range(10)
    ]
    # Nearly full: each node already runs 3 cpu worth of pods.
    await store.create_many(
        POD,
        [
            pod_obj(unique("base"), cpu="1", memory="2Gi", node=n.row["name"], phase="Running")
            for n in nodes
            for _ in range(3)
        ],
    )
    label = unique("race")
    objs = []
    for _ in range(300):
        obj = pod_obj(
            unique("r"),
            cpu=f"{rng.choice([100, 200, 250, 500])}m",
            memory=f"{rng.randint(64, 900)}Mi",
        )
        obj["metadata"]["labels"] = {"race": label}
        objs.append(obj)
    await store.create_many(POD, objs)
    pending_query = (
        "SELECT uid, name, row_version, req_cpu_milli, req_memory_bytes, req_gpu FROM pods"
        " WHERE namespace = $1 AND labels @> $2::jsonb AND node_name IS NULL"
    )
    results: list[BindResult] = []
    stop = asyncio.Event()

    async def scheduler(seed: int) -> None:
        r = random.Random(seed)
        conn = await asyncpg.connect(pg_url)
        try:
            for _ in range(15):
                pending = await conn.fetch(pending_query, NS, f'{{"race": "{label}"}}')
                if not pending:
                    break
                picked = r.sample(list(pending), min(len(pending), r.randint(20, 80)))
                binds = [decide(p, r.choice(nodes), batch=r.random() < 0.3) for p in picked]
                results.append(await bind_many(conn, binds, NOW))
                await asyncio.sleep(0)
        finally:
            await conn.close()

    async def status_writer() -> None:
        # Batched status writes to pending pods, in no particular order: they move row
        # versions under the schedulers and take pod locks against them.
        r = random.Random(99)
        conn = await asyncpg.connect(pg_url)
        try:
            while not stop.is_set():
                pending = await conn.fetch(pending_query, NS, f'{{"race": "{label}"}}')
                picked = r.sample(list(pending), min(len(pending), 15))
                with contextlib.suppress(asyncpg.exceptions.DeadlockDetectedError):
                    await conn.execute(
                        "UPDATE pods SET status = status || '{\"conditions\": []}'"
                        " FROM unnest($1::uuid[]) AS v(uid) WHERE pods.uid = v.uid",
                        [p["uid"] for p in picked],
                    )
                await asyncio.sleep(0.005)
        finally:
            await conn.close()

    writer = asyncio.create_task(status_writer())
    try:
        await asyncio.gather(*(scheduler(s) for s in range(4)))
    finally:
        stop.set()
        await writer

    bound = [b.pod_uid for res in results for b in res.bound]
    assert len(bound) == len(set(bound)), "a pod was bound by two calls"
    assert len(bound) > 20
    assert any(res.no_room for res in results)
    decisions = Counter(
        b.pod_uid for res in results for b in {*res.bound, *res.stale, *res.no_room}
    )
    assert any(n > 1 for n in decisions.values()), "no pod was decided by two calls"
    rows = await pool.fetch(
        "SELECT uid, node_name FROM pods WHERE namespace = $1 AND labels @> $2::jsonb"
        " AND node_name IS NOT NULL",
        NS,
        {"race": label},
    )
    placed = {str(r["uid"]): r["node_name"] for r in rows}
    assert placed == {b.pod_uid: b.node_name for res in results for b in res.bound}

    uids = [n.uid for n in nodes]
    sums = await direct_sums(pool, uids)
    assert await kept(pool, uids) == sums
    for n in nodes:
        cpu, memory, gpu, count = sums[n.uid]
        assert cpu <= 4000 and memory <= 8 * GI and gpu == 0 and count <= 12, (
            n.row["name"],
            sums[n.uid],
        )


async def test_the_bind_time_is_recorded_once(pool: asyncpg.Pool, store: Store) -> None:
    node = await store.create(NODE, node_obj(unique("bt")))
    pod = (await with_requests(store, [await store.create(POD, pod_obj(unique("p")))]))[0]
    before = await pool.fetchval("SELECT clock_timestamp()")
    assert (await run_binds(pool, [decide(pod, node)])).bound
    bound_at = await pool.fetchval("SELECT bound_at FROM pods WHERE uid = $1", uuid.UUID(pod.uid))
    assert bound_at is not None and bound_at >= before
    await set_phase(pool, pod.uid, "Running")
    again = await pool.fetchval("SELECT bound_at FROM pods WHERE uid = $1", uuid.UUID(pod.uid))
    assert again == bound_at
