"""A real agent (process runtime, real cgroups) reports a busy pod's usage end to end: the
pod's CPU and memory, read from its cgroups, reach ``GET .../pods/{name}`` of the metrics API
and the agent's own ``/metrics`` within seconds. Skips, with the reason, where the host gives
no writable cgroups (the process runtime then reads no usage at all)."""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import make_agent

from agent.api import NAMESPACE, POD, AgentApi
from agent.loop import Agent
from agent.runtime.cgroups import Cgroups
from agent.runtime.process import ProcessRuntime
from agent.server import AgentServer
from agent.usage import UsageCollector
from app.client import build
from app.devstack.apiserver import ApiServer

# Touches 64 MiB (so it is resident, not just reserved), then spins one core.
BURN = [sys.executable, "-c", "b = b'x' * (64 << 20)\nwhile True: pass"]


class Setup:
    def __init__(self, agent: Agent, api: AgentApi, node: str, ns: str, server: AgentServer):
        self.agent, self.api, self.node, self.ns, self.server = agent, api, node, ns, server


@pytest.fixture
async def setup(api_server: ApiServer, tmp_path: Path, cgroups: Cgroups) -> AsyncIterator[Setup]:
    api = AgentApi(api_server.url, api_server.token)
    node, ns = f"use-{secrets.token_hex(3)}", f"use-{secrets.token_hex(3)}"
    api.create(NAMESPACE, None, {"metadata": {"name": ns}})
    runtime = ProcessRuntime(tmp_path / "pods", cgroups)
    agent = make_agent(api, runtime, node)
    usage_api = api.clone()
    agent.usage = UsageCollector(
        runtime,
        node,
        lambda body: usage_api.report_usage(node, body),
        interval=1.0,
    )
    agent.server = AgentServer(None, port=0)
    agent.server.add_metrics(agent.usage.metrics_text)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield Setup(agent, api, node, ns, agent.server)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        assert runtime.containers() == []
        api.close()
        usage_api.close()


async def poll(fn: Any, timeout: float = 15.0) -> Any:
    """`fn()`'s first truthy result, checked in a thread every 0.25 s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (result := await asyncio.to_thread(fn)):
        assert loop.time() < deadline, "no usage reported in time"
        await asyncio.sleep(0.25)
    return result


def _millis(cpu: str) -> int:
    return int(cpu.removesuffix("m"))


def _kib(memory: str) -> int:
    return int(memory.removesuffix("Ki"))


async def test_a_busy_pods_usage_reaches_the_api_and_the_agent_metrics(setup: Setup) -> None:
    body = {"metadata": {"name": "burner"}, "spec": {"nodeName": setup.node, "priority": 3,
            "containers": [{"name": "c", "image": "local", "command": BURN}]}}  # fmt: skip
    setup.api.create(POD, setup.ns, body)

    def busy() -> Any:
        try:
            got = setup.api.send(build.metrics("pods", setup.ns, "burner"))
        except Exception:
            return None
        return got if _millis(got["usage"]["cpu"]) >= 300 else None

    got = await poll(busy)
    assert got["node"] == setup.node and got["priority"] == 3
    assert _kib(got["usage"]["memory"]) >= 60 * 1024  # the 64 MiB it touched
    assert [c["name"] for c in got["containers"]] == ["c"]

    node = setup.api.send(build.metrics("nodes", None, setup.node))
    assert _millis(node["usage"]["cpu"]) >= 300 and node["pods"] == 1
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{setup.server.port}") as http:
        text = (await http.get("/metrics")).text
    line = next(x for x in text.splitlines() if x.startswith("qm_pod_cpu_usage_millicores{"))
    assert f'namespace="{setup.ns}",pod="burner"' in line and int(line.split()[-1]) >= 300
    assert setup.agent.usage is not None and setup.agent.usage.failed < setup.agent.usage.sent
