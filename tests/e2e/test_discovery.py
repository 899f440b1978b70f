"""Discovery, version, health, metrics and the OpenAPI document, as clients find them."""

from __future__ import annotations

import httpx


def test_discovery_lists_every_kind_and_its_subresources(api_server) -> None:  # type: ignore[no-untyped-def]
    h = {"Authorization": f"Bearer {api_server.token}"}
    groups = httpx.get(f"{api_server.url}/apis", headers=h).json()
    assert groups["groups"][0]["preferredVersion"]["groupVersion"] == "quaymaster.io/v1"
    res = httpx.get(f"{api_server.url}/apis/quaymaster.io/v1", headers=h).json()
    names = {r["name"]: r for r in res["resources"]}
    assert names["pods"]["namespaced"] is True and "watch" in names["pods"]["verbs"]
    assert names["nodes"]["namespaced"] is False
    assert "pods/status" in names and "configmaps/status" not in names
    assert names["deployments"]["shortNames"] == ["deploy"]
    assert names["pods/log"]["verbs"] == ["get"] and names["pods/eviction"]["verbs"] == ["create"]
    assert groups["groups"][1]["name"] == "metrics.quaymaster.io"
    metrics = httpx.get(f"{api_server.url}/apis/metrics.quaymaster.io/v1", headers=h).json()
    assert {r["name"]: r["kind"] for r in metrics["resources"]} == {
        "nodes": "NodeMetrics",
        "pods": "PodMetrics",
    }


def test_openapi_document_and_docs_ui(api_server) -> None:  # type: ignore[no-untyped-def]
    index = httpx.get(f"{api_server.url}/openapi/v3").json()
    url = index["paths"]["apis/quaymaster.io/v1"]["serverRelativeURL"]
    doc = httpx.get(f"{api_server.url}{url}").json()
    assert doc["openapi"].startswith("3.")
    assert httpx.get(f"{api_server.url}/schema").json()["paths"].keys() >= doc["paths"].keys()
    pods = doc["paths"]["/apis/quaymaster.io/v1/namespaces/{namespace}/pods"]
    assert {"get", "post"} <= set(pods)
    assert (
        "patch" in doc["paths"]["/apis/quaymaster.io/v1/namespaces/{namespace}/pods/{name}/status"]
    )
    ui = httpx.get(f"{api_server.url}/schema/swagger")
    assert ui.status_code == 200 and "swagger" in ui.text.lower()


def test_version_health_and_metrics(api_server) -> None:  # type: ignore[no-untyped-def]
    v = httpx.get(f"{api_server.url}/version").json()
    assert v["gitVersion"].startswith("v")
    for path in ("/healthz", "/livez", "/readyz"):
        assert httpx.get(f"{api_server.url}{path}").text == "ok"
    metrics = httpx.get(f"{api_server.url}/metrics").text
    assert "qm_watch_cache_revision " in metrics
    assert 'qm_watch_cache_objects{kind="Namespace"}' in metrics
    assert "qm_revisioner_child_alive 1" in metrics
