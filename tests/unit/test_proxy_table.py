"""The node proxy's routing table and endpoint choice (agent/proxy/table.py), table-driven on a
fake clock: zone preference, fail open, terminating endpoints, ejection, round robin."""

from __future__ import annotations

import random
from typing import Any

import pytest

from agent.proxy.health import HealthBook
from agent.proxy.table import (
    EJECT_BASE,
    EJECT_CAP,
    Ejections,
    Endpoint,
    Picker,
    Service,
    Table,
    edge_tiers,
    node_tiers,
)
from app.core.traffic.protocol import Replica


def ep(name: str, zone: str = "a", r: bool = True, t: bool = False, port: int = 8000) -> Endpoint:
    return Endpoint(
        key=f"e/ns/web/{name}",
        address=f"10.0.0.{name[-1]}",
        zone=zone,
        ready=r,
        serving=r or t,
        terminating=t,
        ports={"http": port},
    )


def svc(*endpoints: Endpoint) -> Service:
    return Service("s/ns/web", "ns", "web", "127.100.0.1", endpoints=endpoints)


def first_tier(endpoints: list[Endpoint], zone: str = "a") -> set[str]:
    tiers = [t for t in node_tiers(endpoints, zone) if t]
    return {e.key.rsplit("/", 1)[1] for e in tiers[0]} if tiers else set()


@pytest.mark.parametrize(
    ("endpoints", "zone", "expected"),
    [
        # ready in the proxy's zone are preferred
        ([ep("p1", "a"), ep("p2", "b")], "a", {"p1"}),
        # none ready in the zone: ready elsewhere
        ([ep("p1", "a", r=False), ep("p2", "b")], "a", {"p2"}),
        # no zone given: every ready endpoint
        ([ep("p1", "a"), ep("p2", "b")], "", {"p1", "p2"}),
        # none ready: fail open to every non-terminating endpoint, zone first
        ([ep("p1", "a", r=False), ep("p2", "b", r=False)], "a", {"p1"}),
        ([ep("p1", "b", r=False), ep("p2", "b", r=False)], "a", {"p1", "p2"}),
        # terminating endpoints get nothing while anything else exists, even unready
        ([ep("p1", "a", r=False, t=True), ep("p2", "b", r=False)], "a", {"p2"}),
        # ... and are used only when nothing else is left
        ([ep("p1", "a", r=False, t=True)], "a", {"p1"}),
        ([], "a", set()),
    ],
)
def test_node_tiers(endpoints: list[Endpoint], zone: str, expected: set[str]) -> None:
    assert first_tier(endpoints, zone) == expected


def node_picker(rng: random.Random | None = None, zone: str = "a") -> Picker:
    return Picker(lambda s, _p: node_tiers(s.endpoints, zone), Ejections(), rng)


def test_round_robin_within_the_best_tier() -> None:
    picker = node_picker()
    service = svc(ep("p1"), ep("p2"), ep("p3", "b"))
    chosen = [picker.pick(service, "http", 0.0) for _ in range(4)]
    assert [c[1] for c in chosen if c] == [
        ("10.0.0.1", 8000),
        ("10.0.0.2", 8000),
        ("10.0.0.1", 8000),
        ("10.0.0.2", 8000),
    ]


def test_random_choice_is_seeded() -> None:
    service = svc(ep("p1"), ep("p2"), ep("p3"))
    a = [node_picker(random.Random(7)).pick(service, "http", 0.0) for _ in range(5)]
    b = [node_picker(random.Random(7)).pick(service, "http", 0.0) for _ in range(5)]
    assert a == b


def test_an_endpoint_without_the_port_is_never_chosen() -> None:
    other = Endpoint("e/ns/web/p9", "10.0.0.9", "a", ports={"metrics": 9100})
    picker = node_picker()
    assert picker.pick(svc(other), "http", 0.0) is None
    assert {picker.pick(svc(other, ep("p2", "b")), "http", 0.0)[1] for _ in range(3)} == {
        ("10.0.0.2", 8000)
    }


def test_tried_endpoints_are_skipped_and_none_left_is_none() -> None:
    picker = node_picker()
    service = svc(ep("p1"), ep("p2"))
    tried = [("10.0.0.1", 8000)]
    assert picker.pick(service, "http", 0.0, tried)[1] == ("10.0.0.2", 8000)
    assert picker.pick(service, "http", 0.0, [*tried, ("10.0.0.2", 8000)]) is None


def test_an_ejected_endpoint_is_skipped_until_its_time_is_up() -> None:
    picker = node_picker()
    service = svc(ep("p1"), ep("p2"))
    assert picker.ejections.eject(("10.0.0.1", 8000), now=100.0) == EJECT_BASE
    during = {picker.pick(service, "http", 100.0 + EJECT_BASE - 0.01)[1] for _ in range(4)}
    assert during == {("10.0.0.2", 8000)}
    after = {picker.pick(service, "http", 100.0 + EJECT_BASE)[1] for _ in range(4)}
    assert after == {("10.0.0.1", 8000), ("10.0.0.2", 8000)}


def test_ejecting_a_ready_endpoint_prefers_another_ready_one_over_the_other_zone() -> None:
    picker = node_picker()
    service = svc(ep("p1", "a"), ep("p2", "b"))
    picker.ejections.eject(("10.0.0.1", 8000), 0.0)
    assert picker.pick(service, "http", 1.0)[1] == ("10.0.0.2", 8000)


def test_all_ejected_still_picks_one_rather_than_refuse() -> None:
    picker = node_picker()
    service = svc(ep("p1"), ep("p2"))
    picker.ejections.eject(("10.0.0.1", 8000), 0.0)
    picker.ejections.eject(("10.0.0.2", 8000), 0.0)
    assert picker.pick(service, "http", 1.0) is not None


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(1, EJECT_BASE), (2, 2 * EJECT_BASE), (3, 4 * EJECT_BASE), (10, EJECT_CAP)],
)
def test_ejection_doubles_on_repeat_up_to_the_cap(failures: int, expected: float) -> None:
    ej, now, seconds = Ejections(), 0.0, 0.0
    for _ in range(failures):
        seconds = ej.eject(("10.0.0.1", 80), now)
        now += seconds  # fails again as soon as it is back
    assert seconds == expected


def test_a_success_resets_the_doubling_and_a_second_failure_meanwhile_does_not_extend() -> None:
    ej = Ejections()
    assert ej.eject(("x", 1), 0.0) == EJECT_BASE
    assert ej.eject(("x", 1), 0.5) == pytest.approx(EJECT_BASE - 0.5)  # two at once
    ej.succeeded(("x", 1), EJECT_BASE + 1)
    assert ej.eject(("x", 1), EJECT_BASE + 2) == EJECT_BASE
    assert ej.count(EJECT_BASE + 2) == 1


# -- edge mode -------------------------------------------------------------------------------


def edge_first(endpoints: list[Endpoint], healthy: set[str], fail_open: float) -> set[str]:
    tiers = [
        t
        for t in edge_tiers(endpoints, lambda e: e.key.rsplit("/", 1)[1] in healthy, fail_open)
        if t
    ]
    return {e.key.rsplit("/", 1)[1] for e in tiers[0]} if tiers else set()


@pytest.mark.parametrize(
    ("endpoints", "healthy", "fail_open", "expected"),
    [
        # healthy and ready first
        ([ep("p1"), ep("p2", r=False), ep("p3")], {"p1", "p2", "p3"}, 0.5, {"p1", "p3"}),
        # healthy but discovery says unready: still in, after the ready ones
        ([ep("p1", r=False), ep("p2", r=False)], {"p1"}, 0.5, {"p1"}),
        # an unhealthy endpoint is out while enough pass
        ([ep("p1"), ep("p2"), ep("p3")], {"p1", "p2"}, 0.5, {"p1", "p2"}),
        # fewer than half pass: fail open to every non-terminating endpoint
        ([ep("p1"), ep("p2"), ep("p3")], {"p1"}, 0.5, {"p1", "p2", "p3"}),
        ([ep("p1"), ep("p2"), ep("p3")], set(), 0.5, {"p1", "p2", "p3"}),
        # a threshold of 0 never fails open; 1 fails open unless all pass
        ([ep("p1"), ep("p2")], {"p1"}, 0.0, {"p1"}),
        ([ep("p1"), ep("p2")], {"p1"}, 1.0, {"p1", "p2"}),
        # terminating endpoints are out, and do not count towards the threshold
        ([ep("p1"), ep("p2", t=True, r=False)], {"p1", "p2"}, 0.5, {"p1"}),
        ([ep("p1", t=True, r=False)], {"p1"}, 0.5, {"p1"}),
    ],
)
def test_edge_tiers(
    endpoints: list[Endpoint], healthy: set[str], fail_open: float, expected: set[str]
) -> None:
    assert edge_first(endpoints, healthy, fail_open) == expected


@pytest.mark.parametrize(
    ("results", "healthy"),
    [
        ([], False),  # never checked
        ([True], True),  # healthy after one success
        ([True, False], True),  # one failure is not enough
        ([True, False, False], False),  # two are
        ([True, False, True, False], True),  # not consecutive
        ([False, False, True], True),
    ],
)
def test_health_rise_one_fall_two(results: list[bool], healthy: bool) -> None:
    book = HealthBook()
    for ok in results:
        book.record(("10.0.0.1", 80), ok)
    assert book.healthy(("10.0.0.1", 80)) is healthy


def test_health_forgets_gone_targets() -> None:
    book = HealthBook()
    book.record(("a", 1), True)
    book.record(("b", 1), True)
    book.keep([("a", 1)])
    assert book.counts() == (1, 1)


# -- the table from the replica ------------------------------------------------------------


def service_value(ip: str | None = "127.100.0.1", **extra: Any) -> dict[str, Any]:
    return {"ip": ip, "type": "ClusterIP", "ports": [{"name": "http", "port": 80}], **extra}


def endpoint_value(address: str, ready: bool = True) -> dict[str, Any]:
    return {"a": address, "z": "a", "n": "n1", "r": ready, "s": ready, "t": False,
            "p": {"http": 8000}}  # fmt: skip


def test_the_table_follows_snapshots_and_deltas() -> None:
    replica, table = Replica(), Table()

    def apply(message: dict[str, Any]) -> None:
        applied = replica.apply(message)
        table.update(replica.resources, applied.changed, applied.reset)

    apply(
        {
            "t": "snapshot",
            "v": 5,
            "nonce": 1,
            "resources": {
                "s/ns/web": service_value(),
                "e/ns/web/p1": endpoint_value("10.0.0.1"),
                "e/ns/db/p9": endpoint_value("10.0.0.9"),  # its service arrives later
            },
        }
    )
    assert [e.address for e in table.services["s/ns/web"].endpoints] == ["10.0.0.1"]
    assert "s/ns/db" not in table.services
    assert table.vips() == {("127.100.0.1", 80): ("s/ns/web", "http")}
    apply({"t": "delta", "v": 6, "from": 5, "nonce": 2,
           "set": {"s/ns/db": service_value("127.100.0.2"),
                   "e/ns/web/p2": endpoint_value("10.0.0.2", ready=False)},
           "del": ["e/ns/web/p1"]})  # fmt: skip
    web = table.services["s/ns/web"]
    assert [(e.address, e.ready) for e in web.endpoints] == [("10.0.0.2", False)]
    assert [e.address for e in table.services["s/ns/db"].endpoints] == ["10.0.0.9"]
    apply({"t": "delta", "v": 7, "from": 6, "nonce": 3, "set": {}, "del": ["s/ns/web"]})
    assert set(table.services) == {"s/ns/db"}
    apply({"t": "snapshot", "v": 9, "nonce": 4, "resources": {}})
    assert table.services == {}


def test_load_balancer_ports_on_the_edge_address() -> None:
    table = Table()
    resources = {
        "s/ns/web": service_value(type="LoadBalancer"),
        "s/ns/api": service_value("127.100.0.2", type="LoadBalancer"),  # same port 80
        "s/ns/db": service_value("127.100.0.3"),
    }
    table.update(resources, resources, reset=True)
    assert table.load_balancer_ports("127.0.0.200") == {("127.0.0.200", 80): ("s/ns/api", "http")}


def test_a_malformed_resource_is_skipped_not_fatal() -> None:
    table = Table()
    resources: dict[str, Any] = {
        "s/ns/web": service_value(),
        "e/ns/web/ok": endpoint_value("10.0.0.1"),
        "e/ns/web/bad": {"a": "10.0.0.2", "p": ["not", "a", "map"]},
        "s/ns/broken": {"ip": "127.100.0.9", "ports": "nope"},
    }
    table.update(resources, resources, reset=True)
    assert [e.address for e in table.services["s/ns/web"].endpoints] == ["10.0.0.1"]
    assert "s/ns/broken" not in table.services
    assert table.invalid == {"e/ns/web/bad", "s/ns/broken"}


def test_round_robin_turns_of_removed_services_are_forgotten() -> None:
    picker = node_picker()
    service = svc(ep("p1"), ep("p2"))
    assert picker.pick(service, "http", 0.0)[1] == ("10.0.0.1", 8000)
    picker.keep({"s/ns/web"})
    assert picker.pick(service, "http", 0.0)[1] == ("10.0.0.2", 8000)
    picker.keep(set())
    assert picker.pick(service, "http", 0.0)[1] == ("10.0.0.1", 8000)  # starts over
