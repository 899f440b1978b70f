"""A pod's page and its logs against a real API server: the scheduler's reason verbatim, the
containers' states and last termination, the owner resolved to its Deployment, the pod's own
Events, delete and evict (a disruption budget's refusal in its own words), a namespace the
user may not read, and the logs page, download and follow relayed from a real agent."""

from __future__ import annotations

import asyncio
import hashlib
import html
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from agents import make_agent

from agent.api import AgentApi
from agent.credentials import ApiServerReviewer
from agent.logs import ContainerLogs
from agent.runtime.process import ProcessRuntime
from agent.server import AgentServer
from app.core.kinds import API_VERSION
from tests.integration.test_ui_shell import csrf_of, sign_in

API = f"/apis/{API_VERSION}"
PENDING = (
    "0/3 nodes are available: 2 Insufficient cpu, 1 node(s) had untolerated taint "
    "{dedicated: db}. preemption: 0/3 nodes are available: 3 No preemption victims found."
)
Obj = dict[str, Any]


@pytest.fixture
def admin(api_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30) as c:
        yield c


@pytest.fixture
def browser(api_server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False) as c:
        yield c


def namespace(admin: httpx.Client, prefix: str) -> str:
    ns = f"{prefix}-{secrets.token_hex(3)}"
    assert admin.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    return ns


def make_pod(admin: httpx.Client, ns: str, name: str, status: Obj | None = None, **meta: Any
             ) -> Obj:  # fmt: skip
    body = {"metadata": {"name": name, **meta},
            "spec": {"containers": [{"name": "app", "image": "busybox"},
                                    {"name": "side", "image": "busybox"}]}}  # fmt: skip
    r = admin.post(f"{API}/namespaces/{ns}/pods", json=body)
    assert r.status_code == 201, r.text
    if status is not None:
        r = admin.patch(f"{API}/namespaces/{ns}/pods/{name}/status", json={"status": status},
                        headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
        assert r.status_code == 200, r.text
    out: Obj = r.json()
    return out


def running_status(ready: bool = True) -> Obj:
    """Running, its app container restarted three times after being OOM-killed, its sidecar
    terminated with an error."""
    last = {"reason": "OOMKilled", "exitCode": 137, "finishedAt": "2026-12-02T09:59:58Z"}
    side = {"reason": "Error", "exitCode": 2, "message": "config file missing"}
    ready_cond = {"type": "Ready", "status": "True" if ready else "False"}
    app = {"name": "app", "ready": ready, "restartCount": 3, "lastState": {"terminated": last},
           "state": {"running": {"startedAt": "2026-12-02T10:00:00Z"}}}  # fmt: skip
    sidecar = {"name": "side", "ready": False, "restartCount": 0,
               "state": {"terminated": side}}  # fmt: skip
    return {
        "phase": "Running",
        "podIP": "10.88.0.7",
        "conditions": [{"type": "PodScheduled", "status": "True"}, ready_cond],
        "containerStatuses": [app, sidecar],
    }


def test_a_pending_pod_shows_the_scheduler_reason_verbatim(
    admin: httpx.Client, browser: httpx.Client, api_server: Any
) -> None:
    ns = namespace(admin, "uipd")
    status = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": PENDING, "lastTransitionTime": "2026-12-02T10:00:00Z"}]}  # fmt: skip
    make_pod(admin, ns, "waiting", status)
    sign_in(browser, api_server.token)
    page = browser.get(f"/ui/pods/{ns}/waiting")
    assert page.status_code == 200, page.text
    text = html.unescape(page.text)
    assert f"Unschedulable: {PENDING}" in text  # the reason at the top
    assert f'<td class="message">{PENDING}</td>' in text  # and the condition's message
    assert "not scheduled" in text
    assert 'data-live-kinds="Pod,Event"' in page.text
    frag = browser.get(f"/ui/pods/{ns}/waiting", headers={"X-QM-Fragment": "main"})
    assert frag.status_code == 200 and "<html" not in frag.text
    assert PENDING in html.unescape(frag.text)


def test_container_states_owner_and_the_pods_own_events(
    admin: httpx.Client, browser: httpx.Client, api_server: Any
) -> None:
    ns = namespace(admin, "uipd")
    deploy = {"metadata": {"name": "web", "labels": {"app": "web"}},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "app",
                                                             "image": "busybox"}]}}}}  # fmt: skip
    d = admin.post(f"{API}/namespaces/{ns}/deployments", json=deploy)
    assert d.status_code == 201, d.text
    rs = {"metadata": {"name": "web-abc", "labels": {"app": "web"}, "ownerReferences": [
              {"apiVersion": API_VERSION, "kind": "Deployment", "name": "web",
               "uid": d.json()["metadata"]["uid"], "controller": True}]},
          "spec": deploy["spec"]}  # fmt: skip
    r = admin.post(f"{API}/namespaces/{ns}/replicasets", json=rs)
    assert r.status_code == 201, r.text
    owner = [{"apiVersion": API_VERSION, "kind": "ReplicaSet", "name": "web-abc",
              "uid": r.json()["metadata"]["uid"], "controller": True}]  # fmt: skip
    pod = make_pod(admin, ns, "web-abc-1", running_status(), ownerReferences=owner,
                   labels={"app": "web"})  # fmt: skip
    other = make_pod(admin, ns, "web-abc-2")
    for name, target, reason in (("e1", pod, "BackOff"), ("e2", other, "Elsewhere")):
        meta = target["metadata"]
        event = {"metadata": {"name": name}, "type": "Warning", "reason": reason,
                 "message": f"about {meta['name']}", "count": 2,
                 "involvedObject": {"kind": "Pod", "name": meta["name"], "namespace": ns,
                                    "uid": meta["uid"]},
                 "source": {"component": "quaymaster-agent", "host": "n1"}}  # fmt: skip
        assert admin.post(f"{API}/namespaces/{ns}/events", json=event).status_code == 201
    sign_in(browser, api_server.token)
    page = browser.get(f"/ui/pods/{ns}/web-abc-1")
    assert page.status_code == 200, page.text
    text = html.unescape(page.text)
    assert f'href="/ui/workloads/deployments/{ns}/web"' in text
    assert "through ReplicaSet web-abc" in text
    assert "10.88.0.7" in text
    assert "OOMKilled (exit code 137)" in text  # the app container's last termination
    assert "Error: config file missing" in text  # the sidecar's current termination
    assert '<td class="num">2</td>' in text  # its exit code
    assert "BackOff" in text and "about web-abc-1" in text
    assert "Elsewhere" not in text  # another pod's Event
    assert '"restartCount": 3' in text  # the raw view
    assert f'action="/ui/pods/{ns}/web-abc-1/evict"' in text
    assert f'action="/ui/pods/{ns}/web-abc-1/delete"' in text


def test_evict_refused_by_a_budget_says_why_and_delete_records_the_reason(
    admin: httpx.Client, browser: httpx.Client, api_server: Any
) -> None:
    ns = namespace(admin, "uipd")
    make_pod(admin, ns, "guarded", running_status(), labels={"app": "db"})
    pdb = {"metadata": {"name": "db-budget"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}  # fmt: skip
    assert admin.post(f"{API}/namespaces/{ns}/poddisruptionbudgets", json=pdb).status_code == 201
    sign_in(browser, api_server.token)
    url = f"/ui/pods/{ns}/guarded"
    csrf = csrf_of(browser.get(url).text)
    r = browser.post(f"{url}/evict", data={"csrf": csrf, "back": url, "reason": "drain test"})
    assert r.status_code == 303
    page = browser.get(r.headers["location"])
    text = html.unescape(page.text)
    assert "disruption budget db-budget needs 1 healthy pods and has 1 currently" in text, text
    assert admin.get(f"{API}/namespaces/{ns}/pods/guarded").status_code == 200

    r = browser.post(f"{url}/delete", data={"csrf": csrf, "back": url, "reason": "stuck pod"})
    assert r.status_code == 303 and "done=" in r.headers["location"]
    gone = browser.get(r.headers["location"])
    assert gone.status_code == 200 and "This pod is gone" in gone.text, gone.text
    history = admin.get(f"/apis/audit.quaymaster.io/v1/namespaces/{ns}/history",
                        params={"kind": "Pod", "name": "guarded"})  # fmt: skip
    assert history.status_code == 200, history.text
    rows = [i for i in history.json().get("items", []) if i.get("reason") == "stuck pod"]
    assert rows and rows[0].get("principal"), history.text
    assert browser.post(f"{url}/delete", data={"back": url}).status_code == 403  # no CSRF


@pytest.fixture
def viewer(admin: httpx.Client, pg_url: str) -> tuple[str, str]:
    """A token for a user bound to ``view`` in one namespace only, and that namespace."""
    ns = namespace(admin, "uipd-view")
    user = f"viewer-{secrets.token_hex(3)}"
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


def test_a_viewer_gets_no_actions_and_another_namespace_is_forbidden(
    admin: httpx.Client, browser: httpx.Client, viewer: tuple[str, str]
) -> None:
    token, ns = viewer
    other = namespace(admin, "uipd-other")
    make_pod(admin, ns, "seen", running_status())
    make_pod(admin, other, "hidden", running_status())
    assert sign_in(browser, token).status_code == 303
    page = browser.get(f"/ui/pods/{ns}/seen")
    assert page.status_code == 200, page.text
    assert "/evict" not in page.text and "/delete" not in page.text  # not offered
    forbidden = browser.get(f"/ui/pods/{other}/hidden")
    assert forbidden.status_code == 403 and "Forbidden" in forbidden.text
    assert "OOMKilled" not in forbidden.text
    csrf = csrf_of(page.text)
    url = f"/ui/pods/{ns}/seen"
    r = browser.post(f"{url}/delete", data={"csrf": csrf, "back": url, "reason": "try"})
    assert r.status_code == 403 and "Forbidden" in r.text  # the server refuses
    assert admin.get(f"{API}/namespaces/{ns}/pods/seen").status_code == 200
    logs = browser.get(f"/ui/pods/{other}/hidden/logs")
    assert logs.status_code == 403


def test_the_logs_page_of_an_unbound_pod_says_it_has_no_log(
    admin: httpx.Client, browser: httpx.Client, api_server: Any
) -> None:
    ns = namespace(admin, "uipd")
    make_pod(admin, ns, "nolog")
    sign_in(browser, api_server.token)
    page = browser.get(f"/ui/pods/{ns}/nolog/logs?container=side&tail=99999")
    assert page.status_code == 200, page.text
    assert "not bound to a node yet" in page.text and "data-log-problem" in page.text
    assert 'value="10000"' in page.text  # the tail is bounded
    assert "<option selected>side</option>" in page.text
    download = browser.get(f"/ui/pods/{ns}/nolog/logs/download?container=app")
    assert download.status_code == 400 and "not bound to a node yet" in download.text
    with browser.stream("GET", f"/ui/pods/{ns}/nolog/logs/follow?container=app") as s:
        assert s.headers["content-type"].startswith("text/event-stream")
        body = "".join(s.iter_text())
    assert "event: refused" in body and "not bound to a node yet" in body


# -- with a real agent ------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def log_node(api_server: Any, tmp_path_factory: pytest.TempPathFactory
                   ) -> AsyncIterator[tuple[str, str]]:  # fmt: skip
    """A real agent running pods as processes on a node of its own: (node, namespace)."""
    api = AgentApi(api_server.url, api_server.token)
    name, ns = f"uilogs-{secrets.token_hex(3)}", f"uilogs-{secrets.token_hex(3)}"
    await asyncio.to_thread(admin_create_namespace, api_server, ns)
    runtime = ProcessRuntime(tmp_path_factory.mktemp("ui-logs-agent") / "pods", None)
    agent = make_agent(api, runtime, name, address="127.0.0.1")
    logs = ContainerLogs(runtime, lambda: [w.pod for w in agent.workers.values()])
    agent.server = AgentServer(logs, port=0, reviewer=ApiServerReviewer(agent.source.api.clone()),
                               poll=0.05)  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield name, ns
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        headers = {"Authorization": f"Bearer {api_server.token}"}
        await asyncio.to_thread(httpx.delete, f"{api_server.url}{API}/nodes/{name}",
                                headers=headers)  # fmt: skip
        api.close()


def admin_create_namespace(api_server: Any, ns: str) -> None:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    r = httpx.post(f"{api_server.url}{API}/namespaces", json={"metadata": {"name": ns}},
                   headers=headers)  # fmt: skip
    assert r.status_code == 201, r.text


async def until(check: Any, timeout: float = 20.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (got := await asyncio.to_thread(check)):
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)
    return got


async def test_logs_tail_download_and_follow_from_a_real_agent(
    api_server: Any, log_node: tuple[str, str], tmp_path: Path
) -> None:
    node, ns = log_node
    flag = tmp_path / "go"
    script = (f"for i in 1 2 3 4 5; do echo line $i; done; "
              f"while [ ! -e {flag} ]; do sleep 0.05; done; echo after; exit 0")  # fmt: skip
    container = {"name": "c", "image": "local", "command": ["sh", "-c", script]}
    body = {"metadata": {"name": "talker"}, "spec": {
        "nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
        "containers": [container]}}  # fmt: skip
    headers = {"Authorization": f"Bearer {api_server.token}"}
    r = await asyncio.to_thread(httpx.post, f"{api_server.url}{API}/namespaces/{ns}/pods",
                                json=body, headers=headers)  # fmt: skip
    assert r.status_code == 201, r.text
    browser = httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False)
    await asyncio.to_thread(sign_in, browser, api_server.token)
    base = f"/ui/pods/{ns}/talker/logs"

    def tail_shown() -> str:
        page = browser.get(f"{base}?tail=2")
        return page.text if "line 4\nline 5\n</pre>" in page.text else ""

    page = await until(tail_shown)
    assert "line 3" not in page and "The last 2 lines" in page

    download = await asyncio.to_thread(browser.get, f"{base}/download?container=c")
    assert download.status_code == 200
    assert download.headers["content-type"].startswith("text/plain")
    assert download.headers["content-disposition"] == f'attachment; filename="{ns}_talker_c.log"'
    assert download.text == "".join(f"line {i}\n" for i in range(1, 6))

    def follow() -> list[tuple[str, str]]:
        events: list[tuple[str, str]] = []
        event = ""
        timeout = httpx.Timeout(30, read=20)
        with browser.stream("GET", f"{base}/follow?container=c&tail=1", timeout=timeout) as s:
            assert s.headers["content-type"].startswith("text/event-stream")
            for line in s.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    events.append((event, json.loads(line[6:])))
                    if event == "line" and events[-1][1] == "line 5":
                        flag.touch()  # now print a line after the follow started
                    if event == "end":
                        break
        return events

    events = await asyncio.to_thread(follow)
    lines = [data for event, data in events if event == "line"]
    assert lines == ["line 5", "after"], events
    assert events[-1][0] == "end"
    browser.close()
