"""Pods in a node's network namespace, for real: the process runtime starts them there, on the
pod IP, and the agent's probes reach them from inside; two nodes' namespaces reach each other
over the bridge and each holds its own copy of one virtual IP.

Needs root and ``ip netns`` (capability-gated). The network is the dev stack's plan with a
tag of this test run's pid, so it never collides with a running ``make up``; the fixture
checks that nothing of it is left afterwards.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import capability
import local_network
import pytest

from agent import netns
from agent.probe_exec import ProbeContext, run_probe
from agent.probes import ExecAction, HttpGetAction, Outcome, TcpAction
from agent.runtime.base import ContainerSpec, Running
from agent.runtime.cgroups import Cgroups, CgroupsUnavailable, detect
from agent.runtime.process import ProcessRuntime, container_cgroup
from app.devstack.network import NetworkPlan

PORT = 8000


@pytest.fixture(scope="module")
def plan() -> Iterator[NetworkPlan]:
    with local_network.built("p") as built:
        yield built


def _inode(name: str) -> int:
    return netns.path_of(name).stat().st_ino


@pytest.fixture
def maybe_cgroups() -> Iterator[Cgroups | None]:
    try:
        cgroups = detect(f"qm-test-{secrets.token_hex(4)}", relative_to_self=True)
    except CgroupsUnavailable:
        yield None
        return
    yield cgroups
    cgroups.remove("")


@pytest.fixture
async def pod_on_b(
    plan: NetworkPlan, tmp_path: Path, maybe_cgroups: Cgroups | None
) -> AsyncIterator[tuple[ProcessRuntime, ContainerSpec, Running]]:
    """An HTTP server started by the process runtime in local-b's namespace, on its pod IP."""
    b = plan.node("b")
    runtime = ProcessRuntime(tmp_path / "pods", maybe_cgroups, netns_name=b.namespace)
    spec = ContainerSpec(
        pod_uid="netns-pod",
        name="web",
        command=[sys.executable, "-m", "http.server", str(PORT), "--bind", b.address],
    )
    running = await runtime.start(spec)
    try:
        await _until_listening(netns.NamespaceSockets(b.namespace), b.address)
        yield runtime, spec, running
    finally:
        await runtime.cleanup(spec.pod_uid)


async def _until_listening(sockets: netns.NamespaceSockets, host: str) -> None:
    deadline = time.monotonic() + 20
    ctx = ProbeContext(host=host, sockets=sockets)
    while (result := await run_probe(TcpAction(PORT), 1, ctx)).outcome is not Outcome.SUCCESS:
        assert time.monotonic() < deadline, result.message
        await asyncio.sleep(0.05)
    sockets.close()


async def test_the_pod_runs_inside_the_namespace_as_the_pid_the_runtime_holds(
    plan: NetworkPlan, pod_on_b: tuple[ProcessRuntime, ContainerSpec, Running]
) -> None:
    runtime, spec, running = pod_on_b
    pid = running.pid
    assert os.stat(f"/proc/{pid}/ns/net").st_ino == _inode(plan.node("b").namespace)
    assert os.stat(f"/proc/{pid}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino
    assert b"http.server" in Path(f"/proc/{pid}/cmdline").read_bytes(), "the wrapper exec'd"
    if runtime.cgroups is not None:  # entered its cgroup before the namespace
        assert pid in runtime.cgroups.pids(container_cgroup(spec.pod_uid, spec.name))


async def test_probes_pass_from_inside_the_namespace(
    plan: NetworkPlan, pod_on_b: tuple[ProcessRuntime, ContainerSpec, Running]
) -> None:
    runtime, _, _ = pod_on_b
    b = plan.node("b")
    async with netns.NamespaceSockets(b.namespace) as sockets:
        ctx = ProbeContext(host=b.address, sockets=sockets, exec_prefix=runtime.exec_prefix())
        http = await run_probe(HttpGetAction(PORT, "/"), 5, ctx)
        assert (http.outcome, http.message) == (Outcome.SUCCESS, "HTTP probe returned 200")
        assert (await run_probe(TcpAction(PORT), 5, ctx)).outcome is Outcome.SUCCESS
        closed = await run_probe(TcpAction(PORT + 1), 5, ctx)
        assert closed.outcome is Outcome.FAILURE, "a closed port in the namespace is refused"
        here = await run_probe(ExecAction(("readlink", "/proc/self/ns/net")), 5, ctx)
        assert here.message == f"net:[{_inode(b.namespace)}]", "exec probes run inside too"


async def test_another_nodes_namespace_reaches_the_pod_over_the_bridge(
    plan: NetworkPlan, pod_on_b: tuple[ProcessRuntime, ContainerSpec, Running]
) -> None:
    a, b = plan.node("a"), plan.node("b")
    async with netns.NamespaceSockets(a.namespace) as sockets:
        ctx = ProbeContext(host=b.address, sockets=sockets)
        result = await run_probe(HttpGetAction(PORT, "/"), 5, ctx)
        assert result.outcome is Outcome.SUCCESS, result.message
        reader, writer = await sockets.open_connection(b.address, PORT)
        writer.write(b"GET / HTTP/1.0\r\n\r\n")
        await writer.drain()
        assert (await asyncio.wait_for(reader.readline(), 10)).startswith(b"HTTP/1.0 200")
        writer.close()


async def test_each_namespace_holds_its_own_listener_on_one_virtual_ip(plan: NetworkPlan) -> None:
    """The point of the namespaces: every node proxy listens on the same VIP:port."""
    vip = "127.100.3.7"
    servers: list[tuple[str, netns.NamespaceSockets, asyncio.Server]] = []

    def answering(
        zone: str,
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(zone.encode())
            await writer.drain()
            writer.close()

        return answer

    try:
        for node in plan.nodes:
            sockets = netns.NamespaceSockets(node.namespace)
            listener = await sockets.listen(vip, 80)
            server = await asyncio.start_server(answering(node.zone), sock=listener)
            servers.append((node.zone, sockets, server))
        for zone, sockets, _ in servers:
            reader, writer = await sockets.open_connection(vip, 80)
            assert await asyncio.wait_for(reader.read(), 10) == zone.encode()
            writer.close()
    finally:
        for _, sockets, server in servers:
            server.close()
            await server.wait_closed()
            sockets.close()


async def test_a_udp_socket_binds_inside(plan: NetworkPlan) -> None:
    async with netns.NamespaceSockets(plan.node("c").namespace) as sockets:
        sock = await sockets.listen("127.0.0.53", 53, kind=socket.SOCK_DGRAM)
        try:
            assert sock.getsockname() == ("127.0.0.53", 53)
        finally:
            sock.close()


def test_the_exec_wrapper_and_preexec_start_children_inside(plan: NetworkPlan) -> None:
    name = plan.node("c").namespace
    want = f"net:[{_inode(name)}]"
    argv = [
        sys.executable,
        "-m",
        "agent.netns",
        "exec",
        name,
        "--",
        "readlink",
        "/proc/self/ns/net",
    ]
    assert subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip() == want
    prefixed = [*netns.exec_prefix(name), "readlink", "/proc/self/ns/net"]
    assert (
        subprocess.run(prefixed, capture_output=True, text=True, check=True).stdout.strip() == want
    )
    done = subprocess.run(
        ["readlink", "/proc/self/ns/net"],
        preexec_fn=netns.preexec(name),  # the helper under test
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == want


def test_entered_returns_the_thread_to_where_it_was(plan: NetworkPlan) -> None:
    home = os.readlink("/proc/thread-self/ns/net")
    with netns.entered(plan.node("a").namespace):
        assert (
            os.readlink("/proc/thread-self/ns/net") == f"net:[{_inode(plan.node('a').namespace)}]"
        )
    assert os.readlink("/proc/thread-self/ns/net") == home


async def test_a_runc_container_joins_the_namespace_and_probes_reach_it(
    plan: NetworkPlan, tmp_path: Path
) -> None:
    from test_agent_runc import host_skip_reason, make_busybox_image

    from agent.runtime.runc import RuncRuntime

    if reason := host_skip_reason():
        capability.missing(reason)
    try:
        cgroups = detect(f"qm-test-runc-{secrets.token_hex(4)}")
    except CgroupsUnavailable as exc:
        capability.missing(f"this host gives no writable memory/cpu cgroups: {exc}")
    c = plan.node("c")
    make_busybox_image(tmp_path / "images")
    rt = RuncRuntime(
        tmp_path / "state", cgroups, images_dir=tmp_path / "images", netns_name=c.namespace
    )
    spec = ContainerSpec(
        "runc-pod", "web", ["httpd", "-f", "-p", f"{c.address}:{PORT}", "-h", "/tmp"],
        image="busybox:1",
    )  # fmt: skip
    try:
        running = await rt.start(spec)
        assert os.stat(f"/proc/{running.pid}/ns/net").st_ino == _inode(c.namespace)
        sockets = netns.NamespaceSockets(c.namespace)
        await _until_listening(sockets, c.address)
        async with netns.NamespaceSockets(c.namespace) as sockets:
            prefix = rt.exec_prefix(spec.pod_uid, spec.name)
            ctx = ProbeContext(host=c.address, sockets=sockets, exec_prefix=prefix)
            assert (await run_probe(TcpAction(PORT), 5, ctx)).outcome is Outcome.SUCCESS
            here = await run_probe(ExecAction(("readlink", "/proc/self/ns/net")), 5, ctx)
            assert here.message == f"net:[{_inode(c.namespace)}]", here.message
    finally:
        await rt.cleanup(spec.pod_uid)
        rt.close()
        cgroups.remove("")
