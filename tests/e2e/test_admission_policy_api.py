"""Admission policies as a cluster administrator and a team meet them: a real API server, a
Celery worker and the dispatcher. Refusals are 403 ``Status`` bodies naming the policy and the
rule; a policy in ``Warn`` mode stores the pod and says why in a ``Warning`` header; a
Deployment whose template breaks an enforcing policy is stored with a warning, and its
ReplicaSet shows the pods' refusal as ``FailedCreate``. Each policy selects only the test's
namespace (the server is shared with other tests)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

API = "/apis/quaymaster.io/v1"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def http(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30) as c:
        yield c


@pytest.fixture
def team(http: httpx.Client) -> Iterator[tuple[str, Callable[..., str]]]:
    """A namespace of the test's own, and ``policy(mode, **rules)`` creating a policy that
    governs only it (deleted afterwards)."""
    ns = f"policy-{secrets.token_hex(3)}"
    assert http.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    made: list[str] = []

    def policy(mode: str = "Enforce", **rules: Any) -> str:
        name = f"{ns}-{mode.lower()}-{len(made)}"
        selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                          "operator": "In", "values": [ns]}]}  # fmt: skip
        body = {"kind": "AdmissionPolicy", "metadata": {"name": name},
                "spec": {"mode": mode, "namespaceSelector": selector, "rules": rules}}  # fmt: skip
        r = http.post(f"{API}/admissionpolicies", json=body)
        assert r.status_code == 201, r.text
        made.append(name)
        return name

    yield ns, policy
    for name in made:
        http.delete(f"{API}/admissionpolicies/{name}")


def container(**extra: Any) -> dict[str, Any]:
    return {"name": "c", "image": "registry.internal/app:1", **extra}


def pod(name: str, **spec: Any) -> dict[str, Any]:
    body = {"containers": [container()], **spec}
    return {"kind": "Pod", "metadata": {"name": name}, "spec": body}


PRIVILEGED = {"securityContext": {"privileged": True}}


def eventually(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
    return got


def test_an_enforcing_policy_refuses_with_403_naming_the_policy_and_rule(
    http: httpx.Client, team: tuple[str, Callable[..., str]]
) -> None:
    ns, policy = team
    images = {"registries": ["registry.internal/"], "digests": True}
    name = policy(denyPrivileged=True, denyHostNamespaces=True, maxPriority=999,
                  allowedImages=images)  # fmt: skip
    pods = f"{API}/namespaces/{ns}/pods"

    r = http.post(pods, json=pod("root", containers=[container(**PRIVILEGED)], hostPID=True))
    assert r.status_code == 403, r.text
    body = r.json()
    assert body["kind"] == "Status" and body["reason"] == "Forbidden" and body["code"] == 403
    assert body["message"] == (
        f'pods "root" is forbidden: violates AdmissionPolicy "{name}": denyPrivileged '
        '(container "c" must not set securityContext.privileged=true); denyHostNamespaces '
        "(hostPID=true is not allowed)"
    )
    fields = [c["field"] for c in body["details"]["causes"]]
    assert fields == ["spec.containers[0].securityContext.privileged", "spec.hostPID"]
    assert http.get(f"{pods}/root").status_code == 404  # nothing was stored

    r = http.post(pods, json=pod("elsewhere", containers=[container(image="docker.io/nginx")]))
    assert r.status_code == 403 and "allowedImages" in r.json()["message"], r.text
    pinned = container(image="docker.io/nginx@sha256:" + "0" * 64)
    assert http.post(pods, json=pod("pinned", containers=[pinned])).status_code == 201

    # The priority class is resolved before the policy looks: the class's value counts.
    pc = f"{ns}-production"
    r = http.post(f"{API}/priorityclasses", json={"kind": "PriorityClass",
                  "metadata": {"name": pc}, "value": 1000})  # fmt: skip
    assert r.status_code == 201, r.text
    try:
        r = http.post(pods, json=pod("urgent", priorityClassName=pc))
        assert r.status_code == 403, r.text
        assert r.json()["message"] == (
            f'pods "urgent" is forbidden: violates AdmissionPolicy "{name}": maxPriority '
            f'(priority 1000 (priorityClassName "{pc}") exceeds this namespace\'s maximum of 999)'
        )
    finally:
        http.delete(f"{API}/priorityclasses/{pc}")

    r = http.post(pods, json=pod("fine"))
    assert r.status_code == 201, r.text
    assert "warning" not in r.headers
    # An update that leaves the pod spec alone is not judged again.
    r = http.patch(f"{pods}/fine", json={"metadata": {"labels": {"x": "y"}}},
                   headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
    assert r.status_code == 200, r.text


def test_warn_mode_stores_the_pod_and_sends_a_warning_header(
    http: httpx.Client,
    team: tuple[str, Callable[..., str]],
    qm_env: dict[str, str],
    tmp_path: Path,
) -> None:
    ns, policy = team
    name = policy("Warn", requireResources=True)
    r = http.post(f"{API}/namespaces/{ns}/pods", json=pod("loose"))
    assert r.status_code == 201, r.text
    assert r.headers.get_list("warning") == [
        f'299 - "would violate AdmissionPolicy \\"{name}\\": requireResources (container \\"c\\" '
        "must set resources.requests.cpu, resources.requests.memory, resources.limits.cpu, "
        'resources.limits.memory)"'
    ]
    assert http.get(f"{API}/namespaces/{ns}/pods/loose").status_code == 200
    # ``qm apply`` shows the server's warnings as kubectl does.
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(pod("loose-too")))
    done = subprocess.run([sys.executable, "-m", "app.cli.main", "apply", "-n", ns, "-f",
                           str(manifest)], cwd=ROOT, env=qm_env, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f'Warning: would violate AdmissionPolicy "{name}": requireResources' in done.stderr


def test_an_invalid_policy_is_422(http: httpx.Client) -> None:
    body = {"kind": "AdmissionPolicy", "metadata": {"name": f"bad-{secrets.token_hex(3)}"},
            "spec": {"mode": "Audit", "rules": {"denyEverything": True}}}  # fmt: skip
    r = http.post(f"{API}/admissionpolicies", json=body)
    assert r.status_code == 422, r.text
    fields = {c["field"] for c in r.json()["details"]["causes"]}
    assert fields == {"spec.mode", "spec.rules.denyEverything"}


def test_a_deployment_is_warned_and_its_replicaset_shows_the_refusal(
    http: httpx.Client, team: tuple[str, Callable[..., str]], workers: None
) -> None:
    ns, policy = team
    name = policy(denyPrivileged=True)
    template = {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [container(**PRIVILEGED)]}}  # fmt: skip
    dep = {"kind": "Deployment", "metadata": {"name": "web"},
           "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                    "template": template}}  # fmt: skip
    r = http.post(f"{API}/namespaces/{ns}/deployments", json=dep)
    assert r.status_code == 201, r.text
    (warning,) = r.headers.get_list("warning")
    assert warning.startswith(f'299 - "would violate AdmissionPolicy \\"{name}\\": denyPrivileged')
    # A replace (answered by the fast PUT path) that changes the template is warned about too.
    stored = r.json()
    stored["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.internal/app:2"
    r = http.put(f"{API}/namespaces/{ns}/deployments/web", json=stored)
    assert r.status_code == 200, r.text
    assert r.headers.get_list("warning") == [warning]

    def failed_create() -> str | None:
        r = http.get(f"{API}/namespaces/{ns}/events",
                     params={"fieldSelector": "reason=FailedCreate"})  # fmt: skip
        items = r.json()["items"]
        rs = [e for e in items if e["involvedObject"]["kind"] == "ReplicaSet"]
        return str(rs[0]["message"]) if rs else None

    message = eventually(failed_create, 60, "FailedCreate on the ReplicaSet")
    assert message.startswith('Error creating: pods "web-')
    assert (
        f'is forbidden: violates AdmissionPolicy "{name}": denyPrivileged (container "c" must '
        "not set securityContext.privileged=true)" in message
    )
    assert http.get(f"{API}/namespaces/{ns}/pods").json()["items"] == []
