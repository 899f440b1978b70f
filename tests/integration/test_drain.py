"""Node drains against a real API server: a drain cordons the node, evicts what its budgets
allow, stops at a budget (naming it), and resumes as replacements become ready elsewhere, until
the node is empty.

The test plays the node agent (confirming terminated pods gone, reporting replacements Ready)
and the ReplicaSet controller (creating the replacements on another node).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from test_eviction import API, Cluster


@pytest.fixture(scope="module")
def http(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        yield c


@pytest.fixture
def cluster(http: httpx.Client, pg_url: str) -> Iterator[Cluster]:
    with psycopg.connect(pg_url, autocommit=True) as db:
        yield Cluster(http, db)


def node(http: httpx.Client) -> str:
    name = f"drain-{secrets.token_hex(3)}"
    r = http.post(f"{API}/nodes", json={"metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name


def drain(http: httpx.Client, name: str) -> dict[str, Any]:
    r = http.post(f"{API}/nodes/{name}/drain")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["kind"] == "DrainStatus" and body["node"] == name
    return dict(body)


def confirm_terminated(cluster: Cluster) -> None:
    """The node agent: every terminating pod has stopped; finish its deletion."""
    for name in cluster.terminating():
        r = cluster.http.delete(
            f"{API}/namespaces/{cluster.ns}/pods/{name}", params={"gracePeriodSeconds": "0"}
        )
        assert r.status_code == 200, r.text
    assert cluster.terminating() == []


def names(refs: list[dict[str, Any]]) -> list[str]:
    return sorted(r["name"] for r in refs)


def test_a_drain_stops_at_a_budget_and_resumes_when_it_allows(cluster: Cluster) -> None:
    http = cluster.http
    a, b = node(http), node(http)
    for i in range(3):
        cluster.pod(f"web-{i}", node=a)
    cluster.pod("loner", node=a, app="batch")  # no budget: evicted at once
    cluster.pod("elsewhere", node=b, app="batch")  # on another node: never touched
    cluster.pdb("web-pdb", minAvailable=3)
    cluster.pod("web-b", node=b)  # four healthy web pods; the budget needs three

    first = drain(http, a)
    assert http.get(f"{API}/nodes/{a}").json()["spec"]["unschedulable"] is True
    assert len(first["evicted"]) == 2
    assert "loner" in names(first["evicted"])
    assert len(first["blocked"]) == 2
    for blocked in first["blocked"]:
        assert blocked["namespace"] == cluster.ns
        assert blocked["budget"] == "web-pdb"
        assert blocked["reason"] == (
            "The disruption budget web-pdb needs 3 healthy pods and has 3 currently"
        )
    assert first["remaining"] == 4 and first["done"] is False
    assert names(first["terminating"]) == names(first["evicted"])

    # Nothing changed: the next pass evicts nothing and reports the same blockers.
    again = drain(http, a)
    assert again["evicted"] == [] and names(again["blocked"]) == names(first["blocked"])

    replacements = 0
    for _ in range(6):
        confirm_terminated(cluster)
        status = drain(http, a)
        if status["done"]:
            break
        if not status["evicted"]:
            # Blocked: the ReplicaSet's replacement comes up Ready on node b.
            assert status["blocked"], status
            replacements += 1
            cluster.pod(f"web-new-{replacements}", node=b)
    else:
        raise AssertionError(f"the drain never finished: {status}")
    assert status == {
        **status,
        "evicted": [],
        "blocked": [],
        "terminating": [],
        "remaining": 0,
        "done": True,
    }
    assert replacements == 2  # each blocked pod waited for one replacement
    left = cluster.db.execute(
        "SELECT name FROM pods WHERE namespace = %s ORDER BY name", (cluster.ns,)
    ).fetchall()
    assert [r[0] for r in left] == ["elsewhere", "web-b", "web-new-1", "web-new-2"]


def test_drain_of_an_unknown_node_is_404_and_an_empty_node_is_done(http: httpx.Client) -> None:
    r = http.post(f"{API}/nodes/no-such-node-{secrets.token_hex(2)}/drain")
    assert r.status_code == 404
    assert r.json()["reason"] == "NotFound"
    empty = node(http)
    status = drain(http, empty)
    assert status["done"] is True and status["remaining"] == 0
    assert http.get(f"{API}/nodes/{empty}").json()["spec"]["unschedulable"] is True
