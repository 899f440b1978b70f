"""The dev stack's local network built for real with ``ip``: what the plan says exists, a
second setup and a leftover of a killed run are fine, teardown leaves nothing, twice.

Needs root and ``ip netns`` (capability-gated); the names carry this run's pid, so a running
``make up`` is never touched.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import capability
import pytest

from app.devstack import network
from app.devstack.network import NetworkPlan


@pytest.fixture
def plan() -> Iterator[NetworkPlan]:
    why_not = network.available()
    if why_not is not None:
        capability.missing(f"network namespaces: {why_not}")
    tagged = NetworkPlan(tag=f"d{os.getpid() % 10**7}")
    try:
        yield tagged
    finally:
        network.teardown(tagged)


def _ip_json(*argv: str) -> list[dict[str, Any]]:
    done = subprocess.run(["ip", "-j", *argv], capture_output=True, text=True, check=True)
    parsed: list[dict[str, Any]] = json.loads(done.stdout or "[]")
    return parsed


def _check_built(plan: NetworkPlan) -> None:
    assert all(network.present(plan).values()), network.present(plan)
    (bridge,) = _ip_json("addr", "show", "dev", plan.bridge)
    assert "UP" in bridge["flags"]
    assert not [a for a in bridge["addr_info"] if a["family"] == "inet"], "bridge has no IPv4"
    for node in plan.nodes:
        (veth,) = _ip_json("link", "show", "dev", node.veth)
        assert veth["master"] == plan.bridge
        (eth0,) = _ip_json("-n", node.namespace, "addr", "show", "dev", "eth0")
        inet = [(a["local"], a["prefixlen"]) for a in eth0["addr_info"] if a["family"] == "inet"]
        assert inet == [(node.address, 24)]
        (lo,) = _ip_json("-n", node.namespace, "link", "show", "dev", "lo")
        assert "UP" in lo["flags"]


def test_setup_builds_the_plan_and_teardown_removes_it(plan: NetworkPlan) -> None:
    network.setup(plan)
    _check_built(plan)
    network.teardown(plan)
    assert not any(network.present(plan).values()), network.present(plan)
    network.teardown(plan)  # nothing left to remove is fine


def test_setup_twice_and_over_a_killed_runs_leftover(plan: NetworkPlan) -> None:
    network.setup(plan)
    network.setup(plan)
    _check_built(plan)
    network.teardown(plan)
    # A run killed half-way: the bridge, one namespace and a veth without its address.
    partial = network.setup_commands(plan)[:6]
    for argv in partial:
        subprocess.run(argv, check=True, capture_output=True)
    network.setup(plan)
    _check_built(plan)


def test_the_pod_network_has_no_route_off_the_bridge(plan: NetworkPlan) -> None:
    """Inside a node's namespace only 10.88.0.0/24 is routed: nothing leaves the host."""
    network.setup(plan)
    for node in plan.nodes:
        routes = _ip_json("-n", node.namespace, "route", "show")
        assert [r["dst"] for r in routes] == ["10.88.0.0/24"]
