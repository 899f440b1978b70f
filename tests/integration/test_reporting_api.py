"""The reporting views over writes made the way users make them: through a running API server,
with ``X-Reason`` and a request id, read back by an auditor's and a team's reporting logins."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from reporting_seed import Roles

API = "/apis/quaymaster.io/v1"


@pytest.fixture(scope="module")
def http(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        yield c


@pytest.fixture(scope="module")
def logins(pg_url: str) -> Iterator[tuple[Roles, str]]:
    roles = Roles(pg_url)
    ns = f"rep-{roles.suffix}"
    roles.make("rep_api_auditor", "LOGIN IN ROLE qm_reporting", "*")
    roles.make("rep_api_team", "LOGIN IN ROLE qm_reporting", ns)
    try:
        yield roles, ns
    finally:
        roles.drop()


def query(url: str, role: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, user=role, autocommit=True) as db:
        return db.execute(sql, args).fetchall()


def test_a_drain_and_a_rollout_through_the_api(
    http: httpx.Client, pg_url: str, logins: tuple[Roles, str]
) -> None:
    roles, ns = logins
    auditor, team = roles.made
    node = f"rep-node-{secrets.token_hex(3)}"
    assert http.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    assert http.post(f"{API}/nodes", json={"metadata": {"name": node}}).status_code == 201
    for i in range(2):
        spec = {"nodeName": node, "containers": [{"name": "c", "image": "w"}]}
        pod = {"metadata": {"name": f"p{i}"}, "spec": spec}
        assert http.post(f"{API}/namespaces/{ns}/pods", json=pod).status_code == 201
    why = {"X-Reason": "kernel upgrade CHG-9", "X-Request-Id": f"drain-{roles.suffix}"}
    r = http.post(f"{API}/nodes/{node}/drain", headers=why)
    assert r.status_code == 200, r.text

    (drain,) = query(
        pg_url, auditor,
        "SELECT principal, reason, request_id, cordoned, pods_evicted FROM reporting.drains"
        " WHERE node = %s", node,
    )  # fmt: skip
    assert drain == ("admin", "kernel upgrade CHG-9", f"drain-{roles.suffix}", True, 2)
    evicted = query(
        pg_url, team,
        "SELECT pod, cause, principal, reason FROM reporting.evictions ORDER BY pod",
    )  # fmt: skip
    assert evicted == [
        (f"p{i}", "EvictionByEvictionAPI", "admin", "kernel upgrade CHG-9") for i in range(2)
    ]
    # The team sees its pods' side of the drain, not the node's cordon.
    assert query(pg_url, team, "SELECT cordoned, pods_evicted FROM reporting.drains") == [
        (False, 2)
    ]

    template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "web:1"}]},
    }
    deploy = {
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template},
    }
    made = http.post(
        f"{API}/namespaces/{ns}/deployments", json=deploy, headers={"X-Reason": "first release"}
    )
    assert made.status_code == 201, made.text
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "web:2"}]}}}}
    rolled = http.patch(
        f"{API}/namespaces/{ns}/deployments/web",
        json=patch,
        headers={"Content-Type": "application/merge-patch+json", "X-Reason": "CVE fix"},
    )
    assert rolled.status_code == 200, rolled.text
    changes = query(
        pg_url, team,
        "SELECT change, principal, reason FROM reporting.rollout_changes"
        " WHERE deployment = 'web' ORDER BY at",
    )  # fmt: skip
    assert changes == [("created", "admin", "first release"), ("template", "admin", "CVE fix")]
