"""Why a pod is pending, as a user sees it: through the API and ``qm describe pod``.

A scheduler process runs against the session's API server database for this test only, and
only for pods naming its own ``schedulerName``, so other tests' pods are left alone.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from app.devstack.supervise import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
API = "/apis/quaymaster.io/v1"


def test_an_unschedulable_pod_explains_itself_in_the_api_and_describe(
    api_server: Any, pg_url: str
) -> None:
    name_of_scheduler = f"e2e-{secrets.token_hex(3)}"
    ns = f"pending-{secrets.token_hex(3)}"
    c = httpx.Client(
        base_url=api_server.url, headers={"Authorization": f"Bearer {api_server.token}"}
    )
    assert c.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    pod = {
        "metadata": {"name": "stuck"},
        "spec": {
            "schedulerName": name_of_scheduler,
            "nodeSelector": {"quaymaster.io/machine-class": "does-not-exist"},
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
            ],
        },
    }
    assert c.post(f"{API}/namespaces/{ns}/pods", json=pod).status_code == 201
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.scheduler",
            "--no-leader-elect",
            "--scheduler-name",
            name_of_scheduler,
            "--metrics-port",
            str(free_port()),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "DATABASE_URL": pg_url, "QM_STREAM_DATABASE_URL": pg_url},
    )
    try:
        condition: dict[str, Any] | None = None
        deadline = time.monotonic() + 60
        while condition is None and time.monotonic() < deadline:
            status = c.get(f"{API}/namespaces/{ns}/pods/stuck").json().get("status") or {}
            condition = next(
                (x for x in status.get("conditions") or [] if x["type"] == "PodScheduled"), None
            )
            time.sleep(0.2)
        assert condition is not None, "the scheduler never explained the pending pod"
        assert condition["status"] == "False"
        assert condition["reason"] == "Unschedulable"
        assert re.fullmatch(
            # every node fails the selector; nodes other tests left behind may fail more
            r"0/(\d+) nodes available: \1 didn't match node selector/affinity(, .+)?"
            r"|0/0 nodes available",
            condition["message"],
        ), condition["message"]

        env = {**os.environ, "QM_SERVER": api_server.url, "QM_TOKEN": api_server.token}
        out = ""
        deadline = time.monotonic() + 30
        while "FailedScheduling" not in out and time.monotonic() < deadline:
            out = subprocess.run(
                [sys.executable, "-m", "app.cli.main", "describe", "pod", "stuck", "-n", ns],
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
            time.sleep(0.2)
        assert "PodScheduled" in out and "Unschedulable" in out
        assert "FailedScheduling" in out and "quaymaster-scheduler" in out
        assert condition["message"] in out
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        c.delete(f"{API}/namespaces/{ns}")
