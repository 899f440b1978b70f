"""A rollout as operators drive it: a real API server, a Celery worker and the dispatcher, and
``qm rollout``. The test plays the node agents: pods of the good image become Ready, pods of
the bad one never do. The bad rollout stalls with the old pods serving, reports
ProgressDeadlineExceeded, and ``qm rollout undo`` brings the old template back."""

from __future__ import annotations

import contextlib
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

REPO_ROOT = Path(__file__).resolve().parents[2]
API = "/apis/quaymaster.io/v1"
GOOD, BAD = "registry.local/web:1", "registry.local/web:2-broken"


def qm(env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli.main", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip


class Kubelet(threading.Thread):
    """Marks pods Running and Ready a moment after they appear: those of ``image``, or every
    pod of the namespace."""

    def __init__(self, url: str, namespace: str, image: str | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.namespace, self.image = url, namespace, image
        self.stop = threading.Event()

    def run(self) -> None:
        of_image = " AND spec->'containers'->0->>'image' = %s" if self.image else ""
        params = (self.namespace, self.image) if self.image else (self.namespace,)
        with psycopg.connect(self.url, autocommit=True) as db:
            while not self.stop.wait(0.3):
                db.execute(
                    "UPDATE pods SET status = jsonb_build_object('phase', 'Running', 'conditions',"
                    " jsonb_build_array(jsonb_build_object('type', 'Ready', 'status', 'True',"
                    " 'lastTransitionTime', to_char(now() AT TIME ZONE 'UTC',"
                    ' \'YYYY-MM-DD"T"HH24:MI:SS"Z"\'))))'
                    " WHERE namespace = %s AND deletion_timestamp IS NULL"
                    f"{of_image} AND phase IS DISTINCT FROM 'Running'",
                    params,
                )


@contextlib.contextmanager
def played_namespace(
    api_server: Any, pg_url: str, prefix: str, image: str | None = None
) -> Iterator[tuple[str, httpx.Client, psycopg.Connection[Any]]]:
    """A new namespace whose pods a ``Kubelet`` plays the agents of, an API client and a
    database connection: ``(namespace, http, db)``."""
    ns = f"{prefix}-{secrets.token_hex(3)}"
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with (
        httpx.Client(base_url=api_server.url, headers=headers, timeout=30) as http,
        psycopg.connect(pg_url, autocommit=True) as db,
    ):
        assert http.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
        kubelet = Kubelet(pg_url, ns, image)
        kubelet.start()
        try:
            yield ns, http, db
        finally:
            kubelet.stop.set()
            kubelet.join()


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


def wait(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_stalled_rollout_reports_its_deadline_and_rolls_back(
    workers: None, qm_env: dict[str, str], api_server: Any, pg_url: str
) -> None:
    with played_namespace(api_server, pg_url, "rollout", image=GOOD) as (ns, http, db):
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
        done = qm(qm_env, "rollout", "status", "deployment/web", "-n", ns, "--timeout", "60")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "successfully rolled out" in done.stdout

        dep = _deployment(http, ns)
        dep["spec"]["template"]["spec"]["containers"][0]["image"] = BAD
        r = http.put(f"{API}/namespaces/{ns}/deployments/web", json=dep)
        assert r.status_code == 200, r.text

        stalled = qm(qm_env, "rollout", "status", "deployment/web", "-n", ns)
        assert stalled.returncode == 1, stalled.stdout + stalled.stderr
        assert "exceeded its progress deadline" in stalled.stderr
        status = _deployment(http, ns)["status"]
        progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
        assert (progressing["status"], progressing["reason"]) == (
            "False", "ProgressDeadlineExceeded")  # fmt: skip
        # maxUnavailable 0: the three old pods kept serving; one surge pod never got ready.
        assert _pods(db, ns) == {GOOD: 3, BAD: 1}
        assert status["availableReplicas"] == 3

        history = qm(qm_env, "rollout", "history", "deployment/web", "-n", ns)
        assert history.returncode == 0 and BAD in history.stdout and GOOD in history.stdout

        undo = qm(qm_env, "rollout", "undo", "deployment/web", "-n", ns)
        assert undo.returncode == 0, undo.stdout + undo.stderr
        assert "rolled back" in undo.stdout
        assert _deployment(http, ns)["spec"]["template"]["spec"]["containers"][0]["image"] == GOOD
        back = qm(qm_env, "rollout", "status", "deployment/web", "-n", ns, "--timeout", "60")
        assert back.returncode == 0, back.stdout + back.stderr
        wait(lambda: _pods(db, ns) == {GOOD: 3}, "the broken pod to go")


def test_rollout_rejects_other_kinds_and_missing_revisions(qm_env: dict[str, str]) -> None:
    bad_kind = qm(qm_env, "rollout", "undo", "service/web")
    assert bad_kind.returncode == 2 and "deployments" in bad_kind.stderr
    missing = qm(qm_env, "rollout", "history", "deployment/does-not-exist")
    assert missing.returncode == 1 and "not found" in missing.stderr
