"""The workloads pages against a real API server: the lists with their numbers, a
Deployment's page (a stalled rollout's reason, pending pods' reasons, revisions and their
diff), its actions through the UI's forms (scale, pause, resume, roll back, delete) landing in
the history with the principal and the reason typed, and a viewer who is offered no action
and is refused one posted anyway. No controllers run: the test writes the ReplicaSets and the
status a Deployment controller would."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from app.core.kinds import API_VERSION
from tests.integration.test_ui_shell import csrf_of, sign_in

API = f"/apis/{API_VERSION}"
REVISION = "deployment.kubernetes.io/revision"


def _template(image: str, hash_label: str = "") -> dict[str, Any]:
    labels = {"app": "web", **({"pod-template-hash": hash_label} if hash_label else {})}
    return {"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "web", "image": image}]}}  # fmt: skip


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code in (200, 201), r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.fixture
def admin(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30) as c:
        yield c


@pytest.fixture
def web(admin: httpx.Client) -> str:
    """A namespace with Deployment ``web`` at revision 2 (web:2, revision 1 ran web:1), its
    rollout stalled, one pod unschedulable and one pulling its image in vain."""
    ns = f"wl-{secrets.token_hex(3)}"
    _ok(admin.post(f"{API}/namespaces", json={"metadata": {"name": ns}}))
    dep = _ok(admin.post(f"{API}/namespaces/{ns}/deployments", json={
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": _template("registry.local/web:1")},
    }))  # fmt: skip
    owner = {"apiVersion": API_VERSION, "kind": "Deployment", "name": "web",
             "uid": dep["metadata"]["uid"], "controller": True}  # fmt: skip
    for rev, image in ((1, "registry.local/web:1"), (2, "registry.local/web:2")):
        h = f"h{rev}"
        _ok(admin.post(f"{API}/namespaces/{ns}/replicasets", json={
            "metadata": {"name": f"web-{h}", "labels": {"app": "web", "pod-template-hash": h},
                         "annotations": {REVISION: str(rev)}, "ownerReferences": [owner]},
            "spec": {"replicas": 0 if rev == 1 else 3,
                     "selector": {"matchLabels": {"app": "web", "pod-template-hash": h}},
                     "template": _template(image, h)},
        }))  # fmt: skip
    dep = _ok(admin.get(f"{API}/namespaces/{ns}/deployments/web"))
    dep["spec"]["template"] = _template("registry.local/web:2")
    dep = _ok(admin.put(f"{API}/namespaces/{ns}/deployments/web", json=dep))
    status = {"status": {
        "observedGeneration": dep["metadata"].get("generation", 1), "replicas": 3,
        "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1,
        "conditions": [
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
             "message": 'ReplicaSet "web-h2" has timed out progressing.'},
        ]}}  # fmt: skip
    merge = {"Content-Type": "application/merge-patch+json"}
    _ok(admin.patch(f"{API}/namespaces/{ns}/deployments/web/status", json=status,
                    headers=merge))  # fmt: skip
    for name, pod_status in (
        ("web-h2-a", {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/3 nodes are available: 3 Insufficient cpu."}]}),
        ("web-h2-b", {"phase": "Pending", "containerStatuses": [
            {"name": "web", "ready": False, "restartCount": 0,
             "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}),
    ):  # fmt: skip
        _ok(admin.post(f"{API}/namespaces/{ns}/pods", json={
            "metadata": {"name": name, "labels": {"app": "web", "pod-template-hash": "h2"}},
            "spec": {"containers": [{"name": "web", "image": "registry.local/web:2"}]},
        }))  # fmt: skip
        _ok(admin.patch(f"{API}/namespaces/{ns}/pods/{name}/status",
                        json={"status": pod_status}, headers=merge))  # fmt: skip
    return ns


@pytest.fixture
def browser(api_server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False) as c:
        sign_in(c, api_server.token)
        yield c


def _act(c: httpx.Client, page: str, action: str, **fields: str) -> httpx.Response:
    csrf = csrf_of(c.get(page).text)
    r = c.post(f"{page}/{action}", data={"csrf": csrf, "back": page, **fields})
    assert r.status_code == 303, r.text
    return c.get(r.headers["location"])


def _history(pg_url: str, ns: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_url, autocommit=True) as db:
        return db.execute(
            "SELECT principal, reason, after->'spec'->>'replicas' FROM qm_history"
            " WHERE table_name = 'deployments' AND namespace = %s AND name = 'web'"
            " AND op = 'update' ORDER BY id", (ns,)).fetchall()  # fmt: skip


def _dep(admin: httpx.Client, ns: str) -> dict[str, Any]:
    return _ok(admin.get(f"{API}/namespaces/{ns}/deployments/web"))


def test_the_list_shows_each_kind_with_its_numbers(browser: httpx.Client, admin: httpx.Client,
                                                   web: str) -> None:  # fmt: skip
    page = browser.get(f"/ui/workloads?ns={web}")
    assert page.status_code == 200, page.text
    row = page.text.split(f'data-deployment="{web}/web"')[1].split("</tr>")[0]
    assert [n for n in ("3", "2", "1", "1") if f'<td class="num">{n}</td>' in row]
    assert (
        '<progress max="3" value="0"' in row
    )  # the one available may be old and "ProgressDeadlineExceeded" in row
    assert 'data-live-kinds="Deployment"' in page.text
    _ok(admin.post(f"{API}/namespaces/{web}/jobs", json={"metadata": {"name": "once"}, "spec": {
        "completions": 2, "template": {"spec": {"restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox"}]}}}}))  # fmt: skip
    _ok(admin.post(f"{API}/namespaces/{web}/cronjobs", json={"metadata": {"name": "nightly"},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}},
    }))  # fmt: skip
    jobs = browser.get(f"/ui/workloads?tab=jobs&ns={web}").text
    assert f'href="/ui/workloads/jobs/{web}/once"' in jobs and "0/2" in jobs
    crons = browser.get(f"/ui/workloads?tab=cronjobs&ns={web}").text
    assert "<code>0 3 * * *</code>" in crons and "never" in crons
    assert "No Deployments match." in browser.get(f"/ui/workloads?ns={web}&selector=app%3Ddb").text
    cj = browser.get(f"/ui/workloads/cronjobs/{web}/nightly")
    assert cj.status_code == 200 and "/suspend" in cj.text
    after = _act(browser, f"/ui/workloads/cronjobs/{web}/nightly", "suspend", reason="quiet")
    assert "cronjob/nightly suspended" in after.text
    job = browser.get(f"/ui/workloads/jobs/{web}/once")
    assert job.status_code == 200 and "0 of 2" in job.text


def test_the_page_shows_a_stalled_rollout_pending_pods_and_a_revision_diff(
    browser: httpx.Client, web: str
) -> None:
    page = browser.get(f"/ui/workloads/deployments/{web}/web")
    assert page.status_code == 200, page.text
    stalled = page.text.split('class="stalled"')[1]
    assert "ProgressDeadlineExceeded" in stalled and "has timed out progressing" in stalled
    assert "0/3 nodes are available: 3 Insufficient cpu." in page.text
    assert "ImagePullBackOff" in page.text
    assert page.text.count('data-revision="') == 2
    live = page.text.split('data-live-kinds="')[1].split('"')[0]
    assert live == "Deployment,ReplicaSet,Pod,Event"
    for action in ("/scale", "/pause", "/restart", "/rollback", "/delete"):
        assert f'action="/ui/workloads/deployments/{web}/web{action}"' in page.text
    compared = browser.get(f"/ui/workloads/deployments/{web}/web?from=1&to=2").text
    q = "&#34;"
    assert f'<span class="diff-del">-        {q}image{q}: {q}registry.local/web:1{q},' in compared
    assert f'<span class="diff-add">+        {q}image{q}: {q}registry.local/web:2{q},' in compared
    frag = browser.get(f"/ui/workloads/deployments/{web}/web", headers={"X-QM-Fragment": "main"})
    assert frag.status_code == 200 and "<html" not in frag.text and "Revisions" in frag.text


def test_actions_change_the_deployment_and_land_in_the_history(
    browser: httpx.Client, admin: httpx.Client, web: str, pg_url: str
) -> None:
    page = f"/ui/workloads/deployments/{web}/web"
    done = _act(browser, page, "scale", replicas="5", reason="scale for the sale")
    assert "deployment/web scaled to 5" in done.text
    assert _dep(admin, web)["spec"]["replicas"] == 5
    principal, reason, replicas = _history(pg_url, web)[-1]
    assert (reason, replicas) == ("scale for the sale", "5") and principal
    assert "deployment/web paused" in _act(browser, page, "pause", reason="hold").text
    assert _dep(admin, web)["spec"]["paused"] is True
    assert f'action="{page}/resume"' in browser.get(page).text
    assert "deployment/web resumed" in _act(browser, page, "resume", reason="go").text
    assert _dep(admin, web)["spec"]["paused"] is False
    back = _act(browser, page, "rollback", revision="1", reason="web:2 does not start")
    assert "rolled back to revision 1" in back.text
    template = _dep(admin, web)["spec"]["template"]
    assert template["spec"]["containers"][0]["image"] == "registry.local/web:1"
    assert "pod-template-hash" not in template["metadata"]["labels"]
    assert _history(pg_url, web)[-1][1] == "web:2 does not start"
    again = _act(browser, page, "rollback", revision="1", reason="again")
    assert "nothing to roll back" in again.text
    missing = _act(browser, page, "rollback", revision="9", reason="x")
    assert "revision 9 not found" in missing.text
    restarted = _act(browser, page, "restart", reason="new certs")
    assert "restarted" in restarted.text
    stamp = _dep(admin, web)["spec"]["template"]["metadata"]["annotations"]
    assert "quaymaster.io/restartedAt" in stamp
    csrf = csrf_of(browser.get(page).text)
    gone = browser.post(f"{page}/delete", data={"csrf": csrf, "back": f"/ui/workloads?ns={web}",
                                                "reason": "retired"})  # fmt: skip
    assert gone.status_code == 303 and "deployment%2Fweb+deleted" in gone.headers["location"]
    assert admin.get(f"{API}/namespaces/{web}/deployments/web").status_code == 404
    assert "No Deployments match." in browser.get(gone.headers["location"]).text


def test_a_viewer_is_offered_no_action_and_refused_one_posted_anyway(
    api_server: Any, admin: httpx.Client, web: str, pg_url: str
) -> None:
    token = secrets.token_urlsafe(32)
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(
            "INSERT INTO qm_tokens (username, groups, token_sha256, description)"
            " VALUES (%s, %s, %s, 'ui workloads test')",
            ("vic", ["system:authenticated"], hashlib.sha256(token.encode()).hexdigest()),
        )
    _ok(admin.post(f"{API}/namespaces/{web}/rolebindings", json={
        "metadata": {"name": "vic-view"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "User", "name": "vic"}]}))  # fmt: skip
    with httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False) as c:
        sign_in(c, token)
        page = c.get(f"/ui/workloads/deployments/{web}/web")
        assert page.status_code == 200, page.text
        body = page.text.split("</header>")[1]
        acts = [line for line in body.splitlines() if 'class="action' in line]
        assert not acts, acts
        assert "You may not change this Deployment." in page.text
        assert "ProgressDeadlineExceeded" in page.text  # reading is allowed
        url = f"/ui/workloads/deployments/{web}/web"
        refused = c.post(f"{url}/scale", data={"csrf": csrf_of(page.text), "back": url,
                                               "replicas": "9", "reason": "try"})  # fmt: skip
        assert refused.status_code == 403 and "Forbidden" in refused.text, refused.text[:300]
    assert _dep(admin, web)["spec"]["replicas"] == 3
