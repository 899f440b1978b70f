"""The Events page against a real API server: Events created through the REST API are listed
with their object linked to its page, the warnings filter and the other field selectors work
on the server, pages follow ``continue``, and a principal who may not list Events is told so."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from app.api.ui.pages import events as page
from app.core.kinds import API_VERSION
from tests.integration.test_ui_shell import sign_in
from workers.loops.events import EventRetention

API = f"/apis/{API_VERSION}"


def _event(name: str, kind: str, obj: str, reason: str, kind_of_event: str, message: str,
           ns: str | None) -> dict[str, Any]:  # fmt: skip
    involved: dict[str, Any] = {"kind": kind, "name": obj}
    if ns:
        involved["namespace"] = ns
    return {
        "metadata": {"name": name},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": kind_of_event,
        "count": 3,
        "source": {"component": "test-controller", "host": "node-a"},
        "lastTimestamp": "2026-12-02T10:00:00Z",
    }


@pytest.fixture(scope="module")
def ns(api_server: Any) -> Iterator[str]:
    name = f"ui-ev-{secrets.token_hex(3)}"
    admin = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=admin, timeout=30) as c:
        assert c.post(f"{API}/namespaces", json={"metadata": {"name": name}}).status_code == 201
        stalled = "ReplicaSet web-1 has timed out progressing"
        for body in (
            _event("web-1.a", "Pod", "web-1", "Pulled", "Normal", "pulled <busybox> & ran", name),
            _event(
                "web.b", "Deployment", "web", "ProgressDeadlineExceeded", "Warning", stalled, name
            ),
            _event(
                "node-a.c", "Node", "node-a", "NodeNotReady", "Warning", "kubelet stopped", None
            ),
            _event("db.d", "Service", "db", "NoEndpoints", "Normal", "no ready pods", name),
        ):
            r = c.post(f"{API}/namespaces/{name}/events", json=body)
            assert r.status_code == 201, r.text
    yield name


@pytest.fixture
def browser(api_server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False) as c:
        sign_in(c, api_server.token)
        yield c


def test_the_retention_caption_reads_the_retention_loops_settings() -> None:
    loop = EventRetention()
    assert float(page.TTL_DEFAULT) == loop.ttl_seconds
    assert int(page.MAX_DEFAULT) == loop.max_events
    assert "kept 7 days after they were last seen" in page.retention()
    assert "200,000" in page.retention()
    assert page.duration(90 * 60) == "90 minutes" and page.duration(2 * 86400) == "2 days"


def test_events_are_listed_with_their_objects_linked(browser: httpx.Client, ns: str) -> None:
    r = browser.get(f"/ui/events?ns={ns}")
    assert r.status_code == 200, r.text
    html = r.text
    assert f'href="/ui/pods/{ns}/web-1"' in html
    assert f'href="/ui/workloads/deployments/{ns}/web"' in html
    assert 'href="/ui/nodes/node-a"' in html
    assert f'href="/ui/services/{ns}/db"' in html
    assert "pulled &lt;busybox&gt; &amp; ran" in html  # the message verbatim, escaped
    assert "ReplicaSet web-1 has timed out progressing" in html
    assert "test-controller on node-a" in html and ">3</td>" in html
    assert "kept 7 days after they were last seen" in html
    assert 'data-live-kinds="Event"' in html and f'data-live-ns="{ns}"' in html


def test_the_warnings_filter_and_the_field_filters_run_on_the_server(
    browser: httpx.Client, ns: str
) -> None:
    warnings = browser.get(f"/ui/events?ns={ns}&warnings=1").text
    assert "ProgressDeadlineExceeded" in warnings and "NodeNotReady" in warnings
    assert "Pulled" not in warnings and "NoEndpoints" not in warnings
    pods = browser.get(f"/ui/events?ns={ns}&kind=Pod").text
    assert "Pulled" in pods and "NodeNotReady" not in pods
    named = browser.get(f"/ui/events?ns={ns}&name=node-a").text
    assert "NodeNotReady" in named and "Pulled" not in named
    reason = browser.get(f"/ui/events?ns={ns}&reason=NoEndpoints").text
    assert "no ready pods" in reason and "kubelet stopped" not in reason
    none = browser.get(f"/ui/events?ns={ns}&warnings=1&kind=Pod").text
    assert "No Events match." in none


def test_pages_follow_the_continue_token(browser: httpx.Client, api_server: Any) -> None:
    name = f"ui-evp-{secrets.token_hex(3)}"
    admin = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=admin, timeout=30) as c:
        assert c.post(f"{API}/namespaces", json={"metadata": {"name": name}}).status_code == 201
        for i in range(page.PAGE + 2):
            body = _event(f"e-{i:03d}", "Pod", f"p-{i:03d}", "Pulled", "Normal", f"m{i}", name)
            assert c.post(f"{API}/namespaces/{name}/events", json=body).status_code == 201
    first = browser.get(f"/ui/events?ns={name}").text
    assert first.count("<tr data-event=") == page.PAGE
    assert 'rel="next"' in first and "p-000" in first and "p-051" not in first
    nxt = first.split('rel="next" href="?', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    second = browser.get(f"/ui/events?{nxt}").text
    assert second.count("<tr data-event=") == 2 and "p-051" in second
    assert 'rel="next"' not in second


def test_a_principal_who_may_not_list_events_is_told_so(
    api_server: Any, pg_url: str, ns: str
) -> None:
    token = secrets.token_urlsafe(32)
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(
            "INSERT INTO qm_tokens (username, groups, token_sha256, description)"
            " VALUES (%s, %s, %s, 'ui events test')",
            ("ui-ev-nobody", ["system:authenticated"], hashlib.sha256(token.encode()).hexdigest()),
        )
    with httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False) as c:
        assert sign_in(c, token).status_code == 303
        r = c.get("/ui/events")
        assert r.status_code == 200 and "Forbidden" in r.text, r.text
        assert "No Events match." not in r.text
        one = c.get(f"/ui/events?ns={ns}")
        assert f"Forbidden: you may not list Events in namespace {ns}" in one.text, one.text
