"""The queuing arithmetic of API priority and fairness, on a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sortedcontainers import SortedDict

from app.api.fairness import request_seats
from app.core import fairness as f
from app.core.kinds import BY_KIND

LIMITS = {f.GLOBAL_DEFAULT: 4, f.SYSTEM: 2, f.CATCH_ALL: 1}


def dispatcher(**config: float) -> f.Dispatcher:
    return f.Dispatcher(LIMITS, f.Config(**config))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "groups", "level"),
    [
        ("admin", ("system:masters",), f.EXEMPT),
        ("system:node:n1", ("system:nodes", "system:authenticated"), f.SYSTEM),
        ("system:kube-scheduler", ("system:authenticated",), f.WORKLOAD_HIGH),
        ("system:kube-controller-manager", (), f.WORKLOAD_HIGH),
        ("system:serviceaccount:team-a:ci", ("system:serviceaccounts",), f.WORKLOAD_LOW),
        ("alice", ("system:authenticated",), f.GLOBAL_DEFAULT),
        ("bob", (), f.GLOBAL_DEFAULT),
        ("system:anonymous", ("system:unauthenticated",), f.CATCH_ALL),
    ],
)
def test_principals_land_in_their_levels(name: str, groups: tuple[str, ...], level: str) -> None:
    assert f.classify(name, groups) == (level, name)


@pytest.mark.parametrize(
    ("objects", "limit", "seats"),
    [(0, None, 1), (100, None, 1), (101, None, 2), (950, None, 10), (50_000, None, 10),
     (50_000, 250, 3), (50_000, 0, 10), (20, 500, 1)],
)  # fmt: skip
def test_a_list_costs_a_seat_per_hundred_objects(
    objects: int, limit: int | None, seats: int
) -> None:
    assert f.list_seats(objects, limit) == seats


@pytest.mark.parametrize("servers", [1, 2, 3, 7])
def test_servers_split_every_level_so_the_sum_never_exceeds_one_server(servers: int) -> None:
    alone = f.seat_limits(400, 1)
    each = f.seat_limits(400, servers)
    for level, seats in alone.items():
        assert each[level] * servers <= max(seats, servers)
        assert each[level] >= 1
    assert f.seat_limits(400, 2)[f.GLOBAL_DEFAULT] == alone[f.GLOBAL_DEFAULT] // 2


def test_a_request_within_the_share_is_admitted_at_once() -> None:
    d = dispatcher()
    req = d.offer(f.GLOBAL_DEFAULT, "alice", 1, now=0.0)
    assert req.state == "admitted"
    assert d.levels[f.GLOBAL_DEFAULT].in_use == 1


def test_a_quiet_flow_is_served_before_the_flood_queued_ahead_of_it() -> None:
    d = dispatcher()
    flood = [d.offer(f.GLOBAL_DEFAULT, "flooder", 1, 0.0) for _ in range(10)]
    assert [r.state for r in flood].count("admitted") == 4
    calm = d.offer(f.GLOBAL_DEFAULT, "calm", 1, 1.0)
    assert calm.state == "queued"
    admitted = d.release(flood[0], 2.0)
    assert admitted == [calm]
    assert calm.state == "admitted"
    # Then the flooder's next in line, in arrival order.
    assert d.release(flood[1], 3.0) == [flood[4]]


def test_two_busy_flows_share_seats_evenly() -> None:
    d = dispatcher()
    a = [d.offer(f.GLOBAL_DEFAULT, "a", 1, 0.0) for _ in range(20)]
    b = [d.offer(f.GLOBAL_DEFAULT, "b", 1, 0.1) for _ in range(20)]
    held = [r for r in a + b if r.state == "admitted"]
    for step in range(12):  # finish the oldest admitted request, again and again
        held += d.release(held.pop(0), 1.0 + step)
    flows = d.levels[f.GLOBAL_DEFAULT].flows
    assert flows["a"].in_use == flows["b"].in_use == 2
    # a held all four seats first; b caught up to two, then they alternated.
    assert (flows["a"].dispatched, flows["b"].dispatched) == (4 + 6, 6)
    assert b[0].state == "done"


def test_levels_do_not_take_each_others_seats() -> None:
    d = dispatcher()
    for _ in range(10):
        d.offer(f.GLOBAL_DEFAULT, "flooder", 1, 0.0)
    node = d.offer(f.SYSTEM, "system:node:n1", 1, 0.0)
    assert node.state == "admitted"


def test_the_exempt_level_never_queues() -> None:
    d = dispatcher()
    reqs = [d.offer(f.EXEMPT, "admin", 10, 0.0) for _ in range(100)]
    assert all(r.state == "admitted" for r in reqs)


def test_a_full_queue_refuses_at_once() -> None:
    d = dispatcher(queue_length=3)
    reqs = [d.offer(f.GLOBAL_DEFAULT, "flooder", 1, 0.0) for _ in range(8)]
    assert [r.state for r in reqs] == ["admitted"] * 4 + ["queued"] * 3 + ["rejected"]
    assert reqs[-1].reason == f.QUEUE_FULL
    # Another flow still has its own queue.
    assert d.offer(f.GLOBAL_DEFAULT, "calm", 1, 0.0).state == "queued"


def test_the_level_bounds_all_its_queues_together() -> None:
    d = dispatcher(queue_length=10, max_queued=5)
    for i in range(4 + 5):
        d.offer(f.GLOBAL_DEFAULT, f"u{i}", 1, 0.0)
    assert d.offer(f.GLOBAL_DEFAULT, "late", 1, 0.0).reason == f.QUEUE_FULL


def test_a_request_is_refused_after_the_wait_limit_and_not_before() -> None:
    d = dispatcher(wait_limit=2.0)
    for _ in range(4):
        d.offer(f.GLOBAL_DEFAULT, "flooder", 1, 0.0)
    waiting = d.offer(f.GLOBAL_DEFAULT, "flooder", 1, 10.0)
    later = d.offer(f.GLOBAL_DEFAULT, "flooder", 1, 11.0)
    assert d.expire(11.9) == []
    assert d.expire(12.0) == [waiting]
    assert (waiting.state, waiting.reason) == ("rejected", f.TIME_OUT)
    assert later.state == "queued"
    lv = d.levels[f.GLOBAL_DEFAULT]
    assert (lv.queued, lv.rejected[f.TIME_OUT], lv.flows["flooder"].rejected) == (1, 1, 1)


def test_a_wide_list_waits_for_its_seats_and_is_not_overtaken() -> None:
    d = dispatcher()
    small = [d.offer(f.GLOBAL_DEFAULT, "a", 1, 0.0) for _ in range(3)]
    wide = d.offer(f.GLOBAL_DEFAULT, "b", 10, 1.0)  # clamped to the level's 4 seats
    assert (wide.state, wide.seats) == ("queued", 4)
    assert d.offer(f.GLOBAL_DEFAULT, "a", 1, 2.0).state == "queued"
    d.release(small[0], 3.0)
    d.release(small[1], 3.0)
    assert d.release(small[2], 3.0) == [wide]


def test_a_flood_whose_seats_were_all_released_does_not_go_ahead_of_a_quiet_flow() -> None:
    d = dispatcher()
    wide = d.offer(f.GLOBAL_DEFAULT, "flooder", 10, 0.0)  # the whole level
    flood = [d.offer(f.GLOBAL_DEFAULT, "flooder", 1, 0.0) for _ in range(4)]
    calm = d.offer(f.GLOBAL_DEFAULT, "calm", 1, 1.0)
    # Both flows hold no seat once the list is done: the one served least recently goes first,
    # not the earlier arrival.
    assert d.release(wide, 2.0) == [calm, *flood[:3]]


def test_a_wide_head_timing_out_lets_the_next_that_fits_in() -> None:
    d = dispatcher(wait_limit=2.0)
    held = [d.offer(f.GLOBAL_DEFAULT, "a", 1, 0.0) for _ in range(3)]
    wide = d.offer(f.GLOBAL_DEFAULT, "b", 4, 1.0)
    narrow = d.offer(f.GLOBAL_DEFAULT, "c", 1, 2.0)
    assert (wide.state, narrow.state) == ("queued", "queued")
    assert d.expire(3.0) == [wide, narrow]
    assert (wide.reason, narrow.state, held[0].state) == (f.TIME_OUT, "admitted", "admitted")


def test_a_watch_costs_one_seat_while_a_big_list_costs_ten() -> None:
    cms = BY_KIND["ConfigMap"]

    class Cache:
        objects = {cms.kind: SortedDict({("big", f"c{i}"): None for i in range(2000)})}

    def scope(path: str, query: str = "", method: str = "GET") -> dict[str, object]:
        return {"method": method, "path": path, "query_string": query.encode()}

    cache: object = Cache()
    coll = "/apis/quaymaster.io/v1/namespaces/big/configmaps"
    other = "/apis/quaymaster.io/v1/namespaces/other/configmaps"
    assert request_seats(scope(coll), cache, False) == 10  # type: ignore[arg-type]
    assert request_seats(scope(coll, "limit=150"), cache, False) == 2  # type: ignore[arg-type]
    assert request_seats(scope(other), cache, False) == 1  # type: ignore[arg-type]
    assert request_seats(scope("/apis/quaymaster.io/v1/configmaps"), cache, False) == 10  # type: ignore[arg-type]
    assert request_seats(scope(coll, "watch=1"), cache, False) == 1  # type: ignore[arg-type]
    assert request_seats(scope(coll), cache, True) == 1  # type: ignore[arg-type]
    assert request_seats(scope(coll, method="POST"), cache, False) == 1  # type: ignore[arg-type]
    assert request_seats(scope(coll + "/c1"), cache, False) == 1  # type: ignore[arg-type]


def test_more_seats_admit_the_waiting_and_cancels_free_theirs() -> None:
    d = dispatcher()
    held = [d.offer(f.GLOBAL_DEFAULT, "a", 1, 0.0) for _ in range(4)]
    waiting = [d.offer(f.GLOBAL_DEFAULT, "a", 1, 0.0) for _ in range(3)]
    assert d.cancel(waiting[0], 1.0) == []
    assert d.set_limits({f.GLOBAL_DEFAULT: 5}) == [waiting[1]]
    assert d.cancel(held[0], 1.0) == [waiting[2]]


def test_idle_flows_are_forgotten() -> None:
    d = dispatcher(idle_flow_s=60.0)
    req = d.offer(f.GLOBAL_DEFAULT, "gone", 1, 0.0)
    d.release(req, 1.0)
    d.prune(30.0)
    assert "gone" in d.levels[f.GLOBAL_DEFAULT].flows
    d.prune(62.0)
    assert "gone" not in d.levels[f.GLOBAL_DEFAULT].flows


ops = st.lists(
    st.tuples(st.sampled_from(["offer", "release", "expire", "cancel"]),
              st.sampled_from(["a", "b", "c"]), st.integers(1, 6)),
    max_size=80,
)  # fmt: skip


@given(ops)
def test_seats_in_use_never_exceed_the_limit_and_the_books_balance(
    script: list[tuple[str, str, int]],
) -> None:
    d = dispatcher(queue_length=4, wait_limit=3.0)
    live: list[f.Request] = []
    for t, (op, flow, seats) in enumerate(script):
        if op == "offer":
            live.append(d.offer(f.GLOBAL_DEFAULT, flow, seats, float(t)))
        elif op == "expire":
            d.expire(float(t))
        elif live:
            req = live.pop(seats % len(live))
            (d.release if op == "release" else d.cancel)(req, float(t))
        lv = d.levels[f.GLOBAL_DEFAULT]
        assert 0 <= lv.in_use <= lv.limit
        assert lv.in_use == sum(fl.in_use for fl in lv.flows.values())
        assert lv.queued == sum(len(fl.queue) for fl in lv.flows.values())
        assert all(len(fl.queue) <= 4 for fl in lv.flows.values())
        if lv.queued:  # work-conserving: a queue waits only when its head does not fit
            head = min((fl for fl in lv.flows.values() if fl.queue),
                       key=lambda fl: (fl.in_use, fl.served, fl.queue[0].seq)).queue[0]  # fmt: skip
            assert lv.in_use + head.seats > lv.limit
