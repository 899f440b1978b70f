"""Write context from every path, against real PostgreSQL: each write the store, a controller's
applier, the scheduler's binder, an eviction or the garbage collector makes shows up in
``qm_history`` with the principal, request id and reason its caller passed (``qm.context``, or
each row's own entry of ``qm.contexts`` for a batched statement)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from pools import pool_on

from app.core.audit import SCHEDULER, WriteContext, system
from app.core.controllers.garbage import Batch, Candidate
from app.core.controllers.plan import Plan
from app.core.kinds import BY_KIND
from app.scheduler.binder import Bind, bind_many
from app.store import collect, tokens
from app.store.eviction import evict
from app.store.lease import LeaderLease
from app.store.service_range import apply_range
from app.store.store import Store
from workers.context import reconciling
from workers.controllers.apply import apply_plan

NS = "ctx"
CM = BY_KIND["ConfigMap"]
POD = BY_KIND["Pod"]
NODE = BY_KIND["Node"]
RS = BY_KIND["ReplicaSet"]
ALICE = WriteContext(
    principal="alice",
    groups=("dev", "system:authenticated"),
    request_id="req-1",
    client="10.1.2.3",
    user_agent="qm/1",
    reason="CHG-7: rotate the config",
)
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def url(make_database: Callable[[str], str]) -> str:
    return make_database("qm_write_context")


@pytest.fixture(scope="module")
async def pool(url: str) -> AsyncIterator[asyncpg.Pool]:
    async with pool_on(url, 6) as p:
        yield p


@pytest.fixture(scope="module")
def store(pool: asyncpg.Pool) -> Store:
    return Store(pool)


async def history(pool: asyncpg.Pool, table: str, name: str) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT op, principal, groups, request_id, client_addr, user_agent, reason, verb,"
        " subresource, before, after, db_role FROM qm_history"
        " WHERE table_name = $1 AND name = $2 ORDER BY id",
        table,
        name,
    )


def cm(name: str, data: Obj | None = None) -> Obj:
    return {"metadata": {"name": name, "namespace": NS}, "data": data or {"k": "v"}}


def pod(name: str, labels: Obj | None = None) -> Obj:
    container = {
        "name": "c",
        "image": "busybox:1.36",
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    }
    meta = {"name": name, "namespace": NS, "labels": labels or {}}
    return {"kind": "Pod", "metadata": meta, "spec": {"containers": [container]}, "status": {}}


async def test_create_update_status_and_delete_each_record_the_callers_context(
    store: Store, pool: asyncpg.Pool
) -> None:
    made = await store.create(CM, cm("one"), ALICE)
    changed = await store.update(
        CM, cm("one", {"k": "w"}), made.row_version, ALICE.using(verb="patch")
    )
    await store.delete(CM, NS, "one", ctx=ALICE.using(reason="no longer used"))
    rows = await history(pool, "configmaps", "one")
    assert [r["op"] for r in rows] == ["insert", "update", "delete"]
    for r in rows:
        assert r["principal"] == "alice"
        assert list(r["groups"]) == ["dev", "system:authenticated"]
        assert (r["request_id"], r["client_addr"], r["user_agent"]) == ("req-1", "10.1.2.3", "qm/1")
    assert [(r["verb"], r["reason"]) for r in rows] == [
        ("create", "CHG-7: rotate the config"),
        ("patch", "CHG-7: rotate the config"),
        ("delete", "no longer used"),
    ]
    assert rows[1]["before"]["spec"] != rows[1]["after"]["spec"]
    assert rows[1]["after"]["row_version"] == changed.row_version


async def test_a_write_without_context_names_only_the_database_role(
    store: Store, pool: asyncpg.Pool
) -> None:
    await store.create(CM, cm("anon"))
    (row,) = await history(pool, "configmaps", "anon")
    assert row["principal"] is None and row["reason"] is None
    assert row["db_role"]


async def test_a_context_does_not_leak_to_the_next_statement_on_the_connection(
    url: str, pool: asyncpg.Pool
) -> None:
    async with pool_on(url, 1) as one:  # one connection: the next statement runs on it too
        await Store(one).create(CM, cm("first"), ALICE)
        await one.execute(
            f"INSERT INTO {CM.table} (uid, namespace, name) VALUES ($1, $2, 'by-hand')",
            uuid.uuid4(),
            NS,
        )
    (first,) = await history(pool, "configmaps", "first")
    (row,) = await history(pool, "configmaps", "by-hand")
    assert (first["principal"], row["principal"]) == ("alice", None)


async def test_a_controllers_writes_name_it_the_task_and_the_step(
    store: Store, pool: asyncpg.Pool
) -> None:
    rs = await store.create(
        RS,
        {
            "metadata": {"name": "web", "namespace": NS},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": pod("x")["spec"],
                },
            },
        },
    )
    child = pod("web-abc12", {"app": "web"})
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": "quaymaster.io/v1", "kind": "ReplicaSet", "name": "web", "uid": rs.uid,
         "controller": True}
    ]  # fmt: skip
    plan = Plan(creates=(child,), status={"replicas": 1})
    with reconciling("task-42"):
        outcome = await apply_plan(store, rs, plan)
    assert outcome.created == 1 and outcome.status_written
    (made,) = await history(pool, "pods", "web-abc12")
    assert made["principal"] == "system:controller:replicaset-controller"
    assert made["request_id"] == "task-42"
    assert made["reason"] == f"create 1 pods for ReplicaSet {NS}/web"
    status = [r for r in await history(pool, "replicasets", "web") if r["op"] == "update"]
    assert [(r["principal"], r["subresource"], r["reason"]) for r in status] == [
        ("system:controller:replicaset-controller", "status", f"status of ReplicaSet {NS}/web")
    ]


async def test_a_bind_batch_gives_each_pod_its_own_node_in_the_reason(
    store: Store, pool: asyncpg.Pool
) -> None:
    node = await store.create(
        NODE,
        {
            "metadata": {"name": "ctx-node"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}},
        },
    )
    pods = [await store.create(POD, pod(f"bind-{i}")) for i in range(3)]
    binds = [
        Bind(p.uid, NS, p.row["name"], p.row_version, node.uid, "ctx-node", 100, 64 * 2**20, 0,
             False)
        for p in pods
    ]  # fmt: skip
    async with pool.acquire() as conn:
        ctx = system(SCHEDULER, request_id="sched-1:7")
        result = await bind_many(conn, binds, datetime.now(UTC), ctx)
    assert len(result.bound) == 3
    for p in pods:
        rows = [r for r in await history(pool, "pods", p.row["name"]) if r["op"] == "update"]
        assert [(r["principal"], r["request_id"], r["subresource"], r["reason"]) for r in rows] == [
            (SCHEDULER, "sched-1:7", "binding", "scheduled onto node ctx-node")
        ]
        assert rows[0]["after"]["node_name"] == "ctx-node"


async def test_an_eviction_records_its_reason_on_every_write_of_its_transaction(
    store: Store, pool: asyncpg.Pool
) -> None:
    victim = await store.create(POD, pod("evicted"))
    ctx = ALICE.using(reason="drain for kernel upgrade", verb="create", subresource="eviction")
    outcome = await evict(store, NS, "evicted", now=datetime.now(UTC), ctx=ctx)
    assert outcome.result == "evicted"
    rows = [r for r in await history(pool, "pods", "evicted") if r["op"] != "insert"]
    assert rows, "the eviction left no history"
    for r in rows:  # the DisruptionTarget condition, then the deletion
        assert (r["principal"], r["reason"], r["subresource"]) == (
            "alice",
            "drain for kernel upgrade",
            "eviction",
        )
    assert rows[-1]["op"] == "delete"
    assert victim.uid == rows[-1]["before"]["uid"]


async def test_the_garbage_collectors_batches_carry_its_context(
    store: Store, pool: asyncpg.Pool
) -> None:
    doomed = [await store.create(CM, cm(f"gc-{i}")) for i in range(3)]
    batch = Batch(delete=tuple(Candidate(d.uid, d.row_version, (), None, False) for d in doomed))
    ctx = WriteContext(principal="system:controller:garbage-collector", request_id="task-9")
    assert await collect.apply(pool, CM, batch, ctx) == 3
    for d in doomed:
        (*_, gone) = await history(pool, "configmaps", d.row["name"])
        assert (gone["op"], gone["principal"], gone["request_id"], gone["verb"]) == (
            "delete",
            "system:controller:garbage-collector",
            "task-9",
            "delete",
        )


async def test_minting_and_revoking_a_token_record_who_did_it(pool: asyncpg.Pool) -> None:
    minted = await tokens.mint(pool, "bob", ("dev",), 3600, "ci", ctx=ALICE)
    name = minted.obj["metadata"]["name"]
    await tokens.revoke(pool, name, ALICE.using(reason="leaked"))
    rows = await history(pool, "qm_tokens", name)
    assert [(r["op"], r["principal"], r["verb"], r["reason"]) for r in rows] == [
        ("insert", "alice", "create", "CHG-7: rotate the config"),
        ("update", "alice", "delete", "leaked"),
    ]
    assert all("token_sha256" not in (r["after"] or {}) for r in rows)


async def test_a_lease_taken_names_the_candidate_and_renewals_are_counted_not_stored(
    pool: asyncpg.Pool,
) -> None:
    lease = LeaderLease(pool, "cand-1", "ctx-leader", duration=8.0, renew_every=2.0)
    assert await lease.try_acquire_or_renew()
    assert await lease.try_acquire_or_renew()  # a renewal by the holder
    assert await lease.release()
    rows = await history(pool, "leases", "ctx-leader")
    assert [(r["op"], r["principal"], r["reason"]) for r in rows] == [
        ("insert", "system:leader-election", "cand-1 holds the lease quaymaster-system/ctx-leader"),
        ("update", "system:leader-election", "cand-1 gives up leadership"),
    ]


async def test_a_new_service_range_names_the_api_server_configuration(pool: asyncpg.Pool) -> None:
    assert await apply_range(pool, "10.99.0.0/16")
    (row,) = await history(pool, "service_ip_range", "1")
    assert (row["op"], row["principal"]) == ("update", "system:apiserver")
    assert row["reason"] == "QM_SERVICE_CIDR at API server start"
