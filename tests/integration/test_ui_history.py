"""The history pages against a real API server: a change made through the REST API with a
reason shows who made it, why, from where, and its diff; one object's page; "Roll back to this"
puts a Deployment's old pod template back through the REST API with its own reason in the
history; a namespaced viewer is told the cluster-wide history is forbidden, and is not offered
the roll back."""

from __future__ import annotations

import hashlib
import html
import re
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest

from app.api.ui.pages import history as page
from app.core.kinds import API_VERSION
from tests.integration.test_ui_shell import csrf_of, sign_in

API = f"/apis/{API_VERSION}"
AUDIT = "/apis/audit.quaymaster.io/v1"
MERGE = {"Content-Type": "application/merge-patch+json"}


def _deployment(name: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION, "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "c", "image": image}]}},
        },
    }  # fmt: skip


def _token(pg_url: str, user: str) -> str:
    token = secrets.token_urlsafe(32)
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(
            "INSERT INTO qm_tokens (username, groups, token_sha256, description)"
            " VALUES (%s, %s, %s, 'ui history test')",
            (user, ["system:authenticated"], hashlib.sha256(token.encode()).hexdigest()),
        )
    return token


@pytest.fixture(scope="module")
def admin(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def ns(admin: httpx.Client) -> str:
    """A namespace with Deployment web: created, then its image changed with a reason."""
    name = f"ui-hist-{secrets.token_hex(3)}"
    assert admin.post(f"{API}/namespaces", json={"metadata": {"name": name}}).status_code == 201
    binding = {"metadata": {"name": "viewer"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "User", "name": "ui-hist-viewer"}]}  # fmt: skip
    assert admin.post(f"{API}/namespaces/{name}/rolebindings", json=binding).status_code == 201
    coll = f"{API}/namespaces/{name}/deployments"
    r = admin.post(coll, json=_deployment("web", "web:1"), headers={"X-Reason": "first cut"})
    assert r.status_code == 201, r.text
    change = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "web:2"}]}}}}
    r = admin.patch(f"{coll}/web", json=change, headers={
        **MERGE, "X-Reason": "ship web 2", "X-Request-Id": "req-ui-hist-1"})  # fmt: skip
    assert r.status_code == 200, r.text
    return name


@pytest.fixture
def browser(api_server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False) as c:
        sign_in(c, api_server.token)
        yield c


def _image(admin: httpx.Client, ns: str) -> str:
    dep = admin.get(f"{API}/namespaces/{ns}/deployments/web").json()
    return str(dep["spec"]["template"]["spec"]["containers"][0]["image"])


def test_relative_since_and_links_are_built_as_the_api_and_pages_expect() -> None:
    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    assert page.since_param("2h", now) == "2026-12-02T10:00:00Z"
    assert page.since_param("2026-12-01T00:00:00Z", now) == "2026-12-01T00:00:00Z"
    assert page.history_url("Deployment", "a", "web") == "/ui/history/deployments/a/web"
    assert page.history_url("Node", "", "n1") == "/ui/history/nodes/_/n1"
    assert page.history_url("", "", "x") == ""
    before = {"spec": {"template": {"a": 1}, "replicas": 1}}
    assert page.rolls_back(before, {"spec": {"template": {"a": 2}, "replicas": 1}})
    assert not page.rolls_back({"spec": {"replicas": 1}}, {"spec": {"replicas": 2}})


def test_a_change_shows_who_why_from_where_and_its_diff(
    browser: httpx.Client, admin: httpx.Client, ns: str
) -> None:
    api = admin.get(f"{AUDIT}/namespaces/{ns}/history", params={"kind": "Deployment",
                                                                "name": "web"})  # fmt: skip
    assert api.status_code == 200, api.text
    newest = api.json()["items"][0]
    r = browser.get(f"/ui/history?ns={ns}&kind=Deployment&name=web")
    assert r.status_code == 200, r.text
    text = html.unescape(r.text)
    assert newest["principal"] and f">{newest['principal']}</span>" in text
    assert "ship web 2" in text and "first cut" in text and "req-ui-hist-1" in text
    assert "patch" in text and "(update)" in text and "(insert)" in text
    assert "<details>" in r.text and "changed " in text
    assert re.search(r'<span class="diff-del">-\s*"image": "web:1"', text), text
    assert re.search(r'<span class="diff-add">\+\s*"image": "web:2"', text), text
    assert f'href="/ui/workloads/deployments/{ns}/web"' in r.text
    assert f'href="/ui/history/deployments/{ns}/web"' in r.text
    assert "Roll back to this" not in r.text  # offered on the object's own page
    cluster = browser.get(f"/ui/history?principal={newest['principal']}&since=1h")
    assert cluster.status_code == 200 and "ship web 2" in cluster.text, cluster.text
    bad = browser.get("/ui/history?name=web")  # a name needs a kind: the API's 422, in place
    assert bad.status_code == 200 and 'class="flash bad"' in bad.text


def test_one_objects_page_rolls_a_deployment_back_with_its_own_reason(
    browser: httpx.Client, admin: httpx.Client, ns: str
) -> None:
    r = browser.get(f"/ui/history/deployments/{ns}/web")
    assert r.status_code == 200, r.text
    assert "History of Deployment" in r.text and "ship web 2" in r.text
    assert r.text.count("Roll back to this") == 1  # the update, not the insert
    assert browser.get(f"/ui/history/Deployment/{ns}/web").status_code == 200
    form = r.text.split('action="/ui/history/deployments/', 1)[1]
    fields = dict(re.findall(r'name="(id|at)" value="([^"]*)"', form.split("</form>", 1)[0]))
    assert set(fields) == {"id", "at"}
    assert _image(admin, ns) == "web:2"
    back = f"/ui/history/deployments/{ns}/web"
    done = browser.post(f"{back}/rollback", data={
        "csrf": csrf_of(r.text), "back": back, "reason": "web 2 stalls", **fields})  # fmt: skip
    assert done.status_code == 303, done.text
    assert "done=" in done.headers["location"], done.headers["location"]
    assert _image(admin, ns) == "web:1"
    newest = admin.get(f"{AUDIT}/namespaces/{ns}/history",
                       params={"kind": "Deployment", "name": "web"}).json()["items"][0]  # fmt: skip
    assert newest["reason"] == "web 2 stalls" and newest["verb"] == "patch"
    again = browser.get(back)
    assert "web 2 stalls" in again.text
    stale = browser.post(f"{back}/rollback", data={
        "csrf": csrf_of(r.text), "back": back, "id": "1", "at": fields["at"]})  # fmt: skip
    assert stale.status_code == 303 and "failed=" in stale.headers["location"]


def test_a_namespaced_viewer_may_not_read_the_cluster_history_nor_roll_back(
    api_server: Any, pg_url: str, ns: str
) -> None:
    with httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False) as c:
        assert sign_in(c, _token(pg_url, "ui-hist-viewer")).status_code == 303
        cluster = c.get("/ui/history")
        assert cluster.status_code == 200 and "Forbidden" in cluster.text, cluster.text
        assert "No changes match." not in cluster.text
        mine = c.get(f"/ui/history/deployments/{ns}/web")  # get on the object is enough
        assert mine.status_code == 200 and "ship web 2" in mine.text, mine.text
        assert "Roll back to this" not in mine.text
    with httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False) as c:
        assert sign_in(c, _token(pg_url, "ui-hist-nobody")).status_code == 303
        other = c.get(f"/ui/history?ns={ns}")
        assert "Forbidden" in other.text and "No changes match." not in other.text
