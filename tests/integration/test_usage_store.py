"""The usage store against a real Redis: round trip, latest figures, pods leaving, trimming."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from app.store.usage import ContainerUsage, NodeSample, PodUsage, UsageStore

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
    for i in range(0, 200, 10):  # twenty samples over 200 s
        await store.record(_sample(node, T0 + i, _pod(ns, "a", cpu=i)))
    history = await store.history(node, 0)
    # The newest is at T0+190: everything before T0+90 is gone.
    assert [s.at - T0 for s in history] == [float(i) for i in range(90, 200, 10)]
    assert [s.pods[0].cpu_millis for s in await store.history(node, T0 + 150)] == [
        150, 160, 170, 180, 190,
    ]  # fmt: skip
    assert await client.xlen(f"qm:usage:node:{node}") == 11
    assert 0 < await client.ttl(f"qm:usage:node:{node}") <= 100


async def test_a_sample_from_a_clock_that_stepped_back_is_kept(client: aioredis.Redis) -> None:
    store = UsageStore(client, clock=Clock(T0))
    node, ns = _name("n"), _name("ns")
    await store.record(_sample(node, T0, _pod(ns, "a", cpu=1)))
    await store.record(_sample(node, T0 - 5, _pod(ns, "a", cpu=2)))
    await store.record(_sample(node, T0 - 5, _pod(ns, "a", cpu=3)))
    assert [s.pods[0].cpu_millis for s in await store.history(node, T0 - 100)] == [1, 2, 3]
    ids = [i for i, _ in await client.xrange(f"qm:usage:node:{node}")]
    assert ids == [f"{int(T0 * 1000)}-{n}".encode() for n in range(3)]
