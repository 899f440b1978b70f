"""The web UI's nodes pages against a real API server: the list and its filters, a node's
conditions and pods, cordoning from the page (reason in the history), a viewer who is offered
no action and refused one anyway, and a drain that names the disruption budget holding it."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg
import pytest

from tests.integration.test_ui_shell import csrf_of, sign_in

API = "/apis/quaymaster.io/v1"
AUDIT = "/apis/audit.quaymaster.io/v1"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture(scope="module")
def admin(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        yield c


@pytest.fixture
def browser(api_server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False) as c:
        yield c


def make_node(admin: httpx.Client, zone: str, ready: str = "True", **labels: str) -> str:
    name = f"uin-{secrets.token_hex(3)}"
    body = {
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone, **labels}},
        "spec": {"taints": [{"key": "dedicated", "value": "ui", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady",
                            "message": "agent is posting ready status"}],
        },
    }  # fmt: skip
    r = admin.post(f"{API}/nodes", json=body)
    assert r.status_code == 201, r.text
    return name


def make_namespace(admin: httpx.Client) -> str:
    ns = f"uin-{secrets.token_hex(3)}"
    assert admin.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    return ns


def make_pod(admin: httpx.Client, ns: str, name: str, node: str, app: str = "web") -> None:
    body = {
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [
            {"name": "c", "image": "web:1", "resources": {"requests": {"cpu": "500m",
                                                                     "memory": "1Gi"}}}]},
    }  # fmt: skip
    r = admin.post(f"{API}/namespaces/{ns}/pods", json=body)
    assert r.status_code == 201, r.text
    cond = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    r = admin.patch(f"{API}/namespaces/{ns}/pods/{name}/status",
                    json={"status": {"phase": "Running", "conditions": [cond]}},
                    headers=MERGE)  # fmt: skip
    assert r.status_code == 200, r.text


def post_action(browser: httpx.Client, page: str, action: str, reason: str) -> dict[str, str]:
    """Submit a node page's action form as the browser would; the flash message back."""
    csrf = csrf_of(browser.get(page).text)
    r = browser.post(f"{page}/{action}", data={"csrf": csrf, "back": page, "reason": reason})
    assert r.status_code == 303, r.text
    query = parse_qs(urlsplit(r.headers["location"]).query)
    return {k: v[0] for k, v in query.items()}


def test_the_list_shows_nodes_and_filters_on_the_server(
    browser: httpx.Client, admin: httpx.Client, api_server: Any
) -> None:
    tag = secrets.token_hex(3)
    a = make_node(admin, "zone-a", pool=tag)
    b = make_node(admin, "zone-b", ready="False", pool=tag)
    sign_in(browser, api_server.token)
    page = browser.get(f"/ui/nodes?selector=pool%3D{tag}")
    assert page.status_code == 200, page.text
    assert f'href="/ui/nodes/{a}"' in page.text and f'href="/ui/nodes/{b}"' in page.text
    assert "zone-a" in page.text and "Not ready" in page.text
    assert 'data-live-kinds="Node"' in page.text
    one = browser.get(f"/ui/nodes?name={a}")
    assert f'data-node="{a}"' in one.text and f'data-node="{b}"' not in one.text
    admin.patch(f"{API}/nodes/{b}", json={"spec": {"unschedulable": True}}, headers=MERGE)
    cordoned = browser.get(f"/ui/nodes?selector=pool%3D{tag}&cordoned=yes")
    assert f'data-node="{b}"' in cordoned.text and f'data-node="{a}"' not in cordoned.text
    bad = browser.get("/ui/nodes?selector=%3D%3D%3D")
    assert bad.status_code == 200 and 'role="alert"' in bad.text
    frag = browser.get(f"/ui/nodes?name={a}", headers={"X-QM-Fragment": "main"})
    assert frag.status_code == 200 and "<html" not in frag.text and a in frag.text


def test_a_node_page_shows_conditions_pods_and_allocation(
    browser: httpx.Client, admin: httpx.Client, api_server: Any
) -> None:
    node = make_node(admin, "zone-a")
    ns = make_namespace(admin)
    make_pod(admin, ns, "web-1", node)
    make_pod(admin, ns, "web-2", node)
    sign_in(browser, api_server.token)
    page = browser.get(f"/ui/nodes/{node}")
    assert page.status_code == 200, page.text
    text = page.text
    assert "KubeletReady" in text and "agent is posting ready status" in text  # conditions
    assert f'data-pod="{ns}/web-1"' in text and f'data-pod="{ns}/web-2"' in text
    assert "dedicated" in text and "NoSchedule" in text  # taints
    assert "1 of" not in text and ">1<" in text and ">4<" in text  # 2 x 500m of 4 cores
    assert 'aria-label="CPU requested of allocatable"' in text
    assert 'data-live-kinds="Node,Pod"' in text and 'data-live-ns=""' in text
    assert "none</span> (no agent has reported)" in text  # no Lease for this node
    assert f'action="/ui/nodes/{node}/cordon"' in text and f'/ui/nodes/{node}/drain"' in text
    assert browser.get(f"/ui/nodes/no-such-{secrets.token_hex(2)}").status_code == 404


def test_cordon_from_the_page_lands_with_its_reason(
    browser: httpx.Client, admin: httpx.Client, api_server: Any
) -> None:
    node = make_node(admin, "zone-a")
    sign_in(browser, api_server.token)
    page = f"/ui/nodes/{node}"
    flash = post_action(browser, page, "cordon", "disk replacement")
    assert flash.get("done") == f"node/{node} cordoned", flash
    assert admin.get(f"{API}/nodes/{node}").json()["spec"]["unschedulable"] is True
    shown = browser.get(page).text
    assert "Cordoned" in shown and f'action="/ui/nodes/{node}/uncordon"' in shown
    history = admin.get(f"{AUDIT}/history", params={"kind": "Node", "name": node})
    assert history.status_code == 200, history.text
    reasons = [i.get("reason") for i in history.json().get("items") or []]
    assert "disk replacement" in reasons, history.json()
    flash = post_action(browser, page, "uncordon", "disk replaced")
    assert flash.get("done") == f"node/{node} uncordoned"
    assert not admin.get(f"{API}/nodes/{node}").json()["spec"].get("unschedulable")
    no_csrf = browser.post(f"{page}/cordon", data={"back": page, "reason": "x"})
    assert no_csrf.status_code == 403


def viewer_token(pg_url: str, admin: httpx.Client) -> str:
    """A user bound to ``view`` cluster-wide, who may also read nodes (``view`` has none)."""
    user = f"vic-{secrets.token_hex(3)}"
    role = {"metadata": {"name": f"{user}-nodes"},
            "rules": [{"apiGroups": ["quaymaster.io"], "resources": ["nodes"],
                       "verbs": ["get", "list", "watch"]}]}  # fmt: skip
    assert admin.post(f"{API}/clusterroles", json=role).status_code == 201
    for name, ref in ((f"{user}-view", "view"), (f"{user}-nodes", f"{user}-nodes")):
        binding = {"metadata": {"name": name}, "roleRef": {"kind": "ClusterRole", "name": ref},
                   "subjects": [{"kind": "User", "name": user}]}  # fmt: skip
        r = admin.post(f"{API}/clusterrolebindings", json=binding)
        assert r.status_code == 201, r.text
    return user_token(pg_url, user)


def user_token(pg_url: str, user: str) -> str:
    """A bearer token for ``user`` (no groups), written where the server looks tokens up."""
    token = secrets.token_urlsafe(32)
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(
            "INSERT INTO qm_tokens (username, groups, token_sha256, description)"
            " VALUES (%s, %s, %s, 'ui test')",
            (user, [], hashlib.sha256(token.encode()).hexdigest()),
        )
    return token


def test_a_viewer_is_offered_no_action_and_refused_one_anyway(
    browser: httpx.Client, admin: httpx.Client, api_server: Any, pg_url: str
) -> None:
    node = make_node(admin, "zone-a")
    token = viewer_token(pg_url, admin)
    signed = sign_in(browser, token)
    assert signed.status_code == 303, signed.text
    page = browser.get(f"/ui/nodes/{node}")
    assert page.status_code == 200, page.text
    assert "KubeletReady" in page.text
    assert "/cordon" not in page.text and "/drain" not in page.text
    assert "<h2>Actions</h2>" not in page.text
    csrf = csrf_of(page.text)
    for action in ("cordon", "drain"):
        form = {"csrf": csrf, "back": f"/ui/nodes/{node}", "reason": "trying"}
        r = browser.post(f"/ui/nodes/{node}/{action}", data=form)
        assert r.status_code == 403 and "Forbidden" in r.text, (action, r.text[:300])
    assert not admin.get(f"{API}/nodes/{node}").json()["spec"].get("unschedulable")
    listed = browser.get("/ui/nodes")
    assert listed.status_code == 200 and "lease ages not shown" in listed.text


def test_a_drain_names_the_budget_that_blocks_it(
    browser: httpx.Client, admin: httpx.Client, api_server: Any
) -> None:
    node = make_node(admin, "zone-a")
    ns = make_namespace(admin)
    make_pod(admin, ns, "db-0", node, app="db")
    make_pod(admin, ns, "loner", node, app="batch")
    pdb = {"metadata": {"name": "db-pdb"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}  # fmt: skip
    assert admin.post(f"{API}/namespaces/{ns}/poddisruptionbudgets", json=pdb).status_code == 201
    sign_in(browser, api_server.token)
    page = f"/ui/nodes/{node}"
    empty = post_action(browser, page, "drain", "")
    assert "needs a reason" in empty.get("failed", ""), empty
    flash = post_action(browser, page, "drain", "kernel upgrade")
    message = flash.get("done", "")
    assert f"blocked by PodDisruptionBudget {ns}/db-pdb" in message, flash
    assert f"evicted 1 ({ns}/loner)" in message, flash
    assert admin.get(f"{API}/nodes/{node}").json()["spec"]["unschedulable"] is True
    shown = browser.get(page).text
    assert "Drain progress" in shown and "being evicted" in shown
    blockers = re.search(r"<table class=\"blockers\">.*?</table>", shown, re.S)
    assert blockers, shown
    assert f'data-budget="{ns}/db-pdb"' in blockers.group(0)
    assert ">db-0<" in blockers.group(0) and "minAvailable 1" in blockers.group(0)
    assert ">Drain</button>" in shown  # another pass may be asked for
