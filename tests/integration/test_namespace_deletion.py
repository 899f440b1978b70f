"""Deleting a namespace deletes what is in it, by the usual rules, and then the namespace."""

from __future__ import annotations

import time

import httpx

API = "/apis/quaymaster.io/v1"


def _wait(predicate, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_namespace_deletion_empties_it_then_removes_it(api_server, controllers) -> None:  # type: ignore[no-untyped-def]
    h = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=h, timeout=30) as c:
        assert c.post(f"{API}/namespaces", json={"metadata": {"name": "doomed"}}).status_code == 201
        for i in range(3):
            r = c.post(
                f"{API}/namespaces/doomed/configmaps",
                json={"metadata": {"name": f"cm{i}"}, "data": {"i": str(i)}},
            )
            assert r.status_code == 201, r.text
        pod = {
            "metadata": {"name": "running"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
        }
        assert c.post(f"{API}/namespaces/doomed/pods", json=pod).status_code == 201

        held = {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}
        assert c.post(f"{API}/namespaces/doomed/configmaps", json=held).status_code == 201

        r = c.delete(f"{API}/namespaces/doomed")
        assert r.status_code == 200, r.text
        assert r.json()["metadata"]["deletionTimestamp"]
        assert r.json()["status"]["phase"] == "Terminating"
        refused = c.post(f"{API}/namespaces/doomed/configmaps", json={"metadata": {"name": "late"}})
        assert refused.status_code == 403, refused.text

        def conditions() -> dict[str, dict[str, str]]:
            ns = c.get(f"{API}/namespaces/doomed").json()
            return {x["type"]: x for x in (ns.get("status") or {}).get("conditions") or []}

        def only_the_held_left() -> bool:
            left = conditions().get("NamespaceContentRemaining", {}).get("message", "")
            return left == (
                "Some resources are remaining: configmaps. has 1 resource instances,"
                " pods. has 1 resource instances"
            )

        assert _wait(only_the_held_left), conditions()
        assert conditions()["NamespaceFinalizersRemaining"]["message"] == (
            "Some content in the namespace has finalizers remaining:"
            " example.com/hold in 1 resource instances"
        )
        assert conditions()["NamespaceDeletionContentFailure"]["status"] == "False"
        names = [
            i["metadata"]["name"]
            for i in c.get(f"{API}/namespaces/doomed/configmaps").json()["items"]
        ]
        assert names == ["held"]
        ns = c.get(f"{API}/namespaces/doomed").json()
        assert ns["status"]["phase"] == "Terminating"
        patch = {"metadata": {"finalizers": None}}
        r = c.patch(f"{API}/namespaces/doomed/configmaps/held", json=patch,
                    headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
        assert r.status_code == 200, r.text
        # The bound pod waits for its node to confirm; the namespace waits for the pod.
        assert _wait(
            lambda: "configmaps" not in conditions()["NamespaceContentRemaining"]["message"]
        )
        pod_now = c.get(f"{API}/namespaces/doomed/pods/running").json()
        assert pod_now["metadata"]["deletionTimestamp"]
        assert c.get(f"{API}/namespaces/doomed").status_code == 200

        r = c.request(
            "DELETE", f"{API}/namespaces/doomed/pods/running", json={"gracePeriodSeconds": 0}
        )
        assert r.status_code == 200, r.text
        assert _wait(lambda: c.get(f"{API}/namespaces/doomed").status_code == 404)
