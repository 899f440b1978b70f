"""Authentication, the change history, and how writes move ``generation`` and
``resourceVersion``, against a real API server and its database.

Every write through the API appends exactly one ``qm_history`` row (written by the table's
trigger, with the API's write context) in the same transaction as the change; rejected writes
and no-op updates append none; the history cannot be edited by SQL.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

API = "/apis/quaymaster.io/v1"
NS = "api-auth-audit"
CM = f"{API}/namespaces/{NS}/configmaps"
DEPLOY = f"{API}/namespaces/{NS}/deployments"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture(scope="module")
def http(api_server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        r = c.post(
            f"{API}/namespaces",
            json={"apiVersion": "quaymaster.io/v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
        assert r.status_code in (201, 409), r.text
        yield c


@pytest.fixture(scope="module")
def anon(api_server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=api_server.url, timeout=30.0) as c:
        yield c


@pytest.fixture(scope="module")
def db(pg_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


def status_of(r: httpx.Response, code: int, reason: str) -> dict[str, Any]:
    assert r.status_code == code, f"expected {code}, got {r.status_code}: {r.text}"
    body = r.json()
    assert body["kind"] == "Status" and body["status"] == "Failure", body
    assert body["code"] == code and body["reason"] == reason, body
    assert body["message"]
    return body


def cm(name: str, data: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, **meta},
        "data": data if data is not None else {"k": "v"},
    }


def deployment(name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }


def audit_rows(db: psycopg.Connection, name: str) -> list[dict[str, Any]]:
    """The history of the object ``name`` in the test's namespace (the API's writes)."""
    cur = db.execute(
        "SELECT id, principal AS username, verb, kind, namespace, name, uid::text AS uid,"
        " coalesce(subresource, '') AS subresource, before, after FROM qm_history"
        " WHERE namespace = %s AND name = %s AND op <> 'summary' ORDER BY id",
        (NS, name),
    )
    cols = [d.name for d in cur.description or []]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


# ---------------------------------------------------------------------------- authentication


@pytest.mark.parametrize(
    "header",
    [None, "Bearer not-a-real-token", "Bearer", "Basic YWRtaW46YWRtaW4=", "bearer x", "Token"],
)
def test_requests_without_a_valid_token_are_401(anon, db, header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    before = db.execute("SELECT count(*) FROM configmaps WHERE namespace = %s", (NS,)).fetchone()
    audits = db.execute("SELECT max(id) FROM qm_history WHERE namespace = %s", (NS,)).fetchone()
    for method, path, body in (
        ("GET", CM, None),
        ("GET", f"{API}/configmaps", None),
        ("GET", "/apis", None),
        ("GET", f"{API}/namespaces", None),
        ("POST", CM, cm("sneaky")),
        ("DELETE", f"{CM}/anything", None),
        ("PATCH", f"{CM}/anything", {"data": {"a": "b"}}),
    ):
        r = anon.request(method, path, json=body, headers={**headers, **MERGE})
        status = status_of(r, 401, "Unauthorized")
        assert "token" in status["message"]
        assert "details" not in status
    r = anon.get(CM, params={"watch": "1"}, headers=headers)
    status_of(r, 401, "Unauthorized")
    assert (
        db.execute("SELECT count(*) FROM configmaps WHERE namespace = %s", (NS,)).fetchone()
        == before
    )
    assert (
        db.execute("SELECT max(id) FROM qm_history WHERE namespace = %s", (NS,)).fetchone()
        == audits
    )


def test_health_and_version_need_no_token(anon) -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        r = anon.get(path)
        assert r.status_code == 200, r.text
        assert r.text == "ok"
    r = anon.get("/version")
    assert r.status_code == 200
    assert r.json()["gitVersion"].startswith("v")


def test_tokens_are_stored_hashed(api_server, db) -> None:
    token = api_server.token
    digest = hashlib.sha256(token.encode()).hexdigest()
    row = db.execute(
        "SELECT username, token_sha256 FROM qm_tokens WHERE token_sha256 = %s", (digest,)
    ).fetchone()
    assert row == ("admin", digest)
    for (text,) in db.execute("SELECT t::text FROM qm_tokens t").fetchall():
        assert token not in text
    for (sha,) in db.execute("SELECT token_sha256 FROM qm_tokens").fetchall():
        assert len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)


def test_a_new_token_authenticates_as_its_user_and_expiry_is_honoured(api_server, http, db) -> None:
    token, expired = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    db.execute(
        "INSERT INTO qm_tokens (username, groups, token_sha256, description)"
        " VALUES ('auditor', '{}', %s, 'test')",
        (hashlib.sha256(token.encode()).hexdigest(),),
    )
    db.execute(
        "INSERT INTO qm_tokens (username, token_sha256, expires_at)"
        " VALUES ('expired', %s, now() - interval '1 minute')",
        (hashlib.sha256(expired.encode()).hexdigest(),),
    )
    grant = {  # a principal may write only what RBAC grants it
        "metadata": {"name": "auditor-edit"},
        "roleRef": {"kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "User", "name": "auditor"}],
    }
    r = http.post(f"{API}/namespaces/{NS}/rolebindings", json=grant)
    assert r.status_code in (201, 409), r.text
    with httpx.Client(base_url=api_server.url, timeout=30.0) as c:
        r = c.post(CM, json=cm("by-auditor"), headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 201, r.text
        r = c.post(CM, json=cm("by-expired"), headers={"Authorization": f"Bearer {expired}"})
        status_of(r, 401, "Unauthorized")
    (row,) = audit_rows(db, "by-auditor")
    assert (row["username"], row["verb"]) == ("auditor", "create")
    assert audit_rows(db, "by-expired") == []


# ---------------------------------------------------------------------------- audit trail


def test_every_write_appends_one_audit_row(http, db) -> None:
    created = http.post(DEPLOY, json=deployment("audited")).json()
    uid = created["metadata"]["uid"]

    replaced = dict(created)
    replaced["spec"] = dict(created["spec"], replicas=2)
    r = http.put(f"{DEPLOY}/audited", json=replaced)
    assert r.status_code == 200, r.text

    r = http.patch(
        f"{DEPLOY}/audited", content=b'{"metadata": {"labels": {"a": "b"}}}', headers=MERGE
    )
    assert r.status_code == 200, r.text

    with_status = r.json()
    with_status["status"] = {"replicas": 2, "readyReplicas": 1}
    r = http.put(f"{DEPLOY}/audited/status", json=with_status)
    assert r.status_code == 200, r.text

    r = http.patch(
        f"{DEPLOY}/audited/status", content=b'{"status": {"readyReplicas": 2}}', headers=MERGE
    )
    assert r.status_code == 200, r.text
    assert r.json()["status"] == {"replicas": 2, "readyReplicas": 2}

    r = http.delete(f"{DEPLOY}/audited")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "Success"

    rows = audit_rows(db, "audited")
    assert [(a["verb"], a["subresource"]) for a in rows] == [
        ("create", ""),
        ("update", ""),
        ("patch", ""),
        ("update", "status"),
        ("patch", "status"),
        ("delete", ""),
    ]
    for a in rows:
        assert (a["username"], a["kind"], a["namespace"], a["name"], a["uid"]) == (
            "admin",
            "Deployment",
            NS,
            "audited",
            uid,
        )
    create, update, patch, status, status_patch, delete = rows
    assert create["before"] is None and create["after"]["spec"]["replicas"] == 1
    assert update["before"]["spec"]["replicas"] == 1
    assert update["after"]["spec"]["replicas"] == 2
    assert patch["before"]["labels"] == {} and patch["after"]["labels"] == {"a": "b"}
    assert status["before"]["status"] == {}
    assert status["after"]["status"] == {"replicas": 2, "readyReplicas": 1}
    assert "spec" not in status["after"]  # an update keeps only the fields that changed
    assert status_patch["after"]["status"]["readyReplicas"] == 2
    assert delete["before"]["uid"] == uid and delete["after"] is None
    # Each row's before is the previous row's after: the trail is complete.
    for prev, cur in itertools.pairwise(rows):
        assert cur["before"]["row_version"] == prev["after"]["row_version"]


def test_rejected_writes_append_nothing(http, db) -> None:
    created = http.post(CM, json=cm("rejected", {"n": "1"})).json()
    r = http.patch(f"{CM}/rejected", content=b'{"data": {"n": "2"}}', headers=MERGE)
    assert r.status_code == 200
    baseline = audit_rows(db, "rejected")
    assert [a["verb"] for a in baseline] == ["create", "patch"]

    status_of(http.post(CM, json=cm("rejected")), 409, "AlreadyExists")
    status_of(http.put(f"{CM}/rejected", json=dict(created, data={"n": "x"})), 409, "Conflict")
    status_of(
        http.patch(f"{CM}/rejected", content=b'{"data": {"n": 3}}', headers=MERGE), 422, "Invalid"
    )
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    status_of(
        http.patch(f"{CM}/rejected", content=json.dumps(stale).encode(), headers=MERGE),
        409,
        "Conflict",
    )
    pre = {"preconditions": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    status_of(http.request("DELETE", f"{CM}/rejected", json=pre), 409, "Conflict")
    status_of(
        http.request("DELETE", f"{CM}/rejected", json={"preconditions": {"uid": "other"}}),
        409,
        "Conflict",
    )
    status_of(
        http.request("DELETE", f"{CM}/rejected", json={"propagationPolicy": "Sometimes"}),
        400,
        "BadRequest",
    )
    status_of(
        http.request("DELETE", f"{CM}/rejected", json={"gracePeriodSeconds": -3}),
        422,
        "Invalid",
    )
    status_of(http.delete(f"{CM}/rejected", params={"gracePeriodSeconds": "-3"}), 400, "BadRequest")
    assert audit_rows(db, "rejected") == baseline
    assert http.get(f"{CM}/rejected").json()["data"] == {"n": "2"}


def test_the_history_is_append_only(http, db) -> None:
    http.post(CM, json=cm("append-only"))
    (row,) = audit_rows(db, "append-only")
    refused = psycopg.errors.InsufficientPrivilege
    with pytest.raises(refused, match="append-only"):
        db.execute("UPDATE qm_history SET principal = 'mallory' WHERE id = %s", (row["id"],))
    with pytest.raises(refused, match="append-only"):
        db.execute("DELETE FROM qm_history WHERE id = %s", (row["id"],))
    with pytest.raises(refused, match="append-only"):
        db.execute("DELETE FROM qm_history")
    assert audit_rows(db, "append-only") == [row]


# ---------------------------------------------------------------------------- generation


def test_generation_moves_with_spec_only(http, db) -> None:
    created = http.post(DEPLOY, json=deployment("gen")).json()
    assert created["metadata"]["generation"] == 1
    assert created["status"] == {}

    labelled = dict(created, metadata={**created["metadata"], "labels": {"x": "y"}})
    r = http.put(f"{DEPLOY}/gen", json=labelled)
    assert r.status_code == 200, r.text
    after_labels = r.json()
    assert after_labels["metadata"]["labels"] == {"x": "y"}
    assert after_labels["metadata"]["generation"] == 1
    assert rv(after_labels) > rv(created)

    scaled = dict(after_labels, spec=dict(after_labels["spec"], replicas=3))
    r = http.put(f"{DEPLOY}/gen", json=scaled)
    assert r.status_code == 200, r.text
    after_spec = r.json()
    assert after_spec["metadata"]["generation"] == 2
    assert after_spec["spec"]["replicas"] == 3

    # The status subresource changes status only: neither spec nor generation.
    attempt = dict(after_spec, spec=dict(after_spec["spec"], replicas=9))
    attempt["status"] = {"replicas": 3, "observedGeneration": 2}
    r = http.put(f"{DEPLOY}/gen/status", json=attempt)
    assert r.status_code == 200, r.text
    after_status = r.json()
    assert after_status["status"] == {"replicas": 3, "observedGeneration": 2}
    assert after_status["spec"] == after_spec["spec"]
    assert after_status["metadata"]["generation"] == 2
    assert rv(after_status) > rv(after_spec)

    # The main resource ignores status.
    attempt = dict(after_status, status={"replicas": 100})
    attempt["metadata"] = {**after_status["metadata"], "labels": {"x": "z"}}
    r = http.put(f"{DEPLOY}/gen", json=attempt)
    assert r.status_code == 200, r.text
    after_main = r.json()
    assert after_main["status"] == {"replicas": 3, "observedGeneration": 2}
    assert after_main["metadata"]["labels"] == {"x": "z"}
    assert after_main["metadata"]["generation"] == 2

    r = http.patch(f"{DEPLOY}/gen", content=b'{"status": {"replicas": 7}}', headers=MERGE)
    assert r.status_code == 200, r.text
    assert r.json() == after_main, "a status-only patch of the main resource is a no-op"

    row = db.execute(
        "SELECT generation, status, spec->>'replicas' FROM deployments"
        " WHERE namespace = %s AND name = 'gen'",
        (NS,),
    ).fetchone()
    assert row == (2, {"replicas": 3, "observedGeneration": 2}, "3")


def test_unchanged_update_is_a_no_op(http, db) -> None:
    created = http.post(DEPLOY, json=deployment("noop")).json()
    with_status = dict(created, status={"replicas": 1})
    current = http.put(f"{DEPLOY}/noop/status", json=with_status).json()
    rows = len(audit_rows(db, "noop"))
    log = db.execute(
        "SELECT count(*) FROM qm_revision_log WHERE uid = %s", (current["metadata"]["uid"],)
    ).fetchone()

    for method, path, kw in (
        ("PUT", f"{DEPLOY}/noop", {"json": current}),
        ("PUT", f"{DEPLOY}/noop/status", {"json": current}),
        ("PATCH", f"{DEPLOY}/noop", {"content": b"{}", "headers": MERGE}),
        ("PATCH", f"{DEPLOY}/noop", {"content": b'{"spec": {"replicas": 1}}', "headers": MERGE}),
        ("PATCH", f"{DEPLOY}/noop/status", {"content": b"{}", "headers": MERGE}),
    ):
        r = http.request(method, path, **kw)
        assert r.status_code == 200, r.text
        assert r.json() == current, f"{method} {path} changed the object"

    # A fresh manifest without the server-set fields changes nothing either.
    manifest = deployment("noop")
    manifest["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    r = http.put(f"{DEPLOY}/noop", json=manifest)
    assert r.status_code == 200, r.text
    assert r.json() == current

    assert len(audit_rows(db, "noop")) == rows
    assert (
        db.execute(
            "SELECT count(*) FROM qm_revision_log WHERE uid = %s", (current["metadata"]["uid"],)
        ).fetchone()
        == log
    )
