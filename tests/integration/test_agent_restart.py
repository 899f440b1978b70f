"""A node agent that dies and comes back adopts the containers it left running.

The agent runs as a real ``python -m agent`` process (process runtime, real cgroups where the
host allows them) against the test API server. It is SIGKILLed with a pod running and started
again with the same state directory: the pod's process is the same one (no copy started, the
restart count unchanged), and a pod deleted while the agent was away is stopped once the new
agent has listed its assignments. A gracefully stopped agent leaves no cgroup of its own.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import capability
import pytest
from agents import bootstrap_token

from agent.api import NAMESPACE, NODE, POD, AgentApi
from agent.runtime.cgroups import CgroupsUnavailable, detect
from agent.runtime.process import start_ticks
from app.core.errors import NotFound
from app.devstack.apiserver import ApiServer

Obj = dict[str, Any]
REPO_ROOT = Path(__file__).resolve().parents[2]
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


class AgentProcess:
    """``python -m agent`` joining with a one-time bootstrap token: the restarted agent can
    only get in with the credential the first one saved in its state directory."""

    def __init__(self, server: ApiServer, node: str, state: Path, log: Path) -> None:
        admin = AgentApi(server.url, server.token)
        token_file = log.with_suffix(".bootstrap-token")
        token_file.write_text(bootstrap_token(admin, node))
        admin.close()
        self.argv = [
            sys.executable, "-m", "agent", "--server", server.url,
            "--bootstrap-token-file", str(token_file),
            "--node-name", node, "--state-dir", str(state), "--port", "0",
        ]  # fmt: skip
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT
            )

    def stop(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)
            self.proc.wait(30)
        self.proc = None


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.1)


def pid_in(pod: Obj) -> int | None:
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if "running" in (c.get("state") or {}):
            return int(str(c["containerID"]).rsplit("/", 1)[1])
    return None


def registered(api: AgentApi, node: str) -> bool:
    try:
        return bool(api.get(NODE, None, node))
    except NotFound:
        return False


def alive(pid: int) -> bool:
    return start_ticks(pid) is not None


@pytest.fixture
def setup(
    api_server: ApiServer, tmp_path: Path
) -> Iterator[tuple[AgentProcess, AgentApi, str, str]]:
    api = AgentApi(api_server.url, api_server.token)
    node, ns = f"restart-{secrets.token_hex(3)}", f"restart-{secrets.token_hex(3)}"
    api.create(NAMESPACE, None, {"metadata": {"name": ns}})
    agent = AgentProcess(api_server, node, tmp_path / "state", tmp_path / "agent.log")
    agent.start()
    try:
        yield agent, api, node, ns
    finally:
        agent.stop(signal.SIGTERM)  # stops whatever pods are left
        api.close()


def test_a_restarted_agent_adopts_its_running_pods(
    setup: tuple[AgentProcess, AgentApi, str, str],
) -> None:
    agent, api, node, ns = setup

    def create(name: str) -> None:
        spec = {
            "nodeName": node,
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "c", "image": "local", "command": SLEEP}],
        }
        api.create(POD, ns, {"metadata": {"name": name}, "spec": spec})

    def pid(name: str) -> int | None:
        return pid_in(api.get(POD, ns, name))

    create("kept")
    create("dropped")
    wait_for(lambda: pid("kept") is not None and pid("dropped") is not None, 30, "pods running")
    kept, dropped = pid("kept"), pid("dropped")
    assert kept is not None and dropped is not None

    agent.stop(signal.SIGKILL)  # no chance to stop anything
    assert alive(kept) and alive(dropped)
    api.delete(POD, ns, "dropped", grace_seconds=0)  # bound pods wait for the agent to confirm
    agent.start()

    wait_for(lambda: not alive(dropped), 30, "the pod deleted meanwhile stopped")

    def gone() -> bool:
        try:
            api.get(POD, ns, "dropped")
        except NotFound:
            return True
        return False

    wait_for(gone, 15, "the deletion confirmed")
    time.sleep(2)  # a few loop passes: a copy would have been started by now
    assert alive(kept) and pid("kept") == kept
    status = api.get(POD, ns, "kept")["status"]
    assert status["phase"] == "Running" and status["containerStatuses"][0]["restartCount"] == 0
    containers = [c for c in api.get(POD, ns, "kept")["status"]["containerStatuses"]]
    assert len(containers) == 1 and pid_in({"status": {"containerStatuses": containers}}) == kept

    api.delete(POD, ns, "kept")
    wait_for(lambda: not alive(kept), 15, "the adopted pod stopped on deletion")


def test_a_stopped_agent_leaves_no_cgroup_of_its_own(
    setup: tuple[AgentProcess, AgentApi, str, str],
) -> None:
    agent, api, node, _ = setup
    try:
        cgroups = detect(f"quaymaster-{node}")
    except CgroupsUnavailable as exc:
        capability.missing(f"no writable cgroups on this host: {exc}")
    wait_for(lambda: registered(api, node), 15, "registered")
    agent.stop(signal.SIGTERM)
    assert not cgroups.exists(""), f"left behind: {cgroups.dirs('')}"
