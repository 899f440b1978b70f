"""Measured usage in the reporting schema: samples recorded in Redis, rolled up per minute by the
controller manager's usage-rollup loop into qm_usage_rollup, and the views over it checked
against figures computed here from the same samples; a team login sees only its namespaces."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
import redis.asyncio as aioredis
from pools import pool_on
from psycopg.rows import dict_row
from reporting_seed import Roles, seed_cluster

from app.store.store import Store
from app.store.usage import NodeSample, PodUsage, UsageStore
from workers.loops import Context
from workers.loops.usage_rollup import UsageRollup, minute_of

MINUTES = 8
# namespace -> team, node -> zone, as reporting_seed writes them ("ghost" and "n3" exist only
# in the samples: no namespace row, no node row).
TEAMS = {"team-a": "alpha", "team-b": "team-b", "ghost": "ghost"}
ZONES = {"n1": "z1", "n2": "z2", "n3": None}


@dataclass(frozen=True)
class Use:
    minute: datetime
    namespace: str
    node: str
    cpu: int
    mem: int


def samples_of(minute_index: int) -> dict[str, list[tuple[str, str, int, int]]]:
    """Per node, the pods (namespace, name, cpu, memory) its agent reports in that minute."""
    i = minute_index
    n1 = [("team-a", "a1", 100 + 10 * i, 2**20 * (10 + i)), ("team-a", "a5", 40, 2**20)]
    if i % 2 == 0:  # a2 comes and goes
        n1.append(("team-a", "a2", 50, 2**19))
    n2 = [("team-b", "b1", 300 + i * i, 2**21), ("team-a", "a9", 7 * i, 1000)]
    n3 = [("ghost", "g1", 5, 5)] if i >= 3 else []
    return {"n1": n1, "n2": n2, "n3": n3}


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(scope="module")
def seeded(make_database: Callable[[str], str]) -> str:
    url = make_database("qm_report_usage")
    seed_cluster(url)
    return url


@pytest.fixture
async def usage_redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    # A database of its own on the session's Redis: the rollup reads every namespace's pods.
    client = aioredis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/11")
    await client.flushdb()
    try:
        yield client
    finally:
        await client.flushdb()
        await client.aclose()


@pytest.fixture
async def rolled_up(seeded: str, usage_redis: aioredis.Redis) -> list[Use]:
    """Eight minutes of samples recorded in Redis and rolled up by the loop, ending now; what
    was recorded, as the test knows it."""
    start = minute_of(datetime.now(UTC)) - timedelta(minutes=MINUTES)
    clock = Clock(start)
    uses: list[Use] = []
    async with pool_on(seeded, 2) as pool:
        await pool.execute("DELETE FROM qm_usage_rollup")
        ctx = Context(pool, Store(pool), time.monotonic, clock)
        job = UsageRollup(usage=UsageStore(usage_redis, clock=lambda: clock().timestamp()))
        for i in range(MINUTES):
            minute = start + timedelta(minutes=i)
            for node, pods in samples_of(i).items():
                at = (minute + timedelta(seconds=20)).timestamp()
                pod_uses = tuple(
                    PodUsage(ns, name, f"uid-{name}", 0, cpu, mem) for ns, name, cpu, mem in pods
                )
                await UsageStore(usage_redis).record(
                    NodeSample(node, at, sum(p[2] for p in pods), sum(p[3] for p in pods), pod_uses)
                )
                uses += [Use(minute, ns, node, cpu, mem) for ns, _, cpu, mem in pods]
            clock.now = minute + timedelta(seconds=30)
            assert await job.record(ctx) > 0
            await job.tick(ctx)  # a second tick in the same minute skips Redis
            job.reset()  # a new term (or leader) in a minute already written adds nothing
            assert await job.record(ctx) == 0
    return uses


def rows(url: str, query: str, *args: Any, user: str | None = None) -> list[dict[str, Any]]:
    kwargs: dict[str, Any] = {"user": user} if user else {}
    with psycopg.connect(url, row_factory=dict_row, autocommit=True, **kwargs) as db:
        return db.execute(query, args).fetchall()


async def test_the_loop_writes_one_row_per_minute_namespace_and_node(
    seeded: str, rolled_up: list[Use]
) -> None:
    expected: dict[tuple[datetime, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for u in rolled_up:
        acc = expected[(u.minute, u.namespace, u.node)]
        acc[0] += 1
        acc[1] += u.cpu
        acc[2] += u.mem
    got = {
        (r["minute"], r["namespace"], r["node"]): [r["pods"], r["cpu_milli"], r["memory_bytes"]]
        for r in rows(seeded, "SELECT * FROM qm_usage_rollup")
    }
    assert got == dict(expected)
    # Telemetry, not state: no history of it.
    assert not rows(seeded, "SELECT 1 FROM qm_history WHERE table_name = 'qm_usage_rollup'")


async def test_old_rows_are_pruned_in_batches(seeded: str, rolled_up: list[Use]) -> None:
    old = minute_of(datetime.now(UTC)) - timedelta(days=40)
    with psycopg.connect(seeded, autocommit=True) as db:
        db.execute(
            "INSERT INTO qm_usage_rollup SELECT %s::timestamptz - make_interval(mins => g),"
            " 'team-a', 'n1', 1, 1, 1 FROM generate_series(0, 24) AS g",
            (old,),
        )
    async with pool_on(seeded, 2) as pool:
        ctx = Context(pool, Store(pool), time.monotonic, lambda: datetime.now(UTC))
        assert await UsageRollup(retention_days=35, batch=4).prune(ctx) == 25
    assert rows(seeded, "SELECT count(*) AS n FROM qm_usage_rollup")[0]["n"] == len(
        {(u.minute, u.namespace, u.node) for u in rolled_up}
    )


def expected_hourly(uses: list[Use]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """usage_hourly computed from the samples: per level, summed per minute, then avg and max
    per hour over the minutes with figures."""
    keys: dict[str, Callable[[Use], tuple[Any, ...]]] = {
        "namespace_node": lambda u: (u.namespace, TEAMS[u.namespace], ZONES[u.node], u.node),
        "namespace": lambda u: (u.namespace, TEAMS[u.namespace], None, None),
        "team": lambda u: (None, TEAMS[u.namespace], None, None),
        "zone": lambda u: (None, None, ZONES[u.node], None),
        "node": lambda u: (None, None, None, u.node),
        "cluster": lambda u: (None, None, None, None),
    }
    out: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for level, key in keys.items():
        per_minute: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0, 0])
        for u in uses:
            acc = per_minute[(u.minute, *key(u))]
            acc[0] += 1
            acc[1] += u.cpu
            acc[2] += u.mem
        per_hour: dict[tuple[Any, ...], list[list[int]]] = defaultdict(list)
        for (minute, *k), acc in per_minute.items():
            per_hour[(minute.replace(minute=0), level, *k)].append(acc)
        for group, accs in per_hour.items():
            cpu, mem = [a[1] for a in accs], [a[2] for a in accs]
            out[group] = (
                len(accs),
                round(Decimal(sum(cpu)) / len(cpu), 1),
                max(cpu),
                round(Decimal(sum(mem)) / len(mem)),
                max(mem),
                max(a[0] for a in accs),
            )
    return out


HOURLY = """SELECT hour, level, namespace, team, zone, node, minutes, avg_cpu_milli,
  max_cpu_milli, avg_memory_bytes, max_memory_bytes, max_pods FROM reporting.usage_hourly"""


BETWEEN = HOURLY.replace("reporting.usage_hourly", "reporting.usage_hourly_between(%s, %s)")


def hourly(
    url: str, user: str | None = None, query: str = HOURLY, *args: Any
) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    return {
        (r["hour"], r["level"], r["namespace"], r["team"], r["zone"], r["node"]): (
            r["minutes"],
            r["avg_cpu_milli"],
            r["max_cpu_milli"],
            r["avg_memory_bytes"],
            r["max_memory_bytes"],
            r["max_pods"],
        )
        for r in rows(url, query, *args, user=user)
    }


async def test_usage_hourly_matches_the_samples(seeded: str, rolled_up: list[Use]) -> None:
    assert hourly(seeded) == expected_hourly(rolled_up)
    # The same over a window: the minutes in [since, until) only.
    since = min(u.minute for u in rolled_up) + timedelta(minutes=2)
    until = since + timedelta(minutes=3)
    window = [u for u in rolled_up if since <= u.minute < until]
    assert hourly(seeded, None, BETWEEN, since, until) == expected_hourly(window)


async def test_allocation_against_usage(seeded: str, rolled_up: list[Use]) -> None:
    got = {
        (r["namespace"], r["node"]): r
        for r in rows(seeded, "SELECT * FROM reporting.allocation_vs_usage")
    }
    requested = {
        (r["namespace"], r["node_name"]): r
        for r in rows(
            seeded,
            "SELECT namespace, node_name, sum(cpu_milli) AS cpu, sum(pods) AS pods"
            " FROM reporting.allocation GROUP BY 1, 2",
        )
    }
    used: dict[tuple[str, str], list[int]] = defaultdict(list)
    per_minute: dict[tuple[datetime, str, str], int] = defaultdict(int)
    for u in rolled_up:
        per_minute[(u.minute, u.namespace, u.node)] += u.cpu
    for (_, ns, node), minute_cpu in per_minute.items():
        used[(ns, node)].append(minute_cpu)
    assert set(got) == set(requested) | set(used)
    for key, r in got.items():
        cpus = used.get(key, [])
        asked = requested.get(key)
        assert r["team"] == TEAMS[key[0]] and r["zone"] == ZONES[key[1]]
        assert r["measured_minutes"] == len(cpus)
        assert r["requested_cpu_milli"] == (asked["cpu"] if asked else 0)
        assert r["requesting_pods"] == (asked["pods"] if asked else 0)
        if cpus:
            avg = round(Decimal(sum(cpus)) / len(cpus), 1)
            assert (r["avg_cpu_milli"], r["max_cpu_milli"]) == (avg, max(cpus))
            if asked and asked["cpu"]:
                assert r["cpu_used_fraction"] == round(avg / asked["cpu"], 4)
        else:
            assert r["avg_cpu_milli"] is None


async def test_a_team_login_sees_only_its_namespaces(seeded: str, rolled_up: list[Use]) -> None:
    roles = Roles(seeded)
    try:
        team_a = roles.make("rep_usage_a", "LOGIN IN ROLE qm_reporting", "team-a")
        nobody = roles.make("rep_usage_none", "LOGIN IN ROLE qm_reporting")
        mine = [u for u in rolled_up if u.namespace == "team-a"]
        assert hourly(seeded, team_a) == expected_hourly(mine)
        day = datetime.now(UTC) - timedelta(days=1)
        assert hourly(seeded, team_a, BETWEEN, day, datetime.now(UTC)) == expected_hourly(mine)
        assert {
            r["namespace"]
            for r in rows(
                seeded, "SELECT namespace FROM reporting.allocation_vs_usage", user=team_a
            )
        } == {"team-a"}
        # The table itself: the granted columns, its namespaces' rows only.
        direct = rows(seeded, "SELECT DISTINCT namespace FROM qm_usage_rollup", user=team_a)
        assert {r["namespace"] for r in direct} == {"team-a"}
        assert not rows(seeded, "SELECT * FROM reporting.usage_hourly", user=nobody)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            rows(seeded, "DELETE FROM qm_usage_rollup", user=team_a)
    finally:
        roles.drop()
