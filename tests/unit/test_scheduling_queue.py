"""The scheduling queue: priority, then namespace fair share, then age; backoff; parking."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.core.scheduling.podinfo import PodInfo, pod_info
from app.core.scheduling.queue import SchedulingQueue

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def pod(
    name: str,
    *,
    priority: int = 0,
    namespace: str = "ns",
    age: float = 0.0,
    cpu: str = "100m",
    nominated: str | None = None,
) -> PodInfo:
    created = (EPOCH + timedelta(seconds=age)).isoformat().replace("+00:00", "Z")
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"{namespace}/{name}",
            "creationTimestamp": created,
        },
        "spec": {
            "priority": priority,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"nominatedNodeName": nominated} if nominated else {},
    }
    return pod_info(obj, 1)


def drain(q: SchedulingQueue, limit: int = 100_000) -> list[str]:
    out = []
    for _ in range(limit):
        p = q.pop()
        if p is None:
            break
        out.append(p.uid)
    return out


def names(uids: list[str]) -> list[str]:
    return [u.split("/", 1)[1] for u in uids]


# -- priority -------------------------------------------------------------------------------
def test_production_created_mid_burst_pops_first() -> None:
    q = SchedulingQueue()
    for i in range(10_000):
        q.add(pod(f"b{i}", priority=0, age=i), 0.0)
    taken = [q.pop() for _ in range(100)]
    assert all(p is not None and p.priority == 0 for p in taken)
    q.add(pod("web", priority=1000, age=99_999), 1.0)  # the youngest pod of all
    nxt = q.pop()
    assert nxt is not None and nxt.name == "web"
    assert q.pop().name == "b100"  # type: ignore[union-attr]


def test_a_priority_floor_leaves_lower_pods_queued() -> None:
    q = SchedulingQueue()
    q.add(pod("b0", priority=0), 0.0)
    q.add(pod("web", priority=1000), 0.0)
    assert names(drain_floor(q, 1000)) == ["web"]
    assert q.pop(min_priority=1000) is None
    assert names(drain(q)) == ["b0"]  # still there for the next pop without a floor


def drain_floor(q: SchedulingQueue, floor: int) -> list[str]:
    out = []
    while (p := q.pop(min_priority=floor)) is not None:
        out.append(p.uid)
    return out


@pytest.mark.parametrize(
    ("priorities", "expected"),
    [
        pytest.param([0, 1000, 999], ["p1000", "p999", "p0"], id="bands"),
        pytest.param([-5, 0, 5], ["p5", "p0", "p-5"], id="best-effort-last"),
        pytest.param([2_000_000_000, 1000, 1001], ["p2000000000", "p1001", "p1000"], id="levels"),
    ],
)
def test_higher_priority_first(priorities: list[int], expected: list[str]) -> None:
    q = SchedulingQueue()
    for i, prio in enumerate(priorities):
        q.add(pod(f"p{prio}", priority=prio, age=-i), 0.0)  # later ones are older
    assert names(drain(q)) == expected


# -- fair share -----------------------------------------------------------------------------
def test_namespaces_interleave_even_after_a_big_burst() -> None:
    q = SchedulingQueue()
    for i in range(1000):
        q.add(pod(f"a{i}", namespace="team-a", age=i), 0.0)
    for i in range(5):
        q.add(pod(f"b{i}", namespace="team-b", age=10_000 + i), 0.0)
    first = drain(q, 10)
    assert [u.split("/")[0] for u in first] == ["team-a", "team-b"] * 5
    assert names(first[1::2]) == ["b0", "b1", "b2", "b3", "b4"]
    assert names(first[0::2]) == ["a0", "a1", "a2", "a3", "a4"]
    rest = drain(q)
    assert len(rest) == 995
    assert all(u.startswith("team-a/") for u in rest)


def test_three_namespaces_take_turns() -> None:
    q = SchedulingQueue()
    for ns, n in (("x", 300), ("y", 3), ("z", 300)):
        for i in range(n):
            q.add(pod(f"{ns}{i}", namespace=ns, age=i), 0.0)
    order = [u.split("/")[0] for u in drain(q, 9)]
    assert order == ["x", "y", "z"] * 3
    order = [u.split("/")[0] for u in drain(q, 6)]
    assert order == ["x", "z"] * 3


def test_late_namespace_gets_no_credit_for_idle_time() -> None:
    """A namespace that arrives after another has had 500 turns shares from then on; it
    does not get 500 turns in a row."""
    q = SchedulingQueue()
    for i in range(1000):
        q.add(pod(f"a{i}", namespace="a", age=i), 0.0)
    assert len(drain(q, 500)) == 500
    for i in range(100):
        q.add(pod(f"b{i}", namespace="b", age=i), 1.0)
    order = [u.split("/")[0] for u in drain(q, 20)]
    assert order.count("a") == 10
    assert order.count("b") == 10
    assert all(x != y for x, y in itertools.pairwise(order))


def test_fair_share_is_per_priority_level() -> None:
    q = SchedulingQueue()
    for i in range(5):
        q.add(pod(f"a{i}", namespace="a", priority=10, age=i), 0.0)
    for i in range(5):
        q.add(pod(f"b{i}", namespace="b", priority=5, age=i), 0.0)
    assert [u.split("/")[0] for u in drain(q)] == ["a"] * 5 + ["b"] * 5


def test_namespace_returning_after_emptying_resumes_its_share() -> None:
    q = SchedulingQueue()
    q.add(pod("a0", namespace="a"), 0.0)
    for i in range(10):
        q.add(pod(f"b{i}", namespace="b", age=i), 0.0)
    assert names(drain(q, 3)) == ["a0", "b0", "b1"]
    q.add(pod("a1", namespace="a", age=100), 1.0)
    assert names(drain(q, 3)) == ["a1", "b2", "b3"]


# -- age ------------------------------------------------------------------------------------
def test_oldest_first_within_a_namespace() -> None:
    q = SchedulingQueue()
    for name, age in (("mid", 50), ("young", 90), ("old", 10), ("oldest", 0)):
        q.add(pod(name, age=age), 0.0)
    assert names(drain(q)) == ["oldest", "old", "mid", "young"]


def test_equal_age_in_arrival_order() -> None:
    q = SchedulingQueue()
    for i in range(5):
        q.add(pod(f"p{i}"), 0.0)
    assert names(drain(q)) == ["p0", "p1", "p2", "p3", "p4"]


# -- parking and backoff --------------------------------------------------------------------
def test_failed_pod_stays_parked_until_the_cluster_changes() -> None:
    q = SchedulingQueue(initial_backoff=1.0, max_backoff=10.0, max_unschedulable=60.0)
    p = pod("p")
    q.add(p, 0.0)
    assert q.pop() is p
    q.failed(p, 5.0)
    for now in (5.0, 6.0, 20.0, 64.9):
        q.flush(now)
        assert q.pop() is None
    assert "ns/p" in q and len(q) == 1
    assert q.cluster_changed(64.9) == 1
    assert q.pop() is None  # through backoff, which has long passed: ready at 6.0
    q.flush(64.9)
    assert q.pop() is p


def test_cluster_change_obeys_backoff_no_hot_loop() -> None:
    q = SchedulingQueue(initial_backoff=1.0, max_backoff=10.0)
    p = pod("p")
    q.add(p, 0.0)
    assert q.pop() is p
    now = 100.0
    expected_waits = [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    for wait in expected_waits:
        q.failed(p, now)
        assert q.cluster_changed(now) == 1  # e.g. a pod finished right away
        assert q.next_ready() == pytest.approx(now + wait)
        q.flush(now + wait - 0.01)
        assert q.pop() is None
        q.cluster_changed(now + wait - 0.01)  # more changes do not speed it up
        q.flush(now + wait - 0.01)
        assert q.pop() is None
        q.flush(now + wait)
        assert q.pop() is p
        now += wait


def test_cluster_change_moves_only_parked_pods() -> None:
    q = SchedulingQueue()
    parked, waiting = pod("parked"), pod("waiting")
    for p in (parked, waiting):
        q.add(p, 0.0)
    q.pop()
    q.pop()
    q.failed(parked, 0.0)
    q.retry(waiting, 0.0)
    assert q.cluster_changed(0.0) == 1
    assert q.cluster_changed(0.0) == 0


def test_max_unschedulable_safety_net() -> None:
    q = SchedulingQueue(max_unschedulable=60.0)
    p = pod("p")
    q.add(p, 0.0)
    q.pop()
    q.failed(p, 10.0)
    assert q.flush(69.9) == 0
    assert q.pop() is None
    assert q.flush(70.0) == 1
    assert q.pop() is p


def test_retry_after_a_lost_bind_uses_a_quarter_backoff() -> None:
    q = SchedulingQueue(initial_backoff=1.0)
    p = pod("p")
    q.add(p, 0.0)
    q.pop()
    q.retry(p, 10.0)
    assert q.next_ready() == pytest.approx(10.25)
    q.flush(10.2)
    assert q.pop() is None
    q.flush(10.25)
    assert q.pop() is p


def test_successful_bind_resets_the_backoff() -> None:
    q = SchedulingQueue(initial_backoff=1.0)
    p = pod("p")
    for _ in range(3):
        q.failed(p, 0.0)
    assert q.backoff_for(p.uid) == 4.0
    q.done(p.uid)
    assert q.backoff_for(p.uid) == 1.0


def test_new_version_of_a_parked_pod() -> None:
    q = SchedulingQueue()
    p = pod("p", cpu="100m")
    q.add(p, 0.0)
    q.pop()
    q.failed(p, 0.0)
    same = pod("p", cpu="100m")  # e.g. the scheduler's own condition write
    q.add(same, 1.0)
    assert q.pop() is None
    assert q.unschedulable["ns/p"][0] is same
    changed = pod("p", cpu="50m")  # its requirements changed: worth a new try
    q.add(changed, 2.0)
    assert q.pop() is changed
    q.failed(changed, 3.0)
    nominated = pod("p", cpu="50m", nominated="n1")
    q.add(nominated, 4.0)
    assert q.pop() is nominated


def test_new_version_of_a_backing_off_pod_keeps_waiting() -> None:
    q = SchedulingQueue(initial_backoff=1.0)
    p = pod("p")
    q.add(p, 0.0)
    q.pop()
    q.retry(p, 0.0)
    newer = pod("p", cpu="1")
    q.add(newer, 0.1)
    assert q.pop() is None
    q.flush(0.25)
    assert q.pop() is newer


# -- removal and re-adding ------------------------------------------------------------------
@pytest.mark.parametrize("state", ["active", "backoff", "unschedulable"])
def test_remove_from_every_state(state: str) -> None:
    q = SchedulingQueue()
    p, other = pod("p"), pod("other", age=1)
    q.add(p, 0.0)
    q.add(other, 0.0)
    if state != "active":
        assert q.pop() is p
        if state == "backoff":
            q.retry(p, 0.0)
        else:
            q.failed(p, 0.0)
    assert p.uid in q
    q.remove(p.uid)
    assert p.uid not in q
    q.cluster_changed(0.0)
    q.flush(1000.0)
    assert drain(q) == [other.uid]
    assert len(q) == 0
    assert q.backoff_for(p.uid) == 1.0  # attempts forgotten


def test_remove_then_add_again() -> None:
    q = SchedulingQueue()
    a, b = pod("a"), pod("b", age=1)
    q.add(a, 0.0)
    q.add(b, 0.0)
    q.remove(a.uid)
    q.add(a, 1.0)
    assert drain(q) == [a.uid, b.uid]  # still ordered by age


def test_readding_an_active_pod_does_not_duplicate_it() -> None:
    q = SchedulingQueue()
    p = pod("p")
    for _ in range(3):
        q.add(p, 0.0)
    newer = pod("p", priority=5)
    q.add(newer, 0.0)
    assert len(q) == 1
    assert drain(q) == [p.uid]
    assert q.pop() is None


def test_remove_unknown_is_harmless() -> None:
    q = SchedulingQueue()
    q.remove("nope")
    assert len(q) == 0 and q.pop() is None and q.next_ready() is None


# -- depth ----------------------------------------------------------------------------------
def test_depth() -> None:
    q = SchedulingQueue()
    assert q.depth() == {}
    for i in range(3):
        q.add(pod(f"prod{i}", priority=1000 + i), 0.0)
    for i in range(4):
        q.add(pod(f"batch{i}", priority=i), 0.0)
    q.add(pod("be", priority=-1), 0.0)
    parked = q.pop()
    retried = q.pop()
    assert parked is not None and retried is not None
    q.failed(parked, 0.0)
    q.retry(retried, 0.0)
    assert q.depth() == {
        ("production", "active"): 1,
        ("production", "unschedulable"): 1,
        ("production", "backoff"): 1,
        ("batch", "active"): 4,
        ("best-effort", "active"): 1,
    }
    assert len(q) == 8
    assert q.active_count == 6
    q.cluster_changed(0.0)
    assert q.depth()[("production", "backoff")] == 2
    assert ("production", "unschedulable") not in q.depth()
