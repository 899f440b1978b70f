"""The usage store against a real Redis: round trip, latest figures, pods leaving, trimming."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import numpy as np
import pytest
import redis.asyncio as aioredis

from app.core.controllers.reclaim import PodUse, Series
from app.store.usage import RECORD, ContainerUsage, NodeSample, PodUsage, UsageStore

T0 = 1_700_000_000.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    r = aioredis.Redis.from_url(redis_url)
    try:
        yield r
    finally:
        await r.aclose()


def _rows(series: Series) -> list[tuple[float, int, int]]:
    cols = (series.at, series.cpu_millis, series.memory_bytes)
    return list(zip(*(np.asarray(c).tolist() for c in cols), strict=True))


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def _pod(ns: str, name: str, cpu: int = 100, mem: int = 2**20, prio: int = 0) -> PodUsage:
    return PodUsage(ns, name, f"uid-{name}", prio, cpu, mem, (ContainerUsage("main", cpu, mem),))


def _sample(node: str, at: float, *pods: PodUsage) -> NodeSample:
    return NodeSample(
        node, at, sum(p.cpu_millis for p in pods), sum(p.memory_bytes for p in pods), pods
    )


async def test_round_trip_latest_and_pods(client: aioredis.Redis) -> None:
    clock = Clock(T0)
    store = UsageStore(client, clock=clock)
    node, ns = _name("n"), _name("ns")
    a, b = _pod(ns, "a", 250, 10 * 2**20, prio=5), _pod(ns, "b", 50, 2**20)
    await store.record(_sample(node, T0 - 1, a, b))

    latest = await store.latest(node)
    assert latest is not None
    assert (latest.cpu_millis, latest.memory_bytes) == (300, 11 * 2**20)
    assert [(p.name, p.priority, p.containers) for p in latest.pods] == [
        ("a", 5, (ContainerUsage("main", 250, 10 * 2**20),)),
        ("b", 0, (ContainerUsage("main", 50, 2**20),)),
    ]
    got = await store.pod(ns, "a")
    assert got is not None and (got.cpu_millis, got.node, got.at) == (250, node, T0 - 1)
    assert [p.name for p in await store.pods(ns)] == ["a", "b"]
    assert node in [s.node for s in await store.latest_nodes()]
    everywhere = [p for p in await store.pods(None) if p.namespace == ns]
    assert [p.name for p in everywhere] == ["a", "b"]


async def test_pod_leaving_the_sample_leaves_the_index(client: aioredis.Redis) -> None:
    store = UsageStore(client, clock=Clock(T0))
    node, ns = _name("n"), _name("ns")
    await store.record(_sample(node, T0 - 20, _pod(ns, "a"), _pod(ns, "b")))
    await store.record(_sample(node, T0 - 10, _pod(ns, "b")))
    assert await store.pod(ns, "a") is None
    assert [p.name for p in await store.pods(ns)] == ["b"]


async def test_stale_figures_are_not_latest(client: aioredis.Redis) -> None:
    clock = Clock(T0)
    store = UsageStore(client, stale_s=60, clock=clock)
    node, ns = _name("n"), _name("ns")
    await store.record(_sample(node, T0, _pod(ns, "a")))
    clock.now = T0 + 61
    assert await store.latest(node) is None
    assert await store.pod(ns, "a") is None
    assert await store.pods(ns) == []
    assert node not in [s.node for s in await store.latest_nodes()]
    assert len(await store.history(node, T0 - 1)) == 1  # history still has it


async def test_history_is_ordered_and_trimmed_to_the_retention(client: aioredis.Redis) -> None:
    clock = Clock(T0 + 1000)
    store = UsageStore(client, retention_s=100, clock=clock)
    node, ns = _name("n"), _name("ns")
    key = f"qm:usage:hist:{node}"
    for i in range(0, 200, 10):  # twenty samples over 200 s
        await store.record(_sample(node, T0 + i, _pod(ns, "a", cpu=i)))
        # What is older than the retention is cut once it is a tenth of the history.
        kept = await client.strlen(key) // RECORD.size  # the newest `kept` samples
        old = sum(1 for k in range(kept) if i - 10 * k < i - 100)
        assert old == 0 or old < kept / 10, (i, kept, old)
    history = await store.history(node, T0 + 90)
    # The newest is at T0+190: the retention reaches back to T0+90.
    assert [s.at - T0 for s in history] == [float(i) for i in range(90, 200, 10)]
    assert [s.pods[0].cpu_millis for s in await store.history(node, T0 + 150)] == [
        150, 160, 170, 180, 190,
    ]  # fmt: skip
    assert [s.at for s in await store.history(node, 0)][-11:] == [s.at for s in history]
    assert 0 < await client.ttl(key) <= 100


async def test_a_sample_from_a_clock_that_stepped_back_is_kept(client: aioredis.Redis) -> None:
    store = UsageStore(client, clock=Clock(T0))
    node, ns = _name("n"), _name("ns")
    await store.record(_sample(node, T0, _pod(ns, "a", cpu=1)))
    await store.record(_sample(node, T0 - 5, _pod(ns, "a", cpu=2), _pod(ns, "b", prio=7)))
    await store.record(_sample(node, T0 - 5, _pod(ns, "a", cpu=3)))
    history = await store.history(node, T0 - 100)
    assert [[b.cpu_millis for b in s.pods] for s in history] == [[1], [2, 100], [3]]
    # Filed 1 ms after the newest, every record of the sample alike.
    assert [s.at for s in history] == [T0, T0 + 0.001, T0 + 0.002]


async def test_a_sample_without_pods_still_counts(client: aioredis.Redis) -> None:
    store = UsageStore(client, clock=Clock(T0))
    node, ns = _name("n"), _name("ns")
    await store.record(_sample(node, T0 - 20, _pod(ns, "a", cpu=5, prio=1000)))
    await store.record(_sample(node, T0 - 10))
    await store.record(_sample(node, T0))
    assert [(s.at, s.pods) for s in await store.history(node, 0)] == [
        (T0 - 20, (PodUse(1000, 5, 2**20),)),
        (T0 - 10, ()),
        (T0, ()),
    ]
    got = await store.production([node], T0 - 60, 1000)
    assert _rows(got[node]) == [(T0 - 20, 5, 2**20), (T0 - 10, 0, 0), (T0, 0, 0)]


async def test_history_keeps_one_figure_per_priority(client: aioredis.Redis) -> None:
    store = UsageStore(client, clock=Clock(T0))
    node, ns = _name("n"), _name("ns")
    pods = [
        _pod(ns, "web-1", 300, 5 * 2**20, prio=2000),
        _pod(ns, "batch", 40, 2**20, prio=-10),
        _pod(ns, "web-2", 200, 3 * 2**20, prio=2000),
        _pod(ns, "plain", 7, 2**20),
    ]
    await store.record(_sample(node, T0 - 10, *pods))
    await store.record(_sample(node, T0, pods[0]))
    other = _name("n")
    await store.record(_sample(other, T0, pods[1]))
    history = await store.history(node, T0 - 100)
    assert [s.pods for s in history] == [
        (PodUse(-10, 40, 2**20), PodUse(0, 7, 2**20), PodUse(2000, 500, 8 * 2**20)),
        (PodUse(2000, 300, 5 * 2**20),),
    ]
    assert [s.at for s in history] == [T0 - 10, T0]
    # What the reclaim controller reads: production's sums per sample, many nodes at once.
    got = await store.production([node, other, _name("none")], T0 - 100, 1000)
    assert [_rows(s) for s in got.values()] == [
        [(T0 - 10, 500, 8 * 2**20), (T0, 300, 5 * 2**20)],
        [(T0, 0, 0)],
        [],
    ]
    assert _rows((await store.production([node], T0 - 5, 0))[node]) == [(T0, 300, 5 * 2**20)]
