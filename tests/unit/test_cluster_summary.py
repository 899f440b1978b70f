"""The cluster summary: its arithmetic (app.core.cluster_tally), what it reads of objects
(app.core.capacity) and how it follows the watch cache (app.stream.summary), on a fake clock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from app.core.capacity import node_facts, pod_facts, timestamp
from app.core.cluster_tally import Tally
from app.core.kinds import BY_KIND
from app.store.usage import NodeSample, UsageStore, encode
from app.stream.cache import WatchCache
from app.stream.log import LogEntry
from app.stream.summary import ClusterSummary, observed_usage

NODE, POD, LEASE = BY_KIND["Node"], BY_KIND["Pod"], BY_KIND["Lease"]
T0 = 1_800_000_000.0  # a fixed instant; 2027-01-15T08:00:00Z


def iso(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_obj(name: str, zone: str = "a", ready: bool = True, cordoned: bool = False,
             cpu: str = "4", memory: str = "8Gi") -> dict[str, Any]:  # fmt: skip
    labels = {"topology.kubernetes.io/zone": zone} if zone else {}
    return {
        "kind": "Node",
        "metadata": {"name": name, "uid": f"n-{name}", "labels": labels},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod_obj(name: str, node: str = "", phase: str = "Pending", cpu: str = "500m",
            memory: str = "1Gi", created: float = T0, scheduled: float | None = None,
            reason: str | None = None) -> dict[str, Any]:  # fmt: skip
    conditions: list[dict[str, Any]] = []
    if scheduled is not None:
        conditions.append({"type": "PodScheduled", "status": "True",
                           "lastTransitionTime": iso(scheduled)})  # fmt: skip
    if reason is not None:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": reason})
    spec: dict[str, Any] = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": cpu, "memory": memory}}},
            {"name": "b", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "c"},
        ]
    }
    if node:
        spec["nodeName"] = node
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"p-{name}",
            "creationTimestamp": iso(created),
        },
        "spec": spec,
        "status": {"phase": phase, "conditions": conditions},
    }


def raw(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode()


# -- what is read of an object --------------------------------------------------------------
def test_pod_facts_sum_container_requests_and_classify() -> None:
    f = pod_facts(raw(pod_obj("p", node="n1", phase="Running", scheduled=T0 + 2)))
    assert (f.node, f.cpu_milli, f.memory_bytes) == ("n1", 600, 2**30)
    assert f.holds_room and not f.pending
    assert (f.created, f.scheduled) == (T0, T0 + 2)
    pending = pod_facts(raw(pod_obj("q", reason="Unschedulable")))
    assert pending.pending and not pending.holds_room and pending.reason == "Unschedulable"
    done = pod_facts(raw(pod_obj("r", node="n1", phase="Succeeded")))
    assert not done.holds_room and not done.pending


def test_unreadable_objects_count_as_empty() -> None:
    f = pod_facts(b'{"spec": {"containers": "nope"}, "status": {"phase": "Running"}}')
    assert (f.node, f.cpu_milli, f.pending) == ("", 0, True)
    bad_amount = pod_obj("p")
    bad_amount["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    assert pod_facts(raw(bad_amount)).cpu_milli == 100
    n = node_facts(b'{"metadata": {"name": "x"}, "status": {"conditions": 3}}')
    assert (n.name, n.ready, n.cpu_milli) == ("", False, 0)
    assert timestamp("not a time") == 0.0 and timestamp(None) == 0.0


# -- the arithmetic ---------------------------------------------------------------------------
def tally_with(*nodes: dict[str, Any]) -> Tally:
    t = Tally()
    for n in nodes:
        t.node_changed(n["metadata"]["name"], node_facts(raw(n)))
    return t


def put(t: Tally, pod: dict[str, Any]) -> None:
    t.pod_changed(pod["metadata"]["uid"], pod_facts(raw(pod)))


def test_pods_add_modify_delete_move_the_node_and_zone_totals() -> None:
    t = tally_with(node_obj("n1", "a"), node_obj("n2", "b", ready=False, cordoned=True))
    put(t, pod_obj("p1", node="n1", phase="Running"))
    put(t, pod_obj("p2", node="n1", phase="Running", cpu="1"))
    put(t, pod_obj("p3"))
    row = t.node("n1")
    assert row is not None and (row.cpu_requested_milli, row.pods) == (1700, 2)
    total = t.totals()
    assert (total.nodes, total.ready, total.not_ready, total.cordoned) == (2, 1, 1, 1)
    assert (total.cpu_allocatable_milli, total.pods, total.cpu_requested_milli) == (8000, 2, 1700)
    put(t, pod_obj("p2", node="n2", phase="Running", cpu="1"))  # moved (SQL can do that)
    zones = {z.zone: z.totals for z in t.zones()}
    assert (zones["a"].cpu_requested_milli, zones["b"].cpu_requested_milli) == (600, 1100)
    t.pod_changed("p-p1", None)
    t.pod_changed("p-p1", None)  # deleting twice changes nothing
    assert t.totals().pods == 1 and t.pending == 1
    assert t.phases() == {"Pending": 1, "Running": 1}


def test_terminal_pods_release_room_and_a_pod_bound_later_records_latency() -> None:
    t = tally_with(node_obj("n1"))
    put(t, pod_obj("p", created=T0, reason="Unschedulable"))
    assert (t.pending, t.oldest_pending(), t.reasons()) == (1, T0, {"Unschedulable": 1})
    put(t, pod_obj("p", node="n1", created=T0, scheduled=T0 + 3))
    assert t.pending == 0 and t.oldest_pending() is None and t.reasons() == {}
    assert t.latencies == [3.0]
    put(t, pod_obj("p", node="n1", phase="Failed", created=T0, scheduled=T0 + 3))
    assert t.totals().pods == 0 and t.totals().cpu_requested_milli == 0
    assert t.latencies == [3.0]  # bound once, counted once


def test_a_pod_first_seen_bound_has_no_latency() -> None:
    t = tally_with(node_obj("n1"))
    put(t, pod_obj("p", node="n1", scheduled=T0 + 9))
    assert t.latencies == []


def test_oldest_pending_follows_deletes() -> None:
    t = Tally()
    for i, created in enumerate((T0 + 5, T0, T0 + 9)):
        put(t, pod_obj(f"p{i}", created=created))
    assert t.oldest_pending() == T0
    t.pod_changed("p-p1", None)
    assert t.oldest_pending() == T0 + 5 and t.pending == 2


def test_removed_node_keeps_its_pods_aside_until_it_returns() -> None:
    t = tally_with(node_obj("n1", "a"))
    put(t, pod_obj("p", node="n1", phase="Running"))
    t.node_changed("n1", None)
    assert t.totals().nodes == 0 and t.zones() == () and t.missing_node_pods() == 1
    t.node_changed("n1", node_facts(raw(node_obj("n1", "b"))))
    assert t.missing_node_pods() == 0
    assert [(z.zone, z.totals.pods) for z in t.zones()] == [("b", 1)]
    t.pod_changed("p-p", None)
    t.node_changed("n1", None)
    assert t.node_page().total == 0 and t.totals() == type(t.totals())()


def test_node_pages_sort_and_filter() -> None:
    t = tally_with(node_obj("n1", "a"), node_obj("n2", "b", ready=False),
                   node_obj("n3", "a", cordoned=True), node_obj("n4", ""))  # fmt: skip
    put(t, pod_obj("p", node="n3", phase="Running", cpu="3"))
    assert [r.name for r in t.node_page("ready").items] == ["n2", "n3", "n1", "n4"]
    assert [r.name for r in t.node_page("cpu", descending=True, limit=1).items] == ["n3"]
    page = t.node_page(zone="a", offset=1)
    assert page.total == 2 and [r.name for r in page.items] == ["n3"]
    assert [r.name for r in t.node_page(ready=False).items] == ["n2"]
    assert [z.zone for z in t.zones()] == ["", "a", "b"]


# -- following the watch cache ----------------------------------------------------------------
class Cluster:
    """A watch cache fed log entries by hand, and a summary following it on a fake clock."""

    def __init__(self, queue_size: int = 50_000) -> None:
        self.cache = WatchCache()
        self.now = T0
        self.summary = ClusterSummary(self.cache, clock=lambda: self.now, queue_size=queue_size,
                                      chunk=2)  # fmt: skip

    def write(self, obj: dict[str, Any], op: str = "M") -> None:
        kind = BY_KIND[obj["kind"]]
        meta = obj["metadata"]
        rev = self.cache.revision + 1
        self.cache.apply([LogEntry(rev, kind, meta["uid"], meta.get("namespace", ""),
                                   meta["name"], rev, op, json.dumps(obj))])  # fmt: skip

    async def settle(self) -> None:
        for _ in range(1000):
            w = self.summary._watcher
            if not self.summary.building and w is not None and w.queue.empty():
                await asyncio.sleep(0)
                return
            await asyncio.sleep(0)
        raise AssertionError("the summary did not catch up")


async def running(c: Cluster, body: Callable[[], Any]) -> None:
    task = asyncio.create_task(c.summary.follow())
    try:
        await c.settle()
        await body()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_follows_the_cache_from_its_objects_then_its_changes() -> None:
    c = Cluster()
    c.write(node_obj("n1"), "A")
    c.write(pod_obj("p1", node="n1", phase="Running"), "A")
    c.write(pod_obj("p2", created=T0 - 60), "A")
    assert c.summary.snapshot().complete is False

    async def body() -> None:
        s = c.summary.snapshot()
        assert s.complete and s.totals.pods == 1 and s.pending == 1
        assert s.oldest_pending_created == T0 - 60
        c.write(pod_obj("p2", node="n1", created=T0 - 60, scheduled=T0))
        c.write(pod_obj("p3", node="n1", phase="Running"), "A")
        c.write(pod_obj("p1", node="n1", phase="Running"), "D")
        await c.settle()
        s = c.summary.snapshot()
        assert (s.totals.pods, s.pending, s.totals.cpu_requested_milli) == (2, 0, 1200)
        c.now = T0 + 15
        sample = c.summary.tick()
        assert (sample.at, sample.bound, sample.latency_p50_s, sample.pending) == (
            T0 + 15, 1, 60.0, 0)  # fmt: skip
        assert c.summary.snapshot().samples == (sample,)

    await running(c, body)
    assert c.summary.rebuilds == 1 and not c.cache.watchers


async def test_overflow_reads_the_cache_again() -> None:
    c = Cluster(queue_size=2)
    c.write(node_obj("n1"), "A")

    async def body() -> None:
        for i in range(5):  # more than the queue holds, before the summary runs again
            c.write(pod_obj(f"p{i}", node="n1", phase="Running"), "A")
        await c.settle()
        assert c.summary.rebuilds == 2
        assert c.summary.snapshot().totals.pods == 5

    await running(c, body)


async def test_a_reloaded_cache_is_read_again_at_the_next_tick() -> None:
    c = Cluster()
    c.write(node_obj("n1"), "A")

    async def body() -> None:
        # What a reload does: the objects come back from the log with no events.
        c.cache._put(c.cache.objects[NODE.kind][("", "n1")])
        from app.stream.cache import make_cached

        c.cache._put(make_cached(POD, json.dumps(pod_obj("p", node="n1", phase="Running")), 9, 9))
        c.cache.loads += 1
        c.summary.tick()
        await c.settle()
        assert c.summary.rebuilds == 2 and c.summary.snapshot().totals.pods == 1

    await running(c, body)


def test_the_ring_keeps_an_hour_of_fifteen_second_samples() -> None:
    c = Cluster()
    for i in range(300):
        c.now = T0 + 15 * i
        c.summary.tick()
    samples = c.summary.snapshot().samples
    assert len(samples) == 240 and samples[-1].at == T0 + 15 * 299
    assert samples[0].at == T0 + 15 * 60


def test_latency_percentiles_per_interval() -> None:
    c = Cluster()
    c.summary.tally.latencies = [float(i) for i in range(1, 101)]
    s = c.summary.tick()
    assert (s.bound, s.latency_p50_s, s.latency_p99_s) == (100, 50.0, 99.0)
    assert c.summary.tick().bound == 0


async def test_ticks_wait_on_the_injected_sleep_to_the_next_multiple() -> None:
    c = Cluster()
    c.now = T0 + 4
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        c.now += s
        if len(slept) == 2:
            raise asyncio.CancelledError

    c.summary.sleep = sleep
    with pytest.raises(asyncio.CancelledError):
        await c.summary.ticks()
    assert slept == [11.0, 15.0]
    assert [s.at for s in c.summary.samples] == [T0 + 15]


async def test_lease_age_comes_from_the_nodes_lease() -> None:
    c = Cluster()
    c.write(node_obj("n1"), "A")
    c.write(node_obj("n2"), "A")
    lease = {"kind": "Lease", "metadata": {"name": "n1", "namespace": "quaymaster-node-lease",
             "uid": "l-n1"}, "spec": {"renewTime": iso(T0 - 7)}}  # fmt: skip
    c.write(lease, "A")

    async def body() -> None:
        rows = {r.name: r.lease_age_s for r in c.summary.nodes().items}
        assert rows == {"n1": 7.0, "n2": None}
        n1 = c.summary.node("n1")
        assert n1 is not None and n1.lease_age_s == 7.0
        assert c.summary.node("nope") is None

    await running(c, body)


async def test_observed_usage_reads_a_page_of_nodes_in_one_round_trip() -> None:
    class FakeRedis:
        def __init__(self) -> None:
            self.calls: list[list[str]] = []
            fresh = NodeSample("n1", T0 - 5, 1500, 2**30, ())
            stale = NodeSample("n2", T0 - 600, 1, 1, ())
            self.data = {"qm:usage:latest:n1": encode(fresh), "qm:usage:latest:n2": encode(stale)}

        def register_script(self, _: str) -> object:
            return object()

        async def mget(self, keys: list[str]) -> list[bytes | None]:
            self.calls.append(keys)
            return [self.data.get(k) for k in keys]

    redis = FakeRedis()
    store = UsageStore(redis, clock=lambda: T0)  # type: ignore[arg-type]
    got = await observed_usage(store, ["n1", "n2", "n3"])
    assert list(got) == ["n1"] and (got["n1"].cpu_millis, got["n1"].at) == (1500, T0 - 5)
    assert len(redis.calls) == 1
    assert await observed_usage(None, ["n1"]) == {}

    c = Cluster()
    c.write(node_obj("n1", "a"), "A")
    c.write(node_obj("n2", "b"), "A")

    async def body() -> None:
        redis.calls.clear()
        assert await c.summary.observed_by_zone(store) == {"a": (1500, 2**30)}
        c.now += 14
        assert await c.summary.observed_by_zone(store) == {"a": (1500, 2**30)}
        assert len(redis.calls) == 1  # read once per interval
        c.now += 1
        await c.summary.observed_by_zone(store)
        assert len(redis.calls) == 2
        assert await c.summary.observed_by_zone(None) == {}

    await running(c, body)
