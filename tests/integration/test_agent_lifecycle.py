"""A container's life under a real agent, with real processes in real cgroups: a crashing
container restarted on a doubling backoff, an OOM kill reported and restarted, a liveness
failure restarting the container in place, and a deletion that runs preStop, then SIGTERM, then
SIGKILL once the grace period is out, while the pod shows as terminating."""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agents import make_agent, running

from agent.api import NAMESPACE, POD, AgentApi
from agent.runtime.cgroups import Cgroups
from agent.runtime.process import ProcessRuntime
from app.core.errors import NotFound
from app.devstack.apiserver import ApiServer

Obj = dict[str, Any]


@dataclass
class Node:
    api: AgentApi
    name: str
    namespace: str

    def create(self, name: str, container: Obj, **spec: Any) -> Obj:
        body = {
            "metadata": {"name": name},
            "spec": {
                "nodeName": self.name,
                "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "c", "image": "local", **container}],
                **spec,
            },
        }
        return self.api.create(POD, self.namespace, body)

    def status(self, name: str) -> Obj:
        return dict(self.api.get(POD, self.namespace, name).get("status") or {})

    def container(self, name: str) -> Obj:
        statuses = self.status(name).get("containerStatuses") or [{}]
        return dict(statuses[0])


@pytest.fixture
async def node(api_server: ApiServer, tmp_path: Path, cgroups: Cgroups) -> AsyncIterator[Node]:
    api = AgentApi(api_server.url, api_server.token)
    name, ns = f"life-{secrets.token_hex(3)}", f"life-{secrets.token_hex(3)}"
    api.create(NAMESPACE, None, {"metadata": {"name": ns}})
    agent = make_agent(api, ProcessRuntime(tmp_path / "pods", cgroups), name)
    async with running(agent):
        yield Node(api, name, ns)
    assert agent.runtime.containers() == []
    api.close()


async def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        await asyncio.sleep(0.05)


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def test_a_crashing_container_is_restarted_on_a_doubling_backoff(
    node: Node, tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    node.create("crasher", {"command": ["sh", "-c", f"date +%s.%N >> {starts}; exit 1"]})
    waiting: set[str] = set()

    def four_starts() -> bool:
        state = node.container("crasher").get("state") or {}
        waiting.add(str((state.get("waiting") or {}).get("reason")))
        return len(lines(starts)) >= 4

    await wait_for(four_starts, 20, "four runs")
    times = [float(t) for t in lines(starts)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # The test agent's backoff starts at 0.5 s and doubles: 0.5, 1, 2 (plus a start each).
    for gap, backoff in zip(gaps, (0.5, 1.0, 2.0), strict=False):
        assert backoff <= gap < backoff + 1.0, gaps
    assert gaps[1] > 1.4 * gaps[0] and gaps[2] > 1.4 * gaps[1], gaps
    assert "CrashLoopBackOff" in waiting
    last = node.container("crasher")["lastState"]["terminated"]
    assert last["exitCode"] == 1 and last["reason"] == "Error"


async def test_an_oom_killed_container_is_reported_and_restarted(node: Node) -> None:
    hog = ["python3", "-c", "b = bytearray(300 << 20)"]
    memory = {"memory": "48Mi", "cpu": "100m"}
    node.create("hog", {"command": hog, "resources": {"requests": memory, "limits": memory}})

    def restarted_after_oom() -> bool:
        c = node.container("hog")
        last = (c.get("lastState") or {}).get("terminated") or {}
        return c.get("restartCount", 0) >= 1 and last.get("reason") == "OOMKilled"

    await wait_for(restarted_after_oom, 20, "OOMKilled and restarted")
    last = node.container("hog")["lastState"]["terminated"]
    assert last["exitCode"] == 137 and last["signal"] == 9


async def test_a_liveness_failure_restarts_the_container_in_place(node: Node) -> None:
    script = "touch healthy; sleep 2; rm healthy; exec sleep 600"
    probe = {"exec": {"command": ["test", "-f", "healthy"]}, "periodSeconds": 1}
    created = node.create(
        "lively",
        {"command": ["sh", "-c", script], "livenessProbe": {**probe, "failureThreshold": 2}},
    )

    def restarted() -> bool:
        return int(node.container("lively").get("restartCount", 0)) >= 1

    await wait_for(restarted, 20, "restarted by its liveness probe")
    c = node.container("lively")
    last = c["lastState"]["terminated"]
    assert last["exitCode"] == 143 and "liveness probe" in last.get("message", "")
    assert "running" in c["state"]
    got = node.api.get(POD, node.namespace, "lively")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]  # the same pod, restarted
    assert got["status"]["phase"] == "Running"


async def test_deletion_runs_prestop_then_sigterm_then_sigkill_after_the_grace(
    node: Node, tmp_path: Path
) -> None:
    order = tmp_path / "order"
    # Answers SIGTERM by noting it and carrying on, so only SIGKILL ends it.
    script = (
        f'trap "echo term >> {order}" TERM; echo started >> {order}; while :; do sleep 0.1; done'
    )
    hook = {"exec": {"command": ["sh", "-c", f"echo prestop >> {order}"]}}
    node.create(
        "stubborn",
        {"command": ["sh", "-c", script], "lifecycle": {"preStop": hook}},
        terminationGracePeriodSeconds=2,
    )
    await wait_for(lambda: lines(order) == ["started"], 15, "started")
    node.api.delete(POD, node.namespace, "stubborn")
    deleted_at = time.monotonic()
    marked = node.api.get(POD, node.namespace, "stubborn")
    assert marked["metadata"].get("deletionTimestamp"), "not marked terminating first"

    def gone() -> bool:
        try:
            node.api.get(POD, node.namespace, "stubborn")
        except NotFound:
            return True
        return False

    await wait_for(gone, 15, "the pod gone")
    took = time.monotonic() - deleted_at
    assert lines(order) == ["started", "prestop", "term"]
    assert 2.0 <= took < 6.0, f"ended {took:.1f} s after the deletion; the grace period is 2 s"
