"""The whole agent loop against a real API server, running real processes: pods bound to a
node of the test's own become Running and Ready in the API, a readiness exec probe flips
Ready, a crashing container is restarted, and a deleted pod's process is stopped before the
pod leaves the API. Each test stops its agent, which stops every process it started."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agents import make_agent

from agent.api import NAMESPACE, POD, AgentApi
from agent.loop import Agent
from agent.runtime import Running
from agent.runtime.process import ProcessRuntime
from app.core.errors import NotFound
from app.core.kinds import BY_KIND
from app.devstack.apiserver import ApiServer

Obj = dict[str, Any]
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@dataclass
class Running_:
    agent: Agent
    api: AgentApi
    node: str
    namespace: str

    def create(self, name: str, container: Obj, **spec: Any) -> Obj:
        body = {
            "metadata": {"name": name},
            "spec": {
                "nodeName": self.node,
                "terminationGracePeriodSeconds": 5,
                "containers": [{"name": "c", "image": "local", **container}],
                **spec,
            },
        }
        return self.api.create(POD, self.namespace, body)

    def get(self, name: str) -> Obj:
        return self.api.get(POD, self.namespace, name)


async def wait_for(check: Callable[[], bool], timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await asyncio.to_thread(check):
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


def condition(pod: Obj, kind: str) -> str:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == kind), "")


@pytest.fixture
async def running(api_server: ApiServer, tmp_path: Path) -> AsyncIterator[Running_]:
    api = AgentApi(api_server.url, api_server.token)
    node = f"loop-{secrets.token_hex(3)}"
    ns = f"loop-{secrets.token_hex(3)}"
    api.create(NAMESPACE, None, {"metadata": {"name": ns}})
    agent = make_agent(api, ProcessRuntime(tmp_path / "pods", None), node)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield Running_(agent, api, node, ns)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        assert agent.runtime.containers() == []
        api.close()


def pid_of(agent: Agent, uid: str) -> int:
    state = agent.runtime.state(uid, "c")
    assert isinstance(state, Running)
    return state.pid


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def test_a_pod_becomes_running_and_ready(running: Running_) -> None:
    pod = running.create("sleeper", {"command": SLEEP})
    await wait_for(lambda: condition(running.get("sleeper"), "Ready") == "True")
    got = running.get("sleeper")
    assert got["status"]["phase"] == "Running"
    cs = got["status"]["containerStatuses"][0]
    assert "running" in cs["state"] and cs["restartCount"] == 0
    assert alive(pid_of(running.agent, pod["metadata"]["uid"]))


async def test_readiness_exec_probe_flips_ready_when_a_file_appears(
    running: Running_, tmp_path: Path
) -> None:
    flag = tmp_path / "ready-flag"
    probe = {"exec": {"command": ["test", "-f", str(flag)]}, "periodSeconds": 1}
    pod = running.create("gated", {"command": SLEEP, "readinessProbe": probe})
    await wait_for(lambda: running.get("gated")["status"].get("phase") == "Running")
    await asyncio.sleep(1.5)  # at least one failing probe
    got = running.get("gated")
    assert condition(got, "Ready") == "False"
    pid = pid_of(running.agent, pod["metadata"]["uid"])
    flag.touch()
    await wait_for(lambda: condition(running.get("gated"), "Ready") == "True", timeout=10)
    assert pid_of(running.agent, pod["metadata"]["uid"]) == pid  # flipped, not restarted
    flag.unlink()
    await wait_for(lambda: condition(running.get("gated"), "Ready") == "False", timeout=10)
    assert running.get("gated")["status"]["containerStatuses"][0]["restartCount"] == 0


async def test_a_crashing_container_is_restarted(running: Running_) -> None:
    running.create("crasher", {"command": ["sh", "-c", "exit 1"]}, restartPolicy="Always")

    def restarted() -> bool:
        statuses = running.get("crasher")["status"].get("containerStatuses") or []
        return bool(statuses) and statuses[0]["restartCount"] >= 1

    await wait_for(restarted)
    cs = running.get("crasher")["status"]["containerStatuses"][0]
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert cs["lastState"]["terminated"]["reason"] == "Error"


async def test_deleting_a_pod_stops_its_process_and_the_pod_goes(running: Running_) -> None:
    handler = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
    pod = running.create("doomed", {"command": [sys.executable, "-c", handler + "time.sleep(60)"]})
    uid = pod["metadata"]["uid"]
    await wait_for(lambda: running.get("doomed")["status"].get("phase") == "Running")
    pid = pid_of(running.agent, uid)
    marked = running.api.delete(POD, running.namespace, "doomed")
    assert marked["metadata"].get("deletionTimestamp")  # bound: the agent must finish it

    def gone() -> bool:
        try:
            running.get("doomed")
        except NotFound:
            return True
        return False

    await wait_for(gone)
    assert not alive(pid)
    await wait_for(lambda: uid not in running.agent.workers)
    assert not running.agent.runtime.containers(uid)
    assert not os.path.exists(running.agent.runtime.pod_dir(uid))  # type: ignore[attr-defined]


async def test_init_containers_and_config_reach_the_process(running: Running_) -> None:
    """An init container writes a file the app then reads; the app's environment comes from a
    ConfigMap key, a Secret's keys and the pod's own name; a ConfigMap volume is laid out as
    files under the pod directory, the process's working directory."""
    ns = running.namespace
    running.api.create(
        BY_KIND["ConfigMap"],
        ns,
        {
            "metadata": {"name": "web-config"},
            "data": {"greeting": "hello", "site.ini": "[site]"},
        },
    )
    running.api.create(
        BY_KIND["Secret"],
        ns,
        {"metadata": {"name": "web-secret"}, "data": {"TOKEN": "czNjcmV0"}},  # s3cret
    )
    script = (
        "import os, pathlib; e, p = os.environ, pathlib.Path;"
        " print(e['GREETING'], e['TOKEN'], e['POD'], p('conf/site.ini').read_text(),"
        " p('seeded').read_text(), flush=True)"
    )
    app = {
        "command": [sys.executable, "-c", script],
        "env": [
            {
                "name": "GREETING",
                "valueFrom": {"configMapKeyRef": {"name": "web-config", "key": "greeting"}},
            },
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "envFrom": [{"secretRef": {"name": "web-secret"}}],
        "volumeMounts": [{"name": "conf", "mountPath": "/conf"}],
    }
    init = {
        "name": "seed",
        "image": "local",
        "command": [sys.executable, "-c", "open('seeded', 'w').write('seeded')"],
    }
    pod = running.create(
        "configured",
        app,
        restartPolicy="Never",
        initContainers=[init],
        volumes=[{"name": "conf", "configMap": {"name": "web-config"}}],
    )
    await wait_for(lambda: running.get("configured")["status"].get("phase") == "Succeeded")
    status = running.get("configured")["status"]
    assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert condition(running.get("configured"), "Initialized") == "True"
    runtime = running.agent.runtime
    assert isinstance(runtime, ProcessRuntime)
    output = runtime.log_path(pod["metadata"]["uid"], "c").read_text()
    assert output.strip() == "hello s3cret configured [site] seeded"
