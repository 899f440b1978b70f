"""RBAC over the HTTP API: built-in roles bound per namespace, 403s naming the permission,
the escalation check, and tenant isolation (a namespace its principal holds nothing in
answers exactly as a missing one: status, body, and time)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from app.core.authz import Attributes
from app.core.authz.rbac import Policy
from app.core.kinds import KINDS

API = "/apis/quaymaster.io/v1"
TEAM_A, TEAM_B, MISSING = "rbac-team-a", "rbac-team-b", "rbac-no-such-namespace"
USERS = {"vera": "view", "eddie": "edit", "ada": "admin"}


def _token(db: psycopg.Connection, user: str, groups: tuple[str, ...]) -> str:
    token = secrets.token_urlsafe(32)
    db.execute(
        "INSERT INTO qm_tokens (username, groups, token_sha256, description)"
        " VALUES (%s, %s, %s, 'rbac test')",
        (user, list(groups), hashlib.sha256(token.encode()).hexdigest()),
    )
    return token


def _binding(name: str, role: str, user: str, kind: str = "ClusterRole") -> dict[str, Any]:
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"kind": kind, "name": role},
        "subjects": [{"kind": "User", "name": user}],
    }


def _pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


@pytest.fixture(scope="module")
def db(pg_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="module")
def admin(api_server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        for ns in (TEAM_A, TEAM_B):
            r = c.post(f"{API}/namespaces", json={"metadata": {"name": ns}})
            assert r.status_code in (201, 409), r.text
        for user, role in USERS.items():
            r = c.post(f"{API}/namespaces/{TEAM_A}/rolebindings", json=_binding(user, role, user))
            assert r.status_code in (201, 409), r.text
        for ns in (TEAM_A, TEAM_B):
            r = c.post(f"{API}/namespaces/{ns}/pods", json=_pod("shared-name"))
            assert r.status_code in (201, 409), r.text
        yield c


@pytest.fixture(scope="module")
def tokens(admin, db) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {user: _token(db, user, ("system:authenticated",)) for user in (*USERS, "nobody")}


@pytest.fixture(scope="module")
def clients(api_server, tokens) -> Iterator[dict[str, httpx.Client]]:  # type: ignore[no-untyped-def]
    out = {}
    for user, token in tokens.items():
        out[user] = httpx.Client(
            base_url=api_server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0
        )
    yield out
    for c in out.values():
        c.close()


def _forbidden(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 403, r.text
    body = r.json()
    assert body["kind"] == "Status" and body["reason"] == "Forbidden", body
    return body


# -- every built-in role, per verb, over HTTP, as the pure policy says -------------------------


@pytest.mark.parametrize("user", list(USERS))
def test_each_builtin_role_over_http_matches_the_policy(clients, user: str) -> None:  # type: ignore[no-untyped-def]
    """Every kind, reading, listing and deleting, as each role bound in team A: what the pure
    policy allows is served, what it refuses is a 403 naming the permission (cluster-scoped
    kinds at the cluster scope); Namespaces are listed as far as they are visible."""
    policy = Policy(
        role_bindings=[
            {"metadata": {"namespace": TEAM_A, "name": u}, **_binding(u, r, u)}
            for u, r in USERS.items()
        ]
    )

    class Who:
        name = user
        groups = ("system:authenticated",)

    c = clients[user]
    for kind in KINDS:
        ns = TEAM_A if kind.namespaced else ""
        coll = f"{API}/namespaces/{TEAM_A}/{kind.plural}" if ns else f"{API}/{kind.plural}"
        for verb, request in (
            ("list", lambda coll=coll: c.get(coll)),
            ("get", lambda coll=coll: c.get(f"{coll}/not-there")),
            ("delete", lambda coll=coll: c.delete(f"{coll}/not-there")),
        ):
            r = request()
            if kind.kind == "Namespace":  # visible ones listed; "not-there" is hidden: 404
                assert r.status_code == (200 if verb == "list" else 404), (user, verb, r.text)
                continue
            name = "not-there" if verb != "list" else ""
            allowed = policy.authorize(Who(), Attributes(verb, kind.plural, ns, name)).allowed
            if allowed:
                assert r.status_code in (200, 404), (user, verb, kind.plural, r.text)
            else:
                body = _forbidden(r)
                assert f'cannot {verb} resource "{kind.plural}"' in body["message"], body
                assert f'User "{user}"' in body["message"], body
                where = f'in the namespace "{TEAM_A}"' if ns else "at the cluster scope"
                assert where in body["message"], body


def test_forbidden_names_the_missing_permission(clients) -> None:  # type: ignore[no-untyped-def]
    body = _forbidden(clients["vera"].delete(f"{API}/namespaces/{TEAM_A}/pods/shared-name"))
    assert body["message"] == (
        f'pods "shared-name" is forbidden: User "vera" cannot delete resource "pods" in API '
        f'group "quaymaster.io" in the namespace "{TEAM_A}"'
    )
    body = _forbidden(clients["eddie"].get(f"{API}/nodes"))
    assert "at the cluster scope" in body["message"]


def test_edit_creates_and_deletes_pods_view_reads_them(clients) -> None:  # type: ignore[no-untyped-def]
    coll = f"{API}/namespaces/{TEAM_A}/pods"
    r = clients["eddie"].post(coll, json=_pod("by-eddie"))
    assert r.status_code == 201, r.text
    assert clients["vera"].get(f"{coll}/by-eddie").status_code == 200
    _forbidden(clients["vera"].post(coll, json=_pod("by-vera")))
    assert clients["eddie"].delete(f"{coll}/by-eddie").status_code == 200
    # status and eviction subresources are authorised as such
    _forbidden(clients["eddie"].put(f"{coll}/shared-name/status", json=_pod("shared-name")))


# -- escalation ------------------------------------------------------------------------------


def test_escalation_is_refused_and_holding_the_permissions_allows(clients, admin) -> None:  # type: ignore[no-untyped-def]
    rbs = f"{API}/namespaces/{TEAM_A}/rolebindings"
    # edit may not bind at all; admin may bind what it holds, not more
    _forbidden(clients["eddie"].post(rbs, json=_binding("eddie-admin", "admin", "eddie")))
    r = clients["ada"].post(rbs, json=_binding("friend-edit", "edit", "friend"))
    assert r.status_code == 201, r.text
    body = _forbidden(clients["ada"].post(rbs, json=_binding("ada-ca", "cluster-admin", "ada")))
    assert "attempting to grant permissions it does not hold" in body["message"], body
    roles = f"{API}/namespaces/{TEAM_A}/roles"
    nodes_role = {
        "metadata": {"name": "node-reader"},
        "rules": [{"verbs": ["get"], "apiGroups": ["quaymaster.io"], "resources": ["nodes"]}],
    }
    _forbidden(clients["ada"].post(roles, json=nodes_role))
    pods_role = {
        "metadata": {"name": "pod-reader"},
        "rules": [
            {"verbs": ["get", "list"], "apiGroups": ["quaymaster.io"], "resources": ["pods"]}
        ],
    }
    assert clients["ada"].post(roles, json=pods_role).status_code == 201
    # a patch that would widen the role is checked on the patched object
    wider = [{"op": "add", "path": "/rules/0/resources/-", "value": "nodes"}]
    r = clients["ada"].patch(
        f"{roles}/pod-reader", content=json.dumps(wider),
        headers={"Content-Type": "application/json-patch+json"},
    )  # fmt: skip
    _forbidden(r)
    # the admin may do what ada may not
    assert admin.patch(
        f"{roles}/pod-reader", content=json.dumps(wider),
        headers={"Content-Type": "application/json-patch+json"},
    ).status_code == 200  # fmt: skip


def test_a_new_binding_takes_effect_and_its_removal_too(clients, admin) -> None:  # type: ignore[no-untyped-def]
    c = clients["nobody"]
    path = f"{API}/namespaces/{TEAM_B}/pods/shared-name"
    assert c.get(path).status_code == 404
    rbs = f"{API}/namespaces/{TEAM_B}/rolebindings"
    assert admin.post(rbs, json=_binding("nobody-view", "view", "nobody")).status_code == 201
    assert c.get(path).status_code == 200
    assert admin.delete(f"{rbs}/nobody-view").status_code == 200
    assert c.get(path).status_code == 404


# -- tenant isolation --------------------------------------------------------------------------


def _same_answers(c: httpx.Client, method: str, path_of, **kw) -> None:  # type: ignore[no-untyped-def]
    a = c.request(method, path_of(TEAM_B), **kw)
    b = c.request(method, path_of(MISSING), **kw)
    assert a.status_code == b.status_code, (a.text, b.text)
    ta, tb = a.text.replace(TEAM_B, "NS"), b.text.replace(MISSING, "NS")
    if a.status_code == 200 and a.text and a.json().get("kind", "").endswith("List"):
        ja, jb = a.json(), b.json()
        ja["metadata"].pop("resourceVersion", None)
        jb["metadata"].pop("resourceVersion", None)
        assert ja == jb
    else:
        assert ta == tb
    assert dict(a.headers).keys() == dict(b.headers).keys()


def test_a_forbidden_namespace_answers_like_a_missing_one(clients) -> None:  # type: ignore[no-untyped-def]
    for user in ("vera", "eddie", "ada", "nobody"):
        c = clients[user]
        _same_answers(c, "GET", lambda ns: f"{API}/namespaces/{ns}/pods/shared-name")
        _same_answers(c, "GET", lambda ns: f"{API}/namespaces/{ns}/pods")
        _same_answers(c, "GET", lambda ns: f"{API}/namespaces/{ns}/pods?labelSelector=app%3Dweb")
        _same_answers(
            c,
            "GET",
            lambda ns: f"{API}/namespaces/{ns}/pods?fieldSelector=metadata.name%3Dshared-name",
        )
        _same_answers(c, "GET", lambda ns: f"{API}/namespaces/{ns}/secrets")
        _same_answers(c, "GET", lambda ns: f"{API}/namespaces/{ns}/pods/shared-name/status")
        _same_answers(c, "GET", lambda ns: f"{API}/namespaces/{ns}/pods/shared-name/log")
        _same_answers(c, "GET", lambda ns: f"{API}/namespaces/{ns}")
        _same_answers(c, "DELETE", lambda ns: f"{API}/namespaces/{ns}/pods/shared-name")
        _same_answers(c, "POST", lambda ns: f"{API}/namespaces/{ns}/pods", json=_pod("x"))
        _same_answers(
            c, "POST", lambda ns: f"{API}/namespaces/{ns}/pods/shared-name/eviction",
            json={"apiVersion": "policy/v1", "kind": "Eviction",
                  "metadata": {"name": "shared-name"}},
        )  # fmt: skip
        _same_answers(
            c, "PATCH", lambda ns: f"{API}/namespaces/{ns}/pods/shared-name",
            content=b'{"metadata":{"labels":{"a":"b"}}}',
            headers={"Content-Type": "application/merge-patch+json"},
        )  # fmt: skip
        _same_answers(
            c, "GET", lambda ns: f"/apis/metrics.quaymaster.io/v1/namespaces/{ns}/pods/shared-name"
        )
        _same_answers(c, "GET", lambda ns: f"{API}/namespaces/{ns}/pods?watch=1&timeoutSeconds=1")


def _timed_ms(c: httpx.Client, path: str) -> float:
    t = time.perf_counter()
    r = c.get(path)
    elapsed = (time.perf_counter() - t) * 1000
    assert r.status_code == 404, r.text
    return elapsed


def test_forbidden_and_missing_take_the_same_time(clients) -> None:  # type: ignore[no-untyped-def]
    """Medians of many requests, the two alternating so that load from elsewhere on the machine
    falls on both alike."""
    c = clients["eddie"]
    forbidden = f"{API}/namespaces/{TEAM_B}/pods/shared-name"
    missing = f"{API}/namespaces/{MISSING}/pods/shared-name"
    for _ in range(50):  # warm both paths
        _timed_ms(c, forbidden), _timed_ms(c, missing)
    a, b = [], []
    for i in range(600):
        first, second = (forbidden, missing) if i % 2 else (missing, forbidden)
        t1, t2 = _timed_ms(c, first), _timed_ms(c, second)
        a.append(t1 if first == forbidden else t2)
        b.append(t2 if first == forbidden else t1)
    fa, fb = statistics.median(a), statistics.median(b)
    print(f"GET median of 600: forbidden namespace {fa:.3f} ms, missing namespace {fb:.3f} ms")
    assert abs(fa - fb) < max(1.0, 0.2 * min(fa, fb)), (fa, fb)


def test_all_namespaces_lists_and_watches_only_reachable_namespaces(clients, admin) -> None:  # type: ignore[no-untyped-def]
    c = clients["vera"]
    items = c.get(f"{API}/pods").json()["items"]
    assert items and {p["metadata"]["namespace"] for p in items} == {TEAM_A}
    labelled = c.get(f"{API}/pods?labelSelector=app%3Dweb").json()["items"]
    assert {p["metadata"]["namespace"] for p in labelled} == {TEAM_A}
    assert clients["nobody"].get(f"{API}/pods").json()["items"] == []
    probe = c.get(f"{API}/pods?fieldSelector=metadata.namespace%3D{TEAM_B}").json()
    assert probe["items"] == []  # a field selector cannot reach past the principal's namespaces
    names = {n["metadata"]["name"] for n in c.get(f"{API}/namespaces").json()["items"]}
    assert names == {TEAM_A}
    # paging across namespaces stays inside them
    page = c.get(f"{API}/pods?limit=1").json()
    assert len(page["items"]) <= 1
    # a watch across namespaces streams only team A's events
    with c.stream("GET", f"{API}/pods?watch=1&timeoutSeconds=3") as stream:
        for ns in (TEAM_B, TEAM_A):
            r = admin.post(
                f"{API}/namespaces/{ns}/pods", json=_pod(f"watched-{secrets.token_hex(3)}")
            )
            assert r.status_code == 201, r.text
        seen = [json.loads(line) for line in stream.iter_lines() if line]
    namespaces = {e["object"]["metadata"]["namespace"] for e in seen}
    assert namespaces == {TEAM_A}, seen
    assert any(e["object"]["metadata"]["name"].startswith("watched-") for e in seen)


def test_access_reviews(clients) -> None:  # type: ignore[no-untyped-def]
    def can(user: str, verb: str, resource: str, ns: str, path: str) -> bool:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": ns}},
        }
        r = clients[user].post(path, json=body)
        assert r.status_code == 201, r.text
        return bool(r.json()["status"]["allowed"])

    for path in (
        "/apis/authorization.quaymaster.io/v1/selfsubjectaccessreviews",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
    ):
        assert can("eddie", "create", "pods", TEAM_A, path)
        assert not can("vera", "create", "pods", TEAM_A, path)
        assert not can("eddie", "create", "pods", TEAM_B, path)
    r = clients["vera"].post(
        "/apis/authorization.quaymaster.io/v1/selfsubjectrulesreviews",
        json={"kind": "SelfSubjectRulesReview", "spec": {"namespace": TEAM_A}},
    )
    assert r.status_code == 201, r.text
    rules = r.json()["status"]["resourceRules"]
    assert any("pods" in rule["resources"] and "list" in rule["verbs"] for rule in rules)
    groups = {g["name"] for g in clients["nobody"].get("/apis").json()["groups"]}
    assert {"authorization.quaymaster.io", "authorization.k8s.io"} <= groups


def test_qm_auth_can_i(api_server, tokens, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "config.yaml"
    config.write_text("server: http://127.0.0.1:9\ntoken: not-the-token\n")

    def qm(user: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "QM_CONFIG": str(config), "QM_SERVER": api_server.url,
               "QM_TOKEN": tokens[user]}  # fmt: skip
        return subprocess.run(
            [sys.executable, "-m", "app.cli.main", *args],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    yes = qm("eddie", "auth", "can-i", "create", "deploy", "-n", TEAM_A)
    assert (yes.returncode, yes.stdout.strip()) == (0, "yes"), yes.stderr
    no = qm("vera", "auth", "can-i", "delete", "pods", "-n", TEAM_A)
    assert (no.returncode, no.stdout.strip()) == (1, "no"), no.stderr
    assert qm("eddie", "auth", "can-i", "get", "pods/log", "-n", TEAM_A).stdout.strip() == "yes"
    assert qm("eddie", "auth", "can-i", "list", "pods", "-n", TEAM_B).stdout.strip() == "no"
    assert qm("eddie", "auth", "can-i", "list", "nodes").stdout.strip() == "no"
    listed = qm("vera", "auth", "can-i", "--list", "-n", TEAM_A)
    assert listed.returncode == 0, listed.stderr
    assert "RESOURCES" in listed.stdout and "pods" in listed.stdout, listed.stdout
    assert "[get list watch]" in listed.stdout, listed.stdout


def test_scale_subresource_is_authorised_as_such(clients, admin) -> None:  # type: ignore[no-untyped-def]
    deploy = {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Deployment",
        "metadata": {"name": "scaled"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "scaled"}},
            "template": {
                "metadata": {"labels": {"app": "scaled"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    for ns in (TEAM_A, TEAM_B):
        r = admin.post(f"{API}/namespaces/{ns}/deployments", json=deploy)
        assert r.status_code in (201, 409), r.text
    merge = {"Content-Type": "application/merge-patch+json"}
    path = f"{API}/namespaces/{TEAM_A}/deployments/scaled/scale"
    assert clients["vera"].get(path).status_code == 200
    body = _forbidden(
        clients["vera"].patch(path, content=b'{"spec":{"replicas":0}}', headers=merge)
    )
    assert 'cannot patch resource "deployments/scale"' in body["message"], body
    r = clients["eddie"].patch(path, content=b'{"spec":{"replicas":0}}', headers=merge)
    assert r.status_code == 200, r.text
    _same_answers(
        clients["eddie"], "GET", lambda ns: f"{API}/namespaces/{ns}/deployments/scaled/scale"
    )
