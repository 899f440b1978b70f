"""ResourceQuota as a user meets it through the API: the 403 a refused pod gets, the status the
controller keeps, and a Deployment whose pods a quota holds back telling so on its ReplicaSet."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.devstack.apiserver import ApiServer
from app.devstack.supervise import free_port

API = "/apis/quaymaster.io/v1"
ROOT = Path(__file__).resolve().parents[2]


def ns_path(ns: str, plural: str, name: str = "") -> str:
    base = f"{API}/namespaces/{ns}/{plural}"
    return f"{base}/{name}" if name else base


def make_namespace(c: httpx.Client) -> str:
    ns = f"quota-{secrets.token_hex(3)}"
    r = c.post(f"{API}/namespaces", json={"metadata": {"name": ns}})
    assert r.status_code == 201, r.text
    return ns


def quota(name: str, hard: dict[str, str]) -> dict[str, Any]:
    return {"kind": "ResourceQuota", "metadata": {"name": name}, "spec": {"hard": hard}}


def pod(name: str, cpu: str) -> dict[str, Any]:
    c = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
    return {"kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [c]}}


def eventually(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_refused_pod_gets_403_status_with_causes(api_server: ApiServer) -> None:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30) as c:
        ns = make_namespace(c)
        r = c.post(ns_path(ns, "resourcequotas"), json=quota("team-a-prod", {"requests.cpu": "3"}))
        assert r.status_code == 201, r.text
        assert c.post(ns_path(ns, "pods"), json=pod("a", "2")).status_code == 201
        r = c.post(ns_path(ns, "pods"), json=pod("b", "1500m"))
        assert r.status_code == 403, r.text
        body = r.json()
        assert body["kind"] == "Status" and body["reason"] == "Forbidden" and body["code"] == 403
        assert body["message"] == (
            "exceeded quota: team-a-prod, requested: requests.cpu=1500m, "
            "used: requests.cpu=2, limited: requests.cpu=3"
        )
        causes = body["details"]["causes"]
        assert [(x["field"], x["reason"]) for x in causes] == [
            ("spec.hard[requests.cpu]", "ExceededQuota")
        ]
        assert c.get(ns_path(ns, "pods", "b")).status_code == 404
        assert c.post(ns_path(ns, "pods"), json=pod("b", "1")).status_code == 201


@pytest.fixture
def stack(
    make_database: Callable[[str], str], redis_url: str, tmp_path: Path
) -> Iterator[httpx.Client]:
    """An API server, a Celery worker and a dispatcher on a database of their own, so the
    controllers touch nothing the other end-to-end tests own."""
    url = make_database("qm_quota_e2e")
    port = free_port()
    token = secrets.token_urlsafe(24)
    broker = redis_url.rsplit("/", 1)[0] + f"/{secrets.randbelow(14) + 1}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "QM_STREAM_DATABASE_URL": url,
        "QM_BROKER_URL": broker,
        "QM_BOOTSTRAP_TOKEN": token,
        "QM_API_PORT": str(port),
        "QM_RESYNC_SECONDS": "2",
        "PYTHONUNBUFFERED": "1",
    }
    server = ApiServer(port, token, env, tmp_path / "api.log", cwd=ROOT)
    server.start(timeout=30)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "--loglevel=WARNING",
             "--concurrency=2", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=env,
        ),
        subprocess.Popen([sys.executable, "-m", "workers.dispatch"], cwd=ROOT, env=env),
    ]  # fmt: skip
    try:
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
            yield c
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        server.stop()


def test_deployment_held_back_by_quota_tells_on_its_replicaset(stack: httpx.Client) -> None:
    c = stack
    ns = make_namespace(c)
    assert c.post(ns_path(ns, "resourcequotas"), json=quota("q", {"pods": "3"})).status_code == 201
    template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "web"}}, "template": template},
    }
    assert c.post(ns_path(ns, "deployments"), json=deployment).status_code == 201

    def pods() -> list[str]:
        items = c.get(ns_path(ns, "pods")).json()["items"]
        return [p["metadata"]["name"] for p in items]

    def failed_create() -> list[dict[str, Any]]:
        items = c.get(ns_path(ns, "events")).json()["items"]
        return [e for e in items if e.get("reason") == "FailedCreate"]

    events = eventually(failed_create, 30, "a FailedCreate event")
    event = events[0]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "ReplicaSet"
    assert event["involvedObject"]["name"].startswith("web-")
    assert event["message"].startswith('Error creating: pods "web-')
    assert "is forbidden: exceeded quota: q, requested: pods=" in event["message"]
    # as many pods as the quota admits, and no more, however often the controller retries
    eventually(lambda: len(pods()) == 3, 30, "three pods")
    status = eventually(
        lambda: (
            (c.get(ns_path(ns, "resourcequotas", "q")).json().get("status") or {}).get("used")
            == {"pods": "3"}
        ),
        30,
        "quota status used pods=3",
    )
    assert status
    time.sleep(3)  # a resync or two
    assert len(pods()) == 3
    rs = c.get(ns_path(ns, "replicasets")).json()["items"][0]
    assert rs["status"]["replicas"] == 3
