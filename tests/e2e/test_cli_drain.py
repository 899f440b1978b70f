"""``qm cordon``, ``qm uncordon`` and ``qm drain`` as a user runs them: a subprocess talking to
a real API server. The test plays the node agent by confirming terminated pods gone."""

from __future__ import annotations

import os
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


@pytest.fixture(scope="module")
def env(api_server: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    config = tmp_path_factory.mktemp("qm-drain") / "config.yaml"
    config.write_text("")
    return {**os.environ, "QM_CONFIG": str(config), "QM_SERVER": api_server.url,
            "QM_TOKEN": api_server.token}  # fmt: skip


def qm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args], cwd=REPO_ROOT, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def http(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        yield c


def setup_node(http: httpx.Client, pods: int) -> tuple[str, str]:
    ns, node = f"cli-drain-{secrets.token_hex(3)}", f"cli-node-{secrets.token_hex(3)}"
    assert http.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    assert http.post(f"{API}/nodes", json={"metadata": {"name": node}}).status_code == 201
    for i in range(pods):
        spec = {"nodeName": node, "containers": [{"name": "c", "image": "w"}]}
        body = {"metadata": {"name": f"web-{i}", "labels": {"app": "web"}}, "spec": spec}
        assert http.post(f"{API}/namespaces/{ns}/pods", json=body).status_code == 201
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        r = http.patch(
            f"{API}/namespaces/{ns}/pods/web-{i}/status",
            json={"status": {"phase": "Running", "conditions": [ready]}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status_code == 200, r.text
    return ns, node


def unschedulable(http: httpx.Client, node: str) -> bool:
    return bool(http.get(f"{API}/nodes/{node}").json()["spec"].get("unschedulable"))


def test_cordon_and_uncordon_flip_unschedulable(env: dict[str, str], http: httpx.Client) -> None:
    _, node = setup_node(http, 0)
    r = qm(env, "cordon", node)
    assert (r.returncode, r.stdout) == (0, f"node/{node} cordoned\n"), r.stderr
    assert unschedulable(http, node) is True
    assert qm(env, "cordon", node).stdout == f"node/{node} already cordoned\n"
    r = qm(env, "uncordon", node)
    assert (r.returncode, r.stdout) == (0, f"node/{node} uncordoned\n"), r.stderr
    assert unschedulable(http, node) is False
    r = qm(env, "cordon", "no-such-node")
    assert r.returncode == 1 and "NotFound" in r.stderr
    r = qm(env, "drain", node, "--timeout", "soon")
    assert r.returncode == 2 and "invalid duration" in r.stderr


def test_drain_names_the_blocking_budget_then_finishes(
    env: dict[str, str], http: httpx.Client, pg_url: str
) -> None:
    ns, node = setup_node(http, 2)
    pdb = {"metadata": {"name": "web-pdb"},
           "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}  # fmt: skip
    assert http.post(f"{API}/namespaces/{ns}/poddisruptionbudgets", json=pdb).status_code == 201

    started = time.monotonic()
    r = qm(env, "drain", node, "--timeout", "2s", "--interval", "500ms")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert time.monotonic() - started < 30
    blocker = (
        f"pod {ns}/web-0 blocked by PodDisruptionBudget {ns}/web-pdb: "
        "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"
    )
    assert r.stdout.splitlines()[0] == f"node/{node} cordoned"
    assert blocker in r.stdout.splitlines()
    assert r.stdout.count(blocker) == 1  # printed when the blockers change, not every pass
    assert f"timed out after 2s draining node/{node}: 2 pods remain" in r.stderr
    assert f"  {blocker}" in r.stderr.splitlines()
    assert unschedulable(http, node) is True

    # The budget is relaxed; the drain evicts both pods and waits for the agent to stop them.
    r2 = http.patch(
        f"{API}/namespaces/{ns}/poddisruptionbudgets/web-pdb",
        json={"spec": {"minAvailable": 0}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r2.status_code == 200, r2.text
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "drain", node, "--interval", "0.3s",
         "--timeout", "60s"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with psycopg.connect(pg_url, autocommit=True) as db:
        while proc.poll() is None:
            db.execute(
                "DELETE FROM pods WHERE namespace = %s AND deletion_timestamp IS NOT NULL", (ns,)
            )
            time.sleep(0.2)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, (out, err)
    lines = out.splitlines()
    assert lines[0] == f"node/{node} cordoned"
    assert sorted(lines[1:3]) == [f"evicting pod {ns}/web-0", f"evicting pod {ns}/web-1"]
    assert lines[-1] == f"node/{node} drained"
