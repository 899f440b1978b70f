"""Node-pressure eviction by a whole agent against a real API server.

With the ``sim`` runtime (usage set by the test) several pods of every QoS class and priority
are evicted one at a time in the kubelet's order until enough memory is free. With the
``process`` runtime and real cgroups, a BestEffort pod that allocates memory steadily is
evicted (Failed/Evicted, DisruptionTarget, an Event) while a Guaranteed pod keeps running,
and the node shows MemoryPressure and its NoSchedule taint, then clears both after the
transition period. Both use the ``pods`` signal (the node's allocatable memory minus what its
pods use) so that the rest of this shared machine does not matter."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import make_agent

from agent.api import NAMESPACE, NODE, POD, AgentApi
from agent.loop import Agent
from agent.machine import Reserve, detect
from agent.pressure import TAINT_KEY, EvictionConfig, Threshold
from agent.pressure_monitor import PodsSignal, PressureMonitor
from agent.runtime import Runtime, Usage
from agent.runtime.cgroups import Cgroups
from agent.runtime.process import ProcessRuntime
from agent.runtime.sim import SimRuntime
from app.core.kinds import BY_KIND
from app.devstack.apiserver import ApiServer

Obj = dict[str, Any]
Mi = 2**20
SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]
# Grows by 16 MiB every 0.1 s (pages written, so they count) up to 480 MiB, then waits.
HOG = [
    sys.executable,
    "-c",
    "import time\nheld = []\nfor _ in range(30):\n"
    "    held.append(b'x' * (16 << 20)); time.sleep(0.1)\ntime.sleep(120)",
]


@dataclass
class Node:
    agent: Agent
    monitor: PressureMonitor
    api: AgentApi
    name: str
    namespace: str

    def create(self, name: str, command: list[str], resources: Obj, priority: int = 0) -> Obj:
        container = {"name": "c", "image": "local", "command": command, "resources": resources}
        body = {
            "metadata": {"name": name},
            "spec": {"nodeName": self.name, "priority": priority, "containers": [container]},
        }
        return self.api.create(POD, self.namespace, body)

    def pod(self, name: str) -> Obj:
        return self.api.get(POD, self.namespace, name)

    def node(self) -> Obj:
        return self.api.get(NODE, None, self.name)


async def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await asyncio.to_thread(check):
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def memory_pressure(node: Obj) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "MemoryPressure"), "")


def tainted(node: Obj) -> bool:
    return any(t.get("key") == TAINT_KEY for t in (node.get("spec") or {}).get("taints") or [])


async def watch_node(node: Node, seen: list[tuple[str, bool]]) -> None:
    """Record the node's (MemoryPressure, tainted) every 0.1 s until cancelled."""
    while True:
        current = await asyncio.to_thread(node.node)
        seen.append((memory_pressure(current), tainted(current)))
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def run_node(
    api_server: ApiServer, runtime: Runtime, allocatable: int, cfg: EvictionConfig
) -> AsyncIterator[Node]:
    api = AgentApi(api_server.url, api_server.token)
    name, ns = f"press-{secrets.token_hex(3)}", f"press-{secrets.token_hex(3)}"
    api.create(NAMESPACE, None, {"metadata": {"name": ns}})
    machine = detect()
    reserve = Reserve(100, machine.capacity.memory_bytes - allocatable)
    monitor = PressureMonitor(cfg, PodsSignal(allocatable), api.clone(), name)
    agent = make_agent(api, runtime, name, reserve=reserve, pressure=monitor)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield Node(agent, monitor, api, name, ns)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        assert agent.runtime.containers() == []
        api.close()


# -- the order, with the sim runtime ------------------------------------------------------------


async def test_pods_are_evicted_one_at_a_time_in_rank_order_until_enough_is_free(
    api_server: ApiServer,
) -> None:
    """1000Mi allocatable, evict below 500Mi available and then free 100Mi more: 700Mi in use
    takes three evictions (300, 400, 550 available), BestEffort first at equal priority,
    Burstable above requests by priority, and the pods within requests are left alone."""
    runtime = SimRuntime()
    cfg = EvictionConfig(Threshold(500 * Mi), 100 * Mi, transition_period=1.0, interval=0.3)
    g = {"limits": {"cpu": "100m", "memory": "200Mi"}}
    b = {"requests": {"memory": "50Mi"}}
    pods = {  # name: (resources, priority, usage)
        "guaranteed": (g, 0, 200),
        "burst-high": (b, 1000, 150),
        "burst-low": (b, 0, 150),
        "besteffort": ({}, 0, 100),
        "within": ({"requests": {"memory": "300Mi"}}, -5, 100),
    }
    async with run_node(api_server, runtime, 1000 * Mi, cfg) as node:
        uids = {n: node.create(n, ["x"], r, p)["metadata"]["uid"] for n, (r, p, _) in pods.items()}
        await wait_for(lambda: all(phase(node.pod(n)) == "Running" for n in pods))
        await wait_for(lambda: memory_pressure(node.node()) == "False")
        for n, (_, _, used) in pods.items():  # no await in between: one reading sees them all
            runtime.set_usage(uids[n], "c", Usage(used * Mi, 0))
        await wait_for(lambda: phase(node.pod("burst-high")) == "Failed")
        await asyncio.sleep(1.0)  # a few more readings: nothing else goes
        assert node.monitor.evicted == ["besteffort", "burst-low", "burst-high"]
        for n in ("besteffort", "burst-low", "burst-high"):
            status = node.pod(n)["status"]
            assert (status["phase"], status["reason"]) == ("Failed", "Evicted")
        for n in ("guaranteed", "within"):
            assert phase(node.pod(n)) == "Running"
        assert node.monitor.last is not None and node.monitor.last.available == 700 * Mi


# -- a real memory hog in a real cgroup ----------------------------------------------------------


async def test_a_besteffort_hog_is_evicted_and_a_guaranteed_pod_keeps_running(
    api_server: ApiServer, cgroups: Cgroups, tmp_path: Path
) -> None:
    """600Mi allocatable, evict below 300Mi available: the hog (up to 480Mi) crosses it."""
    runtime = ProcessRuntime(tmp_path / "pods", cgroups)
    cfg = EvictionConfig(Threshold(300 * Mi), transition_period=2.0, interval=0.25)
    guaranteed = {"limits": {"cpu": "100m", "memory": "64Mi"}}
    async with run_node(api_server, runtime, 600 * Mi, cfg) as node:
        svc = node.create("svc", SLEEP, guaranteed, priority=1000)
        await wait_for(lambda: phase(node.pod("svc")) == "Running")
        await wait_for(lambda: memory_pressure(node.node()) == "False" and not tainted(node.node()))
        seen: list[tuple[str, bool]] = []
        watcher = asyncio.create_task(watch_node(node, seen))
        node.create("hog", HOG, {})
        await wait_for(lambda: phase(node.pod("hog")) == "Failed")
        status = node.pod("hog")["status"]
        assert status["reason"] == "Evicted"
        assert status["message"].startswith("The node was low on resource: memory.")
        assert "Container c was using" in status["message"]
        target = next(c for c in status["conditions"] if c["type"] == "DisruptionTarget")
        assert (target["status"], target["reason"]) == ("True", "TerminationByAgent")
        assert node.monitor.evicted == ["hog"]
        await wait_for(lambda: ("True", True) in seen, timeout=5)
        events, _ = node.api.list_items(BY_KIND["Event"], node.namespace)
        assert any(e.get("reason") == "Evicted" and e.get("type") == "Warning" for e in events)
        await wait_for(lambda: seen[-1] == ("False", False), timeout=10)
        watcher.cancel()
        got = node.pod("svc")
        assert phase(got) == "Running"
        assert got["status"]["containerStatuses"][0]["restartCount"] == 0
        assert runtime.containers(svc["metadata"]["uid"])
        assert not runtime.containers(node.pod("hog")["metadata"]["uid"])
