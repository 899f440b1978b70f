"""The local network of ``make up`` as a plan: names, addresses, the ``ip`` commands in order,
setup that survives a leftover and cleans up after a failure (on a recording runner), and
the argv each local node's agent and proxy get in either mode."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from app.devstack import network, up
from app.devstack.network import NetworkPlan


class Recorder:
    """A stand-in for ``ip``: records commands, fails the ones named in ``fail``."""

    def __init__(self, fail: Sequence[str] = ()) -> None:
        self.calls: list[list[str]] = []
        self.fail = set(fail)

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        code = 1 if " ".join(argv) in self.fail else 0
        return subprocess.CompletedProcess(list(argv), code, "", "boom" if code else "")


def test_the_plan_names_three_nodes_on_one_bridge() -> None:
    plan = NetworkPlan()
    assert plan.bridge == "qm0"
    assert [(n.node_name, n.namespace, n.veth, n.address) for n in plan.nodes] == [
        ("local-a", "qm-local-a", "qmv-a", "10.88.0.11"),
        ("local-b", "qm-local-b", "qmv-b", "10.88.0.12"),
        ("local-c", "qm-local-c", "qmv-c", "10.88.0.13"),
    ]
    assert plan.node("local-b") == plan.node("b") == plan.nodes[1]
    assert plan.owns("10.88.0.13") and not plan.owns("127.0.0.1")
    with pytest.raises(KeyError):
        plan.node("local-d")


def test_a_tag_suffixes_every_name_within_the_kernels_limit() -> None:
    plan = NetworkPlan(tag="t1234567")
    assert plan.bridge == "qm0t1234567"
    assert plan.nodes[0].namespace == "qm-local-a-t1234567"
    names = [plan.bridge, *(n.veth for n in plan.nodes), "eth0"]
    assert all(len(name) <= 15 for name in names)
    for bad in ("toolongtag", "Upper", "a-b"):
        with pytest.raises(ValueError):
            NetworkPlan(tag=bad)
    assert network.plan_from_env({"QM_NETWORK_TAG": "x9"}).tag == "x9"
    assert network.plan_from_env({}).tag == ""


def test_setup_builds_bridge_first_and_each_node_in_order() -> None:
    cmds = [" ".join(c) for c in network.setup_commands(NetworkPlan())]
    assert cmds[:2] == ["ip link add qm0 type bridge", "ip link set qm0 up"]
    assert cmds[2:9] == [
        "ip netns add qm-local-a",
        "ip -n qm-local-a link set lo up",
        "ip link add qmv-a type veth peer name eth0 netns qm-local-a",
        "ip link set qmv-a master qm0",
        "ip link set qmv-a up",
        "ip -n qm-local-a addr add 10.88.0.11/24 dev eth0",
        "ip -n qm-local-a link set eth0 up",
    ]
    assert len(cmds) == 2 + 3 * 7
    assert not any("qm0" in c and "addr" in c for c in cmds), "the bridge has no address"


def test_setup_removes_a_leftover_first() -> None:
    run = Recorder()
    network.setup(NetworkPlan(), run)
    teardown = [" ".join(c) for c in network.teardown_commands(NetworkPlan())]
    assert [" ".join(c) for c in run.calls[: len(teardown)]] == teardown
    assert run.calls[len(teardown) :] == network.setup_commands(NetworkPlan())


def test_a_failed_step_is_named_and_what_was_built_is_removed() -> None:
    run = Recorder(fail=["ip link set qmv-b master qm0"])
    with pytest.raises(RuntimeError, match="qmv-b master qm0: boom"):
        network.setup(NetworkPlan(), run)
    tail = [" ".join(c) for c in run.calls[-7:]]
    assert tail == [" ".join(c) for c in network.teardown_commands(NetworkPlan())]


def test_teardown_deletes_namespaces_then_veths_then_the_bridge() -> None:
    cmds = [" ".join(c) for c in network.teardown_commands(NetworkPlan(tag="z"))]
    assert cmds == [
        "ip netns delete qm-local-a-z",
        "ip netns delete qm-local-b-z",
        "ip netns delete qm-local-c-z",
        "ip link delete qmv-az",
        "ip link delete qmv-bz",
        "ip link delete qmv-cz",
        "ip link delete qm0z",
    ]


def test_the_network_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QM_LOCAL_NETWORK", "off")
    assert network.available(Recorder()) == "QM_LOCAL_NETWORK=off"


VALUES = {"python": "py", "api_port": "8080", "api_url": "u", "state": "/s"}


def _argv(name: str, plan: NetworkPlan | None) -> list[str] | None:
    component = next(c for c in up.COMPONENTS if c.name == name)
    return up.component_argv(component, VALUES, plan)


def test_with_the_network_each_agent_gets_its_namespace_and_pod_ip() -> None:
    argv = _argv("agent-b", NetworkPlan())
    assert argv is not None
    assert argv[-6:] == [
        "--netns", "qm-local-b", "--pod-ip", "10.88.0.12", "--cluster-dns", "127.0.0.53"
    ]  # fmt: skip
    assert argv[argv.index("--node-ip") :][:2] == ["--node-ip", "127.0.0.2"]
    i = argv.index("--discovery-http")
    assert argv[i + 1] == "http://127.0.0.1:9480,http://127.0.0.1:9481"


def test_with_the_network_every_node_has_a_proxy_in_its_namespace() -> None:
    for zone in "abc":
        argv = _argv(f"proxy-{zone}", NetworkPlan())
        assert argv is not None
        assert argv[:3] == ["py", "-m", "agent.proxy"]
        assert argv[-2:] == ["--netns", f"qm-local-{zone}"]
        assert f"/s/proxy-{zone}" in argv and f"zone-{zone}" in argv
        assert "127.0.0.1:9470,127.0.0.1:9471" in argv


def test_in_host_mode_agents_keep_the_hosts_network_and_only_one_proxy_runs() -> None:
    agent = _argv("agent-c", None)
    assert agent is not None and "--netns" not in agent and "--pod-ip" not in agent
    proxy = _argv("proxy-a", None)
    assert proxy is not None and "--netns" not in proxy
    assert _argv("proxy-b", None) is None and _argv("proxy-c", None) is None


def test_two_discovery_replicas_on_their_own_ports() -> None:
    for name, port, http in (("discovery-0", "9470", "9480"), ("discovery-1", "9471", "9481")):
        argv = _argv(name, None)
        assert argv is not None and argv == _argv(name, NetworkPlan())
        assert argv == ["py", "-m", "app.discovery", "--host", "127.0.0.1", "--port", port,
                        "--http-port", http]  # fmt: skip
