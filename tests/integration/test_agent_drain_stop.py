"""The wait for the proxies before SIGTERM with real sockets and a real process: a pod worker on
the process runtime stops a deleted pod while small fake discovery replicas (HTTP on
127.0.0.1, in this test) answer ``/v1/drained`` after a delay, never, with an error, or not at
all. The container notes when SIGTERM reaches it, so the test checks that the signal came
after the replicas said drained, within the bound when they never do, and without waiting on
a replica that is down. Also: the agent's client lists a namespace's Services from the test
API server, with the cluster IPs the Service variables are made of."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from pod_api import FakeApi

from agent.api import NAMESPACE, AgentApi
from agent.backoff import CrashLoopBackoff
from agent.drain import Drainer
from agent.loop import RestPodApi
from agent.pods import PodWorker
from agent.runtime.process import ProcessRuntime
from agent.service_env import variables
from app.core.kinds import BY_KIND
from app.devstack.apiserver import ApiServer

Obj = dict[str, Any]
HTTP = {"name": "http", "port": 80, "protocol": "TCP"}
SLACK = 1.0  # a loaded 2-core machine: how late a signal may come beyond what is expected

CONTAINER = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def term(*_):
    (out / "term").write_text(repr(time.monotonic()))
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
(out / "ready").write_text("1")
while True:
    time.sleep(0.02)
"""


@dataclass
class Replica:
    """A fake discovery replica: ``/v1/drained`` says drained ``after`` seconds from the
    question (None: never, answering not drained at the question's timeout), or ``status``."""

    after: float | None = 0.0
    status: int = 200
    url: str = ""
    asked: list[tuple[float, dict[str, str]]] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            head = await reader.readuntil(b"\r\n\r\n")
            target = head.split(b" ", 2)[1].decode()
            query = {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
            self.asked.append((time.monotonic(), query))
            timeout = float(query["timeout"])
            wait = timeout if self.after is None else min(self.after, timeout)
            await asyncio.sleep(wait)
            drained = self.after is not None and self.after <= timeout
            body = json.dumps(
                {"drained": drained, "version": 12, "waiting": [] if drained else ["proxy-b"]}
            )
            if self.status != 200:
                body = "boom"
            writer.write(
                f"HTTP/1.1 {self.status} X\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}".encode()
            )
            await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def serving(*replicas: Replica) -> AsyncIterator[None]:
    servers = []
    for r in replicas:
        server = await asyncio.start_server(r.handle, "127.0.0.1", 0)
        r.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        servers.append(server)
    try:
        yield
    finally:
        for server in servers:
            server.close()
            await server.wait_closed()


def dead_url() -> str:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


async def stop_deleted_pod(
    tmp_path: Path, urls: list[str], *, grace: float, drain_max: float
) -> tuple[float, float, FakeApi]:
    """Start the pod, delete it; (when the stop began, when SIGTERM arrived, the API)."""
    body: Obj = {
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "u-drain",
            "resourceVersion": "1",
        },
        "spec": {
            "containers": [
                {"name": "app", "command": [sys.executable, "-c", CONTAINER, str(tmp_path)]}
            ]
        },
        "status": {},
    }
    runtime = ProcessRuntime(tmp_path / "pods", None)
    api = FakeApi(body)
    worker = PodWorker(body, runtime, api, CrashLoopBackoff(), drainer=Drainer(urls, drain_max))
    try:
        await worker.step()
        assert worker.boxes[0].running
        deadline = time.monotonic() + 10
        while not (tmp_path / "ready").exists():
            assert time.monotonic() < deadline, "the container never became ready"
            await asyncio.sleep(0.01)
        worker.request_stop(confirm=True, grace=grace)
        began = time.monotonic()
        await worker.step()
        assert worker.finished and len(api.deletes) == 1
        return began, float((tmp_path / "term").read_text()), api
    finally:
        await runtime.cleanup("u-drain")


async def test_sigterm_waits_until_every_replica_says_drained(tmp_path: Path) -> None:
    fast, slow = Replica(after=0.2), Replica(after=0.6)
    async with serving(fast, slow):
        began, term, _ = await stop_deleted_pod(
            tmp_path, [fast.url, slow.url], grace=10, drain_max=5
        )
    assert [q for _, q in fast.asked] == [{"namespace": "shop", "pod": "web-1", "timeout": "5.000"}]
    asked_at = slow.asked[0][0]
    assert term - asked_at >= 0.6  # not before the slower replica said drained
    assert term - began < 0.6 + SLACK


async def test_a_replica_that_never_drains_holds_sigterm_only_up_to_the_bound(
    tmp_path: Path,
) -> None:
    never = Replica(after=None)
    async with serving(never):
        began, term, _ = await stop_deleted_pod(tmp_path, [never.url], grace=1.6, drain_max=5)
    assert 0.8 <= term - began < 0.8 + SLACK  # half of the 1.6 s grace period
    assert float(never.asked[0][1]["timeout"]) == pytest.approx(0.8, abs=0.01)


async def test_an_unreachable_or_failing_replica_does_not_block(tmp_path: Path) -> None:
    failing, ok = Replica(after=0.0, status=500), Replica(after=0.3)
    async with serving(failing, ok):
        began, term, _ = await stop_deleted_pod(
            tmp_path, [dead_url(), failing.url, ok.url], grace=30, drain_max=10
        )
    assert len(failing.asked) == 1  # an error counts as drained: not asked again
    assert 0.3 <= term - began < 0.3 + SLACK  # only the live replica was waited for


async def test_without_replicas_answering_at_all_sigterm_is_prompt(tmp_path: Path) -> None:
    began, term, _ = await stop_deleted_pod(tmp_path, [dead_url()], grace=30, drain_max=10)
    assert term - began < SLACK


# -- the Service list the variables come from, from the real API ---------------------------------


async def test_the_agents_client_lists_a_namespaces_services_with_their_cluster_ips(
    api_server: ApiServer,
) -> None:
    api = AgentApi(api_server.url, api_server.token)
    ns = f"svc-{secrets.token_hex(3)}"
    api.create(NAMESPACE, None, {"metadata": {"name": ns}})
    for name in ("web", "cache-db"):
        body = {"metadata": {"name": name}, "spec": {"selector": {"app": name}, "ports": [HTTP]}}
        api.create(BY_KIND["Service"], ns, body)
    headless = {"metadata": {"name": "peers"}, "spec": {"clusterIP": "None", "ports": [HTTP]}}
    api.create(BY_KIND["Service"], ns, headless)
    listed = await RestPodApi(api).list_services(ns)
    assert sorted(s["metadata"]["name"] for s in listed) == ["cache-db", "peers", "web"]
    env = variables(listed)
    web_ip = next(s["spec"]["clusterIP"] for s in listed if s["metadata"]["name"] == "web")
    assert env["WEB_SERVICE_HOST"] == web_ip and env["CACHE_DB_SERVICE_PORT_HTTP"] == "80"
    assert env["WEB_PORT"] == f"tcp://{web_ip}:80"
    assert not any(k.startswith("PEERS_") for k in env)
    assert await RestPodApi(api).list_services(f"empty-{secrets.token_hex(3)}") == []
