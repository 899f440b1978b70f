"""The web UI's overview against a real API server: zones with their capacity chart and
headroom, warnings (not-ready nodes, pending pods, a stalled rollout, a budget refusing
evictions), the last hour's charts, and a principal without cluster-wide reads who gets a
forbidden section instead of the figures."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.integration.test_ui_nodes import (
    API,
    MERGE,
    make_namespace,
    make_node,
    make_pod,
    user_token,
    viewer_token,
)
from tests.integration.test_ui_shell import sign_in

METRICS = "/apis/metrics.quaymaster.io/v1"


@pytest.fixture(scope="module")
def admin(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        yield c


@pytest.fixture
def browser(api_server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False) as c:
        yield c


def stalled_deployment(admin: httpx.Client, ns: str) -> None:
    body = {
        "metadata": {"name": "stuck"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "stuck"}},
                 "template": {"metadata": {"labels": {"app": "stuck"}},
                              "spec": {"containers": [{"name": "c", "image": "web:1"}]}}},
    }  # fmt: skip
    r = admin.post(f"{API}/namespaces/{ns}/deployments", json=body)
    assert r.status_code == 201, r.text
    cond = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
            "message": 'ReplicaSet "stuck-1" has timed out progressing.',
            "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    r = admin.patch(f"{API}/namespaces/{ns}/deployments/stuck/status",
                    json={"status": {"conditions": [cond]}}, headers=MERGE)  # fmt: skip
    assert r.status_code == 200, r.text


def refused_eviction(admin: httpx.Client, ns: str, node: str) -> None:
    make_pod(admin, ns, "db-0", node, app="db")
    pdb = {"metadata": {"name": "db-pdb"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}  # fmt: skip
    assert admin.post(f"{API}/namespaces/{ns}/poddisruptionbudgets", json=pdb).status_code == 201
    body = {"kind": "Eviction", "metadata": {"name": "db-0", "namespace": ns}}
    r = admin.post(f"{API}/namespaces/{ns}/pods/db-0/eviction", json=body)
    assert r.status_code == 429, r.text


def test_the_overview_shows_zones_warnings_and_the_last_hour(
    browser: httpx.Client, admin: httpx.Client, api_server: Any
) -> None:
    zone = f"oz-{secrets.token_hex(2)}"
    ready = make_node(admin, zone)
    down = make_node(admin, zone, ready="False")
    ns = make_namespace(admin)
    make_pod(admin, ns, "web-1", ready)
    pending = {"metadata": {"name": "waiting"},
               "spec": {"containers": [{"name": "c", "image": "web:1"}]}}  # fmt: skip
    assert admin.post(f"{API}/namespaces/{ns}/pods", json=pending).status_code == 201
    stalled_deployment(admin, ns)
    refused_eviction(admin, ns, ready)
    usage = {"apiVersion": "metrics.quaymaster.io/v1", "kind": "NodeUsageSample",
             "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"), "window": "5s",
             "pods": [{"namespace": ns, "name": "web-1", "uid": "u1", "cpuMillis": 1750,
                       "memoryBytes": 3 * 2**29, "containers": []}]}  # fmt: skip
    r = admin.post(f"{METRICS}/nodes/{ready}/samples", json=usage)
    assert r.status_code == 201, r.text
    sign_in(browser, api_server.token)
    deadline = time.monotonic() + 20
    while True:  # the summary follows the watch cache: a moment behind the writes
        page = browser.get("/ui/")
        assert page.status_code == 200, page.text
        if f'data-zone="{zone}"' in page.text:
            break
        assert time.monotonic() < deadline, page.text
        time.sleep(0.2)
    text = page.text
    assert "<svg" in text and 'role="img"' in text and "CPU by zone" in text
    row = text.split(f'data-zone="{zone}"', 1)[1].split("</tr>", 1)[0]
    assert ">2<" in row and ">1<" in row  # two nodes, one not ready
    assert "1 / 8 (12%)" in row, row  # two pods' 500m against two nodes' 4 cores
    assert ">7<" in row and ">14Gi<" in row  # free
    assert "1.8 / 1.5Gi" in row  # observed: the ready node's sample
    warning = text.split('data-warning="not-ready"', 1)[1].split("</li>", 1)[0]
    assert down in warning or "and more" in warning  # other tests' nodes may fill the list
    assert 'data-warning="pending"' in text and "the oldest for" in text
    assert 'data-warning="stalled"' in text and f"{ns}/stuck" in text
    assert "has timed out progressing" in text
    assert 'data-warning="budget"' in text and f"{ns}/db-pdb" in text
    assert "style=" not in text  # the CSP forbids inline styles
    assert "The last hour" in text
    main = browser.get("/ui/", headers={"X-QM-Fragment": "main"})
    assert main.status_code == 200 and "<html" not in main.text and zone in main.text
    assert browser.get("/ui").status_code == 200  # the same page without the slash


def test_without_cluster_wide_reads_the_figures_are_forbidden(
    browser: httpx.Client, admin: httpx.Client, api_server: Any, pg_url: str
) -> None:
    zone = f"oz-{secrets.token_hex(2)}"
    make_node(admin, zone)
    token = viewer_token(pg_url, admin)  # may list nodes and pods; but see below
    assert sign_in(browser, token).status_code == 303
    page = browser.get("/ui/")
    assert page.status_code == 200, page.text
    # view bound cluster-wide may list pods everywhere, and the extra role lists nodes:
    assert f'data-zone="{zone}"' in page.text
    # A principal with no cluster-wide grant at all:
    user = f"nobody-{secrets.token_hex(3)}"
    lone = user_token(pg_url, user)
    browser.cookies.clear()
    assert sign_in(browser, lone).status_code == 303
    page = browser.get("/ui/")
    assert page.status_code == 200, page.text
    assert "Forbidden: the cluster" in page.text
    assert f'data-zone="{zone}"' not in page.text and "<svg" not in page.text
    # Cluster-wide lists are narrowed to the namespaces a principal may read: none here.
    assert 'data-warning="stalled"' not in page.text and 'data-warning="budget"' not in page.text
