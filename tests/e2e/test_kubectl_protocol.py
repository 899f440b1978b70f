"""What kubectl relies on, asked of a real API server over plain HTTP requests: ``dryRun=All``
on every write, the ``scale`` subresource, server-side tables on lists, gets and watches, the
watch-list's closing bookmark and the core Events search describe sends (ADR 0050). The
kubectl end-to-end test (``test_kubectl``) drives the same through kubectl itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

API = "/apis/quaymaster.io/v1"
NS = "kubectl-protocol"
TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
MERGE = {"Content-Type": "application/merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}
CM = f"{API}/namespaces/{NS}/configmaps"
DEPLOY = f"{API}/namespaces/{NS}/deployments"


def configmap(name: str, value: str = "1") -> dict[str, Any]:
    return {"apiVersion": "quaymaster.io/v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"app": "web"}}, "data": {"v": value}}  # fmt: skip


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "local/python", "command": ["sleep", "1"]}
                    ]
                },
            },
        },
    }


@pytest.fixture(scope="module")
def http(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        r = c.post(f"{API}/namespaces", json={"metadata": {"name": NS}})
        assert r.status_code in (201, 409), r.text
        yield c


def test_dry_run_answers_every_write_and_stores_nothing(http: httpx.Client) -> None:
    dry = {"dryRun": "All"}
    created = http.post(CM, json=configmap("dry"), params=dry)
    assert created.status_code == 201, created.text
    assert created.json()["metadata"]["uid"] and "resourceVersion" not in created.json()["metadata"]
    assert http.get(f"{CM}/dry").status_code == 404
    named = http.post(CM, json={**configmap(""), "metadata": {"generateName": "gen-"}}, params=dry)
    assert named.json()["metadata"]["name"].startswith("gen-")
    invalid = http.post(CM, json={**configmap("bad"), "dataz": {}}, params=dry)
    assert invalid.status_code == 422, invalid.text  # admitted as a real write would be

    real = http.post(CM, json=configmap("real")).json()
    assert http.post(CM, json=configmap("real"), params=dry).status_code == 409
    patched = http.patch(f"{CM}/real", json={"data": {"v": "2"}}, headers=MERGE, params=dry)
    assert patched.status_code == 200 and patched.json()["data"] == {"v": "2"}
    replaced = http.put(f"{CM}/real", json={**real, "data": {"v": "3"}}, params=dry)
    assert replaced.status_code == 200 and replaced.json()["data"] == {"v": "3"}
    assert http.delete(f"{CM}/real", params=dry).status_code == 200
    in_body = http.request("DELETE", f"{CM}/real", json={"dryRun": ["All"]})
    assert in_body.status_code == 200, in_body.text
    now = http.get(f"{CM}/real").json()
    assert now["data"] == {"v": "1"}
    assert now["metadata"]["resourceVersion"] == real["metadata"]["resourceVersion"]
    refused = http.patch(f"{CM}/real", json={}, headers=MERGE, params={"dryRun": "Some"})
    assert (refused.status_code, refused.json()["reason"]) == (400, "BadRequest")


def test_the_scale_subresource(http: httpx.Client) -> None:
    assert http.post(DEPLOY, json=deployment("web", 2)).status_code == 201
    scale = http.get(f"{DEPLOY}/web/scale").json()
    assert (scale["apiVersion"], scale["kind"], scale["spec"]) == (
        "autoscaling/v1", "Scale", {"replicas": 2}
    )  # fmt: skip
    assert scale["status"]["selector"] == "app=web"
    put = http.put(f"{DEPLOY}/web/scale", json={**scale, "spec": {"replicas": 4}})
    assert put.status_code == 200 and put.json()["spec"]["replicas"] == 4
    stale = http.put(f"{DEPLOY}/web/scale", json={**scale, "spec": {"replicas": 5}})
    assert stale.status_code == 409, stale.text  # the Scale's resourceVersion is a condition
    merged = http.patch(f"{DEPLOY}/web/scale", json={"spec": {"replicas": 3}}, headers=MERGE)
    assert merged.json()["spec"]["replicas"] == 3
    ops = [{"op": "replace", "path": "/spec/replicas", "value": 1}]
    assert http.patch(f"{DEPLOY}/web/scale", json=ops, headers=JSONPATCH).json()["spec"] == {
        "replicas": 1
    }
    dry = http.patch(f"{DEPLOY}/web/scale", json={"spec": {"replicas": 9}}, headers=MERGE,
                     params={"dryRun": "All"})  # fmt: skip
    assert dry.json()["spec"]["replicas"] == 9
    assert http.get(f"{DEPLOY}/web").json()["spec"]["replicas"] == 1
    bad = http.patch(f"{DEPLOY}/web/scale", json={"spec": {"replicas": -1}}, headers=MERGE)
    assert (bad.status_code, bad.json()["details"]["causes"][0]["field"]) == (422, "spec.replicas")
    assert http.get(f"{API}/namespaces/{NS}/configmaps/x/scale").status_code == 404


def test_tables_for_lists_gets_and_watches(http: httpx.Client) -> None:
    http.post(CM, json=configmap("table-a"))
    listed = http.get(CM, headers=TABLE, params={"labelSelector": "app=web"}).json()
    assert listed["kind"] == "Table"
    assert [c["name"] for c in listed["columnDefinitions"]] == ["Name", "Age", "Labels"]
    assert "table-a" in [row["cells"][0] for row in listed["rows"]]
    assert listed["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    one = http.get(f"{DEPLOY}/web", headers=TABLE, params={"includeObject": "Object"}).json()
    assert one["rows"][0]["cells"][:4] == ["web", "1", "<none>", "<none>"]
    assert one["rows"][0]["object"]["kind"] == "Deployment"
    assert http.get(CM, headers={"Accept": "application/json"}).json()["kind"] == "ConfigMapList"

    rv = listed["metadata"]["resourceVersion"]
    params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "3"}
    with http.stream("GET", CM, headers=TABLE, params=params) as stream:
        http.post(CM, json=configmap("table-b"))
        events = [json.loads(line) for line in stream.iter_lines() if line.strip()]
    added = [e for e in events if e["type"] == "ADDED"]
    assert added and added[0]["object"]["kind"] == "Table"
    assert added[0]["object"]["rows"][0]["cells"][0] == "table-b"


def test_a_watch_list_ends_its_initial_objects_with_a_bookmark(http: httpx.Client) -> None:
    params = {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
              "allowWatchBookmarks": "true", "fieldSelector": "metadata.name=table-a",
              "timeoutSeconds": "2"}  # fmt: skip
    with http.stream("GET", CM, params=params) as stream:
        events = [json.loads(line) for line in stream.iter_lines() if line.strip()]
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"], events
    assert events[0]["object"]["metadata"]["name"] == "table-a"
    annotations = events[1]["object"]["metadata"]["annotations"]
    assert annotations == {"k8s.io/initial-events-end": "true"}


def test_the_core_events_search(http: httpx.Client) -> None:
    web = http.get(f"{DEPLOY}/web").json()
    event = {
        "apiVersion": "quaymaster.io/v1", "kind": "Event",
        "metadata": {"name": "web.scaled"}, "type": "Normal", "reason": "ScalingReplicaSet",
        "message": "scaled", "involvedObject": {"kind": "Deployment", "name": "web",
                                                "namespace": NS, "uid": web["metadata"]["uid"]},
    }  # fmt: skip
    assert http.post(f"{API}/namespaces/{NS}/events", json=event).status_code == 201
    selector = (f"involvedObject.kind=Deployment,involvedObject.uid={web['metadata']['uid']},"
                f"involvedObject.name=web,involvedObject.namespace={NS}")  # fmt: skip
    found = http.get(f"/api/v1/namespaces/{NS}/events", params={"fieldSelector": selector})
    body = found.json()
    assert (body["kind"], body["apiVersion"]) == ("EventList", "v1"), found.text
    assert [e["reason"] for e in body["items"]] == ["ScalingReplicaSet"]
    elsewhere = selector.replace(f"involvedObject.namespace={NS}", "involvedObject.namespace=x")
    none = http.get(f"/api/v1/namespaces/{NS}/events", params={"fieldSelector": elsewhere})
    assert none.json()["items"] == []
