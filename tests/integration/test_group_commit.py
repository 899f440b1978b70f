"""Group commit against real PostgreSQL: concurrent writes with a write context through one
``Store`` go in shared statements, and each still gets exactly the answer and the history row
(with its own context) it would get alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest
from pools import pool_on

from app.core import errors
from app.core.audit import WriteContext
from app.core.kinds import BY_KIND
from app.store.store import Store

LEASE = BY_KIND["Lease"]
NS = "group"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
async def pool(make_database: Callable[[str], str]) -> AsyncIterator[asyncpg.Pool]:
    async with pool_on(make_database("qm_group_commit"), 12) as p:
        yield p


@pytest.fixture
async def store(pool: asyncpg.Pool) -> AsyncIterator[Store]:
    s = Store(pool, group_commit=True)
    try:
        yield s
    finally:
        await s.close()


def lease(name: str, renew: str = "2026-01-01T00:00:00.000000Z") -> Obj:
    return {
        "metadata": {"name": name, "namespace": NS, "labels": {"n": name}},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew},
        "status": {},
    }


async def created(store: Store, prefix: str, n: int) -> list[tuple[str, int]]:
    out = []
    for i in range(n):
        s = await store.create(LEASE, lease(f"{prefix}-{i}"))
        out.append((s.row["name"], s.row_version))
    return out


def by(who: str, verb: str | None = None) -> WriteContext:
    return WriteContext(principal=who, request_id=f"req-{who}", verb=verb)


async def audit_rows(pool: asyncpg.Pool, prefix: str) -> list[asyncpg.Record]:
    """The history's update rows of the leases named ``prefix-*``."""
    return await pool.fetch(
        "SELECT principal AS username, request_id, verb, name, coalesce(subresource, '')"
        " AS subresource, before, after FROM qm_history"
        " WHERE kind = 'Lease' AND namespace = $1 AND name LIKE $2 AND op = 'update'"
        " ORDER BY id",
        NS,
        f"{prefix}-%",
    )


async def test_racing_renewals_one_wins_per_lease_each_with_its_own_audit_row(
    store: Store, pool: asyncpg.Pool
) -> None:
    leases = await created(store, "race", 60)

    async def renew(name: str, expected: int, who: str) -> Any:
        obj = lease(name, f"2026-01-01T00:00:01.{hash(who) % 1000000:06d}Z")
        obj["spec"]["holderIdentity"] = who
        try:
            return await store.update(LEASE, obj, expected, by(who, "update"))
        except errors.Conflict:
            return "conflict"

    # Two writers per lease, both conditional on the version they read: 120 writes at once.
    calls = [renew(n, v, f"{who}-{n}") for n, v in leases for who in ("a", "b")]
    results = await asyncio.gather(*calls)
    lane = store._lanes[("update", "Lease")]
    assert lane.stats.largest > 1, "the writes did not share any statement"
    assert lane.stats.statements < len(calls)
    winners: dict[str, Any] = {}
    for (name, version), pair in zip(leases, zip(results[0::2], results[1::2], strict=True),
                                     strict=True):  # fmt: skip
        won = [r for r in pair if r != "conflict"]
        assert len(won) == 1, f"{name}: {pair}"
        assert won[0].row_version > version
        winners[name] = won[0]
    rows = await audit_rows(pool, "race")
    assert len(rows) == len(leases)
    for row in rows:
        w = winners[row["name"]]
        assert row["username"] == w.row["spec"]["holderIdentity"]
        assert row["request_id"] == f"req-{row['username']}"  # each row its own writer's
        assert (row["verb"], row["subresource"]) == ("update", "")
        before, after = row["before"], row["after"]
        assert "qm_ord" not in before and "qm_ord" not in after
        assert before["row_version"] == dict(leases)[row["name"]]
        assert after["row_version"] == w.row_version > before["row_version"]
        assert after["spec"] == w.row["spec"] and "labels" not in after  # changed fields only
        assert set(before) == set(after)
    current = await store.get(LEASE, NS, leases[0][0])
    assert current.row_version == winners[leases[0][0]].row_version
    assert "qm_ord" not in current.row


async def test_status_writes_batch_too_and_a_missing_object_is_not_found(
    store: Store, pool: asyncpg.Pool
) -> None:
    leases = await created(store, "status", 30)

    async def status(name: str, expected: int) -> Any:
        obj = lease(name)
        obj["status"] = {"seen": name}
        try:
            return await store.update_status(LEASE, obj, expected, by("agent", "patch"))
        except errors.NotFound:
            return "not found"

    calls = [status(n, v) for n, v in leases] + [status("status-missing", 1)]
    results = await asyncio.gather(*calls)
    assert results[-1] == "not found"
    for (name, _), r in zip(leases, results, strict=False):
        assert r.row["status"] == {"seen": name}
    rows = await audit_rows(pool, "status")
    assert len(rows) == len(leases)
    assert {(r["verb"], r["subresource"]) for r in rows} == {("patch", "status")}


async def test_a_write_the_database_refuses_fails_alone_and_the_others_commit(
    store: Store, pool: asyncpg.Pool
) -> None:
    leases = await created(store, "refuse", 20)
    bad = leases[7][0]

    async def renew(name: str, expected: int) -> Any:
        obj = lease(name, "2026-01-01T00:00:02.000000Z")
        obj["spec"]["holderIdentity"] = "agent"  # a new holder: recorded, not summarised
        if name == bad:
            obj["spec"]["note"] = "nul \x00 here"  # jsonb refuses \u0000
        try:
            return await store.update(LEASE, obj, expected, by("agent"))
        except asyncpg.PostgresError as exc:
            return exc

    results = await asyncio.gather(*(renew(n, v) for n, v in leases))
    lane = store._lanes[("update", "Lease")]
    assert lane.stats.fallbacks >= 1
    for (name, version), r in zip(leases, results, strict=True):
        if name == bad:
            assert isinstance(r, asyncpg.PostgresError)
            assert (await store.get(LEASE, NS, name)).row_version == version  # untouched
        else:
            assert r.row_version > version and r.row["spec"]["renewTime"].endswith("02.000000Z")
    assert len(await audit_rows(pool, "refuse")) == len(leases) - 1
