"""Deletion through the API: finalizers, graceful pod termination and ownerReference cascades
(background, orphan, foreground; the cascades carried out by the garbage collector controller),
plus hand-made SQL changes surfacing through GET and watch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest

API = "/apis/quaymaster.io/v1"
NS = "deletion"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}
HOLD = "example.com/hold"


def path(plural: str, name: str = "") -> str:
    base = f"{API}/namespaces/{NS}/{plural}"
    return f"{base}/{name}" if name else base


@pytest.fixture(scope="module")
def http(api_server, controllers) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        r = c.post(
            f"{API}/namespaces",
            json={"apiVersion": "quaymaster.io/v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
        assert r.status_code in (201, 409), r.text
        yield c


@pytest.fixture(scope="module")
def db(pg_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


def eventually(check: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.05)


def gone(http: httpx.Client, plural: str, name: str) -> bool:
    r = http.get(path(plural, name))
    assert r.status_code in (200, 404), r.text
    return r.status_code == 404


def get(http: httpx.Client, plural: str, name: str) -> dict[str, Any]:
    r = http.get(path(plural, name))
    assert r.status_code == 200, r.text
    return r.json()


def create(http: httpx.Client, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
    r = http.post(path(plural), json=obj)
    assert r.status_code == 201, r.text
    return r.json()


def ref(owner: dict[str, Any], controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def cm(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, **meta},
        "data": {"k": "v"},
    }


def pod(name: str, **meta: Any) -> dict[str, Any]:
    node = meta.pop("node", None)
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox:1.36"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name.rsplit("-", 1)[0]}, **meta},
        "spec": spec,
    }


def workload(kind: str, name: str, app: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": kind,
        "metadata": {"name": name, **meta},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }


def tree(http: httpx.Client, prefix: str, rs_finalizers: list[str] | None = None) -> dict[str, Any]:
    """A Deployment owning a ReplicaSet owning two (unbound) Pods."""
    deploy = create(http, "deployments", workload("Deployment", prefix, prefix))
    rs_meta: dict[str, Any] = {"ownerReferences": [ref(deploy)]}
    if rs_finalizers:
        rs_meta["finalizers"] = rs_finalizers
    rs = create(http, "replicasets", workload("ReplicaSet", f"{prefix}-rs", prefix, **rs_meta))
    pods = [
        create(http, "pods", pod(f"{prefix}-rs-{i}", ownerReferences=[ref(rs)])) for i in range(2)
    ]
    assert pods[0]["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]
    return {"deploy": deploy, "rs": rs, "pods": pods}


def names(t: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        ("deployments", t["deploy"]["metadata"]["name"]),
        ("replicasets", t["rs"]["metadata"]["name"]),
        *(("pods", p["metadata"]["name"]) for p in t["pods"]),
    ]


# ---------------------------------------------------------------------------- finalizers


def test_finalizer_holds_the_object_until_removed(http, db) -> None:
    created = create(http, "configmaps", cm("held", finalizers=[HOLD]))
    r = http.delete(path("configmaps", "held"))
    assert r.status_code == 200, r.text
    marked = r.json()
    assert marked["kind"] == "ConfigMap"
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["finalizers"] == [HOLD]
    assert int(marked["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])

    time.sleep(0.3)
    assert get(http, "configmaps", "held") == marked
    again = http.delete(path("configmaps", "held"))
    assert again.status_code == 200, again.text
    assert again.json()["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]

    # A terminating object may still be updated, but its deletionTimestamp stays.
    r = http.patch(
        path("configmaps", "held"),
        content=b'{"metadata": {"deletionTimestamp": null}, "data": {"k": "w"}}',
        headers=MERGE,
    )
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]
    assert r.json()["data"] == {"k": "w"}

    r = http.patch(
        path("configmaps", "held"), content=b'{"metadata": {"finalizers": null}}', headers=MERGE
    )
    assert r.status_code == 200, r.text
    eventually(lambda: gone(http, "configmaps", "held"), what="the finalized object to go")
    assert db.execute(
        "SELECT count(*) FROM configmaps WHERE namespace = %s AND name = 'held'", (NS,)
    ).fetchone() == (0,)
    verbs = db.execute(
        "SELECT op, verb, after ? 'deletion_timestamp' FROM qm_history"
        " WHERE table_name = 'configmaps' AND namespace = %s AND name = 'held' ORDER BY id",
        (NS,),
    ).fetchall()
    assert verbs[0] == ("insert", "create", True)
    assert verbs[1] == ("update", "delete", True), "marking for deletion is recorded"
    assert verbs[-1] == ("delete", "patch", None), "the removal the last patch allowed too"


# ---------------------------------------------------------------------------- graceful pods


def test_bound_pod_terminates_gracefully_and_unbound_pod_goes_now(http) -> None:
    create(http, "pods", pod("bound-0", node="node-a"))
    create(http, "pods", pod("unbound-0"))

    r = http.delete(path("pods", "unbound-0"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["kind"], body["status"]) == ("Status", "Success")
    assert body["details"]["name"] == "unbound-0"
    assert gone(http, "pods", "unbound-0")

    r = http.delete(path("pods", "bound-0"))
    assert r.status_code == 200, r.text
    marked = r.json()
    assert marked["kind"] == "Pod"
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    assert get(http, "pods", "bound-0")["metadata"]["deletionTimestamp"]

    create(http, "pods", pod("bound-1", node="node-a"))
    r = http.delete(path("pods", "bound-1"), params={"gracePeriodSeconds": "5"})
    assert r.json()["metadata"]["deletionGracePeriodSeconds"] == 5

    # Force deletion (grace period 0) removes them at once.
    for name in ("bound-0", "bound-1"):
        r = http.delete(path("pods", name), params={"gracePeriodSeconds": "0"})
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "Success"
        assert gone(http, "pods", name)


# ---------------------------------------------------------------------------- owner references


def test_background_cascade_deletes_all_dependents(http, db) -> None:
    t = tree(http, "bg")
    r = http.delete(path("deployments", "bg"), params={"propagationPolicy": "Background"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "Success"
    for plural, name in names(t):
        eventually(lambda p=plural, n=name: gone(http, p, n), what=f"{plural}/{name} to go")
    audited = db.execute(
        "SELECT kind, name FROM qm_history WHERE namespace = %s AND verb = 'delete'"
        " AND name LIKE 'bg%%' ORDER BY id",
        (NS,),
    ).fetchall()
    # (The Deployment controller, running here, may have made and lost objects of its own.)
    expected = {
        ("Deployment", "bg"),
        ("ReplicaSet", "bg-rs"),
        ("Pod", "bg-rs-0"),
        ("Pod", "bg-rs-1"),
    }
    assert expected <= set(audited)


def test_default_propagation_is_background(http) -> None:
    t = tree(http, "dflt")
    r = http.delete(path("deployments", "dflt"))
    assert r.status_code == 200, r.text
    for plural, name in names(t):
        eventually(lambda p=plural, n=name: gone(http, p, n), what=f"{plural}/{name} to go")


@pytest.mark.parametrize(
    "how",
    [{"params": {"propagationPolicy": "Orphan"}}, {"json": {"orphanDependents": True}}],
    ids=["query", "orphanDependents"],
)
def test_orphan_keeps_dependents_and_drops_the_reference(http, how: dict[str, Any]) -> None:
    prefix = "orph-q" if "params" in how else "orph-b"
    t = tree(http, prefix)
    r = http.request("DELETE", path("deployments", prefix), **how)
    assert r.status_code == 200, r.text
    assert gone(http, "deployments", prefix)

    def orphaned() -> bool:
        return "ownerReferences" not in get(http, "replicasets", f"{prefix}-rs")["metadata"]

    eventually(orphaned, what="the ReplicaSet to lose its owner")
    rs = get(http, "replicasets", f"{prefix}-rs")
    assert rs["metadata"]["uid"] == t["rs"]["metadata"]["uid"]
    assert "deletionTimestamp" not in rs["metadata"]
    for p in t["pods"]:
        current = get(http, "pods", p["metadata"]["name"])
        assert current["metadata"]["ownerReferences"] == [ref(t["rs"])], "only direct dependents"
    # The orphans now delete on their own terms.
    r = http.delete(path("replicasets", f"{prefix}-rs"))
    assert r.status_code == 200
    for p in t["pods"]:
        eventually(lambda n=p["metadata"]["name"]: gone(http, "pods", n))


def test_foreground_waits_for_dependents(http) -> None:
    t = tree(http, "fg", rs_finalizers=[HOLD])
    r = http.delete(path("deployments", "fg"), params={"propagationPolicy": "Foreground"})
    assert r.status_code == 200, r.text
    owner = r.json()
    assert owner["kind"] == "Deployment"
    assert owner["metadata"]["deletionTimestamp"]
    assert owner["metadata"]["finalizers"] == ["foregroundDeletion"]

    for p in t["pods"]:
        eventually(lambda n=p["metadata"]["name"]: gone(http, "pods", n))
    rs = get(http, "replicasets", "fg-rs")
    assert rs["metadata"]["deletionTimestamp"]
    assert rs["metadata"]["finalizers"] == [HOLD]

    # While the held dependent remains, the owner remains too (past a housekeeping sweep).
    time.sleep(2.5)
    still = get(http, "deployments", "fg")
    assert still["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert still["metadata"]["deletionTimestamp"] == owner["metadata"]["deletionTimestamp"]

    ops = [{"op": "remove", "path": "/metadata/finalizers"}]
    r = http.patch(
        path("replicasets", "fg-rs"), content=json.dumps(ops).encode(), headers=JSONPATCH
    )
    assert r.status_code == 200, r.text
    eventually(lambda: gone(http, "replicasets", "fg-rs"), what="the released ReplicaSet to go")
    eventually(lambda: gone(http, "deployments", "fg"), what="the foreground owner to go")


def test_foreground_without_blockers_finishes_without_waiting(http) -> None:
    t = tree(http, "fgnow")
    r = http.delete(path("deployments", "fgnow"), params={"propagationPolicy": "Foreground"})
    assert r.status_code == 200, r.text
    # As in Kubernetes: the owner is shown waiting, and goes once the collector removed its
    # dependents.
    assert r.json()["metadata"]["finalizers"] == ["foregroundDeletion"]
    for plural, name in names(t):
        eventually(lambda p=plural, n=name: gone(http, p, n), what=f"{plural}/{name} to go")


def test_dependent_with_two_owners_loses_only_the_deleted_one(http) -> None:
    a = create(http, "configmaps", cm("owner-a"))
    b = create(http, "configmaps", cm("owner-b"))
    create(
        http,
        "configmaps",
        cm("shared", ownerReferences=[ref(a, controller=False), ref(b, controller=False)]),
    )
    r = http.delete(path("configmaps", "owner-a"))
    assert r.status_code == 200, r.text

    def only_b() -> bool:
        return get(http, "configmaps", "shared")["metadata"]["ownerReferences"] == [
            ref(b, controller=False)
        ]

    eventually(only_b, what="the shared dependent to lose only owner-a")
    assert "deletionTimestamp" not in get(http, "configmaps", "shared")["metadata"]

    r = http.delete(path("configmaps", "owner-b"))
    assert r.status_code == 200, r.text
    eventually(lambda: gone(http, "configmaps", "shared"), what="the last owner's cascade")


# ---------------------------------------------------------------------------- changes by SQL


async def test_sql_update_shows_through_get_and_watch(api_server, http, db) -> None:
    created = create(http, "configmaps", cm("by-dba"))
    since = created["metadata"]["resourceVersion"]
    headers = {"Authorization": f"Bearer {api_server.token}"}
    db.execute(
        "UPDATE configmaps SET spec = %s WHERE namespace = %s AND name = 'by-dba'",
        (json.dumps({"data": {"k": "dba"}}), NS),
    )
    deadline = time.monotonic() + 6
    while (got := get(http, "configmaps", "by-dba"))["data"] != {"k": "dba"}:
        assert time.monotonic() < deadline, "the SQL change never reached the API"
        time.sleep(0.05)
    assert int(got["metadata"]["resourceVersion"]) > int(since)
    assert got["metadata"]["generation"] == created["metadata"]["generation"] + 1
    assert got["metadata"]["uid"] == created["metadata"]["uid"]

    events: list[dict[str, Any]] = []
    params = {"watch": "1", "resourceVersion": since, "timeoutSeconds": "10"}
    async with (
        httpx.AsyncClient(base_url=api_server.url, headers=headers, timeout=30) as c,
        c.stream("GET", path("configmaps"), params=params) as resp,
    ):
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if not line:
                continue
            ev = json.loads(line)
            if ev["object"]["metadata"]["name"] == "by-dba":
                events.append(ev)
                break
    (ev,) = events
    assert ev["type"] == "MODIFIED"
    assert ev["object"] == got


def test_cascade_writes_are_recorded_and_secret_data_is_not(http, db) -> None:  # type: ignore[no-untyped-def]
    owner = create(http, "configmaps", cm("audit-owner"))
    dep = create(http, "configmaps", cm("audit-dep", ownerReferences=[ref(owner)]))
    r = http.delete(path("configmaps", "audit-owner"), params={"propagationPolicy": "Orphan"})
    assert r.status_code == 200, r.text
    row = db.execute(
        "SELECT principal, verb, before->'owner_references', after->'owner_references'"
        " FROM qm_history WHERE uid = %s ORDER BY id DESC LIMIT 1",
        (dep["metadata"]["uid"],),
    ).fetchone()
    assert row is not None and row[0] and row[1] == "update"
    assert row[2] and row[3] == []

    secret = create(
        http, "secrets", {"metadata": {"name": "audit-secret"}, "data": {"k": "c2VjcmV0"}}
    )
    assert http.delete(path("secrets", "audit-secret")).status_code == 200
    images = db.execute(
        "SELECT before, after FROM qm_history WHERE uid = %s", (secret["metadata"]["uid"],)
    ).fetchall()
    assert len(images) == 2  # insert and delete
    assert all("c2VjcmV0" not in str(img) for pair in images for img in pair)
    assert images[0][1]["spec"]["data"].startswith("sha256:")  # a digest, never the value
