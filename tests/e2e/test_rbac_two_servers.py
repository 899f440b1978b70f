"""A binding written through one API server is in force on another as soon as the revision
stream brings it there (each server evaluates RBAC from its own watch cache)."""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from app.devstack.apiserver import ApiServer
from app.devstack.supervise import free_port

API = "/apis/quaymaster.io/v1"
NS = "rbac-two-servers"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def second_server(api_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    port = free_port()
    env = {**api_server.env, "QM_API_PORT": str(port), "QM_API_URL": f"http://127.0.0.1:{port}"}
    log_path = tmp_path_factory.mktemp("api2") / "api.log"
    server = ApiServer(port, api_server.token, env, log_path, cwd=REPO_ROOT)  # type: ignore[arg-type]
    server.start(timeout=60.0)
    try:
        yield server
    finally:
        server.stop()


def _until(check: Any, timeout: float = 5.0) -> float:
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, "not in force in time"
        time.sleep(0.005)
    return time.monotonic() - start


def test_a_binding_reaches_the_other_server(
    api_server: Any, second_server: ApiServer, pg_url: str
) -> None:
    token = secrets.token_urlsafe(32)
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(
            "INSERT INTO qm_tokens (username, groups, token_sha256, description)"
            " VALUES ('remote-reader', '{}', %s, 'rbac test')",
            (hashlib.sha256(token.encode()).hexdigest(),),
        )
    admin_h = {"Authorization": f"Bearer {api_server.token}"}
    with (
        httpx.Client(base_url=api_server.url, headers=admin_h, timeout=30) as one,
        httpx.Client(
            base_url=second_server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as two,
    ):
        r = one.post(f"{API}/namespaces", json={"metadata": {"name": NS}})
        assert r.status_code in (201, 409), r.text
        path = f"{API}/namespaces/{NS}/configmaps"
        assert two.get(path).json()["items"] == []  # hidden: an empty list, not a 403
        assert two.post(path, json={"metadata": {"name": "x"}}).status_code == 404
        binding = {
            "metadata": {"name": "remote-view"},
            "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "remote-reader"}],
        }
        assert one.post(f"{API}/namespaces/{NS}/rolebindings", json=binding).status_code == 201
        granted = _until(
            lambda: two.post(path, json={"metadata": {"name": "x"}}).status_code == 403
        )
        assert two.get(path).status_code == 200
        assert one.delete(f"{API}/namespaces/{NS}/rolebindings/remote-view").status_code == 200
        revoked = _until(
            lambda: two.post(path, json={"metadata": {"name": "x"}}).status_code == 404
        )
        print(f"binding in force on the other server after {granted * 1000:.0f} ms, "
              f"removal after {revoked * 1000:.0f} ms")  # fmt: skip
        assert granted < 1.0 and revoked < 1.0
