"""The API's write context end to end: a request's id, client address, user agent and
``X-Reason`` reach ``qm_history`` with the principal; ``qm drain --reason`` records why the
node was cordoned and each pod evicted; a reason the history could not keep is refused."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
API = "/apis/quaymaster.io/v1"
ADMIN_GROUPS = ["system:masters", "system:authenticated"]


@pytest.fixture(scope="module")
def http(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        yield c


@pytest.fixture(scope="module")
def db(pg_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="module")
def ns(http: httpx.Client) -> str:
    name = f"ctx-{secrets.token_hex(3)}"
    assert http.post(f"{API}/namespaces", json={"metadata": {"name": name}}).status_code == 201
    return name


def history(db: psycopg.Connection, table: str, namespace: str, name: str) -> list[dict[str, Any]]:
    cur = db.execute(
        "SELECT op, principal, groups, request_id, client_addr, user_agent, reason, verb,"
        " subresource, after FROM qm_history"
        " WHERE table_name = %s AND namespace = %s AND name = %s AND op <> 'summary' ORDER BY id",
        (table, namespace, name),
    )
    cols = [d.name for d in cur.description or []]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def test_a_requests_id_address_agent_and_reason_are_recorded(
    http: httpx.Client, db: psycopg.Connection, ns: str
) -> None:
    headers = {"X-Request-Id": "req-e2e-1", "X-Reason": "CHG-42 new port", "User-Agent": "t/1"}
    body = {"metadata": {"name": "conf"}, "data": {"port": "80"}}
    r = http.post(f"{API}/namespaces/{ns}/configmaps", json=body, headers=headers)
    assert r.status_code == 201, r.text
    assert r.headers["X-Request-Id"] == "req-e2e-1"
    r = http.patch(
        f"{API}/namespaces/{ns}/configmaps/conf",
        content=b'{"data": {"port": "81"}}',
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 200, r.text
    generated = r.headers["X-Request-Id"]
    assert generated and generated != "req-e2e-1"
    created, patched = history(db, "configmaps", ns, "conf")
    assert (created["op"], created["verb"], created["principal"]) == ("insert", "create", "admin")
    assert created["groups"] == ADMIN_GROUPS
    assert (created["request_id"], created["reason"], created["user_agent"]) == (
        "req-e2e-1",
        "CHG-42 new port",
        "t/1",
    )
    assert created["client_addr"] == "127.0.0.1"
    assert (patched["verb"], patched["request_id"], patched["reason"]) == ("patch", generated, None)
    assert patched["user_agent"].startswith("python-httpx/")


@pytest.mark.parametrize("reason", ["x" * 1025, "tab\there"])
def test_a_reason_the_history_could_not_keep_is_refused_and_nothing_is_written(
    http: httpx.Client, db: psycopg.Connection, ns: str, reason: str
) -> None:
    body = {"metadata": {"name": "refused"}, "data": {}}
    r = http.post(f"{API}/namespaces/{ns}/configmaps", json=body, headers={"X-Reason": reason})
    assert r.status_code == 400, r.text
    assert r.json()["kind"] == "Status" and "X-Reason" in r.json()["message"]
    assert http.get(f"{API}/namespaces/{ns}/configmaps/refused").status_code == 404
    assert history(db, "configmaps", ns, "refused") == []


def qm(api_server: Any, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.yaml"
    config.write_text("")
    env = {**os.environ, "QM_CONFIG": str(config), "QM_SERVER": api_server.url,
           "QM_TOKEN": api_server.token}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args], cwd=REPO_ROOT, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_qm_drain_reason_is_recorded_on_the_cordon_and_every_eviction(
    api_server: Any, http: httpx.Client, db: psycopg.Connection, ns: str, tmp_path: Path
) -> None:
    node = f"ctx-node-{secrets.token_hex(3)}"
    assert http.post(f"{API}/nodes", json={"metadata": {"name": node}}).status_code == 201
    for i in range(2):
        spec = {"nodeName": node, "containers": [{"name": "c", "image": "w"}]}
        pod = {"metadata": {"name": f"p{i}"}, "spec": spec}
        assert http.post(f"{API}/namespaces/{ns}/pods", json=pod).status_code == 201
    why = "kernel upgrade CHG-77"
    # The pods wait for an agent that never comes: the drain times out once they terminate.
    r = qm(api_server, tmp_path, "drain", node, "--reason", why, "--timeout", "1s")
    assert r.returncode == 1 and "timed out" in r.stderr, (r.stdout, r.stderr)
    cordon = [h for h in history(db, "nodes", "", node) if h["op"] == "update"]
    first = cordon[0]  # later passes find the node cordoned already
    assert (first["principal"], first["verb"], first["reason"]) == ("admin", "patch", why)
    assert cordon[0]["after"]["unschedulable"] is True
    assert cordon[0]["user_agent"].startswith("qm/")
    for i in range(2):
        (evicted,) = [h for h in history(db, "pods", ns, f"p{i}") if h["op"] == "update"]
        assert (evicted["principal"], evicted["verb"], evicted["subresource"]) == (
            "admin",
            "create",
            "eviction",
        )
        assert evicted["reason"] == why
        assert evicted["after"]["deletion_timestamp"]
        assert evicted["request_id"] == cordon[0]["request_id"]  # one drain request did both


def test_qm_refuses_a_reason_it_could_not_send(api_server: Any, tmp_path: Path) -> None:
    r = qm(api_server, tmp_path, "get", "pods", "--reason", "two\nlines")
    assert r.returncode == 2 and "--reason must not contain control characters" in r.stderr


def test_a_controllers_writes_name_it_its_task_and_what_the_step_does(
    workers: None, http: httpx.Client, db: psycopg.Connection, ns: str
) -> None:
    template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "w"}]},
    }
    rs = {
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template},
    }
    assert http.post(f"{API}/namespaces/{ns}/replicasets", json=rs).status_code == 201
    deadline = time.monotonic() + 60
    rows: list[tuple[Any, ...]] = []
    while time.monotonic() < deadline and len(rows) < 2:
        rows = db.execute(
            "SELECT principal, request_id, reason, verb FROM qm_history"
            " WHERE table_name = 'pods' AND namespace = %s AND name LIKE 'web-%%'"
            " AND op = 'insert'",
            (ns,),
        ).fetchall()
        time.sleep(0.2)
    assert len(rows) == 2, rows
    for principal, request_id, reason, verb in rows:
        assert (principal, verb) == ("system:controller:replicaset-controller", "create")
        assert re.fullmatch(r"[0-9a-f-]{36}", request_id), request_id  # the Celery task's id
        assert re.fullmatch(rf"create \d pods for ReplicaSet {ns}/web", reason), reason
