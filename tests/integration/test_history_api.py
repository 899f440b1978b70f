"""The history read API over HTTP (ADR 0061): a change made through the API shows up with who,
why and what; pages follow the continue token; filters; who may read which history; 422s; the
application role's grant; ``qm history``."""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psycopg
import pytest

from app.store import history_read

API = "/apis/quaymaster.io/v1"
AUDIT = "/apis/audit.quaymaster.io/v1"
NS, OTHER = "hist-team", "hist-other"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _cm(name: str, value: str) -> dict[str, Any]:
    return {"apiVersion": "quaymaster.io/v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"k": value}}  # fmt: skip


def _binding(name: str, role: str, user: str) -> dict[str, Any]:
    return {"apiVersion": "quaymaster.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
            "roleRef": {"kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": user}]}  # fmt: skip


@pytest.fixture(scope="module")
def admin(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        for ns in (NS, OTHER):
            r = c.post(f"{API}/namespaces", json={"metadata": {"name": ns}})
            assert r.status_code in (201, 409), r.text
        for user, role in (("hist-viewer", "view"), ("hist-admin", "admin")):
            r = c.post(f"{API}/namespaces/{NS}/rolebindings", json=_binding(user, role, user))
            assert r.status_code in (201, 409), r.text
        yield c


@pytest.fixture(scope="module")
def changed(admin: httpx.Client) -> dict[str, Any]:
    """A ConfigMap created, then patched three times with a reason and a request id."""
    coll = f"{API}/namespaces/{NS}/configmaps"
    r = admin.post(coll, json=_cm("web", "0"), headers={"X-Reason": "first cut"})
    assert r.status_code == 201, r.text
    for i in range(1, 4):
        r = admin.patch(
            f"{coll}/web",
            json={"data": {"k": str(i)}},
            headers={"Content-Type": "application/merge-patch+json",
                     "X-Reason": f"bump {i}", "X-Request-Id": f"req-hist-{i}"},
        )  # fmt: skip
        assert r.status_code == 200, r.text
    r = admin.post(f"{API}/namespaces/{OTHER}/configmaps", json=_cm("elsewhere", "x"))
    assert r.status_code in (201, 409), r.text
    return {"uid": r.json()["metadata"]["uid"]}


def _client(api_server: Any, db_url: str, user: str) -> httpx.Client:
    token = secrets.token_urlsafe(32)
    with psycopg.connect(db_url, autocommit=True) as db:
        db.execute(
            "INSERT INTO qm_tokens (username, groups, token_sha256, description)"
            " VALUES (%s, %s, %s, 'history test')",
            (user, ["system:authenticated"], hashlib.sha256(token.encode()).hexdigest()),
        )
    return httpx.Client(base_url=api_server.url, timeout=30.0,
                        headers={"Authorization": f"Bearer {token}"})  # fmt: skip


@pytest.fixture(scope="module")
def users(api_server: Any, pg_url: str, admin: httpx.Client) -> Iterator[dict[str, httpx.Client]]:
    out = {u: _client(api_server, pg_url, u) for u in ("hist-viewer", "hist-admin", "hist-none")}
    yield out
    for c in out.values():
        c.close()


def _web(client: httpx.Client, **params: str) -> httpx.Response:
    return client.get(f"{AUDIT}/namespaces/{NS}/history",
                      params={"kind": "ConfigMap", "name": "web", **params})  # fmt: skip


def test_a_change_through_the_api_shows_who_why_and_what(
    admin: httpx.Client, changed: dict[str, Any]
) -> None:
    r = _web(admin)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["kind"] == "HistoryList" and body["apiVersion"] == "audit.quaymaster.io/v1"
    items = body["items"]
    assert [i["op"] for i in items] == ["update", "update", "update", "insert"]
    newest, first = items[0], items[-1]
    assert newest["reason"] == "bump 3" and newest["requestId"] == "req-hist-3"
    assert newest["principal"] and newest["verb"] == "patch"
    assert newest["kind"] == "ConfigMap" and newest["table"] == "configmaps"
    assert newest["namespace"] == NS and newest["name"] == "web"
    assert "spec" in newest["changed"] or "data" in newest["changed"], newest["changed"]
    assert newest["before"] != newest["after"]
    assert first["reason"] == "first cut" and first["after"] and first["before"] is None
    assert first["changed"] == []
    assert newest["at"].endswith("Z") and isinstance(newest["sealed"], bool)
    assert isinstance(newest["groups"], list) and newest["userAgent"]


def test_pages_follow_the_continue_token(admin: httpx.Client, changed: dict[str, Any]) -> None:
    seen, cont, pages = [], None, 0
    while True:
        params = {"limit": "1", **({"continue": cont} if cont else {})}
        r = _web(admin, **params)
        assert r.status_code == 200, r.text
        seen += [i["id"] for i in r.json()["items"]]
        cont = r.json()["metadata"].get("continue")
        pages += 1
        if not cont:
            break
    assert pages == 4 and len(seen) == len(set(seen)) == 4
    whole = [i["id"] for i in _web(admin).json()["items"]]
    assert seen == whole
    # The cluster-wide list, ordered by id, pages the same way.
    first = admin.get(f"{AUDIT}/history", params={"limit": "2"}).json()
    second = admin.get(
        f"{AUDIT}/history", params={"limit": "2", "continue": first["metadata"]["continue"]}
    ).json()
    ids = [i["id"] for i in first["items"] + second["items"]]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 4


def test_filters(admin: httpx.Client, changed: dict[str, Any]) -> None:
    updates = _web(admin, op="update").json()["items"]
    assert len(updates) == 3 and {i["op"] for i in updates} == {"update"}
    by_uid = admin.get(f"{AUDIT}/history", params={"uid": changed["uid"]}).json()["items"]
    assert [i["name"] for i in by_uid] == ["elsewhere"]
    newest = _web(admin).json()["items"][0]
    until = _web(admin, until=newest["at"]).json()["items"]
    assert newest["id"] not in [i["id"] for i in until] and len(until) == 3
    assert _web(admin, since=newest["at"]).json()["items"][0]["id"] == newest["id"]
    mine = admin.get(f"{AUDIT}/history", params={"principal": newest["principal"], "limit": "5"})
    assert mine.status_code == 200 and all(
        i["principal"] == newest["principal"] for i in mine.json()["items"]
    )
    in_ns = admin.get(f"{AUDIT}/namespaces/{OTHER}/history").json()["items"]
    assert in_ns and {i["namespace"] for i in in_ns} == {OTHER}
    assert all(i["op"] != "summary" for i in admin.get(f"{AUDIT}/history").json()["items"])


def test_who_may_read_which_history(
    users: dict[str, httpx.Client], changed: dict[str, Any]
) -> None:
    viewer, ns_admin, nobody = users["hist-viewer"], users["hist-admin"], users["hist-none"]
    # view reads configmaps in its namespace, so it reads their history, one object at a time.
    r = _web(viewer)
    assert r.status_code == 200 and len(r.json()["items"]) == 4, r.text
    r = viewer.get(f"{AUDIT}/namespaces/{NS}/history")
    assert r.status_code == 403, r.text
    assert (
        'cannot list resource "history" in API group "audit.quaymaster.io"' in r.json()["message"]
    )
    # admin lists its namespace's whole history.
    r = ns_admin.get(f"{AUDIT}/namespaces/{NS}/history")
    assert r.status_code == 200 and {i["namespace"] for i in r.json()["items"]} == {NS}
    # Neither reads the cluster's, nor another namespace's, which answers as a missing one.
    for c in (viewer, ns_admin, nobody):
        r = c.get(f"{AUDIT}/history")
        assert r.status_code == 403 and "at the cluster scope" in r.json()["message"], r.text
        r = c.get(f"{AUDIT}/namespaces/{OTHER}/history")
        assert r.status_code == 200 and r.json()["items"] == [], r.text
        r = c.get(f"{AUDIT}/namespaces/{OTHER}/history",
                  params={"kind": "ConfigMap", "name": "elsewhere"})  # fmt: skip
        assert r.status_code == 200 and r.json()["items"] == [], r.text
    # The group is discoverable.
    assert any(g["name"] == "audit.quaymaster.io" for g in viewer.get("/apis").json()["groups"])
    res = viewer.get(AUDIT).json()["resources"]
    assert [r["name"] for r in res] == ["history"]


@pytest.mark.parametrize(
    ("params", "fields"),
    [
        ({"limit": "0"}, ["limit"]),
        ({"limit": "501"}, ["limit"]),
        ({"limit": "x", "since": "yesterday"}, ["limit", "since"]),
        ({"since": "2026-12-02T10:00:00"}, ["since"]),
        ({"continue": "bm90LWEtdG9rZW4"}, ["continue"]),
        ({"op": "upsert"}, ["op"]),
        ({"kind": "Gadget"}, ["kind"]),
        ({"name": "web"}, ["name"]),
        ({"uid": "nope"}, ["uid"]),
        ({"since": "2026-12-02T10:00:00Z", "until": "2026-12-01T10:00:00Z"}, ["until"]),
    ],
)
def test_malformed_parameters_are_422_naming_each(
    admin: httpx.Client, params: dict[str, str], fields: list[str]
) -> None:
    r = admin.get(f"{AUDIT}/history", params=params)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["reason"] == "Invalid"
    assert sorted(c["field"] for c in body["details"]["causes"]) == sorted(fields)


def test_a_token_from_another_query_is_refused(admin: httpx.Client, changed: Any) -> None:
    cont = _web(admin, limit="1").json()["metadata"]["continue"]
    r = admin.get(f"{AUDIT}/history", params={"continue": cont})
    assert r.status_code == 422 and "other filters" in r.text, r.text


def test_the_application_role_reads_through_the_parent_only(
    app_role_url: str, pg_url: str, changed: Any
) -> None:
    import asyncio

    async def read() -> history_read.Page:
        pool = await asyncpg.create_pool(app_role_url, min_size=1, max_size=1)
        try:
            q = history_read.Query(table="configmaps", namespace=NS, name="web")
            return await history_read.read(pool, q)
        finally:
            await pool.close()

    assert len(asyncio.run(read()).items) == 4
    with psycopg.connect(pg_url, autocommit=True) as db:
        part = db.execute("SELECT qm_history_partition(now())").fetchone()
    assert part is not None
    with psycopg.connect(app_role_url, autocommit=True) as app:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app.execute(f'SELECT 1 FROM "{part[0]}" LIMIT 1')
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app.execute("DELETE FROM qm_history_links")


def test_qm_history(api_server: Any, changed: Any) -> None:
    env = {**os.environ, "QM_SERVER": api_server.url, "QM_TOKEN": api_server.token,
           "QM_CONFIG": "/nonexistent"}  # fmt: skip

    def qm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app.cli.main", *args],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    out = qm("history", "cm/web", "-n", NS)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:5] == ["TIME", "PRINCIPAL", "VERB", "OP", "OBJECT"]
    assert len(lines) == 5 and "bump 3" in lines[1] and "first cut" in lines[4]
    assert f"ConfigMap/{NS}/web" in lines[1]
    out = qm("history", "cm/web", "-n", NS, "-o", "json", "--limit", "2")
    assert out.returncode == 0, out.stderr
    assert '"kind": "HistoryList"' in out.stdout and out.stdout.count('"op":') == 2
    out = qm("history", "-A", "--since", "1h", "--op", "update", "-o", "wide")
    assert out.returncode == 0 and "SEALED" in out.stdout.splitlines()[0], out.stderr
    out = qm("history", "--since", "soon")
    assert out.returncode == 2 and "neither a duration" in out.stderr
