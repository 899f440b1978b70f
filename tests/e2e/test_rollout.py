"""A rollout as operators drive it: a real API server, a Celery worker and the dispatcher, and
``qm rollout``. The test plays the node agents: pods of the good image become Ready, pods of
the bad one never do. The bad rollout stalls with the old pods serving, reports
ProgressDeadlineExceeded, and ``qm rollout undo`` brings the old template back."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
API = "/apis/quaymaster.io/v1"
GOOD, BAD = "registry.local/web:1", "registry.local/web:2-broken"


@pytest.fixture
def cluster(api_server: Any, pg_url: str, redis_url: str, stop_all: Any,
            tmp_path: Path) -> Iterator[dict[str, str]]:  # fmt: skip
    broker = redis_url.rsplit("/", 1)[0] + f"/{secrets.randbelow(14) + 1}"
    env = {**os.environ, "DATABASE_URL": pg_url, "QM_STREAM_DATABASE_URL": pg_url,
           "QM_BROKER_URL": broker, "QM_RESYNC_SECONDS": "2", "PYTHONUNBUFFERED": "1"}  # fmt: skip
    procs = [
        subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers.app", "worker",
                          "--loglevel=WARNING", "--concurrency=2", "--without-gossip",
                          "--without-mingle"], cwd=REPO_ROOT, env=env),
        subprocess.Popen([sys.executable, "-m", "workers.dispatch"], cwd=REPO_ROOT, env=env),
    ]  # fmt: skip
    config = tmp_path / "config.yaml"
    config.write_text("")
    try:
        yield {**os.environ, "QM_CONFIG": str(config), "QM_SERVER": api_server.url,
               "QM_TOKEN": api_server.token}  # fmt: skip
    finally:
        stop_all(procs)


def qm(env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli.main", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip


class Kubelet(threading.Thread):
    """Marks pods of the good image Running and Ready, a moment after they appear."""

    def __init__(self, url: str, namespace: str) -> None:
        super().__init__(daemon=True)
        self.url, self.namespace, self.stop = url, namespace, threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as db:
            while not self.stop.wait(0.3):
                db.execute(
                    "UPDATE pods SET status = jsonb_build_object('phase', 'Running', 'conditions',"
                    " jsonb_build_array(jsonb_build_object('type', 'Ready', 'status', 'True',"
                    " 'lastTransitionTime', to_char(now() AT TIME ZONE 'UTC',"
                    ' \'YYYY-MM-DD"T"HH24:MI:SS"Z"\'))))'
                    " WHERE namespace = %s AND deletion_timestamp IS NULL"
                    " AND spec->'containers'->0->>'image' = %s"
                    " AND phase IS DISTINCT FROM 'Running'",
                    (self.namespace, GOOD),
                )


def _deployment(http: httpx.Client, ns: str) -> dict[str, Any]:
    r = http.get(f"{API}/namespaces/{ns}/deployments/web")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _pods(db: psycopg.Connection[Any], ns: str) -> dict[str, int]:
    rows = db.execute(
        "SELECT spec->'containers'->0->>'image', count(*) FROM pods WHERE namespace = %s"
        " AND deletion_timestamp IS NULL GROUP BY 1", (ns,)).fetchall()  # fmt: skip
    return {r[0]: r[1] for r in rows}


def _wait(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_stalled_rollout_reports_its_deadline_and_rolls_back(
    cluster: dict[str, str], api_server: Any, pg_url: str
) -> None:
    ns = f"rollout-{secrets.token_hex(3)}"
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with (
        httpx.Client(base_url=api_server.url, headers=headers, timeout=30) as http,
        psycopg.connect(pg_url, autocommit=True) as db,
    ):
        assert http.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
        kubelet = Kubelet(pg_url, ns)
        kubelet.start()
        try:
            manifest = {
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": 3, "progressDeadlineSeconds": 6, "minReadySeconds": 1,
                    "selector": {"matchLabels": {"app": "web"}},
                    "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": GOOD}]}},
                },
            }  # fmt: skip
            r = http.post(f"{API}/namespaces/{ns}/deployments", json=manifest)
            assert r.status_code == 201, r.text
            done = qm(cluster, "rollout", "status", "deployment/web", "-n", ns, "--timeout", "60")
            assert done.returncode == 0, done.stdout + done.stderr
            assert "successfully rolled out" in done.stdout

            dep = _deployment(http, ns)
            dep["spec"]["template"]["spec"]["containers"][0]["image"] = BAD
            r = http.put(f"{API}/namespaces/{ns}/deployments/web", json=dep)
            assert r.status_code == 200, r.text

            stalled = qm(cluster, "rollout", "status", "deployment/web", "-n", ns)
            assert stalled.returncode == 1, stalled.stdout + stalled.stderr
            assert "exceeded its progress deadline" in stalled.stderr
            status = _deployment(http, ns)["status"]
            progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
            assert (progressing["status"], progressing["reason"]) == (
                "False", "ProgressDeadlineExceeded")  # fmt: skip
            # maxUnavailable 0: the three old pods kept serving; one surge pod never got ready.
            assert _pods(db, ns) == {GOOD: 3, BAD: 1}
            assert status["availableReplicas"] == 3

            history = qm(cluster, "rollout", "history", "deployment/web", "-n", ns)
            assert history.returncode == 0 and BAD in history.stdout and GOOD in history.stdout

            undo = qm(cluster, "rollout", "undo", "deployment/web", "-n", ns)
            assert undo.returncode == 0, undo.stdout + undo.stderr
            assert "rolled back" in undo.stdout
            assert (
                _deployment(http, ns)["spec"]["template"]["spec"]["containers"][0]["image"] == GOOD
            )
            back = qm(cluster, "rollout", "status", "deployment/web", "-n", ns, "--timeout", "60")
            assert back.returncode == 0, back.stdout + back.stderr
            _wait(lambda: _pods(db, ns) == {GOOD: 3}, "the broken pod to go")
        finally:
            kubelet.stop.set()
            kubelet.join()


def test_rollout_rejects_other_kinds_and_missing_revisions(
    cluster: dict[str, str], api_server: Any
) -> None:
    bad_kind = qm(cluster, "rollout", "undo", "service/web")
    assert bad_kind.returncode == 2 and "deployments" in bad_kind.stderr
    missing = qm(cluster, "rollout", "history", "deployment/does-not-exist")
    assert missing.returncode == 1 and "not found" in missing.stderr
