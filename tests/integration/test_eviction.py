"""The eviction subresource against a real API server and PostgreSQL: allowed and refused
evictions (429 naming the budget), the unhealthy-pod policies, more than one budget (500),
hostile bodies (422), and many concurrent evictions never taking a budget below its floor.

The tests play the node agent: they bind pods to nodes at creation and write their status.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

API = "/apis/quaymaster.io/v1"


class Cluster:
    """A namespace of its own on the shared API server, and the calls the tests make."""

    def __init__(self, http: httpx.Client, db: psycopg.Connection[Any]) -> None:
        self.http = http
        self.db = db
        self.ns = f"evict-{secrets.token_hex(3)}"
        r = http.post(f"{API}/namespaces", json={"metadata": {"name": self.ns}})
        assert r.status_code == 201, r.text

    def pod(
        self, name: str, *, node: str = "n1", app: str = "web", ready: bool = True,
        phase: str = "Running", owner: dict[str, Any] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        meta: dict[str, Any] = {"name": name, "labels": {"app": app}}
        if owner:
            meta["ownerReferences"] = [owner]
        body = {
            "metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "web:1"}]},
        }
        r = self.http.post(f"{API}/namespaces/{self.ns}/pods", json=body)
        assert r.status_code == 201, r.text
        self.set_status(name, phase, ready)
        return dict(r.json())

    def set_status(self, name: str, phase: str, ready: bool) -> None:
        cond = {"type": "Ready", "status": "True" if ready else "False",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
        r = self.http.patch(
            f"{API}/namespaces/{self.ns}/pods/{name}/status",
            json={"status": {"phase": phase, "conditions": [cond]}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status_code == 200, r.text

    def pdb(self, name: str, app: str = "web", **spec: Any) -> None:
        body = {"metadata": {"name": name},
                "spec": {"selector": {"matchLabels": {"app": app}}, **spec}}  # fmt: skip
        r = self.http.post(f"{API}/namespaces/{self.ns}/poddisruptionbudgets", json=body)
        assert r.status_code == 201, r.text

    def eviction_body(self, name: str, **options: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"apiVersion": "quaymaster.io/v1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": self.ns}}  # fmt: skip
        if options:
            body["deleteOptions"] = options
        return body

    def evict(self, name: str, body: Any = None, **options: Any) -> httpx.Response:
        return self.http.post(
            f"{API}/namespaces/{self.ns}/pods/{name}/eviction",
            json=self.eviction_body(name, **options) if body is None else body,
        )

    def get_pod(self, name: str) -> dict[str, Any] | None:
        r = self.http.get(f"{API}/namespaces/{self.ns}/pods/{name}")
        return None if r.status_code == 404 else dict(r.json())

    def terminating(self) -> list[str]:
        rows = self.db.execute(
            "SELECT name FROM pods WHERE namespace = %s AND deletion_timestamp IS NOT NULL"
            " ORDER BY name",
            (self.ns,),
        ).fetchall()
        return [r[0] for r in rows]

    def events(self, reason: str) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT spec FROM events WHERE namespace = %s AND reason = %s", (self.ns, reason)
        ).fetchall()
        return [r[0] for r in rows]

    def pdb_status(self, name: str) -> dict[str, Any]:
        r = self.http.get(f"{API}/namespaces/{self.ns}/poddisruptionbudgets/{name}")
        return dict(r.json().get("status") or {})


@pytest.fixture(scope="module")
def http(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        yield c


@pytest.fixture
def cluster(http: httpx.Client, pg_url: str) -> Iterator[Cluster]:
    with psycopg.connect(pg_url, autocommit=True) as db:
        yield Cluster(http, db)


def test_eviction_allowed_then_refused_with_the_budget_named(cluster: Cluster) -> None:
    for name in ("web-0", "web-1", "web-2", "web-3"):
        cluster.pod(name)
    cluster.pdb("web-pdb", minAvailable=3)
    r = cluster.evict("web-0")
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "Success"
    pod = cluster.get_pod("web-0")
    assert pod is not None and pod["metadata"].get("deletionTimestamp")  # graceful, on a node
    conds = {c["type"]: c for c in pod["status"]["conditions"]}
    assert conds["DisruptionTarget"]["status"] == "True"
    assert conds["DisruptionTarget"]["reason"] == "EvictionByEvictionAPI"
    status = cluster.pdb_status("web-pdb")
    assert "web-0" in status["disruptedPods"]
    assert status["disruptionsAllowed"] == 0
    assert [e["involvedObject"]["name"] for e in cluster.events("Evicted")] == ["web-0"]

    r = cluster.evict("web-1")
    assert r.status_code == 429, r.text
    body = r.json()
    assert body["kind"] == "Status" and body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [
        {
            "field": "",
            "reason": "DisruptionBudget",
            "message": "The disruption budget web-pdb needs 3 healthy pods and has 3 currently",
        }
    ]
    assert cluster.terminating() == ["web-0"]
    # Refused twice: one EvictionBlocked Event on the budget, counted twice.
    cluster.evict("web-2")
    [blocked] = cluster.events("EvictionBlocked")
    assert blocked["type"] == "Warning" and blocked["count"] == 2
    assert blocked["involvedObject"]["kind"] == "PodDisruptionBudget"

    # Evicting a pod that is already terminating is a success with nothing to do.
    r = cluster.evict("web-0")
    assert r.status_code == 200, r.text
    # The node agent confirms web-0 gone and a replacement becomes ready: one more is allowed.
    cluster.db.execute("DELETE FROM pods WHERE namespace = %s AND name = 'web-0'", (cluster.ns,))
    cluster.pod("web-4", node="n2")
    assert cluster.evict("web-1").status_code == 201


def test_pods_without_a_budget_and_pods_not_running(cluster: Cluster) -> None:
    cluster.pod("free", app="other")
    assert cluster.evict("free").status_code == 201
    cluster.pdb("strict", minAvailable=5)
    cluster.pod("a")
    cluster.pod("pending", phase="Pending", ready=False)
    cluster.pod("done", phase="Succeeded", ready=False)
    assert cluster.evict("a").status_code == 429
    assert cluster.evict("pending").status_code == 201  # costs the budget nothing
    assert cluster.evict("done").status_code == 201
    assert cluster.evict("missing").status_code == 404


def test_unhealthy_pods_follow_the_policy(cluster: Cluster) -> None:
    cluster.pdb("guarded", app="g", minAvailable=2)
    cluster.pdb("lenient", app="l", minAvailable=2, unhealthyPodEvictionPolicy="AlwaysAllow")
    for app in ("g", "l"):
        cluster.pod(f"{app}-ok", app=app)
        cluster.pod(f"{app}-sick", app=app, ready=False)
    # IfHealthyBudget: only 1 of the 2 needed is healthy, so the sick pod must stay.
    r = cluster.evict("g-sick")
    assert r.status_code == 429
    assert "needs 2 healthy pods and has 1" in r.json()["details"]["causes"][0]["message"]
    assert cluster.evict("l-sick").status_code == 201
    # IfHealthyBudget with the budget met: a sick pod may go without spending a disruption.
    cluster.pod("g-ok2", app="g")
    assert cluster.evict("g-sick").status_code == 201


def test_more_than_one_budget_is_a_server_error(cluster: Cluster) -> None:
    cluster.pod("twice")
    cluster.pdb("one", minAvailable=0)
    cluster.pdb("two", minAvailable=0)
    r = cluster.evict("twice")
    assert r.status_code == 500
    assert "more than one PodDisruptionBudget" in r.json()["message"]
    assert cluster.terminating() == []


def test_preconditions_and_dry_run(cluster: Cluster) -> None:
    created = cluster.pod("p")
    r = cluster.evict("p", preconditions={"uid": "00000000-0000-0000-0000-000000000000"})
    assert r.status_code == 409
    stale = created["metadata"]["resourceVersion"]  # before the status write
    assert cluster.evict("p", preconditions={"resourceVersion": stale}).status_code == 409
    assert cluster.evict("p", dryRun=["All"]).status_code == 201
    assert cluster.terminating() == []
    uid = created["metadata"]["uid"]
    assert cluster.evict("p", preconditions={"uid": uid}, gracePeriodSeconds=0).status_code == 201
    assert cluster.get_pod("p") is None  # grace 0: gone at once


HOSTILE: list[tuple[Any, set[str]]] = [
    ({"metadata": {"name": "other"}}, {"metadata.name"}),
    ({"metadata": {}}, {"metadata.name"}),
    ({"kind": "Eviction"}, {"metadata"}),
    ({"metadata": "p"}, {"metadata"}),
    ({"kind": "Pod", "metadata": {"name": "p"}}, {"kind"}),
    ({"apiVersion": "v9", "metadata": {"name": "p"}}, {"apiVersion"}),
    ({"metadata": {"name": "p", "namespace": "elsewhere"}}, {"metadata.namespace"}),
    ({"metadata": {"name": "p"}, "spec": {}}, {"spec"}),
    ({"metadata": {"name": "p"}, "deleteOptions": []}, {"deleteOptions"}),
    ({"metadata": {"name": "p"}, "deleteOptions": {"gracePeriodSeconds": -1}},
     {"deleteOptions.gracePeriodSeconds"}),
    ({"metadata": {"name": "p"}, "deleteOptions": {"gracePeriodSeconds": True}},
     {"deleteOptions.gracePeriodSeconds"}),
    ({"metadata": {"name": "p"}, "deleteOptions": {"gracePeriodSeconds": 2**63}},
     {"deleteOptions.gracePeriodSeconds"}),
    ({"metadata": {"name": "p"}, "deleteOptions": {"propagationPolicy": "Sideways"}},
     {"deleteOptions.propagationPolicy"}),
    ({"metadata": {"name": "p"}, "deleteOptions": {"preconditions": {"uid": 7}}},
     {"deleteOptions.preconditions.uid"}),
    ({"metadata": {"name": "p"}, "deleteOptions": {"preconditions": {"resourceVersion": "x"}}},
     {"deleteOptions.preconditions.resourceVersion"}),
    ({"metadata": {"name": "p"}, "deleteOptions": {"dryRun": ["Some"]}},
     {"deleteOptions.dryRun"}),
    ({"metadata": {"name": "other", "namespace": "x"}, "kind": "Nope"},
     {"metadata.name", "metadata.namespace", "kind"}),
]  # fmt: skip


def test_malformed_and_hostile_bodies_get_422_with_causes(cluster: Cluster) -> None:
    cluster.pod("p")
    for body, fields in HOSTILE:
        r = cluster.evict("p", body=body)
        assert r.status_code == 422, (body, r.text)
        got = r.json()
        assert got["reason"] == "Invalid"
        assert {c["field"] for c in got["details"]["causes"]} == fields, body
    for raw in (b"", b"{", b"[1,2]", b'"x"'):
        r = cluster.http.post(
            f"{API}/namespaces/{cluster.ns}/pods/p/eviction",
            content=raw,
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 400, (raw, r.text)
    assert cluster.terminating() == []
    assert cluster.get_pod("p") is not None


def test_concurrent_evictions_never_break_the_floor(cluster: Cluster, api_server: Any) -> None:
    names = [f"c-{i:02d}" for i in range(20)]
    for name in names:
        cluster.pod(name)
    cluster.pdb("floor", minAvailable=18)

    async def storm() -> list[int]:
        headers = {"Authorization": f"Bearer {api_server.token}"}
        async with httpx.AsyncClient(base_url=api_server.url, headers=headers, timeout=60) as c:
            rs = await asyncio.gather(
                *(
                    c.post(
                        f"{API}/namespaces/{cluster.ns}/pods/{n}/eviction",
                        json=cluster.eviction_body(n),
                    )
                    for n in names
                )
            )
        return [r.status_code for r in rs]

    codes = asyncio.run(storm())
    assert sorted(codes) == [201, 201] + [429] * 18
    assert len(cluster.terminating()) == 2
    healthy = cluster.db.execute(
        "SELECT count(*) FROM pods WHERE namespace = %s AND deletion_timestamp IS NULL"
        " AND phase = 'Running' AND ready",
        (cluster.ns,),
    ).fetchone()
    assert healthy is not None and healthy[0] == 18
    assert sorted(cluster.pdb_status("floor")["disruptedPods"]) == cluster.terminating()


def test_the_status_controller_keeps_the_budget_current(plane: Any) -> None:
    """Real Celery worker and dispatcher: the PDB's status follows its pods."""
    import json
    import uuid

    from plane import NS, start_worker

    def add_pod(name: str, ready: bool) -> None:
        status = {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}  # fmt: skip
        plane.db.execute(
            "INSERT INTO pods (uid, namespace, name, labels, spec, status)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (str(uuid.uuid4()), NS, name, json.dumps({"app": "web"}),
             json.dumps({"containers": [{"name": "c", "image": "w"}]}), json.dumps(status)),
        )  # fmt: skip

    def status() -> dict[str, Any]:
        row = plane.db.execute(
            "SELECT status FROM poddisruptionbudgets WHERE namespace = %s AND name = 'web-pdb'",
            (NS,),
        ).fetchone()
        return dict(row[0]) if row else {}

    start_worker(plane)
    plane.start("-m", "workers.dispatch")
    for i in range(3):
        add_pod(f"web-{i}", ready=True)
    spec = {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
    plane.db.execute(
        "INSERT INTO poddisruptionbudgets (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
        (str(uuid.uuid4()), NS, "web-pdb", json.dumps(spec)),
    )
    plane.wait(lambda: status().get("currentHealthy") == 3, timeout=30, what="currentHealthy 3")
    st = status()
    assert (st["desiredHealthy"], st["disruptionsAllowed"], st["expectedPods"]) == (2, 1, 3)
    assert st["conditions"][0]["reason"] == "SufficientPods"
    assert st["observedGeneration"] == 1
    # A pod turns unready: the dispatcher wakes the budget, which now allows nothing.
    plane.db.execute(
        "UPDATE pods SET status = jsonb_set(status, '{conditions,0,status}', '\"False\"')"
        " WHERE namespace = %s AND name = 'web-0'",
        (NS,),
    )
    plane.wait(lambda: status().get("disruptionsAllowed") == 0, timeout=30, what="no disruption")
    st = status()
    assert st["currentHealthy"] == 2
    assert st["conditions"][0] == {**st["conditions"][0], "status": "False",
                                   "reason": "InsufficientPods"}  # fmt: skip


def test_a_selector_with_expressions_counts_the_same_in_sql(cluster: Cluster) -> None:
    for i in range(3):
        cluster.pod(f"e-{i}", app="expr")
    cluster.pod("e-other", app="nope")
    exprs = [
        {"key": "app", "operator": "In", "values": ["expr", "x"]},
        {"key": "tier", "operator": "NotIn", "values": ["db"]},
        {"key": "app", "operator": "Exists"},
        {"key": "gone", "operator": "DoesNotExist"},
    ]
    body = {"metadata": {"name": "expr-pdb"},
            "spec": {"minAvailable": 2, "selector": {"matchExpressions": exprs}}}  # fmt: skip
    r = cluster.http.post(f"{API}/namespaces/{cluster.ns}/poddisruptionbudgets", json=body)
    assert r.status_code == 201, r.text
    assert cluster.evict("e-0").status_code == 201
    r = cluster.evict("e-1")
    assert r.status_code == 429
    cause = r.json()["details"]["causes"][0]["message"]
    assert cause == "The disruption budget expr-pdb needs 2 healthy pods and has 2 currently"
    assert cluster.evict("e-other").status_code == 201  # not selected: no budget
