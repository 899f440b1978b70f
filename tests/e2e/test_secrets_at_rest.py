"""Secrets at rest, against a real API server and its database (ADR 0048).

After creates, updates and patches, neither the ``secrets`` table, nor the revision log, nor
the audit trail, nor Events hold the plaintext (searched by SQL for a marker, raw and
base64-encoded); the API gives the plaintext back to the admin; a tampered ciphertext is
refused; a principal allowed to list but not to get a Secret sees its data withheld (lists,
watches), and cannot write the withheld form back; error messages never echo a value.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from app.store.db import create_pool
from app.store.tokens import create_token

API = "/apis/quaymaster.io/v1"
NS = "secrets-at-rest"
SECRETS = f"{API}/namespaces/{NS}/secrets"
MERGE = {"Content-Type": "application/merge-patch+json"}
MARK = f"MARKER-{secrets.token_hex(6)}"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(name: str, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "quaymaster.io/v1", "kind": "Secret", "metadata": {"name": name},
            **fields}  # fmt: skip


@pytest.fixture(scope="module")
def http(api_server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(
        base_url=api_server.url, headers=headers, timeout=30.0, verify=api_server.ca_file or True
    ) as c:
        r = c.post(f"{API}/namespaces", json={"kind": "Namespace", "metadata": {"name": NS}})
        assert r.status_code in (201, 409), r.text
        yield c


@pytest.fixture(scope="module")
def db(pg_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


def leaks(db: psycopg.Connection, *needles: str) -> dict[str, int]:
    """Rows holding any of ``needles``, per table: must stay all zero."""
    found = {}
    for table, column in (
        ("secrets", "spec::text || labels::text || annotations::text"),
        ("qm_revision_log", "object::text"),
        ("qm_history", "coalesce(before::text, '') || coalesce(after::text, '')"),
        ("events", "spec::text"),
    ):
        (n,) = db.execute(
            f"SELECT count(*) FROM {table} WHERE {column} LIKE ANY(%s)",
            ([f"%{x}%" for x in needles],),
        ).fetchone() or (0,)
        found[table] = n
    return found


def test_no_plaintext_in_table_log_or_audit(http: httpx.Client, db: psycopg.Connection) -> None:
    one, two, three = f"{MARK}-one", f"{MARK}-two", f"{MARK}-three"
    r = http.post(SECRETS, json=secret("db", data={"password": b64(one)}, stringData={"u": two}))
    assert r.status_code == 201, r.text
    assert r.json()["data"] == {"password": b64(one), "u": b64(two)}
    body = r.json()
    body["data"]["password"] = b64(three)
    r = http.put(f"{SECRETS}/db", json=body)
    assert r.status_code == 200, r.text
    r = http.patch(f"{SECRETS}/db", content=json.dumps({"stringData": {"p": MARK}}), headers=MERGE)
    assert r.status_code == 200, r.text
    got = http.get(f"{SECRETS}/db").json()
    assert got["data"] == {"password": b64(three), "u": b64(two), "p": b64(MARK)}
    assert http.get(SECRETS).json()["items"][0]["data"] == got["data"]

    stored = db.execute(
        "SELECT spec->>'data', spec->>'type' FROM secrets WHERE namespace = %s AND name = 'db'",
        (NS,),
    ).fetchone()
    assert stored is not None and stored[0].startswith("qm1.") and stored[1] == "Opaque"
    (revisions,) = db.execute(
        "SELECT count(*) FROM qm_revision_log WHERE kind = 'Secret' AND namespace = %s", (NS,)
    ).fetchone() or (0,)
    assert revisions >= 3  # create, update, patch all went through the log
    needles = (MARK, b64(MARK), b64(one), b64(two), b64(three))
    assert leaks(db, *needles) == {
        "secrets": 0,
        "qm_revision_log": 0,
        "qm_history": 0,
        "events": 0,
    }


def test_tampered_ciphertext_refused(http: httpx.Client, db: psycopg.Connection) -> None:
    r = http.post(SECRETS, json=secret("tamper", data={"k": b64(MARK)}))
    assert r.status_code == 201, r.text
    rv = r.json()["metadata"]["resourceVersion"]
    (sealed,) = db.execute(
        "SELECT spec->>'data' FROM secrets WHERE namespace = %s AND name = 'tamper'", (NS,)
    ).fetchone() or ("",)
    flipped = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    db.execute(
        "UPDATE secrets SET spec = jsonb_set(spec, '{data}', to_jsonb(%s::text))"
        " WHERE namespace = %s AND name = 'tamper'",
        (flipped, NS),
    )
    for _ in range(100):  # until the cache shows the edited row
        r = http.get(f"{SECRETS}/tamper")
        if r.status_code != 200 or r.json()["metadata"]["resourceVersion"] != rv:
            break
    assert r.status_code == 500, r.text
    assert "cannot be decrypted" in r.json()["message"] and MARK not in r.text


def test_values_never_echoed_in_errors(api_server, http: httpx.Client, db) -> None:  # type: ignore[no-untyped-def]
    for body in (
        secret("bad1", data={"k": f"{MARK} is not base64"}),
        secret("bad2", data=f"{MARK} as a string"),
        secret("bad3", stringData={"k": 12345678901234567}),
        secret("bad4", data={"k": [MARK]}),
    ):
        r = http.post(SECRETS, json=body)
        assert r.status_code == 422, r.text
        assert MARK not in r.text and "12345678901234567" not in r.text, r.text
    assert MARK not in api_server.log_path.read_text(errors="replace")
    assert leaks(db, MARK)["events"] == 0


@pytest.fixture(scope="module")
def lister(api_server, pg_url: str, http: httpx.Client) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    """A user allowed to list and watch Secrets in NS, and to get only the one named "seen"."""
    name = f"lister-{secrets.token_hex(3)}"
    rules = [
        {"apiGroups": ["quaymaster.io"], "resources": ["secrets"],
         "verbs": ["list", "watch", "update", "patch"]},
        {"apiGroups": ["quaymaster.io"], "resources": ["secrets"], "verbs": ["get"],
         "resourceNames": ["seen"]},
    ]  # fmt: skip
    role = {"kind": "Role", "metadata": {"name": name}, "rules": rules}
    r = http.post(f"{API}/namespaces/{NS}/roles", json=role)
    assert r.status_code == 201, r.text
    binding = {
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "quaymaster.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "User", "name": name}],
    }
    r = http.post(f"{API}/namespaces/{NS}/rolebindings", json=binding)
    assert r.status_code == 201, r.text

    async def mint() -> str:
        pool = await create_pool(pg_url, min_size=1, max_size=1)
        try:
            return await create_token(pool, name, ("system:authenticated",))
        finally:
            await pool.close()

    token = asyncio.run(mint())
    with httpx.Client(
        base_url=api_server.url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30.0,
        verify=api_server.ca_file or True,
    ) as c:
        yield c


def test_list_and_watch_without_get_withhold_data(http: httpx.Client, lister: httpx.Client) -> None:
    for name in ("seen", "unseen"):
        r = http.post(SECRETS, json=secret(name, data={"k": b64(f"{MARK}-{name}")}))
        assert r.status_code == 201, r.text
    listed = lister.get(SECRETS)
    assert listed.status_code == 200, listed.text
    items = {i["metadata"]["name"]: i for i in listed.json()["items"]}
    assert items["seen"]["data"] == {"k": b64(f"{MARK}-seen")}
    assert "data" not in items["unseen"]
    annotations = items["unseen"]["metadata"]["annotations"]
    assert annotations["secrets.quaymaster.io/data-redacted"] == "true"
    assert b64(f"{MARK}-unseen") not in listed.text

    with lister.stream("GET", SECRETS, params={"watch": "1", "resourceVersion": "0",
                                              "timeoutSeconds": "2"}) as w:  # fmt: skip
        events = [json.loads(line) for line in w.iter_lines() if line]
    shown = {e["object"]["metadata"]["name"]: e["object"] for e in events}
    assert shown["seen"]["data"] == {"k": b64(f"{MARK}-seen")}
    assert "data" not in shown["unseen"]

    back = items["unseen"]  # the withheld form, sent back as an update
    r = lister.put(f"{SECRETS}/unseen", json=back)
    assert r.status_code == 422, r.text
    assert "withheld" in r.text
    assert http.get(f"{SECRETS}/unseen").json()["data"] == {"k": b64(f"{MARK}-unseen")}
