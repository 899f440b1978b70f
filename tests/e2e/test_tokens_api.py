"""Tokens and service accounts through real API servers: shown once and hashed at rest,
self-service within one's own groups, service account tokens that authenticate as the account,
revocation (API, CLI, deleting the account) refused by a second server on the same database
within a second, expiry, the audit trail's principal and groups, and hostile requests
answered 422 with their causes."""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.devstack.apiserver import ApiServer
from app.devstack.supervise import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
API = "/apis/quaymaster.io/v1"
AUTHN = "/apis/authentication.quaymaster.io/v1"
WHOAMI = f"{AUTHN}/selfsubjectreviews"


@pytest.fixture(scope="module")
def second_server(
    api_server: ApiServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """Another API server on the same database."""
    port = free_port()
    env = {**api_server.env, "QM_API_PORT": str(port), "QM_API_URL": f"http://127.0.0.1:{port}"}
    log = tmp_path_factory.mktemp("api-2") / "api.log"
    server = ApiServer(port, api_server.token, env, log, cwd=REPO_ROOT, pki=api_server.pki)
    server.start(timeout=60.0)
    try:
        yield server
    finally:
        server.stop()


def client(server: ApiServer, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(
        base_url=server.url, headers=headers, timeout=30.0, verify=server.ca_file or True
    )


@pytest.fixture(scope="module")
def admin(api_server: ApiServer) -> Iterator[httpx.Client]:
    with client(api_server, api_server.token) as c:
        yield c


@pytest.fixture(scope="module")
def db(pg_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


def mint(c: httpx.Client, **spec: Any) -> dict[str, Any]:
    r = c.post(f"{AUTHN}/tokens", json={"apiVersion": "authentication.quaymaster.io/v1",
                                        "kind": "Token", "spec": spec})  # fmt: skip
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def whoami(server: ApiServer, token: str) -> httpx.Response:
    with client(server, token) as c:
        return c.post(WHOAMI, json={})


def refused_within(server: ApiServer, token: str, limit: float) -> float:
    """Poll until ``server`` refuses ``token``; the seconds it took (fails past ``limit``)."""
    start = time.monotonic()
    with client(server, token) as c:
        while c.post(WHOAMI, json={}).status_code != 401:
            assert time.monotonic() - start < limit, f"still accepted after {limit} s"
        return time.monotonic() - start


def test_bootstrap_token_is_admin_in_system_masters(api_server: ApiServer) -> None:
    r = whoami(api_server, api_server.token)
    assert r.status_code == 201, r.text
    assert r.json()["status"]["userInfo"]["username"] == "admin"
    assert r.json()["status"]["userInfo"]["groups"] == ["system:masters", "system:authenticated"]
    with client(api_server, api_server.token) as c:  # where ``kubectl auth whoami`` asks
        r = c.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json={})
    assert r.status_code == 201 and r.json()["apiVersion"] == "authentication.k8s.io/v1"
    assert r.json()["status"]["userInfo"]["username"] == "admin"


def test_a_token_is_shown_once_and_only_its_digest_is_stored(
    admin: httpx.Client, api_server: ApiServer, db: psycopg.Connection
) -> None:
    made = mint(admin, user="erin", groups=["team-e"], description="laptop", expirationSeconds=3600)
    token, name = made["status"]["token"], made["metadata"]["name"]
    assert made["spec"]["user"] == "erin" and made["spec"]["groups"] == ["team-e"]
    shown = admin.get(f"{AUTHN}/tokens/{name}").json()
    assert "token" not in shown.get("status", {}) and token not in str(shown)
    for table in ("qm_tokens", "qm_revision_log", "qm_history"):
        row = db.execute(f"SELECT count(*) FROM {table} t WHERE t::text LIKE %s", (f"%{token}%",))
        assert row.fetchone() == (0,), table
    stored = db.execute("SELECT token_sha256 FROM qm_tokens WHERE name = %s", (name,)).fetchone()
    assert stored == (hashlib.sha256(token.encode()).hexdigest(),)
    me = whoami(api_server, token).json()["status"]["userInfo"]
    assert me["username"] == "erin" and me["groups"] == ["team-e", "system:authenticated"]


def test_revocation_on_one_server_is_refused_by_the_other_within_a_second(
    admin: httpx.Client, api_server: ApiServer, second_server: ApiServer
) -> None:
    took = []
    for _ in range(5):
        made = mint(admin, user="frank", expirationSeconds=600)
        token = made["status"]["token"]
        assert whoami(second_server, token).status_code == 201  # cached there now
        assert whoami(second_server, token).status_code == 201
        r = admin.delete(f"{AUTHN}/tokens/{made['metadata']['name']}")
        assert r.status_code == 200 and r.json()["status"]["revokedAt"], r.text
        took.append(refused_within(second_server, token, 1.0))
        assert whoami(api_server, token).status_code == 401
    shown = ", ".join(f"{t * 1000:.0f}" for t in took)
    print(f"revocation seen by the second server after {shown} ms")


def test_service_account_tokens_authenticate_as_the_account_until_it_is_deleted(
    admin: httpx.Client, api_server: ApiServer, second_server: ApiServer
) -> None:
    ns = f"robots-{secrets.token_hex(3)}"
    assert admin.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    r = admin.post(f"{API}/namespaces/{ns}/serviceaccounts", json={"metadata": {"name": "ci"}})
    assert r.status_code == 201, r.text
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 600}}  # fmt: skip
    r = admin.post(f"{API}/namespaces/{ns}/serviceaccounts/ci/token", json=request)
    assert r.status_code == 201, r.text
    token = r.json()["status"]["token"]
    via_tokens = mint(admin, serviceAccount={"namespace": ns, "name": "ci"}, expirationSeconds=600)
    for t in (token, via_tokens["status"]["token"]):
        me = whoami(second_server, t).json()["status"]["userInfo"]
        assert me["username"] == f"system:serviceaccount:{ns}:ci"
        assert me["groups"] == [
            "system:serviceaccounts",
            f"system:serviceaccounts:{ns}",
            "system:authenticated",
        ]
    assert admin.delete(f"{API}/namespaces/{ns}/serviceaccounts/ci").status_code == 200
    refused_within(second_server, token, 1.0)
    refused_within(second_server, via_tokens["status"]["token"], 1.0)


def test_expiry_is_checked_on_every_request(
    admin: httpx.Client, second_server: ApiServer, db: psycopg.Connection
) -> None:
    made = mint(admin, user="gina", expirationSeconds=600)
    token, name = made["status"]["token"], made["metadata"]["name"]
    db.execute(
        "UPDATE qm_tokens SET expires_at = now() + interval '1 second' WHERE name = %s", (name,)
    )
    assert whoami(second_server, token).status_code == 201
    refused_within(second_server, token, 3.0)


def test_self_service_stays_within_ones_own_groups(
    admin: httpx.Client, api_server: ApiServer
) -> None:
    erin = mint(admin, user="erin", groups=["team-e", "readers"], expirationSeconds=3600)
    other = mint(admin, user="hank", expirationSeconds=3600)
    with client(api_server, erin["status"]["token"]) as c:
        own = mint(c, groups=["readers"], expirationSeconds=600)
        assert own["spec"] == {**own["spec"], "user": "erin", "groups": ["readers"]}
        longer = mint(c, expirationSeconds=7200)  # cannot outlive the token that minted it
        expiry = erin["spec"]["expirationTimestamp"]
        assert longer["spec"]["expirationTimestamp"] <= expiry
        for spec in ({"groups": ["system:masters"]}, {"user": "hank"}):
            r = c.post(f"{AUTHN}/tokens", json={"spec": spec})
            assert r.status_code == 403 and r.json()["reason"] == "Forbidden", r.text
        names = {o["metadata"]["name"] for o in c.get(f"{AUTHN}/tokens").json()["items"]}
        assert own["metadata"]["name"] in names and other["metadata"]["name"] not in names
        assert c.delete(f"{AUTHN}/tokens/{other['metadata']['name']}").status_code == 404
        assert c.delete(f"{AUTHN}/tokens/{own['metadata']['name']}").status_code == 200


def test_revoking_a_token_revokes_the_tokens_its_holder_minted_from_it(
    admin: httpx.Client, api_server: ApiServer, second_server: ApiServer
) -> None:
    leaked = mint(admin, user="ivan", groups=["team-i"], expirationSeconds=3600)
    spare = mint(admin, user="ivan", groups=["team-i"], expirationSeconds=3600)  # by the admin
    with client(api_server, leaked["status"]["token"]) as c:
        child = mint(c, expirationSeconds=600)
    with client(second_server, child["status"]["token"]) as c:
        grandchild = mint(c, expirationSeconds=600)
    assert child["spec"]["mintedBy"] == leaked["metadata"]["name"]
    assert grandchild["spec"]["mintedBy"] == child["metadata"]["name"]
    assert "mintedBy" not in spare["spec"]

    gone = admin.delete(f"{AUTHN}/tokens/{leaked['metadata']['name']}")
    assert gone.status_code == 200 and gone.json()["metadata"]["name"] == leaked["metadata"]["name"]
    for server in (api_server, second_server):
        for token in (leaked, child, grandchild):
            refused_within(server, token["status"]["token"], 5.0)
        assert whoami(server, spare["status"]["token"]).status_code == 201


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"expirationSeconds": -5}, "spec.expirationSeconds"),
        ({"expirationSeconds": 10**12}, "spec.expirationSeconds"),
        ({"expirationSeconds": "1h"}, "spec.expirationSeconds"),
        ({"expirationSeconds": True}, "spec.expirationSeconds"),
        ({"description": "x" * 5000}, "spec.description"),
        ({"groups": ["ok", "bad\x1fgroup"]}, "spec.groups[1]"),
        ({"groups": "admins"}, "spec.groups"),
        ({"user": "system:serviceaccount:nope"}, "spec.user"),
        ({"serviceAccount": {"namespace": "default", "name": "no-such-account"}},
         "spec.serviceAccount.name"),
        ({"serviceAccount": {"namespace": "Bad_NS", "name": "x"}}, "spec.serviceAccount.namespace"),
        ({"serviceAccount": {"namespace": "default", "name": "x"}, "groups": ["g"]},
         "spec.groups"),
        ({"surprise": 1}, "spec.surprise"),
    ],
)  # fmt: skip
def test_hostile_requests_are_422_with_causes(
    admin: httpx.Client, spec: dict[str, Any], field: str
) -> None:
    r = admin.post(f"{AUTHN}/tokens", json={"spec": spec})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["kind"] == "Status" and body["reason"] == "Invalid"
    assert field in [c["field"] for c in body["details"]["causes"]], body


def test_oversized_and_malformed_bodies(admin: httpx.Client) -> None:
    r = admin.post(f"{AUTHN}/tokens", content=b'{"spec": {"description": "' + b"x" * 70000 + b'"}}')
    assert r.status_code == 413, r.text
    r = admin.post(f"{AUTHN}/tokens", content=b"{not json")
    assert r.status_code == 400 and r.json()["kind"] == "Status", r.text
    r = admin.post(f"{AUTHN}/tokens", json=[1, 2])
    assert r.status_code == 422, r.text


def test_history_rows_carry_principal_and_groups(
    admin: httpx.Client, db: psycopg.Connection
) -> None:
    name = f"audited-{secrets.token_hex(3)}"
    assert admin.post(f"{API}/namespaces", json={"metadata": {"name": name}}).status_code == 201
    row = db.execute(
        "SELECT principal, groups FROM qm_history WHERE kind = 'Namespace' AND name = %s", (name,)
    ).fetchone()
    assert row == ("admin", ["system:masters", "system:authenticated"])
    made = mint(admin, user="ivy", expirationSeconds=600)
    rows = db.execute(
        "SELECT verb, principal, groups FROM qm_history WHERE kind = 'Token' AND name = %s",
        (made["metadata"]["name"],),
    ).fetchall()
    assert rows == [("create", "admin", ["system:masters", "system:authenticated"])]


Qm = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def qm(api_server: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Qm:
    config = tmp_path_factory.mktemp("qm-token") / "config.yaml"
    config.write_text("server: http://127.0.0.1:9\ntoken: not-the-token\n")
    env = {**os.environ, "QM_CONFIG": str(config), "QM_SERVER": api_server.url,
           "QM_TOKEN": api_server.token}  # fmt: skip

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app.cli.main", *args],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    return run


def test_cli_creates_lists_and_revokes(qm: Qm, second_server: ApiServer) -> None:
    made = qm("token", "create", "--user", "jo", "--group", "ops", "--ttl", "2h",
              "--description", "from the cli")  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert "\n" not in token and len(token) > 30
    token_id = made.stderr.split()[0].removeprefix("token/")
    listed = qm("token", "list", "--user", "jo")
    assert listed.returncode == 0 and token_id in listed.stdout and "from the cli" in listed.stdout
    assert whoami(second_server, token).status_code == 201
    revoked = qm("token", "revoke", token_id)
    assert revoked.returncode == 0 and f"token/{token_id} revoked" in revoked.stdout
    refused_within(second_server, token, 1.0)


def test_cli_reports_bad_durations(qm: Qm) -> None:
    bad = qm("token", "create", "--ttl", "soon")
    assert bad.returncode == 2 and "invalid duration" in bad.stderr
    short = qm("token", "create", "--ttl", "5s")
    assert short.returncode == 1 and "spec.expirationSeconds" in short.stderr
    sa = qm("token", "create", "--service-account", "default/nobody")
    assert sa.returncode == 1 and "spec.serviceAccount.name" in sa.stderr


def test_minting_for_a_service_account_is_an_rbac_permission(
    admin: httpx.Client, api_server: ApiServer
) -> None:
    """``create serviceaccounts/token`` on the account; where the caller holds nothing in the
    namespace, the answer is the one a missing namespace gets."""
    suffix = secrets.token_hex(3)
    mine, theirs, seen = f"ci-{suffix}", f"other-{suffix}", f"seen-{suffix}"
    for ns in (mine, theirs, seen):
        assert admin.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
        sa = admin.post(f"{API}/namespaces/{ns}/serviceaccounts", json={"metadata": {"name": "b"}})
        assert sa.status_code == 201, sa.text
    rule = {"apiGroups": ["quaymaster.io"], "verbs": ["create"],
            "resources": ["serviceaccounts/token"], "resourceNames": ["b"]}  # fmt: skip
    role = {"metadata": {"name": "minter"}, "rules": [rule]}
    assert admin.post(f"{API}/namespaces/{mine}/roles", json=role).status_code == 201
    binding = {"metadata": {"name": "lee-mints"}, "roleRef": {"kind": "Role", "name": "minter"},
               "subjects": [{"kind": "User", "name": "lee"}]}  # fmt: skip
    assert admin.post(f"{API}/namespaces/{mine}/rolebindings", json=binding).status_code == 201
    view = {"metadata": {"name": "lee-views"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "lee"}]}  # fmt: skip
    assert admin.post(f"{API}/namespaces/{seen}/rolebindings", json=view).status_code == 201
    lee = mint(admin, user="lee", expirationSeconds=600)["status"]["token"]
    with client(api_server, lee) as c:

        def ask(ns: str) -> httpx.Response:
            deadline = time.monotonic() + 5
            while True:  # the bindings reach this server's cache through the stream
                r = c.post(f"{API}/namespaces/{ns}/serviceaccounts/b/token", json={})
                if r.status_code != 404 or ns != mine or time.monotonic() > deadline:
                    return r

        r = ask(mine)
        assert r.status_code == 201, r.text
        me = whoami(api_server, r.json()["status"]["token"]).json()["status"]["userInfo"]
        assert me["username"] == f"system:serviceaccount:{mine}:b"
        hidden, missing = ask(theirs), ask(f"nowhere-{suffix}")
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json()["message"] == f'namespaces "{theirs}" not found'
        assert missing.json()["message"] == f'namespaces "nowhere-{suffix}" not found'
        refused = ask(seen)
        assert refused.status_code == 403, refused.text
        assert "serviceaccounts/token" in refused.json()["message"]
