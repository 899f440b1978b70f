"""``qm top nodes`` and ``qm top pods`` as a user runs them: a subprocess against a real API
server whose usage store (Redis) holds a sample posted the way an agent posts it."""

from __future__ import annotations

import datetime as dt
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
API = "/apis/quaymaster.io/v1"
M = "/apis/metrics.quaymaster.io/v1"


@pytest.fixture(scope="module")
def env(api_server: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    config = tmp_path_factory.mktemp("qm-top") / "config.yaml"
    config.write_text("")
    return {**os.environ, "QM_CONFIG": str(config), "QM_SERVER": api_server.url,
            "QM_TOKEN": api_server.token}  # fmt: skip


@pytest.fixture(scope="module")
def http(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        yield c


def qm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args], cwd=REPO_ROOT, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def reported(http: httpx.Client) -> tuple[str, str]:
    """A node with 2 cores and 4 GiB allocatable that reported two pods of a namespace."""
    ns, node = f"top-{secrets.token_hex(3)}", f"top-node-{secrets.token_hex(3)}"
    assert http.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    assert http.post(f"{API}/nodes", json={"metadata": {"name": node}}).status_code == 201
    status = {"status": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                         "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}}}  # fmt: skip
    r = http.patch(f"{API}/nodes/{node}/status", json=status,
                   headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
    assert r.status_code == 200, r.text

    def pod(name: str, cpu: int, mib: int) -> dict[str, Any]:
        return {"namespace": ns, "name": name, "uid": name, "cpuMillis": cpu,
                "memoryBytes": mib << 20, "containers": [
                    {"name": "app", "cpuMillis": cpu - 10, "memoryBytes": (mib - 1) << 20},
                    {"name": "proxy", "cpuMillis": 10, "memoryBytes": 1 << 20}]}  # fmt: skip

    now = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
    body = {"timestamp": now, "pods": [pod("small", 100, 64), pod("big", 900, 960)]}
    assert http.post(f"{M}/nodes/{node}/samples", json=body).status_code == 201
    return ns, node


def test_top_nodes(env: dict[str, str], reported: tuple[str, str]) -> None:
    _, node = reported
    r = qm(env, "top", "nodes", node)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0].split() == ["NAME", "CPU(cores)", "CPU%", "MEMORY(bytes)",
                                               "MEMORY%"]  # fmt: skip
    assert r.stdout.split("\n")[1].split() == [node, "1000m", "50%", "1024Mi", "25%"]
    listed = qm(env, "top", "nodes", "--sort-by", "cpu")
    assert listed.returncode == 0 and f"\n{node} " in listed.stdout


def test_top_pods(env: dict[str, str], reported: tuple[str, str]) -> None:
    ns, _ = reported
    r = qm(env, "top", "pods", "-n", ns, "--sort-by", "memory")
    assert r.returncode == 0, r.stderr
    assert [line.split() for line in r.stdout.splitlines()] == [
        ["NAME", "CPU(cores)", "MEMORY(bytes)"], ["big", "900m", "960Mi"],
        ["small", "100m", "64Mi"],
    ]  # fmt: skip
    one = qm(env, "top", "pod", "small", "-n", ns, "--containers")
    assert [line.split() for line in one.stdout.splitlines()] == [
        ["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"], ["small", "app", "90m", "63Mi"],
        ["small", "proxy", "10m", "1Mi"],
    ]  # fmt: skip
    everywhere = qm(env, "top", "pods", "-A")
    assert everywhere.returncode == 0 and any(
        line.split()[:2] == [ns, "big"] for line in everywhere.stdout.splitlines()
    )


def test_top_pod_without_metrics_fails_with_the_servers_reason(
    env: dict[str, str], reported: tuple[str, str]
) -> None:
    ns, _ = reported
    r = qm(env, "top", "pod", "nobody", "-n", ns)
    assert r.returncode == 1 and "NotFound" in r.stderr and "nobody" in r.stderr
