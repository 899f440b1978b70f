"""A ``runc`` pod finds its Services by name and by variable, for real: a whole agent with the
runc runtime runs busybox pods in a node's network namespace, the node proxy's DNS responder
listens on 127.0.0.53:53 inside that namespace, and the pods look the names up with busybox's
``nslookup`` through the ``/etc/resolv.conf`` the agent wrote for them.

The unit tests check the pieces one by one (the text of resolv.conf in ``test_agent_resolv.py``,
the bind in the OCI config, the variables in ``agent.service_env``); this checks that they meet:
the Services are real ones from the test API server (their cluster IPs allocated by the
database), the proxy gets the same Services from a fake discovery replica speaking
``app.core.traffic.protocol``, and the agent's resolved environment,
its resolv.conf file and runc's bind mount are what the container sees. A pod with
``dnsPolicy: Default`` keeps the image's own file.

Busybox's ``nslookup`` asks the nameserver of ``/etc/resolv.conf`` and applies the ``search``
domains only to a name without a dot, so the bare ``web`` is what proves the search path (it
must come back as ``web.<ns>.svc.cluster.local``, the pod's own namespace's, not another
namespace's ``web``); ``web.<ns>.svc`` is asked as written, and the responder answers it. The
static busybox's ``wget`` (glibc's ``getaddrinfo``, linked statically) cannot stand in for a
glibc lookup: Debian 12's crashes with SIGSEGV on any URL, even an IP literal.

Needs root, runc, busybox-static (with ``nslookup``), writable cgroups and ``ip netns``
(capability-gated). The namespace is the dev stack's plan for one node, with a tag of this
run's pid; it is removed afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import capability
import local_network
import pytest
from agents import make_agent, running
from test_agent_runc import BUSYBOX, IMAGE, assert_nothing_left, cgroups, make_busybox_image

from agent import netns
from agent.api import NAMESPACE, POD, AgentApi
from agent.proxy.config import ProxyConfig
from agent.proxy.run import Proxy
from agent.resolv import ClusterDns
from agent.runtime.cgroups import Cgroups
from agent.runtime.runc import RuncRuntime
from app.core.kinds import BY_KIND
from app.core.traffic import protocol
from app.devstack.apiserver import ApiServer
from app.devstack.network import NodeNetwork

__all__ = ["cgroups"]  # the fixture, shared with test_agent_runc.py

Obj = dict[str, Any]
DNS = ("127.0.0.53", 53)
IMAGE_RESOLV = "nameserver 192.0.2.53\nsearch image.example\n"  # the image's own file
SERVICE = BY_KIND["Service"]
VERSION = 7  # the one version the fake discovery replica serves


@pytest.fixture(scope="module")
def node_net() -> Iterator[NodeNetwork]:
    with local_network.built("s", zones=("a",)) as plan:
        yield plan.node("a")


@pytest.fixture
async def runtime(
    tmp_path: Path, cgroups: Cgroups, node_net: NodeNetwork
) -> AsyncIterator[RuncRuntime]:
    """The runc runtime putting its containers in the node's namespace; the busybox image has
    a resolv.conf of its own."""
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True).stdout
    if "nslookup" not in applets.split():
        capability.missing(f"{BUSYBOX} has no nslookup applet (busybox-static has)")
    rootfs = make_busybox_image(tmp_path / "images")
    (rootfs / "etc" / "resolv.conf").write_text(IMAGE_RESOLV)
    rt = RuncRuntime(
        tmp_path / "state", cgroups, images_dir=tmp_path / "images", netns_name=node_net.namespace
    )
    yield rt
    pods = {uid for uid, _ in rt.containers()}
    for pod in pods:
        await rt.cleanup(pod)
    assert_nothing_left(rt, pods)
    rt.close()


def create_service(api: AgentApi, ns: str, name: str, port: int) -> Obj:
    """A Service of ``ns``, as stored (with the cluster IP the API allocated)."""
    body = {
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"name": "tcp", "port": port}]},
    }
    api.create(SERVICE, ns, body)
    stored = api.get(SERVICE, ns, name)
    ip = str(stored["spec"]["clusterIP"])
    assert ip.startswith("127.100."), ip  # the default range, which the proxy can listen on
    return stored


def ip_of(service: Obj) -> str:
    return str(service["spec"]["clusterIP"])


async def until(check: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


class Discovery:
    """A fake discovery replica: one snapshot of ``resources`` to each subscriber, whose ACKs
    it notes (the proxy acknowledges a version once its table holds it)."""

    def __init__(self, resources: protocol.Resources) -> None:
        self.resources = resources
        self.acks: list[int] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        with contextlib.suppress(ConnectionError):
            protocol.parse_subscribe(protocol.decode(await reader.readline()))
            writer.write(protocol.snapshot(VERSION, 1, self.resources))
            while line := await reader.readline():
                if (message := protocol.decode(line))["t"] == "ack":
                    self.acks.append(int(message["v"]))
        writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()
        await self.server.wait_closed()


@contextlib.asynccontextmanager
async def node_proxy(node: str, namespace: str, port: int, state: Path) -> AsyncIterator[Proxy]:
    """The node proxy (in this loop) subscribed from the host namespace, its DNS responder
    listening on 127.0.0.53:53 inside ``namespace``."""
    config = ProxyConfig(
        node_name=node,
        zone="a",
        discovery=(("127.0.0.1", port),),
        netns=namespace,
        dns=DNS,
        state_dir=state,
    )
    proxy, stop = Proxy(config), asyncio.Event()
    task = asyncio.ensure_future(proxy.run(stop))
    try:
        await until(lambda: task.done() or (proxy.dns is not None and proxy.dns.tcp is not None),
                    "the DNS responder")  # fmt: skip
        if task.done():
            task.result()  # its failure
        yield proxy
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def pod_phase(api: AgentApi, ns: str, name: str) -> str:
    return str((api.get(POD, ns, name).get("status") or {}).get("phase") or "")


async def finished(api: AgentApi, ns: str, names: list[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (phases := [await asyncio.to_thread(pod_phase, api, ns, n) for n in names]) != [
        "Succeeded"
    ] * len(names):
        assert time.monotonic() < deadline, dict(zip(names, phases, strict=True))
        await asyncio.sleep(0.1)


def sections(log: str) -> dict[str, str]:
    """The container's output by its ``== title`` lines."""
    out: dict[str, str] = {}
    for part in re.split(r"^== ", log, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        out[title.strip()] = body
    return out


def answers(nslookup: str) -> list[tuple[str, str]]:
    """(name, address) of every answer busybox's nslookup printed."""
    return re.findall(r"^Name:\s*(\S+)\nAddress:\s*(\S+)", nslookup, flags=re.M)


def server_of(nslookup: str) -> str:
    found = re.search(r"^Server:\s*(\S+)", nslookup, flags=re.M)
    return found.group(1) if found else ""


async def test_a_runc_pod_finds_services_by_name_through_the_node_proxy_and_by_variable(
    runtime: RuncRuntime, node_net: NodeNetwork, api_server: ApiServer, tmp_path: Path
) -> None:
    api = AgentApi(api_server.url, api_server.token)
    ns, other = f"names-{secrets.token_hex(3)}", f"other-{secrets.token_hex(3)}"
    node = f"runc-dns-{secrets.token_hex(3)}"
    for name in (ns, other):
        api.create(NAMESPACE, None, {"metadata": {"name": name}})
    services = [
        create_service(api, ns, "web", 80),
        create_service(api, ns, "cache-db", 6379),
        create_service(api, other, "web", 8080),  # the same name in another namespace
    ]
    web, cache, elsewhere = (ip_of(s) for s in services)
    assert len({web, cache, elsewhere}) == 3
    agent = make_agent(
        api,
        runtime,
        node,
        pod_ip=node_net.address,
        sockets=netns.NamespaceSockets(node_net.namespace),
    )
    agent.cluster_dns = ClusterDns(DNS[0])  # as agent.loop.build does for --cluster-dns
    lookups = [f"web.{ns}.svc.cluster.local", f"web.{ns}.svc", "web", f"cache-db.{ns}.svc"]
    script = "; ".join(
        [
            "echo '== resolv.conf'; cat /etc/resolv.conf",
            "echo '== env'; env | grep -E '^(WEB|CACHE_DB)_' | sort",
            *(f"echo '== {name}'; nslookup {name}" for name in lookups),
            "echo '== end'",
        ]
    )

    def pod(name: str, **spec: Any) -> None:
        container = {"name": "c", "image": IMAGE, "command": ["sh", "-c", script]}
        body = {"nodeName": node, "restartPolicy": "Never", "containers": [container], **spec}
        api.create(POD, ns, {"metadata": {"name": name}, "spec": body})

    # what the discovery service would send: the stored Services, as resources
    discovery = Discovery(
        {
            protocol.service_key(s["metadata"]["namespace"], s["metadata"]["name"]):
            protocol.service_resource(s)
            for s in services
        }
    )  # fmt: skip
    port = await discovery.start()
    try:
        proxies = node_proxy(node, node_net.namespace, port, tmp_path / "proxy")
        async with proxies as proxy, running(agent):
            await until(lambda: VERSION in discovery.acks, "the proxy's ACK of the services")
            answered = proxy.metrics.dns_queries.labels("NOERROR")
            pod("finder")  # dnsPolicy ClusterFirst, the default
            pod("plain", dnsPolicy="Default")
            await finished(api, ns, ["finder", "plain"])
            logs = {
                name: sections(
                    runtime.log_path(api.get(POD, ns, name)["metadata"]["uid"], "c").read_text()
                )
                for name in ("finder", "plain")
            }
            assert answered.value >= len(lookups)  # these lookups went to this proxy
    finally:
        api.close()
        await discovery.stop()

    finder, plain = logs["finder"], logs["plain"]
    assert "end" in finder and "end" in plain, finder

    # the agent's resolv.conf, bound over the image's
    assert finder["resolv.conf"] == (
        "nameserver 127.0.0.53\n"
        f"search {ns}.svc.cluster.local svc.cluster.local cluster.local\n"
        "options ndots:5\n"
    )
    # the names, answered by the node proxy inside the namespace with the API's cluster IPs
    for name in lookups:
        assert server_of(finder[name]) == DNS[0], finder[name]
    assert answers(finder[f"web.{ns}.svc.cluster.local"]) == [(f"web.{ns}.svc.cluster.local", web)]
    assert answers(finder[f"web.{ns}.svc"]) == [(f"web.{ns}.svc", web)]
    assert answers(finder[f"cache-db.{ns}.svc"]) == [(f"cache-db.{ns}.svc", cache)]
    # the bare name through the search path: the pod's own namespace's web, and only that
    assert answers(finder["web"]) == [(f"web.{ns}.svc.cluster.local", web)], finder["web"]

    # the Service variables of the pod's namespace (the other namespace's web is not there)
    env = dict(line.split("=", 1) for line in finder["env"].splitlines())
    assert env["WEB_SERVICE_HOST"] == web and env["WEB_SERVICE_PORT"] == "80"
    assert env["WEB_SERVICE_PORT_TCP"] == "80" and env["WEB_PORT"] == f"tcp://{web}:80"
    assert env["WEB_PORT_80_TCP_ADDR"] == web
    assert env["CACHE_DB_SERVICE_HOST"] == cache and env["CACHE_DB_SERVICE_PORT"] == "6379"
    assert elsewhere not in finder["env"]

    # dnsPolicy Default: the image's own file, untouched; the variables all the same
    assert plain["resolv.conf"] == IMAGE_RESOLV
    for name in lookups:  # asked of the image's nameserver, unreachable from the namespace
        assert server_of(plain[name]) == "" and "(192.0.2.53)" in plain[name], plain[name]
    assert plain["env"] == finder["env"]
