"""The discovery state and the protocol's subscriber copy: steps, catch-ups, scopes, drains."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.traffic import protocol
from app.core.traffic.protocol import Replica
from app.core.traffic.state import DiscoveryState


@dataclass
class Ch:
    revision: int
    kind: str
    op: str
    uid: str
    namespace: str
    name: str
    obj: dict[str, Any]


def service(name: str, kind: str = "ClusterIP", ip: str = "127.100.0.1") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"type": kind, "clusterIP": ip, "ports": [{"name": "http", "port": 80}]},
    }


def endpoint(pod: str, ready: bool = True, terminating: bool = False) -> dict[str, Any]:
    return {
        "addresses": [f"10.0.0.{abs(hash(pod)) % 250}"],
        "conditions": {"ready": ready, "serving": ready, "terminating": terminating},
        "nodeName": "n1",
        "zone": "z1",
        "targetRef": {"kind": "Pod", "namespace": "ns", "name": pod},
    }


def eps(svc: str, *endpoints: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": f"{svc}-x",
            "labels": {"kubernetes.io/service-name": svc},
        },
        "addressType": "IPv4",
        "endpoints": list(endpoints),
        "ports": [{"name": "http", "port": 8000}],
    }


def loaded() -> DiscoveryState:
    state = DiscoveryState()
    state.load(
        10,
        [
            Ch(5, "Service", "A", "s1", "ns", "web", service("web")),
            Ch(
                6,
                "EndpointSlice",
                "A",
                "sl1",
                "ns",
                "web-x",
                eps("web", endpoint("a"), endpoint("b")),
            ),
            Ch(
                7,
                "Service",
                "A",
                "s2",
                "ns",
                "edge",
                service("edge", "LoadBalancer", "127.100.0.2"),
            ),
        ],
    )
    return state


def replica_of(state: DiscoveryState, scope: str = "all") -> Replica:
    r = Replica()
    applied = r.apply(protocol.decode(state.snapshot(scope)))
    assert applied.reply is not None and b'"ack"' in applied.reply
    return r


def test_snapshot_holds_services_and_endpoints() -> None:
    state = loaded()
    r = replica_of(state)
    assert r.version == 10
    assert r.resources["s/ns/web"]["ip"] == "127.100.0.1"
    ep = r.resources["e/ns/web/a"]
    assert (ep["r"], ep["s"], ep["t"], ep["p"], ep["z"]) == (
        True,
        True,
        False,
        {"http": 8000},
        "z1",
    )


def test_a_readiness_change_is_a_one_endpoint_delta_of_few_bytes() -> None:
    state = loaded()
    r = replica_of(state)
    step = state.apply(
        [
            Ch(
                11,
                "EndpointSlice",
                "M",
                "sl1",
                "ns",
                "web-x",
                eps("web", endpoint("a", ready=False), endpoint("b")),
            )
        ]
    )
    assert step is not None and step.keys == {"e/ns/web/a"}
    frame = step.frames["all"]
    assert len(frame) < 300
    applied = r.apply(protocol.decode(frame))
    assert applied.changed == {"e/ns/web/a"}
    assert r.version == 11 and r.resources["e/ns/web/a"]["r"] is False
    assert r.resources == state.view("all")


def test_a_batch_that_changes_nothing_moves_the_version_without_a_step() -> None:
    state = loaded()
    same = eps("web", endpoint("a"), endpoint("b"))
    assert state.apply([Ch(12, "EndpointSlice", "M", "sl1", "ns", "web-x", same)]) is None
    assert state.version == 12


def test_a_delta_from_another_version_is_refused_and_the_copy_kept() -> None:
    state = loaded()
    r = replica_of(state)
    r.version = 9
    step = state.apply([Ch(11, "Service", "D", "s1", "ns", "web", service("web"))])
    assert step is not None
    applied = r.apply(protocol.decode(step.frames["all"]))
    assert applied.reply is not None and b'"nack"' in applied.reply
    assert "s/ns/web" in r.resources


def test_catch_up_sends_only_what_was_missed_merged() -> None:
    state = loaded()
    r = replica_of(state)
    for rev, ready in ((11, False), (12, True), (13, False)):
        state.apply(
            [
                Ch(
                    rev,
                    "EndpointSlice",
                    "M",
                    "sl1",
                    "ns",
                    "web-x",
                    eps("web", endpoint("a", ready), endpoint("b")),
                )
            ]
        )
    frame = state.catch_up("all", 10)
    assert frame is not None
    message = protocol.decode(frame)
    assert message["from"] == 10 and message["v"] == 13
    assert list(message["set"]) == ["e/ns/web/a"] and message["del"] == []
    r.apply(message)
    assert r.resources == state.view("all")


def test_catch_up_from_before_the_history_needs_a_snapshot() -> None:
    state = DiscoveryState(history_keys=2)
    state.load(10, [])
    for rev in range(11, 16):
        state.apply([Ch(rev, "Service", "A", f"u{rev}", "ns", f"s{rev}", service(f"s{rev}"))])
    assert state.catch_up("all", 10) is None
    assert state.catch_up("all", 14) is not None
    assert state.catch_up("all", 99) is None  # from the future: not here


def test_exposed_scope_holds_only_load_balancer_services_and_follows_type_changes() -> None:
    state = loaded()
    r = replica_of(state, "exposed")
    assert set(r.resources) == {"s/ns/edge"}
    step = state.apply([Ch(11, "Service", "M", "s1", "ns", "web", service("web", "LoadBalancer"))])
    assert step is not None
    r.apply(protocol.decode(step.frames["exposed"]))
    assert {"s/ns/web", "e/ns/web/a", "e/ns/web/b"} <= set(r.resources)
    step = state.apply([Ch(12, "Service", "M", "s1", "ns", "web", service("web"))])
    assert step is not None
    r.apply(protocol.decode(step.frames["exposed"]))
    assert set(r.resources) == {"s/ns/edge"}
    # A change of a service it does not receive costs an edge subscriber an empty delta.
    step = state.apply(
        [Ch(13, "EndpointSlice", "M", "sl1", "ns", "web-x", eps("web", endpoint("a", False)))]
    )
    assert step is not None
    message = protocol.decode(step.frames["exposed"])
    assert message["set"] == {} and message["del"] == []


def test_an_endpoint_moving_between_slices_is_never_dropped() -> None:
    state = loaded()
    other = eps("web", endpoint("a"))
    other["metadata"]["name"] = "web-y"
    state.apply([Ch(11, "EndpointSlice", "A", "sl2", "ns", "web-y", other)])
    state.apply([Ch(12, "EndpointSlice", "M", "sl1", "ns", "web-x", eps("web", endpoint("b")))])
    assert "e/ns/web/a" in state.resources


def test_drained_from_the_revision_the_endpoint_turned_terminating() -> None:
    state = loaded()
    assert state.drained_at("ns", "a")[0] is False
    assert state.drained_at("ns", "never") == (True, None, set())
    state.apply(
        [
            Ch(
                14,
                "EndpointSlice",
                "M",
                "sl1",
                "ns",
                "web-x",
                eps("web", endpoint("a", False, True), endpoint("b")),
            )
        ]
    )
    assert state.drained_at("ns", "a") == (True, 14, {"s/ns/web"})
    # Removed later: still drained, from when it first stopped taking connections.
    state.apply([Ch(15, "EndpointSlice", "M", "sl1", "ns", "web-x", eps("web", endpoint("b")))])
    assert state.drained_at("ns", "a") == (True, 14, {"s/ns/web"})
    # Removed without being marked terminating first: drained from the removal.
    state.apply([Ch(16, "EndpointSlice", "D", "sl1", "ns", "web-x", eps("web"))])
    assert state.drained_at("ns", "b")[:2] == (True, 16)


def test_forget_pods_drops_only_drained_marks() -> None:
    state = loaded()
    state.apply([Ch(11, "EndpointSlice", "M", "sl1", "ns", "web-x", eps("web", endpoint("b")))])
    state.forget_pods(keep=1)
    assert state.drained_at("ns", "a") == (True, None, set())
    assert state.drained_at("ns", "b")[0] is False


def test_a_catch_up_is_encoded_once_for_every_subscriber_at_the_same_version() -> None:
    state = loaded()
    state.apply([Ch(11, "Service", "D", "s1", "ns", "web", service("web"))])
    first = state.catch_up("all", 10)
    assert first is not None and state.catch_up("all", 10) is first
    state.apply([Ch(12, "Service", "A", "s3", "ns", "new", service("new"))])
    again = state.catch_up("all", 10)
    assert again is not first and again is not None and protocol.decode(again)["v"] == 12


def test_a_catch_up_from_the_log_resets_the_services_that_changed() -> None:
    old = loaded()
    r = replica_of(old)
    # A replica started later: no history, but the log says "web" changed since version 10.
    state = DiscoveryState()
    state.load(
        20,
        [
            Ch(5, "Service", "A", "s1", "ns", "web", service("web")),
            Ch(
                15,
                "EndpointSlice",
                "A",
                "sl1",
                "ns",
                "web-x",
                eps("web", endpoint("b"), endpoint("c")),
            ),
            Ch(
                7,
                "Service",
                "A",
                "s2",
                "ns",
                "edge",
                service("edge", "LoadBalancer", "127.100.0.2"),
            ),
        ],
    )
    assert state.catch_up("all", 10) is None
    frame = state.catch_up_services("all", 10, {"s/ns/web"}, upto=20)
    assert frame is not None and state.catch_up("all", 10) is frame  # kept for the next ones
    message = protocol.decode(frame)
    assert message["reset"] == ["s/ns/web"] and len(frame) < 1000
    applied = r.apply(message)
    assert "e/ns/web/a" in applied.changed
    assert r.resources == state.view("all") and r.version == 20


def test_a_catch_up_from_the_log_adds_what_the_history_saw_after_it() -> None:
    state = loaded()
    state.apply([Ch(11, "Service", "D", "s2", "ns", "edge", service("edge"))])
    frame = state.catch_up_services("all", 3, set(), upto=10)
    assert frame is not None
    message = protocol.decode(frame)
    assert message["del"] == ["s/ns/edge"] and message["reset"] == ["s/ns/edge"]
    assert state.catch_up_services("all", 3, set(), upto=5) is None  # the history starts at 10
