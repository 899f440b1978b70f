"""Scheduler leader election on a Lease row: one leader at a time, takeover after the leader
stops renewing, immediate handover on release, and a leader cut off from the database stepping
down on its own clock.

Each test uses a lease of its own name, so tests (and anything else on the shared database)
never contend for the same lease.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from app.core.admission import admit
from app.core.kinds import BY_KIND
from app.store.db import create_pool
from app.store.lease import LEASE_NAMESPACE, LeaderLease

DURATION = 2.0
RENEW = 0.5
MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture
async def pool(pg_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(pg_url, min_size=1, max_size=4)
    try:
        yield p
    finally:
        await p.close()


def _name() -> str:
    return f"sched-{uuid.uuid4().hex[:8]}"


def _pair(pool: asyncpg.Pool, name: str, **kw: Any) -> tuple[LeaderLease, LeaderLease]:
    return (
        LeaderLease(pool, "sched-a", name=name, duration=DURATION, renew_every=RENEW, **kw),
        LeaderLease(pool, "sched-b", name=name, duration=DURATION, renew_every=RENEW, **kw),
    )


async def _spec(pool: asyncpg.Pool, name: str) -> dict[str, Any]:
    spec = await pool.fetchval(
        "SELECT spec FROM leases WHERE namespace = $1 AND name = $2", LEASE_NAMESPACE, name
    )
    assert isinstance(spec, dict)
    return spec


async def test_only_one_candidate_leads(pool: asyncpg.Pool) -> None:
    name = _name()
    a, b = _pair(pool, name)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert a.is_leader() and not b.is_leader()
    assert await a.try_acquire_or_renew(), "the holder renews"
    assert not await b.try_acquire_or_renew()

    spec = await _spec(pool, name)
    assert spec["holderIdentity"] == "sched-a"
    assert spec["leaseDurationSeconds"] == 2
    assert spec["leaseTransitions"] == 0
    assert MICROTIME.match(spec["renewTime"]) and MICROTIME.match(spec["acquireTime"])
    assert spec["renewTime"] >= spec["acquireTime"]
    # The stored object is a valid Lease, and its namespace exists.
    admit(
        BY_KIND["Lease"],
        {"metadata": {"name": name, "namespace": LEASE_NAMESPACE}, "spec": spec},
        None,
    )
    assert await pool.fetchval(
        "SELECT count(*) FROM namespaces WHERE name = $1 AND namespace = ''", LEASE_NAMESPACE
    )


async def test_candidates_racing_for_a_fresh_lease_elect_exactly_one(pool: asyncpg.Pool) -> None:
    name = _name()
    cands = [
        LeaderLease(pool, f"sched-{i}", name=name, duration=DURATION, renew_every=RENEW)
        for i in range(4)
    ]
    won = await asyncio.gather(*(c.try_acquire_or_renew() for c in cands))
    assert sorted(won) == [False, False, False, True]
    assert sum(c.is_leader() for c in cands) == 1


async def test_renewal_goes_through_the_row_version_trigger(pool: asyncpg.Pool) -> None:
    name = _name()
    a, _ = _pair(pool, name)
    assert await a.try_acquire_or_renew()
    q = "SELECT row_version, uid FROM leases WHERE namespace = $1 AND name = $2"
    v1, uid1 = await pool.fetchrow(q, LEASE_NAMESPACE, name)  # type: ignore[misc]
    await asyncio.sleep(0.01)
    assert await a.try_acquire_or_renew()
    v2, uid2 = await pool.fetchrow(q, LEASE_NAMESPACE, name)  # type: ignore[misc]
    assert v2 > v1 and uid2 == uid1


async def test_a_standby_takes_over_when_the_leader_stops_renewing(
    pg_url: str, pool: asyncpg.Pool
) -> None:
    name = _name()
    own = await create_pool(pg_url, min_size=1, max_size=2)  # the leader's own connections
    a = LeaderLease(own, "sched-a", name=name, duration=DURATION, renew_every=RENEW)
    b = LeaderLease(pool, "sched-b", name=name, duration=DURATION, renew_every=RENEW)
    changes: dict[str, list[bool]] = {"a": [], "b": []}
    stop = asyncio.Event()
    run_a = asyncio.create_task(a.run(stop, changes["a"].append))
    for _ in range(100):
        if a.is_leader():
            break
        await asyncio.sleep(0.02)
    assert a.is_leader()
    run_b = asyncio.create_task(b.run(stop, changes["b"].append))
    both = False
    try:
        # While the leader keeps renewing, the standby stays out.
        deadline = time.monotonic() + DURATION + 2 * RENEW
        while time.monotonic() < deadline:
            assert a.is_leader() and not b.is_leader()
            await asyncio.sleep(0.05)

        own.terminate()  # the leader loses the database: its renewals fail from now on
        cut = time.monotonic()
        while not b.is_leader() and time.monotonic() - cut < DURATION + 3 * RENEW:
            both |= a.is_leader() and b.is_leader()
            await asyncio.sleep(0.01)
        took = time.monotonic() - cut
        assert b.is_leader()
        assert not a.is_leader(), "the old leader stepped down before the standby took over"
        assert not both, "never two leaders at once"
        # The leader's last renewal was at most one period before the cut, and the lease
        # lasts DURATION from it by the database clock; the standby tries once per period.
        # Never early (that would be two leaders); late by at most a period and, on a loaded
        # two-core machine, a second of scheduling delay.
        assert DURATION - RENEW - 0.1 <= took <= DURATION + RENEW + 1.0, took
        assert changes == {"a": [True, False], "b": [True]}

        spec = await _spec(pool, name)
        assert spec["holderIdentity"] == "sched-b"
        assert spec["leaseTransitions"] == 1
        assert spec["acquireTime"] <= spec["renewTime"]
        await asyncio.sleep(2 * RENEW)
        assert b.is_leader() and not a.is_leader()
    finally:
        stop.set()
        await asyncio.gather(run_a, run_b)


async def test_release_hands_over_at_once(pool: asyncpg.Pool) -> None:
    name = _name()
    a, b = _pair(pool, name)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert await a.release()
    assert not a.is_leader()
    assert await b.try_acquire_or_renew(), "a released lease is free without waiting"
    assert not await a.try_acquire_or_renew()
    assert (await _spec(pool, name))["leaseTransitions"] == 1
    assert not await a.release(), "only the holder can release"

    # A standby running its loop picks the lease up within one period of the release.
    stop = asyncio.Event()
    seen: list[tuple[bool, float]] = []
    run_a = asyncio.create_task(a.run(stop, lambda v: seen.append((v, time.monotonic()))))
    await asyncio.sleep(RENEW * 1.5)
    assert not a.is_leader()
    released = time.monotonic()
    assert await b.release()
    try:
        for _ in range(200):
            if a.is_leader():
                break
            await asyncio.sleep(0.01)
        assert a.is_leader()
        assert seen and seen[-1][0] and seen[-1][1] - released <= RENEW + 0.3
        spec = await _spec(pool, name)
        assert spec["holderIdentity"] == "sched-a" and spec["leaseTransitions"] == 2
    finally:
        stop.set()
        await run_a
    assert await a.release()
    assert (await _spec(pool, name))["holderIdentity"] == ""


async def test_leadership_ends_on_the_local_clock_when_the_database_is_gone(pg_url: str) -> None:
    now = [1000.0]
    own = await create_pool(pg_url, min_size=1, max_size=2)
    a = LeaderLease(
        own, "sched-a", name=_name(), duration=DURATION, renew_every=RENEW, clock=lambda: now[0]
    )
    assert await a.try_acquire_or_renew()
    assert a.is_leader()
    now[0] += DURATION - RENEW - 0.01
    assert a.is_leader()
    now[0] += 0.01
    assert not a.is_leader(), "the window is duration minus one renew period"

    now[0] = 2000.0
    assert await a.try_acquire_or_renew()
    assert a.is_leader()
    await own.close()  # the database is now unreachable to this candidate
    changes: list[bool] = []
    stop = asyncio.Event()
    task = asyncio.create_task(a.run(stop, changes.append))
    try:
        await asyncio.sleep(RENEW * 2.5)  # several failed renewals
        assert a.is_leader(), "within its window a leader keeps leading without the database"
        assert changes == [True]
        now[0] += DURATION - RENEW
        assert not a.is_leader()
        for _ in range(100):
            if changes == [True, False]:
                break
            await asyncio.sleep(0.02)
        assert changes == [True, False]
    finally:
        stop.set()
        await task


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        LeaderLease(None, "x", name="l", duration=2.0, renew_every=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        LeaderLease(None, "", name="l", duration=8.0)  # type: ignore[arg-type]
