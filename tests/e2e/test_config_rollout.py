"""A config change rolls a Deployment out, as operators drive it: a real API server, a Celery
worker and the dispatcher, and ``qm rollout``. The test plays the node agents (every pod
becomes Ready). Changing a ConfigMap the template references starts a rollout to pods that read
the new content; a paused Deployment waits; ``qm rollout undo`` brings the old content back,
reusing the old ReplicaSet."""

from __future__ import annotations

import time
from typing import Any

import httpx
import psycopg
from test_rollout import API, played_namespace, qm, wait

CM_PATH = "{api}/namespaces/{ns}/configmaps/settings"


def modes(http: httpx.Client, db: psycopg.Connection[Any], ns: str) -> dict[str, int]:
    """How many live pods read each content of the config (through their snapshot)."""
    rows = db.execute(
        "SELECT spec->'containers'->0->'envFrom'->0->'configMapRef'->>'name', count(*)"
        " FROM pods WHERE namespace = %s AND deletion_timestamp IS NULL GROUP BY 1", (ns,)
    ).fetchall()  # fmt: skip
    out: dict[str, int] = {}
    for name, n in rows:
        cm = http.get(f"{API}/namespaces/{ns}/configmaps/{name}").json()
        out[cm["data"]["mode"]] = out.get(cm["data"]["mode"], 0) + n
    return out


def replicasets(http: httpx.Client, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = http.get(f"{API}/namespaces/{ns}/replicasets").json()["items"]
    return items


def set_mode(http: httpx.Client, ns: str, mode: str) -> None:
    r = http.patch(CM_PATH.format(api=API, ns=ns), json={"data": {"mode": mode}},
                   headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
    assert r.status_code == 200, r.text


def test_a_configmap_change_rolls_out_pauses_and_rolls_back(
    workers: None, qm_env: dict[str, str], api_server: Any, pg_url: str
) -> None:
    with played_namespace(api_server, pg_url, "config") as (ns, http, db):
        cm = {"kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"mode": "a"}}
        assert http.post(f"{API}/namespaces/{ns}/configmaps", json=cm).status_code == 201
        container = {"name": "web", "image": "registry.local/web:1",
                     "envFrom": [{"configMapRef": {"name": "settings"}}],
                     "volumeMounts": [{"name": "conf", "mountPath": "/etc/web"}]}  # fmt: skip
        manifest = {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3, "minReadySeconds": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [container],
                                      "volumes": [{"name": "conf",
                                                   "configMap": {"name": "settings"}}]}},
            },
        }  # fmt: skip
        r = http.post(f"{API}/namespaces/{ns}/deployments", json=manifest)
        assert r.status_code == 201, r.text
        done = qm(qm_env, "rollout", "status", "deployment/web", "-n", ns, "--timeout", "60")
        assert done.returncode == 0, done.stdout + done.stderr
        assert modes(http, db, ns) == {"a": 3}
        (first,) = replicasets(http, ns)
        volume = first["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
        assert volume.startswith("settings-")  # pinned to the snapshot
        snap = http.get(f"{API}/namespaces/{ns}/configmaps/{volume}").json()
        assert snap["immutable"] is True and snap["data"] == {"mode": "a"}

        set_mode(http, ns, "b")
        wait(lambda: len(replicasets(http, ns)) == 2, "the config change's ReplicaSet")
        done = qm(qm_env, "rollout", "status", "deployment/web", "-n", ns, "--timeout", "60")
        assert done.returncode == 0, done.stdout + done.stderr
        wait(lambda: modes(http, db, ns) == {"b": 3}, "every pod on the new config")

        # Paused: a config change waits for the resume.
        assert qm(qm_env, "rollout", "pause", "deployment/web", "-n", ns).returncode == 0
        set_mode(http, ns, "c")
        time.sleep(3)
        assert len(replicasets(http, ns)) == 2 and modes(http, db, ns) == {"b": 3}
        assert qm(qm_env, "rollout", "resume", "deployment/web", "-n", ns).returncode == 0
        wait(lambda: len(replicasets(http, ns)) == 3, "the resumed rollout's ReplicaSet")
        done = qm(qm_env, "rollout", "status", "deployment/web", "-n", ns, "--timeout", "60")
        assert done.returncode == 0, done.stdout + done.stderr
        wait(lambda: modes(http, db, ns) == {"c": 3}, "every pod on config c")

        undo = qm(qm_env, "rollout", "undo", "deployment/web", "-n", ns)
        assert undo.returncode == 0 and "rolled back" in undo.stdout, undo.stdout + undo.stderr
        wait(lambda: modes(http, db, ns) == {"b": 3}, "the old config back on every pod")
        assert len(replicasets(http, ns)) == 3  # the old ReplicaSet reused, not a fourth
        back = qm(qm_env, "rollout", "status", "deployment/web", "-n", ns, "--timeout", "60")
        assert back.returncode == 0, back.stdout + back.stderr
        history = qm(qm_env, "rollout", "history", "deployment/web", "-n", ns)
        assert history.returncode == 0, history.stdout + history.stderr
        assert history.stdout.count("cm/settings-") == 3, history.stdout  # one per revision
