"""Container logs end to end: a real API server (with its own credential for agents) relays
``GET .../pods/{name}/log`` to a real agent running pods as processes. The last lines, a follow
that sees a line printed after it started and ends with the run, the previous run after a
crash, the latest lines of a rotated log, ``qm logs`` as a subprocess, who the agent server
lets in (an API server's credential, checked by a token review; no shared secret), and hostile
or impossible requests answered with a ``Status``.

One agent serves the whole module (its log rotation limit is tiny, so rotation is exercised);
every test makes its own pods. The agent runs in the test's event loop, so every HTTP call
from a test goes through a thread."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import make_agent

from agent.api import NAMESPACE, NODE, POD, AgentApi
from agent.credentials import ApiServerReviewer
from agent.logs import ContainerLogs, log_path, rotated
from agent.loop import Agent
from agent.runtime.process import ProcessRuntime
from agent.server import AgentServer
from app.devstack.apiserver import ApiServer
from app.devstack.supervise import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_BYTES = 2000
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def logs_api(
    pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """An API server of this module's own, with a shared secret in its environment that the
    agents must not accept."""
    port, token = free_port(), secrets.token_urlsafe(32)
    env = {**os.environ, "DATABASE_URL": pg_url, "QM_STREAM_DATABASE_URL": pg_url,
           "QM_BROKER_URL": redis_url, "QM_BOOTSTRAP_TOKEN": token, "QM_API_PORT": str(port),
           "QM_AGENT_SERVER_TOKEN": SHARED_SECRET, "PYTHONUNBUFFERED": "1"}  # fmt: skip
    server = ApiServer(port, token, env, tmp_path_factory.mktemp("logs-api") / "api.log", REPO_ROOT)
    server.start(timeout=30.0)
    try:
        yield server
    finally:
        server.stop()


SHARED_SECRET = secrets.token_urlsafe(24)  # what agents accepted before they had credentials


@dataclass
class Node:
    agent: Agent
    api: AgentApi
    server: ApiServer
    name: str
    namespace: str
    root: Path
    pods: list[str] = field(default_factory=list)

    def create(self, name: str, *containers: Obj, **spec: Any) -> Obj:
        body = {"metadata": {"name": name}, "spec": {
            "nodeName": self.name, "terminationGracePeriodSeconds": 2,
            "containers": [{"image": "local", **c} for c in containers], **spec}}  # fmt: skip
        return self.api.create(POD, self.namespace, body)

    def log_url(self, pod: str) -> str:
        return f"{self.server.url}/apis/quaymaster.io/v1/namespaces/{self.namespace}/pods/{pod}/log"

    def get_log(self, pod: str, **params: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.server.token}"}
        return httpx.get(self.log_url(pod), params=params, headers=headers, timeout=30)

    async def log(self, pod: str, **params: str) -> httpx.Response:
        return await asyncio.to_thread(self.get_log, pod, **params)


@pytest.fixture(scope="module")
async def node(
    logs_api: ApiServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Node]:
    api = AgentApi(logs_api.url, logs_api.token)
    name, ns = f"logs-{secrets.token_hex(3)}", f"logs-{secrets.token_hex(3)}"
    await asyncio.to_thread(api.create, NAMESPACE, None, {"metadata": {"name": ns}})
    root = tmp_path_factory.mktemp("logs-agent") / "pods"
    runtime = ProcessRuntime(root, None)
    agent = make_agent(api, runtime, name, address="127.0.0.1")
    logs = ContainerLogs(runtime, lambda: [w.pod for w in agent.workers.values()],
                         max_bytes=MAX_BYTES, keep=2, rotate_every=0.1)  # fmt: skip
    reviewer = ApiServerReviewer(agent.source.api.clone())  # the node's own credential
    agent.server = AgentServer(logs, port=0, reviewer=reviewer, poll=0.05)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield Node(agent, api, logs_api, name, ns, root)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        assert agent.runtime.containers() == []
        api.close()


async def wait_for(check: Callable[[], bool], timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await asyncio.to_thread(check):
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


def says(node: Node, pod: str, text: str, **params: str) -> Callable[[], bool]:
    def check() -> bool:
        resp = node.get_log(pod, **params)
        return resp.status_code == 200 and text in resp.text

    return check


def sh(script: str) -> Obj:
    return {"name": "c", "command": ["sh", "-c", script]}


async def test_tail_lines_returns_the_last_lines(node: Node) -> None:
    node.create("counter", sh("for i in 1 2 3 4 5; do echo line $i; done; sleep 60"))
    await wait_for(says(node, "counter", "line 5\n"))
    assert (await node.log("counter")).text == "".join(f"line {i}\n" for i in range(1, 6))
    got = await node.log("counter", tailLines="2")
    assert got.status_code == 200 and got.text == "line 4\nline 5\n"
    assert got.headers["content-type"].startswith("text/plain")
    assert (await node.log("counter", tailLines="0")).text == ""


async def test_follow_sees_a_later_line_and_ends_with_the_run(node: Node, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    script = f"echo before; while [ ! -e {flag} ]; do sleep 0.05; done; echo after; exit 0"
    node.create("talker", sh(script), restartPolicy="Never")
    await wait_for(says(node, "talker", "before\n"))
    received: list[bytes] = []
    ended = threading.Event()

    def follow() -> None:
        with httpx.stream("GET", node.log_url("talker"), params={"follow": "true"},
                          headers={"Authorization": f"Bearer {node.server.token}"},
                          timeout=httpx.Timeout(30, read=None)) as resp:  # fmt: skip
            assert resp.status_code == 200
            for chunk in resp.iter_raw():
                received.append(chunk)
        ended.set()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    await wait_for(lambda: b"before\n" in b"".join(received))
    assert not ended.is_set()
    flag.touch()
    await wait_for(lambda: b"after\n" in b"".join(received))
    await wait_for(ended.is_set, timeout=10)  # the container exited: the follow ends
    assert b"".join(received) == b"before\nafter\n"
    await asyncio.to_thread(thread.join, 5)


async def test_a_client_leaving_a_follow_closes_it_on_the_agent(node: Node) -> None:
    assert node.agent.server is not None
    server = node.agent.server
    node.create("ticker", sh("while true; do echo tick; sleep 0.1; done"))
    await wait_for(says(node, "ticker", "tick"))
    idle = server.connections
    got: list[bytes] = []
    leave = threading.Event()

    def follow() -> None:
        with httpx.stream("GET", node.log_url("ticker"), params={"follow": "true"},
                          headers={"Authorization": f"Bearer {node.server.token}"},
                          timeout=httpx.Timeout(30, read=None)) as resp:  # fmt: skip
            for chunk in resp.iter_raw():
                got.append(chunk)
                if leave.is_set():
                    return  # closes the connection to the API server

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    await wait_for(lambda: b"".join(got).count(b"tick") >= 3)
    assert server.connections == idle + 1  # the API server holds one follow on the agent
    leave.set()
    await asyncio.to_thread(thread.join, 10)
    await wait_for(lambda: server.connections == idle, timeout=10)


async def test_previous_shows_the_run_before_a_crash(node: Node) -> None:
    script = ('n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; '
              'echo "run $n"; [ $n -ge 2 ] && exec sleep 60; exit 3')  # fmt: skip
    node.create("crasher", sh(script), restartPolicy="Always")
    await wait_for(says(node, "crasher", "run 2\n"))
    assert (await node.log("crasher")).text == "run 2\n"
    prev = await node.log("crasher", previous="true")
    assert prev.status_code == 200 and prev.text == "run 1\n"


async def test_previous_before_any_restart_is_a_400(node: Node) -> None:
    node.create("steady", sh("echo once; sleep 60"))
    await wait_for(says(node, "steady", "once"))
    got = await node.log("steady", previous="true")
    assert got.status_code == 400 and got.json()["kind"] == "Status"
    assert "previous terminated container" in got.json()["message"]


async def test_a_rotated_log_still_returns_its_latest_lines(node: Node) -> None:
    pod = node.create(
        "chatty",
        sh(
            "i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo line $i; "
            "[ $((i % 20)) -eq 0 ] && sleep 0.1; done; sleep 60"
        ),
    )
    await wait_for(says(node, "chatty", "line 300\n", tailLines="1"))
    current = log_path(node.root / pod["metadata"]["uid"], "c")
    await wait_for(lambda: rotated(current, 1).exists())
    assert rotated(current, 1).stat().st_size > MAX_BYTES // 2
    assert current.stat().st_size <= MAX_BYTES + 400  # rotated while it wrote
    got = await node.log("chatty", tailLines="3")
    assert got.text == "line 298\nline 299\nline 300\n"


async def test_qm_logs_runs_against_the_server(node: Node) -> None:
    node.create("cli", sh("echo alpha; echo beta; sleep 60"))
    await wait_for(says(node, "cli", "beta"))
    env = {**os.environ, "QM_SERVER": node.server.url, "QM_TOKEN": node.server.token}
    base = [sys.executable, "-m", "app.cli.main", "logs", "-n", node.namespace]

    def qm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], env=env, capture_output=True, text=True,
                              timeout=30, cwd=REPO_ROOT, check=False)  # fmt: skip

    done = await asyncio.to_thread(qm, "cli", "--tail", "1")
    assert (done.returncode, done.stdout) == (0, "beta\n"), done.stderr
    done = await asyncio.to_thread(qm, "cli", "-c", "nope")
    assert done.returncode == 1 and "NotFound" in done.stderr and "c" in done.stderr


async def test_hostile_and_impossible_requests_get_a_status(node: Node) -> None:
    node.create("two", sh("echo a; sleep 60"), {**sh("echo b; sleep 60"), "name": "d"})
    await wait_for(says(node, "two", "b", container="d"))
    for params, field_name in (({"tailLines": "-1"}, "tailLines"),
                               ({"tailLines": "ten"}, "tailLines"),
                               ({"follow": "maybe"}, "follow"),
                               ({}, "container")):  # fmt: skip
        got = await node.log("two", **params)
        assert got.status_code == 422, params
        body = got.json()
        assert body["kind"] == "Status" and body["reason"] == "Invalid"
        assert [c["field"] for c in body["details"]["causes"]] == [field_name]
    got = await node.log("two", container="zzz")
    assert got.status_code == 404 and "c, d" in got.json()["message"]
    assert (await node.log("no-such-pod")).status_code == 404
    anonymous = await asyncio.to_thread(httpx.get, node.log_url("two"), timeout=10)
    assert anonymous.status_code == 401


async def test_unbound_pods_and_unreachable_agents(node: Node) -> None:
    body = {"metadata": {"name": "unbound"}, "spec": {"containers": [sh("true")]}}
    for c in body["spec"]["containers"]:
        c["image"] = "local"
    await asyncio.to_thread(node.api.create, POD, node.namespace, body)
    got = await node.log("unbound")
    assert got.status_code == 400 and "not bound" in got.json()["message"]

    ghost = f"ghost-{secrets.token_hex(3)}"
    created = await asyncio.to_thread(node.api.create, NODE, None,
                                      {"metadata": {"name": ghost}, "spec": {}})  # fmt: skip
    body = {"metadata": {"name": "haunted"}, "spec": {"nodeName": ghost, "containers": [
        {**sh("true"), "image": "local"}]}}  # fmt: skip
    await asyncio.to_thread(node.api.create, POD, node.namespace, body)
    got = await node.log("haunted")
    assert got.status_code == 503 and "has not reported its agent endpoint" in got.json()["message"]
    status = {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
              "daemonEndpoints": {"agentEndpoint": {"Port": free_port()}}}  # fmt: skip
    await asyncio.to_thread(node.api.replace, NODE, None, {**created, "status": status}, "status")
    got = await node.log("haunted")
    assert got.status_code == 503 and "cannot reach the agent" in got.json()["message"]


async def test_the_node_reports_its_agent_endpoint_and_lets_in_only_the_api_servers(
    node: Node,
) -> None:
    assert node.agent.server is not None
    port = node.agent.server.port
    got = await asyncio.to_thread(node.api.get, NODE, None, node.name)
    assert got["status"]["daemonEndpoints"] == {"agentEndpoint": {"Port": port}}
    assert {"type": "InternalIP", "address": "127.0.0.1"} in got["status"]["addresses"]
    node.agent.server.add_metrics(lambda: "qm_agent_test_metric 1")
    base = f"http://127.0.0.1:{port}"

    def fetch(path: str, token: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(base + path, headers=headers, timeout=10)

    assert (await asyncio.to_thread(fetch, "/healthz", None)).text == "ok"
    for path in ("/metrics", f"/containerLogs/{node.namespace}/x/c"):
        assert (await asyncio.to_thread(fetch, path, None)).status_code == 401
        assert (await asyncio.to_thread(fetch, path, "wrong")).status_code == 401
        assert (await asyncio.to_thread(fetch, path, SHARED_SECRET)).status_code == 401
        own = node.agent.source.api.token  # a node's credential is not an API server's
        assert (await asyncio.to_thread(fetch, path, own)).status_code == 401
    # The administrator (system:masters) may call an agent directly, as the API servers do.
    metrics = await asyncio.to_thread(fetch, "/metrics", node.server.token)
    assert metrics.status_code == 200 and "qm_agent_test_metric 1\n" in metrics.text
    where = f"/containerLogs/{node.namespace}/x/c"
    missing = await asyncio.to_thread(fetch, where, node.server.token)
    assert missing.status_code == 404 and missing.json()["kind"] == "Status"
