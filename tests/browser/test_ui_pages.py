"""Every page of the web UI in a real browser against the session's API server: each renders
signed in, passes axe with no serious or critical violation, and leaves a screenshot under
``build/ui-screenshots/``; a list follows the watch stream without a reload, pauses in a
hidden tab and says so when its stream is lost, then resumes; a viewer is offered no action
and a posted one is refused with 403; a session that expires signs out."""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from browser_helpers import assert_accessible, screenshot
from playwright.async_api import Page, expect

from app.core.kinds import API_VERSION
from tests.integration.test_ui_nodes import viewer_token

API = f"/apis/{API_VERSION}"


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code in (200, 201), r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.fixture(scope="module")
def admin(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def cluster(admin: httpx.Client) -> dict[str, str]:
    """One of everything a page shows: a namespace with a Deployment (stalled), its pods (one
    running, one pending with the scheduler's reason), a Service and its slice, a node, an
    Event and a change with a reason in the history."""
    ns = f"uib-{secrets.token_hex(3)}"
    node = f"uib-node-{secrets.token_hex(3)}"
    _ok(admin.post(f"{API}/namespaces", json={"metadata": {"name": ns}}))
    _ok(admin.post(f"{API}/nodes", json={
        "metadata": {"name": node, "labels": {"topology.kubernetes.io/zone": "zone-a"}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                   "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }))  # fmt: skip
    template = {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:1",
                                         "resources": {"requests": {"cpu": "100m"}}}]}}  # fmt: skip
    _ok(admin.post(f"{API}/namespaces/{ns}/deployments", json={
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template},
    }))  # fmt: skip
    _ok(admin.patch(f"{API}/namespaces/{ns}/deployments/web",
                    json={"spec": {"template": {"spec": {"containers": [
                        {"name": "web", "image": "web:2"}]}}}},
                    headers={"Content-Type": "application/merge-patch+json",
                             "X-Reason": "ship web 2"}))  # fmt: skip
    for name, status in (
        ("web-running", {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}),
        ("web-pending", {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/1 nodes are available: 1 Insufficient cpu."}]}),
    ):  # fmt: skip
        spec: dict[str, Any] = {"containers": [{"name": "web", "image": "web:2"}]}
        if status["phase"] == "Running":
            spec["nodeName"] = node
        meta = {"name": name, "labels": {"app": "web"}}
        _ok(admin.post(f"{API}/namespaces/{ns}/pods", json={"metadata": meta, "spec": spec}))
        _ok(admin.put(f"{API}/namespaces/{ns}/pods/{name}/status",
                      json={**admin.get(f"{API}/namespaces/{ns}/pods/{name}").json(),
                            "status": status}))  # fmt: skip
    _ok(admin.post(f"{API}/namespaces/{ns}/services", json={
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))  # fmt: skip
    _ok(admin.post(f"{API}/namespaces/{ns}/events", json={
        "metadata": {"name": "web-pending.1"}, "type": "Warning", "reason": "FailedScheduling",
        "message": "0/1 nodes are available: 1 Insufficient cpu.",
        "involvedObject": {"kind": "Pod", "namespace": ns, "name": "web-pending"},
    }))  # fmt: skip
    return {"ns": ns, "node": node}


def pages(c: dict[str, str]) -> list[tuple[str, str]]:
    ns, node = c["ns"], c["node"]
    return [
        ("overview", "/"),
        ("workloads", f"/workloads?ns={ns}"),
        ("workloads-jobs", "/workloads?tab=jobs"),
        ("deployment", f"/workloads/deployments/{ns}/web"),
        ("pods", f"/pods?ns={ns}"),
        ("pods-pending", "/pods?phase=Pending"),
        ("pod", f"/pods/{ns}/web-pending"),
        ("pod-logs", f"/pods/{ns}/web-running/logs"),
        ("services", f"/services?ns={ns}"),
        ("service", f"/services/{ns}/web"),
        ("nodes", "/nodes"),
        ("node", f"/nodes/{node}"),
        ("events", f"/events?ns={ns}"),
        ("events-warnings", "/events?warnings=1"),
        ("history", f"/history?ns={ns}"),
        ("history-object", f"/history/deployments/{ns}/web"),
    ]


async def test_every_page_renders_is_accessible_and_is_kept_as_a_screenshot(
    signed_in_page: Page, ui_url: str, cluster: dict[str, str]
) -> None:
    page = signed_in_page
    for name, path in pages(cluster):
        resp = await page.goto(ui_url + path)
        assert resp is not None and resp.status == 200, (path, resp and resp.status)
        await expect(page.locator("main h1").first).to_be_visible()
        await screenshot(page, name)
        await assert_accessible(page, context=None)
    # What the operator came for is on the pages, verbatim.
    await page.goto(ui_url + f"/pods/{cluster['ns']}/web-pending")
    await expect(
        page.get_by_text("0/1 nodes are available: 1 Insufficient cpu.").first
    ).to_be_visible()
    await page.goto(ui_url + f"/workloads/deployments/{cluster['ns']}/web")
    await page.get_by_role("link", name="History: who changed it, when and why").click()
    await expect(page).to_have_url(ui_url + f"/history/deployments/{cluster['ns']}/web")
    await expect(page.get_by_text("ship web 2").first).to_be_visible()


async def test_the_sign_in_page_is_accessible(page: Page, ui_url: str) -> None:
    await page.goto(ui_url + "/pods")
    assert page.url.startswith(ui_url + "/signin")
    await expect(page.get_by_label("Token")).to_be_visible()
    await screenshot(page, "signin")
    await assert_accessible(page)


async def _live(page: Page) -> None:
    await expect(page.locator("main")).to_have_attribute("data-live", "open", timeout=15_000)


async def test_a_list_follows_the_stream_pauses_when_hidden_and_resumes_after_a_loss(
    signed_in_page: Page, ui_url: str, admin: httpx.Client, api_server: Any
) -> None:
    page = signed_in_page
    ns = f"uil-{secrets.token_hex(3)}"
    _ok(admin.post(f"{API}/namespaces", json={"metadata": {"name": ns}}))
    await page.goto(ui_url + f"/pods?ns={ns}")
    await _live(page)
    pod = {"metadata": {"name": "first"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    _ok(admin.post(f"{API}/namespaces/{ns}/pods", json=pod))
    row = page.locator(f'tr[data-pod="{ns}/first"]')
    await expect(row).to_be_visible()  # no reload: the main block was fetched again
    assert await page.locator("main").get_attribute("data-refreshed")
    assert page.url.endswith(f"/pods?ns={ns}")

    # A hidden tab closes its stream; shown again, it resumes from the last version it saw.
    await page.evaluate(
        "Object.defineProperty(document, 'hidden', {value: true, configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'))"
    )
    await expect(page.locator("main")).to_have_attribute("data-live", "paused")
    _ok(admin.post(f"{API}/namespaces/{ns}/pods", json={**pod, "metadata": {"name": "hidden"}}))
    await asyncio.sleep(1.5)  # long enough for a live page to have refreshed
    assert await page.locator(f'tr[data-pod="{ns}/hidden"]').count() == 0
    await page.evaluate(
        "Object.defineProperty(document, 'hidden', {value: false, configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'))"
    )
    await expect(page.locator(f'tr[data-pod="{ns}/hidden"]')).to_be_visible()
    await _live(page)

    # The server goes away: the page says so while it is away (looked at before the server is
    # back, since a page that has reconnected no longer says it), and resumes from its last
    # version when it's back.
    api_server.stop()
    try:
        await expect(page.locator("#live-status")).to_contain_text("Live updates lost")
    finally:
        api_server.start(30.0)  # the later tests share this server
    _ok(admin.post(f"{API}/namespaces/{ns}/pods", json={**pod, "metadata": {"name": "after"}}))
    await expect(page.locator(f'tr[data-pod="{ns}/after"]')).to_be_visible(timeout=30_000)
    await _live(page)
    await expect(page.locator("#live-status")).to_be_hidden()


async def test_a_viewer_is_offered_no_action_and_a_posted_one_is_forbidden(
    new_page: Any, sign_in: Any, ui_url: str, admin: httpx.Client, pg_url: str,
    cluster: dict[str, str],
) -> None:  # fmt: skip
    page = await new_page()
    await sign_in(page, viewer_token(pg_url, admin))
    ns, node = cluster["ns"], cluster["node"]
    for path in (f"/workloads/deployments/{ns}/web", f"/nodes/{node}", f"/pods/{ns}/web-running",
                 f"/history/deployments/{ns}/web"):  # fmt: skip
        await page.goto(ui_url + path)
        await expect(page.locator("main h1").first).to_be_visible()
        assert await page.locator("main form.action").count() == 0, path
    await screenshot(page, "viewer-deployment")
    csrf = await page.locator('meta[name="csrf"]').get_attribute("content")
    url = f"/ui/workloads/deployments/{ns}/web"
    refused = await page.request.post(
        ui_url + f"/workloads/deployments/{ns}/web/scale",
        form={"csrf": csrf or "", "back": url, "replicas": "9", "reason": "try"},
        max_redirects=0,
    )
    assert refused.status == 403, await refused.text()
    assert admin.get(f"{API}/namespaces/{ns}/deployments/web").json()["spec"]["replicas"] == 2


async def test_a_session_that_expires_signs_out(
    signed_in_page: Page, ui_url: str, pg_url: str
) -> None:
    page = signed_in_page
    await page.goto(ui_url + "/pods")
    cookies = {c["name"]: c for c in await page.context.cookies()}
    session = cookies["qm_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert session["expires"] > 0  # a cookie that ends, not a browser-session one
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(
            "UPDATE qm_tokens SET expires_at = now() - interval '1 second'"
            " WHERE token_sha256 = encode(sha256(%s::bytea), 'hex')",
            (session["value"].encode(),),
        )
    for _ in range(60):  # the server's token cache sees the change through the stream
        await page.goto(ui_url + "/pods")
        if "/signin" in page.url:
            break
        await asyncio.sleep(0.5)
    assert "/signin" in page.url
    await expect(page.get_by_label("Token")).to_be_visible()


async def test_a_refresh_waits_while_the_operator_fills_a_form(
    signed_in_page: Page, ui_url: str, admin: httpx.Client, cluster: dict[str, str]
) -> None:
    page = signed_in_page
    ns = cluster["ns"]
    await page.goto(ui_url + f"/workloads/deployments/{ns}/web")
    await _live(page)
    replicas = page.get_by_label("Replicas")
    await replicas.fill("5")
    await page.locator("main h1").first.click()  # focus leaves the form; the value stays typed
    patch = {"metadata": {"labels": {"touched": secrets.token_hex(2)}}}
    headers = {"Content-Type": "application/merge-patch+json"}
    _ok(admin.patch(f"{API}/namespaces/{ns}/deployments/web", json=patch, headers=headers))
    await asyncio.sleep(2.5)  # a change event arrived; an idle page would have refreshed by now
    assert await page.locator("main").get_attribute("data-refreshed") is None
    await expect(replicas).to_have_value("5")
    await replicas.fill("2")  # back to what the page showed: the held refresh goes ahead
    await page.locator("main h1").first.click()
    await expect(page.locator("main")).to_have_attribute("data-refreshed", re.compile(r"\d+"))
