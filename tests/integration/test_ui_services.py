"""The Services pages against a real API server: the list with its endpoints counted from the
EndpointSlices, a Service's page with each endpoint's ready, serving and terminating
conditions, which discovery subscribers acknowledged its latest version (through an API
server whose ``QM_DISCOVERY_HTTP`` names a stand-in replica), and a namespace the user may
not read."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import secrets
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.core.kinds import API_VERSION
from app.devstack.apiserver import ApiServer
from app.devstack.supervise import free_port
from tests.integration.test_ui_shell import sign_in

API = f"/apis/{API_VERSION}"
REPO_ROOT = Path(__file__).resolve().parents[2]
LABEL = "kubernetes.io/service-name"
Obj = dict[str, Any]


def endpoint(pod: str, ip: str, ready: bool, serving: bool, terminating: bool) -> Obj:
    return {"addresses": [ip], "nodeName": "n1", "zone": "zone-a",
            "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
            "targetRef": {"kind": "Pod", "name": pod, "namespace": "x", "uid": pod}}  # fmt: skip


def make_service(c: httpx.Client, ns: str, name: str, *slices: list[Obj], **spec: Any) -> Obj:
    port = {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}
    body = {"metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [port], **spec}}  # fmt: skip
    r = c.post(f"{API}/namespaces/{ns}/services", json=body)
    assert r.status_code == 201, r.text
    for i, endpoints in enumerate(slices):
        s = {"metadata": {"name": f"{name}-{i}", "labels": {LABEL: name}},
             "addressType": "IPv4", "endpoints": endpoints,
             "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}  # fmt: skip
        created = c.post(f"{API}/namespaces/{ns}/endpointslices", json=s)
        assert created.status_code == 201, created.text
    out: Obj = r.json()
    return out


def namespace(c: httpx.Client, prefix: str) -> str:
    ns = f"{prefix}-{secrets.token_hex(3)}"
    assert c.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    return ns


@pytest.fixture
def admin(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30) as c:
        yield c


@pytest.fixture
def browser(api_server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False) as c:
        yield c


def test_the_list_counts_ready_endpoints_and_the_page_shows_their_conditions(
    admin: httpx.Client, browser: httpx.Client, api_server: Any
) -> None:
    ns = namespace(admin, "uisvc")
    web = make_service(
        admin, ns, "web",
        [endpoint("web-1", "10.88.0.11", True, True, False),
         endpoint("web-2", "10.88.0.12", False, True, True)],
        [endpoint("web-3", "10.88.0.13", False, False, False)],
    )  # fmt: skip
    make_service(admin, ns, "empty")
    other = namespace(admin, "uisvc")
    make_service(admin, other, "web", [endpoint("w", "10.88.0.14", True, True, False)])
    sign_in(browser, api_server.token)

    page = browser.get(f"/ui/services?ns={ns}")
    assert page.status_code == 200, page.text
    rows = dict(re.findall(r'data-service="([^"]+)">.*?class="num endpoints[^"]*">([^<]+)<',
                           page.text, re.S))  # fmt: skip
    assert rows == {f"{ns}/web": "1/3", f"{ns}/empty": "0/0"}, rows
    vip = web["spec"]["clusterIP"]
    assert vip and vip in page.text and "http 80→8080/TCP" in html.unescape(page.text)
    assert 'data-live-kinds="Service,EndpointSlice"' in page.text
    everywhere = browser.get("/ui/services")
    assert everywhere.status_code == 200
    both = re.findall(r'data-service="([^"]+/web)">.*?class="num endpoints[^"]*">([^<]+)<',
                      everywhere.text, re.S)  # fmt: skip
    assert (f"{other}/web", "1/1") in both  # same name, other namespace: counted apart

    detail = browser.get(f"/ui/services/{ns}/web")
    assert detail.status_code == 200, detail.text
    text = detail.text
    assert "1 ready of 3, in 2 EndpointSlices" in text
    cells = dict(re.findall(r'data-endpoint="([^"]+)">(.*?)</tr>', text, re.S))
    assert ">ready<" in cells["web-1"] and ">serving<" in cells["web-1"]
    assert ">not ready<" in cells["web-2"] and ">serving<" in cells["web-2"]
    assert ">terminating<" in cells["web-2"]
    assert ">not serving<" in cells["web-3"] and "zone-a" in cells["web-3"]
    assert f'href="/ui/pods/{ns}/web-1"' in text
    assert "app=web" in text  # the selector
    assert "no discovery replica is configured" in text


@pytest.fixture
def viewer(admin: httpx.Client, pg_url: str) -> tuple[str, str]:
    ns = namespace(admin, "uisvc-view")
    user = f"svc-viewer-{secrets.token_hex(3)}"
    token = secrets.token_urlsafe(32)
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(
            "INSERT INTO qm_tokens (username, groups, token_sha256, description)"
            " VALUES (%s, %s, %s, 'ui test')",
            (user, ["system:authenticated"], hashlib.sha256(token.encode()).hexdigest()),
        )
    binding = {"metadata": {"name": "viewer"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "User", "name": user}]}  # fmt: skip
    assert admin.post(f"{API}/namespaces/{ns}/rolebindings", json=binding).status_code == 201
    return token, ns


def test_a_namespace_the_user_may_not_read_is_forbidden(
    admin: httpx.Client, browser: httpx.Client, viewer: tuple[str, str]
) -> None:
    token, ns = viewer
    other = namespace(admin, "uisvc-other")
    make_service(admin, ns, "mine", [endpoint("m", "10.88.0.21", True, True, False)])
    make_service(admin, other, "theirs")
    assert sign_in(browser, token).status_code == 303
    mine = browser.get(f"/ui/services/{ns}/mine")
    assert mine.status_code == 200 and "1 ready of 1" in mine.text, mine.text
    assert "Forbidden" in mine.text  # view does not reach the cluster-wide subscribers list
    theirs = browser.get(f"/ui/services/{other}/theirs")
    assert theirs.status_code == 403 and "Forbidden" in theirs.text
    listed = browser.get(f"/ui/services?ns={other}")
    assert listed.status_code == 200
    assert "theirs" not in listed.text
    assert "Forbidden" in listed.text or "No Services." in listed.text


# -- acknowledgements, through an API server that knows a discovery replica -----------------


class Replica:
    """A stand-in discovery replica answering ``/v1/subscribers`` with what the test sets."""

    def __init__(self) -> None:
        self.answer: Obj = {"version": 0, "subscribers": []}
        replica = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(replica.answer).encode()
                self.send_response(200 if self.path == "/v1/subscribers" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def replica() -> Iterator[Replica]:
    r = Replica()
    try:
        yield r
    finally:
        r.close()


@pytest.fixture(scope="module")
def discovery_api(
    pg_url: str, redis_url: str, replica: Replica, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """An API server of this module's own whose ``QM_DISCOVERY_HTTP`` names the replica."""
    port, token = free_port(), secrets.token_urlsafe(32)
    env = {**os.environ, "DATABASE_URL": pg_url, "QM_STREAM_DATABASE_URL": pg_url,
           "QM_BROKER_URL": redis_url, "QM_BOOTSTRAP_TOKEN": token, "QM_API_PORT": str(port),
           "QM_DISCOVERY_HTTP": f"{replica.url},http://127.0.0.1:9",
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    log = tmp_path_factory.mktemp("ui-svc-api") / "api.log"
    server = ApiServer(port, token, env, log, REPO_ROOT)
    server.start(timeout=30.0)
    try:
        yield server
    finally:
        server.stop()


def test_the_page_says_which_subscribers_acknowledged_the_latest_version(
    discovery_api: ApiServer, replica: Replica
) -> None:
    headers = {"Authorization": f"Bearer {discovery_api.token}"}
    with httpx.Client(base_url=discovery_api.url, headers=headers, timeout=30) as admin:
        ns = namespace(admin, "uisvc-acks")
        make_service(admin, ns, "lb", [endpoint("lb-1", "10.88.0.31", True, True, False)],
                     type="LoadBalancer")  # fmt: skip
        make_service(admin, ns, "inner", [endpoint("in-1", "10.88.0.32", True, True, False)])
        slices = admin.get(f"{API}/namespaces/{ns}/endpointslices").json()["items"]
        newest = {s["metadata"]["labels"][LABEL]: int(s["metadata"]["resourceVersion"])
                  for s in slices}  # fmt: skip
    version = max(newest.values())
    replica.answer = {"version": version + 5, "subscribers": [
        {"id": "proxy-a", "node": "n1", "zone": "a", "scope": "all", "acked": version + 5},
        {"id": "proxy-b", "node": "n2", "zone": "b", "scope": "all", "acked": newest["lb"] - 1,
         "lag_seconds": 42.5},
        {"id": "edge-1", "node": "", "zone": "", "scope": "exposed", "acked": None},
    ]}  # fmt: skip
    with httpx.Client(base_url=discovery_api.url, timeout=30, follow_redirects=False) as browser:
        sign_in(browser, discovery_api.token)
        lb = browser.get(f"/ui/services/{ns}/lb")
        assert lb.status_code == 200, lb.text
        said = re.search(r"<p data-acks>(.*?)</p>", lb.text, re.S)
        assert said and said.group(1).startswith(
            f"1 of 3 discovery subscribers that receive this Service have acknowledged version "
            f"{newest['lb']}"
        ), lb.text
        behind = re.findall(r'data-subscriber="([^"]+)"', lb.text)
        assert behind == ["edge-1", "proxy-b"]  # oldest acknowledgement first (none at all)
        assert "42.5" in lb.text
        assert "Discovery replica http://127.0.0.1:9 did not answer" in lb.text
        inner = browser.get(f"/ui/services/{ns}/inner")
        said = re.search(r"<p data-acks>(.*?)</p>", inner.text, re.S)
        assert said and said.group(1).startswith("1 of 2 "), inner.text  # no edge: not exposed
        assert re.findall(r'data-subscriber="([^"]+)"', inner.text) == ["proxy-b"]
