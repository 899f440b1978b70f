"""The controller manager's housekeeping loops on a real database: Event retention and the
collection of orphans."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from pools import pool_on

from app.core.kinds import BY_KIND
from app.store.events import EventNote, ObjectRef, record_events
from app.store.store import Store
from workers.loops import Context
from workers.loops.events import EventRetention
from workers.loops.gc import OrphanCollector

NS = "loops"


@pytest.fixture
async def ctx(make_database: Any) -> AsyncIterator[Context]:
    async with pool_on(make_database("qm_loops"), 4) as pool:
        yield Context(pool, Store(pool), time.monotonic, lambda: datetime.now(UTC))


def _ref(i: int) -> ObjectRef:
    return ObjectRef("Pod", str(uuid.UUID(int=i + 1)), NS, f"pod-{i}")


async def test_events_are_deduplicated_and_expire(ctx: Context) -> None:
    now = datetime.now(UTC)
    old = now - timedelta(hours=2)
    await record_events(ctx.pool, [EventNote(_ref(i), "Old", "m") for i in range(30)], old)
    for _ in range(5):  # the same thing five times is one row with count 5
        await record_events(ctx.pool, [EventNote(_ref(99), "BackOff", "again", "Warning")], now)
    rows = await ctx.pool.fetch("SELECT spec FROM events")
    assert len(rows) == 31
    [fresh] = [r["spec"] for r in rows if r["spec"]["reason"] == "BackOff"]
    assert fresh["count"] == 5 and fresh["type"] == "Warning"

    removed = await EventRetention(ttl_seconds=3600, batch=7).sweep(ctx)
    assert removed == 30
    assert await ctx.pool.fetchval("SELECT count(*) FROM events") == 1


async def test_the_event_table_is_held_under_its_cap(ctx: Context) -> None:
    base = datetime.now(UTC) - timedelta(minutes=30)
    for i in range(50):
        await record_events(ctx.pool, [EventNote(_ref(i), "R", "m")], base + timedelta(seconds=i))
    removed = await EventRetention(ttl_seconds=3600, max_events=20, batch=8).sweep(ctx)
    assert removed == 30
    left = await ctx.pool.fetch("SELECT name FROM events")
    # The newest survive.
    assert {r["name"].split(".")[0] for r in left} == {f"pod-{i}" for i in range(30, 50)}


async def _configmap(ctx: Context, name: str, owners: list[dict[str, Any]]) -> None:
    await ctx.store.create(
        BY_KIND["ConfigMap"],
        {
            "apiVersion": "quaymaster.io/v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS, "ownerReferences": owners},
            "data": {"k": "v"},
        },
    )


async def test_orphans_are_collected_on_the_second_sighting_only(ctx: Context) -> None:
    live = await ctx.store.create(
        BY_KIND["ConfigMap"],
        {"metadata": {"name": "owner", "namespace": NS}, "data": {}},
    )
    ref = {"apiVersion": "quaymaster.io/v1", "kind": "ConfigMap", "controller": True}
    await _configmap(ctx, "kept", [{**ref, "name": "owner", "uid": live.uid}])
    await _configmap(ctx, "orphan", [{**ref, "name": "gone", "uid": str(uuid.uuid4())}])
    await _configmap(ctx, "half", [{**ref, "name": "owner", "uid": live.uid},
                                   {**ref, "name": "gone", "uid": str(uuid.uuid4())}])  # fmt: skip

    gc = OrphanCollector()
    assert await gc.collect(ctx) == 0  # first sighting: only suspected
    names = {r["name"] for r in await ctx.pool.fetch("SELECT name FROM configmaps")}
    assert names == {"owner", "kept", "orphan", "half"}
    assert await gc.collect(ctx) == 1
    names = {r["name"] for r in await ctx.pool.fetch("SELECT name FROM configmaps")}
    assert names == {"owner", "kept", "half"}
    audit = await ctx.pool.fetchrow(
        "SELECT principal, reason FROM qm_history WHERE name = 'orphan' AND op = 'delete'"
    )
    assert audit is not None
    assert tuple(audit) == (
        "system:controller:garbage-collector",
        "orphan: no owner it names exists",
    )


async def test_an_owner_appearing_between_passes_saves_the_dependent(ctx: Context) -> None:
    owner_uid = str(uuid.uuid4())
    ref = {"apiVersion": "quaymaster.io/v1", "kind": "ConfigMap", "controller": True}
    await _configmap(ctx, "early", [{**ref, "name": "late-owner", "uid": owner_uid}])
    gc = OrphanCollector()
    await gc.collect(ctx)
    await ctx.pool.execute(
        "INSERT INTO configmaps (uid, namespace, name, spec) VALUES ($1, $2, 'late-owner', $3)",
        uuid.UUID(owner_uid),
        NS,
        json.loads('{"data": {}}'),
    )
    assert await gc.collect(ctx) == 0
    gc.reset()
    assert await gc.collect(ctx) == 0


async def test_a_garbage_owner_uid_does_not_break_the_pass(ctx: Context) -> None:
    await ctx.pool.execute(
        "INSERT INTO configmaps (uid, namespace, name, spec, owner_references)"
        " VALUES (gen_random_uuid(), $1, 'odd', '{}'::jsonb, $2)",
        NS,
        [{"uid": "not-a-uuid", "kind": "X", "name": "x"}],
    )
    gc = OrphanCollector()
    await gc.collect(ctx)
    assert await gc.collect(ctx) == 1
    assert isinstance(ctx.pool, asyncpg.Pool)
