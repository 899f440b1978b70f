"""The metrics API on a real API server and Redis: samples in, NodeMetrics and PodMetrics out,
hostile bodies refused field by field, unknown nodes and unauthenticated callers turned away."""

from __future__ import annotations

import datetime as dt
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.api.service import MAX_BODY
from app.devstack.apiserver import ApiServer

M = "/apis/metrics.quaymaster.io/v1"
Obj = dict[str, Any]


@pytest.fixture
def http(api_server: ApiServer) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=10) as client:
        yield client


@pytest.fixture
def node(http: httpx.Client) -> str:
    name = f"usage-{secrets.token_hex(3)}"
    r = http.post("/apis/quaymaster.io/v1/nodes", json={"metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name


def stamp(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat().replace("+00:00", "Z")


def pod(ns: str, name: str, cpu: int, mem: int, **extra: Any) -> Obj:
    containers = [{"name": "main", "cpuMillis": cpu, "memoryBytes": mem}]
    body = {"namespace": ns, "name": name, "uid": f"uid-{name}", "priority": 7,
            "cpuMillis": cpu, "memoryBytes": mem, "containers": containers, **extra}  # fmt: skip
    return {k: v for k, v in body.items() if v is not None}


def sample(*pods: Obj, at: float | None = None, **extra: Any) -> Obj:
    return {"apiVersion": "metrics.quaymaster.io/v1", "kind": "NodeUsageSample",
            "timestamp": stamp(time.time() if at is None else at), "window": "5s",
            "pods": list(pods), **extra}  # fmt: skip


def causes(r: httpx.Response) -> dict[str, str]:
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["kind"] == "Status" and body["reason"] == "Invalid"
    return {c["field"]: c["reason"] for c in body["details"]["causes"]}


def test_sample_round_trip(http: httpx.Client, node: str) -> None:
    ns = f"ns-{secrets.token_hex(3)}"
    body = sample(pod(ns, "web", 250, 64 * 2**20), pod(ns, "db", 1500, 2**30))
    r = http.post(f"{M}/nodes/{node}/samples", json=body)
    assert r.status_code == 201, r.text

    got = http.get(f"{M}/nodes/{node}").json()
    assert got["kind"] == "NodeMetrics" and got["metadata"]["name"] == node
    assert got["usage"] == {"cpu": "1750m", "memory": f"{(64 * 2**20 + 2**30) // 1024}Ki"}
    assert got["window"] == "5s"
    listed = http.get(f"{M}/nodes").json()
    assert listed["kind"] == "NodeMetricsList"
    assert node in [i["metadata"]["name"] for i in listed["items"]]

    web = http.get(f"{M}/namespaces/{ns}/pods/web").json()
    assert web["kind"] == "PodMetrics" and web["node"] == node and web["priority"] == 7
    assert web["containers"] == [{"name": "main", "usage": {"cpu": "250m", "memory": "65536Ki"}}]
    names = [i["metadata"]["name"] for i in http.get(f"{M}/namespaces/{ns}/pods").json()["items"]]
    assert names == ["db", "web"]
    everywhere = http.get(f"{M}/pods").json()["items"]
    assert {"db", "web"} <= {i["metadata"]["name"] for i in everywhere if
                             i["metadata"]["namespace"] == ns}  # fmt: skip

    # The next sample no longer has "db": it leaves the pod index.
    assert http.post(f"{M}/nodes/{node}/samples", json=sample(pod(ns, "web", 1, 1))).is_success
    assert http.get(f"{M}/namespaces/{ns}/pods/db").status_code == 404


def test_unknown_node_and_missing_metrics_are_404(http: httpx.Client, node: str) -> None:
    r = http.post(f"{M}/nodes/no-such-node-{secrets.token_hex(3)}/samples", json=sample())
    assert r.status_code == 404 and r.json()["kind"] == "Status"
    assert http.get(f"{M}/nodes/{node}").status_code == 404  # registered, never reported
    assert http.get(f"{M}/namespaces/default/pods/nobody").status_code == 404


def test_unauthenticated_callers_are_refused(api_server: ApiServer, node: str) -> None:
    with httpx.Client(base_url=api_server.url, timeout=10) as anonymous:
        assert anonymous.post(f"{M}/nodes/{node}/samples", json=sample()).status_code == 401
        assert anonymous.get(f"{M}/nodes").status_code == 401


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(sample(pod("ns", "p", -1, 5)),
                     {"pods[0].cpuMillis": "FieldValueInvalid",
                      "pods[0].containers[0].cpuMillis": "FieldValueInvalid"}, id="negative cpu"),
        pytest.param(sample(pod("ns", "p", 1, 2**60, containers=[])),
                     {"pods[0].memoryBytes": "FieldValueInvalid"}, id="absurd memory"),
        pytest.param(sample(pod("ns", "p", True, "1Gi", containers=None)),
                     {"pods[0].cpuMillis": "FieldValueInvalid",
                      "pods[0].memoryBytes": "FieldValueInvalid"}, id="wrong types"),
        pytest.param(sample(pod("ns", "p", 1, 1, containers=[{"name": "a", "cpuMillis": 1},
                                                            {"name": "a", "memoryBytes": 1}])),
                     {"pods[0].containers[0].memoryBytes": "FieldValueRequired",
                      "pods[0].containers[1].cpuMillis": "FieldValueRequired",
                      "pods[0].containers[1].name": "FieldValueDuplicate"},
                     id="containers incomplete and twice"),
        pytest.param(sample(pod("Bad_NS", "p/../x", 1, 1)),
                     {"pods[0].namespace": "FieldValueInvalid",
                      "pods[0].name": "FieldValueInvalid"}, id="bad names"),
        pytest.param(sample(pod("ns", "p", 1, 1), pod("ns", "p", 1, 1)),
                     {"pods[1]": "FieldValueDuplicate"}, id="duplicate pod"),
        pytest.param(sample(*[pod("ns", f"p{i}", 1, 1) for i in range(1001)]),
                     {"pods": "TooMany"}, id="too many pods"),
        pytest.param(sample(pod("ns", "p", 1, 1, extra=1), junk=True),
                     {"pods[0].extra": "FieldValueNotSupported", "junk": "FieldValueNotSupported"},
                     id="unknown fields"),
        pytest.param(sample(at=time.time() + 3600), {"timestamp": "FieldValueInvalid"},
                     id="far future"),
        pytest.param({**sample(), "timestamp": "yesterday", "window": "-3s"},
                     {"timestamp": "FieldValueInvalid", "window": "FieldValueInvalid"},
                     id="bad time and window"),
        pytest.param({"kind": "Pod", "pods": "all"},
                     {"kind": "FieldValueNotSupported", "timestamp": "FieldValueRequired",
                      "pods": "FieldValueInvalid"}, id="wrong shape"),
    ],
)  # fmt: skip
def test_hostile_bodies_get_field_level_422(
    http: httpx.Client, node: str, body: Obj, expected: dict[str, str]
) -> None:
    assert causes(http.post(f"{M}/nodes/{node}/samples", json=body)) == expected
    assert http.get(f"{M}/nodes/{node}").status_code == 404  # nothing was recorded


def test_metadata_name_must_match_the_url(http: httpx.Client, node: str) -> None:
    body = {**sample(), "metadata": {"name": "someone-else"}}
    assert causes(http.post(f"{M}/nodes/{node}/samples", json=body)) == {
        "metadata.name": "FieldValueInvalid"
    }


def test_not_json_is_400(http: httpx.Client, node: str) -> None:
    r = http.post(f"{M}/nodes/{node}/samples", content=b"{nope",
                  headers={"Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 400 and r.json()["kind"] == "Status"


def test_an_oversized_sample_is_refused_and_records_nothing(http: httpx.Client, node: str) -> None:
    """Samples are answered by the fast write path, which stops reading at the body limit."""
    padding = "x" * MAX_BODY
    r = http.post(
        f"{M}/nodes/{node}/samples",
        content=b'{"pods": [], "timestamp": "' + padding.encode() + b'"}',
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 413 and r.json()["kind"] == "Status", r.text[:200]
    assert http.get(f"{M}/nodes/{node}").status_code == 404  # nothing recorded
    ok = http.post(f"{M}/nodes/{node}/samples", json=sample(pod("ns", "p", 5, 6)))
    assert ok.status_code == 201 and ok.json()["status"] == "Success"
    assert ok.headers["content-type"].startswith("application/json")
