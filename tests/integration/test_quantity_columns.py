"""Spellings of a number the Python grammar accepts (``"1."``, ``"8."``, ``"1k"`` pods) are
charged and limited in the database exactly as the scheduler and quota admission count them:
in ``nodes_allocated``, the bind transaction's room check, a node's limits and quota usage."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from app.core.kinds import BY_KIND
from app.core.quantity import cpu_millis, to_bytes
from app.scheduler.binder import Bind, bind_many
from app.store.db import create_pool
from app.store.quota import quota_usage
from app.store.store import Store, Stored

NODE, POD, RQ = BY_KIND["Node"], BY_KIND["Pod"], BY_KIND["ResourceQuota"]
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
async def pool(pg_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(pg_url, min_size=1, max_size=4)
    try:
        yield p
    finally:
        await p.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def node(store: Store, **allocatable: str) -> Stored:
    status = {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}
    return await store.create(NODE, {"metadata": {"name": unique("n")}, "status": status})


async def pod(store: Store, ns: str, cpu: str, memory: str = "1Mi") -> Stored:
    requests = {"cpu": cpu, "memory": memory}
    c = {"name": "c", "image": "busybox", "resources": {"requests": requests}}
    return await store.create(
        POD, {"metadata": {"name": unique("p"), "namespace": ns}, "spec": {"containers": [c]}}
    )


def decide(p: Stored, n: Stored) -> Bind:
    """The scheduler's decision: it counts the pod's requests with ``app.core.quantity``."""
    requests = p.obj["spec"]["containers"][0]["resources"]["requests"]
    return Bind(
        pod_uid=p.uid,
        namespace=p.row["namespace"],
        name=p.row["name"],
        row_version=p.row_version,
        node_uid=n.uid,
        node_name=n.row["name"],
        cpu_milli=cpu_millis(requests["cpu"]),
        memory_bytes=to_bytes(requests["memory"]),
        gpu=0,
        batch=False,
    )


async def bind(pool: asyncpg.Pool, p: Stored, n: Stored) -> bool:
    async with pool.acquire() as conn:
        result = await bind_many(conn, [decide(p, n)], NOW)
    return [b.pod_uid for b in result.bound] == [p.uid]


async def allocated_cpu(pool: asyncpg.Pool, n: Stored) -> Any:
    return await pool.fetchval(
        "SELECT cpu_milli FROM nodes_allocated WHERE node_uid = $1", uuid.UUID(n.uid)
    )


async def test_a_pod_asking_for_cpu_1_dot_is_charged_a_whole_core(pool: asyncpg.Pool) -> None:
    store = Store(pool)
    ns = unique("q")
    n = await node(store, cpu="1", memory="1Gi")
    first = await pod(store, ns, "1.")
    assert await bind(pool, first, n)
    assert await allocated_cpu(pool, n) == 1000
    # The node is full: a second pod must not pass the bind's room check.
    assert not await bind(pool, await pod(store, ns, "500m"), n)
    assert await allocated_cpu(pool, n) == 1000


async def test_quota_usage_charges_the_spelling_the_python_side_charges(
    pool: asyncpg.Pool,
) -> None:
    store = Store(pool)
    ns = unique("q")
    quota = await store.create(
        RQ,
        {
            "metadata": {"name": "q", "namespace": ns},
            "spec": {"hard": {"requests.cpu": "4", "requests.memory": "4Gi"}},
        },
    )
    await pod(store, ns, "1.", memory="1.Gi")
    await pod(store, ns, ".5", memory="+512Mi")
    used = await quota_usage(pool, quota.obj)
    assert (used.cpu_milli, used.memory_bytes) == (1500, 1536 * 2**20)


async def test_a_node_with_allocatable_cpu_8_dot_accepts_binds(pool: asyncpg.Pool) -> None:
    store = Store(pool)
    ns = unique("q")
    n = await node(store, cpu="8.", memory="16.Gi", pods="1k")
    row = await pool.fetchrow(
        "SELECT alloc_cpu_milli, alloc_memory_bytes, alloc_pods FROM nodes WHERE uid = $1",
        uuid.UUID(n.uid),
    )
    assert tuple(row) == (8000, 16 * 2**30, 1000)
    for _ in range(8):
        assert await bind(pool, await pod(store, ns, "1"), n)
    assert not await bind(pool, await pod(store, ns, "1m"), n)
