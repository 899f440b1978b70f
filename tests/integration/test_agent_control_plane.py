"""The agent's link to the control plane against a real API server process: registration,
status writes over the node lifecycle controller's, lease renewal that keeps a fenced epoch,
and the assignment set following pods bound to the node, also while the API is unreachable
(a closed port stands in for it: the shared server is not stopped)."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent.api import LEASE, NAMESPACE, NODE, POD, AgentApi
from agent.assignments import AssignmentSource
from agent.lease import LEASE_NAMESPACE, LeaseKeeper
from agent.machine import Machine, Reserve, Resources, detect
from agent.node import NodeConfig, NodeStatusWriter
from app.core.errors import NotFound
from app.devstack.apiserver import ApiServer
from app.devstack.supervise import free_port

GI = 1024**3


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api(api_server: ApiServer) -> Iterator[AgentApi]:
    client = AgentApi(api_server.url, api_server.token)
    yield client
    client.close()


@pytest.fixture
def node_name() -> str:
    return f"agent-{secrets.token_hex(3)}"


def wait_for(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def ready(node: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def test_registration_creates_a_usable_node(api: AgentApi, node_name: str) -> None:
    cfg = NodeConfig(node_name, zone="zone-a", machine_class="general", reserve=Reserve(500, GI))
    clock = Clock()
    writer = NodeStatusWriter(api, cfg, detect(), monotonic=clock)
    writer.register()
    node = api.get(NODE, None, node_name)
    labels = node["metadata"]["labels"]
    assert labels["topology.kubernetes.io/zone"] == "zone-a"
    assert labels["quaymaster.io/machine-class"] == "general"
    assert labels["kubernetes.io/hostname"] == node_name  # its own name, not the machine's
    status = node["status"]
    alloc = writer.machine.allocatable(cfg.reserve).to_quantities()
    assert status["allocatable"] == alloc and status["capacity"]["pods"] == "110"
    assert (ready(node)["status"], ready(node)["reason"]) == ("True", "AgentReady")
    assert status["nodeInfo"]["kernelVersion"]
    assert node["spec"].get("unschedulable") in (None, False)
    # Nothing changed: no write until five minutes have passed.
    clock.now += 299
    assert not writer.sync() and writer.writes == 1
    clock.now += 1
    assert writer.sync() and writer.writes == 2
    # Registering again (an agent restart) finds the node and creates nothing new.
    uid = node["metadata"]["uid"]
    NodeStatusWriter(api, cfg, detect()).register()
    assert api.get(NODE, None, node_name)["metadata"]["uid"] == uid


def test_each_node_on_one_machine_is_its_own_hostname(api: AgentApi, node_name: str) -> None:
    """Agents sharing a machine label their Nodes with their own names (so hostname
    anti-affinity and spread see separate domains), a node an older agent labelled with the
    machine's hostname is relabelled at the next start, and an override wins."""
    machine = detect()
    first = NodeStatusWriter(api, NodeConfig(f"{node_name}-1", agent_port=10250), machine)
    second = NodeStatusWriter(api, NodeConfig(f"{node_name}-2", agent_port=10251), machine)
    for writer in (first, second):
        writer.register()
    for name in (f"{node_name}-1", f"{node_name}-2"):
        node = api.get(NODE, None, name)
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == name
        assert {"type": "Hostname", "address": name} in node["status"]["addresses"]
    node = api.get(NODE, None, f"{node_name}-1")
    labels = {**node["metadata"]["labels"], "kubernetes.io/hostname": machine.hostname}
    api.replace(NODE, None, {**node, "metadata": {**node["metadata"], "labels": labels}})
    NodeStatusWriter(api, NodeConfig(f"{node_name}-1"), machine).register()
    relabelled = api.get(NODE, None, f"{node_name}-1")["metadata"]["labels"]
    assert relabelled["kubernetes.io/hostname"] == f"{node_name}-1"
    NodeStatusWriter(api, NodeConfig(f"{node_name}-1", hostname="box-1"), machine).register()
    overridden = api.get(NODE, None, f"{node_name}-1")["metadata"]["labels"]
    assert overridden["kubernetes.io/hostname"] == "box-1"


def test_status_write_sets_ready_back_and_keeps_the_controllers_taints(
    api: AgentApi, node_name: str
) -> None:
    writer = NodeStatusWriter(api, NodeConfig(node_name, zone="zone-b"), detect())
    writer.register()
    # What the node lifecycle controller does to a silent node: taint, then Ready=Unknown.
    node = api.get(NODE, None, node_name)
    taint = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
    node = api.replace(NODE, None, {**node, "spec": {**node["spec"], "taints": [taint]}})
    unknown = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
    status = {**node["status"], "conditions": [unknown]}
    api.replace(NODE, None, {**node, "status": status}, sub="status")
    # The agent's cached copy is stale now: its write must re-read, not lose a race forever.
    assert writer.sync(force=True)
    node = api.get(NODE, None, node_name)
    assert ready(node)["status"] == "True" and ready(node)["reason"] == "AgentReady"
    assert [t["key"] for t in node["spec"]["taints"]] == ["node.kubernetes.io/unreachable"]
    # A machine that grew is a change: written at once, not in five minutes.
    bigger = Machine(writer.machine.hostname, Resources(64000, 256 * GI), writer.machine.node_info)
    writer.machine = bigger
    assert writer.sync()
    assert api.get(NODE, None, node_name)["status"]["capacity"]["cpu"] == "64"


def test_lease_renews_and_keeps_an_epoch_bumped_by_someone_else(
    api: AgentApi, node_name: str
) -> None:
    clock = Clock()
    keeper = LeaseKeeper(api, node_name, monotonic=clock)
    assert keeper.self_kill_due()  # never renewed yet
    assert keeper.renew() and keeper.last_success == 1000.0 and keeper.epoch == 0
    first = api.get(LEASE, LEASE_NAMESPACE, node_name)
    assert first["spec"]["holderIdentity"] == node_name
    assert first["spec"]["leaseDurationSeconds"] == 40
    clock.now += 10
    assert keeper.renew()
    second = api.get(LEASE, LEASE_NAMESPACE, node_name)
    assert second["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    assert second["spec"]["renewTime"] > first["spec"]["renewTime"]
    # The controller fences the node: epoch + 1, conditional on the version it read.
    fenced = api.replace(LEASE, LEASE_NAMESPACE, {**second, "spec": {**second["spec"], "epoch": 1}})
    clock.now += 10
    assert keeper.renew() and keeper.last_success == 1020.0
    third = api.get(LEASE, LEASE_NAMESPACE, node_name)
    assert third["spec"]["epoch"] == 1 and keeper.epoch == 1 and keeper.epoch_changes == 1
    assert third["metadata"]["resourceVersion"] != fenced["metadata"]["resourceVersion"]
    assert third["spec"]["renewTime"] > fenced["spec"]["renewTime"]
    assert not keeper.self_kill_due()
    clock.now += 30
    assert keeper.self_kill_due()


def test_lease_keeper_runs_on_its_interval(api: AgentApi, node_name: str) -> None:
    keeper = LeaseKeeper(api, node_name, interval=0.2)
    stop = threading.Event()
    thread = threading.Thread(target=keeper.run, args=(stop,))
    thread.start()
    try:
        versions: set[str] = set()

        def renewed_thrice() -> bool:
            try:
                lease = api.get(LEASE, LEASE_NAMESPACE, node_name)
            except NotFound:  # not created yet
                return False
            versions.add(lease["metadata"]["resourceVersion"])
            return len(versions) >= 3

        wait_for(renewed_thrice)
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()


def _namespace(api: AgentApi) -> str:
    ns = f"agent-{secrets.token_hex(3)}"
    api.create(NAMESPACE, None, {"metadata": {"name": ns}})
    return ns


def _pod(api: AgentApi, ns: str, name: str, node: str) -> dict[str, Any]:
    body = {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }
    return api.create(POD, ns, body)


def _names(source: AssignmentSource) -> set[str]:
    return {p["metadata"]["name"] for p in source.snapshot().values()}


def test_assignments_follow_pods_bound_to_the_node(api: AgentApi, node_name: str) -> None:
    ns = _namespace(api)
    _pod(api, ns, "one", node_name)
    _pod(api, ns, "elsewhere", node_name + "-other")
    source = AssignmentSource(api.clone(), node_name, watch_timeout=2)
    stop = threading.Event()
    thread = threading.Thread(target=source.run, args=(stop,))
    thread.start()
    try:
        wait_for(lambda: _names(source) == {"one"})
        two = _pod(api, ns, "two", node_name)
        wait_for(lambda: _names(source) == {"one", "two"})
        assert source.snapshot()[two["metadata"]["uid"]]["spec"]["nodeName"] == node_name
        # A graceful delete leaves the pod, marked, for the agent to stop.
        api.delete(POD, ns, "one")
        wait_for(
            lambda: any(
                p["metadata"].get("deletionTimestamp")
                for p in source.snapshot().values()
                if p["metadata"]["name"] == "one"
            )
        )
        api.delete(POD, ns, "one", grace_seconds=0)
        api.delete(POD, ns, "two", grace_seconds=0)
        wait_for(lambda: _names(source) == set())
    finally:
        stop.set()
        thread.join(timeout=10)
        source.api.close()
    assert not thread.is_alive() and source.listed


def test_unreachable_api_keeps_the_last_set_and_relists_on_return(
    api: AgentApi, node_name: str
) -> None:
    ns = _namespace(api)
    kept, gone = _pod(api, ns, "kept", node_name), _pod(api, ns, "gone", node_name)
    source = AssignmentSource(api, node_name, jitter=lambda: 1.0)  # backoff without jitter
    assert source.step() == 0.0 and _names(source) == {"kept", "gone"}
    live = source.api
    source.api = AgentApi(f"http://127.0.0.1:{free_port()}", "x", timeout=2)
    try:
        delays = [source.step() for _ in range(3)]
        assert delays == [0.5, 1.0, 2.0] and source.failures == 3
        assert _names(source) == {"kept", "gone"} and source.listed
        # The lease cannot be renewed either; the last success stays where it was.
        clock = Clock()
        keeper = LeaseKeeper(live, node_name, monotonic=clock)
        assert keeper.renew()
        keeper.api = source.api
        clock.now += 31
        assert not keeper.renew() and keeper.failures == 1
        assert keeper.last_success == 1000.0 and keeper.self_kill_due()
        # Meanwhile the control plane moved a pod away.
        api.delete(POD, ns, "gone", grace_seconds=0)
    finally:
        source.api.close()
        source.api = live
    assert source.step() == 0.0 and source.failures == 0
    assert set(source.snapshot()) == {kept["metadata"]["uid"]}
    assert gone["metadata"]["uid"] not in source.snapshot()
