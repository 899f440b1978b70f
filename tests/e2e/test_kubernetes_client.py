"""The official ``kubernetes`` Python client, through CustomObjectsApi, against a real server."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

GROUP, VERSION = "quaymaster.io", "v1"


@pytest.fixture(scope="module")
def api(api_server):  # type: ignore[no-untyped-def]
    cfg = client.Configuration()
    cfg.host = api_server.url
    cfg.api_key = {"authorization": api_server.token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    objs = client.CustomObjectsApi(client.ApiClient(cfg))
    try:
        objs.create_cluster_custom_object(
            GROUP,
            VERSION,
            "namespaces",
            {
                "apiVersion": "quaymaster.io/v1",
                "kind": "Namespace",
                "metadata": {"name": "k8s-client"},
            },
        )
    except ApiException as exc:
        assert exc.status == 409
    return objs


def _cm(name: str, labels: dict[str, str], data: dict[str, str]) -> dict:
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": data,
    }


def test_create_get_list_patch_replace_delete(api) -> None:  # type: ignore[no-untyped-def]
    ns, plural = "k8s-client", "configmaps"
    created = api.create_namespaced_custom_object(
        GROUP, VERSION, ns, plural, _cm("alpha", {"tier": "web"}, {"k": "v1"})
    )
    api.create_namespaced_custom_object(
        GROUP, VERSION, ns, plural, _cm("beta", {"tier": "db"}, {"k": "v1"})
    )
    assert created["metadata"]["uid"]
    got = api.get_namespaced_custom_object(GROUP, VERSION, ns, plural, "alpha")
    assert got["data"] == {"k": "v1"}
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    listed = api.list_namespaced_custom_object(
        GROUP, VERSION, ns, plural, label_selector="tier=web"
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == ["alpha"]
    listed = api.list_namespaced_custom_object(
        GROUP, VERSION, ns, plural, label_selector="tier in (web,db)"
    )
    assert sorted(i["metadata"]["name"] for i in listed["items"]) == ["alpha", "beta"]

    patched = api.patch_namespaced_custom_object(
        GROUP, VERSION, ns, plural, "alpha", {"data": {"k": "v2"}}
    )
    assert patched["data"] == {"k": "v2"}
    assert int(patched["metadata"]["resourceVersion"]) > int(got["metadata"]["resourceVersion"])

    stale = dict(got)
    stale["data"] = {"k": "stale"}
    with pytest.raises(ApiException) as exc:
        api.replace_namespaced_custom_object(GROUP, VERSION, ns, plural, "alpha", stale)
    assert exc.value.status == 409
    assert api.get_namespaced_custom_object(GROUP, VERSION, ns, plural, "alpha")["data"] == {
        "k": "v2"
    }

    fresh = api.get_namespaced_custom_object(GROUP, VERSION, ns, plural, "alpha")
    fresh["data"] = {"k": "v3"}
    replaced = api.replace_namespaced_custom_object(GROUP, VERSION, ns, plural, "alpha", fresh)
    assert replaced["data"] == {"k": "v3"}

    api.delete_namespaced_custom_object(GROUP, VERSION, ns, plural, "alpha")
    with pytest.raises(ApiException) as exc:
        api.get_namespaced_custom_object(GROUP, VERSION, ns, plural, "alpha")
    assert exc.value.status == 404
    api.delete_namespaced_custom_object(GROUP, VERSION, ns, plural, "beta")


def test_watch_sees_changes(api) -> None:  # type: ignore[no-untyped-def]
    ns, plural = "k8s-client", "configmaps"
    start = api.list_namespaced_custom_object(GROUP, VERSION, ns, plural)
    rv = start["metadata"]["resourceVersion"]
    seen: list[tuple[str, str]] = []

    def consume() -> None:
        w = watch.Watch()
        for ev in w.stream(
            api.list_namespaced_custom_object,
            GROUP,
            VERSION,
            ns,
            plural,
            resource_version=rv,
            timeout_seconds=20,
        ):
            seen.append((ev["type"], ev["object"]["metadata"]["name"]))
            if ev["type"] == "DELETED":
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    api.create_namespaced_custom_object(GROUP, VERSION, ns, plural, _cm("gamma", {}, {"a": "1"}))
    api.patch_namespaced_custom_object(GROUP, VERSION, ns, plural, "gamma", {"data": {"a": "2"}})
    api.delete_namespaced_custom_object(GROUP, VERSION, ns, plural, "gamma")
    t.join(timeout=30)
    assert seen == [("ADDED", "gamma"), ("MODIFIED", "gamma"), ("DELETED", "gamma")]
