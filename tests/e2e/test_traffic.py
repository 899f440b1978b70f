"""Traffic to services on the whole stack ``make up`` runs: real pods (process runtime) in each
local node's network namespace, real TCP through the node proxies, discovery, the EndpointSlice
controller, and the agents' wait for the proxies before SIGTERM.

The client runs inside local-a's namespace (zone-a), as a pod there would, and connects to the
service's virtual IP. Needs root and ``ip netns`` (skipped elsewhere, a failure in CI).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import capability
import httpx
import pytest
import yaml
from up_stack import UpStack

from app.devstack import network

ROOT = Path(__file__).resolve().parents[2]
NS = "traffic"
CLIENT = str(ROOT / "tests" / "e2e" / "traffic_client.py")
APP = str(ROOT / "tests" / "e2e" / "traffic_app.py")


class Stack(UpStack):
    def __init__(self, tmp: Path) -> None:
        self.plan = network.NetworkPlan(tag=f"w{os.getpid() % 10**7}")
        super().__init__(tmp, tag=self.plan.tag)

    @functools.cached_property
    def token(self) -> str:
        return str(yaml.safe_load(self.config.read_text())["token"])

    # -- the API --------------------------------------------------------------------------
    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"https://127.0.0.1:{self.port}/apis/quaymaster.io/v1",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
            verify=self.ca(),
        )

    def ca(self) -> ssl.SSLContext:
        """Trust in make up's CA: it serves the API over HTTPS only."""
        return ssl.create_default_context(cafile=str(self.state / "pki" / "ca.crt"))

    def apply(self, *objs: dict[str, Any]) -> None:
        for obj in objs:
            self.qm("apply", "-f", "-", stdin=json.dumps(obj))

    def items(self, plural: str, selector: str) -> list[dict[str, Any]]:
        with self.api() as api:
            got = api.get(f"/namespaces/{NS}/{plural}", params={"labelSelector": selector})
        got.raise_for_status()
        return list(got.json()["items"])

    def pods(self, app: str) -> list[dict[str, Any]]:
        return self.items("pods", f"app={app}")

    def endpoints(self, service: str) -> list[dict[str, Any]]:
        slices = self.items("endpointslices", f"kubernetes.io/service-name={service}")
        return [ep for s in slices for ep in s.get("endpoints") or []]

    def vip(self, service: str) -> str:
        with self.api() as api:
            got = api.get(f"/namespaces/{NS}/services/{service}")
        got.raise_for_status()
        return str(got.json()["spec"]["clusterIP"])

    # -- inside a node's namespace --------------------------------------------------------
    def inside(self, zone: str, *argv: str, timeout: float = 120) -> str:
        ns = self.plan.node(zone).namespace
        done = subprocess.run(
            ["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def start_load(
        self, zone: str, host: str, rate: float, seconds: float
    ) -> subprocess.Popen[str]:
        """The load client inside the zone's namespace, sending for ``seconds``."""
        ns = self.plan.node(zone).namespace
        argv = ["ip", "netns", "exec", ns, sys.executable, CLIENT, host, "80",
                "--rate", str(rate), "--seconds", str(seconds)]  # fmt: skip
        return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)

    def load(self, zone: str, host: str, rate: float, seconds: float) -> dict[str, Any]:
        return finish(self.start_load(zone, host, rate, seconds), seconds + 60)

    def poke(self, pod: dict[str, Any], path: str) -> None:
        """GET ``path`` on the pod itself, from its node's namespace."""
        zone = pod["spec"]["nodeName"].removeprefix("local-")
        port = PORTS[pod["metadata"]["labels"]["app"]]
        url = f"http://{pod['status']['podIP']}:{port}{path}"
        fetch = f"import urllib.request as u; u.urlopen({url!r}, timeout=5).read()"
        self.inside(zone, sys.executable, "-c", fetch)


def finish(client: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    """What the load client counted (its last line)."""
    out, _ = client.communicate(timeout=timeout)
    assert client.returncode == 0, out[-3000:]
    return dict(json.loads(out.strip().splitlines()[-1]))


def wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.25)


def ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


PORTS = {"echo": 8000, "pair": 8001}


def deployment(name: str, replicas: int, nodes: list[str], version: str = "1") -> dict[str, Any]:
    """A service's pods: the test backend on its port (``PORTS``) of the pod's address, one per node
    (a hostPort: pods of a node share its network), on the chosen nodes, ready while their
    /ready says so. No preStop hook."""
    container = {
        "name": "app",
        "image": "local/python",
        "command": [sys.executable, APP],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "VERSION", "value": version},
            {"name": "PORT", "value": str(PORTS[name])},
        ],
        "ports": [{"containerPort": PORTS[name], "hostPort": PORTS[name], "name": "http"}],
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}},
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": "http"},
            "periodSeconds": 1,
            "failureThreshold": 2,
        },
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
                        ]
                    }
                ]
            }
        }
    }
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [container],
                    "affinity": affinity,
                    "terminationGracePeriodSeconds": 30,
                },
            },
        },
    }


def service(name: str, kind: str = "ClusterIP") -> dict[str, Any]:
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "type": kind,
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    why = network.available()
    if why is not None:
        capability.missing(f"the traffic tests need the local network: {why}")
    s = Stack(tmp_path_factory.mktemp("traffic"))
    s.start()
    try:
        s.apply({"apiVersion": "quaymaster.io/v1", "kind": "Namespace", "metadata": {"name": NS}})
        s.apply(deployment("echo", 3, ["local-a", "local-b", "local-c"]), service("echo"))
        s.apply(deployment("pair", 2, ["local-b", "local-c"]), service("pair", "LoadBalancer"))
        wait(lambda: sum(map(ready, s.pods("echo"))) == 3, 180, "three ready echo pods")
        wait(lambda: sum(map(ready, s.pods("pair"))) == 2, 120, "two ready pair pods")
        wait(
            lambda: sum(bool(e["conditions"]["ready"]) for e in s.endpoints("echo")) == 3,
            60,
            "three ready echo endpoints",
        )
        yield s
    except BaseException:
        print(s.log())
        for app in ("echo", "pair"):
            for pod in s.pods(app):
                print(
                    pod["metadata"]["name"],
                    pod["spec"].get("nodeName"),
                    json.dumps(pod.get("status"))[:1500],
                )
        raise
    finally:
        s.stop()


def _by_node(s: Stack, app: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in s.pods(app) if ready(p)}


def test_names_resolve_to_the_virtual_ip(stack: Stack) -> None:
    vip = stack.vip("echo")
    assert vip.startswith("127.100.")
    query = (
        "from dnslib import DNSRecord; q = DNSRecord.question('echo.traffic.svc.cluster.local');"
        " print(DNSRecord.parse(q.send('127.0.0.53', 53, timeout=5)).short())"
    )
    assert stack.inside("b", sys.executable, "-c", query).strip() == vip


def test_every_proxy_acknowledges_what_discovery_sends_and_the_api_shows_it(stack: Stack) -> None:
    url = f"https://127.0.0.1:{stack.port}/apis/discovery.quaymaster.io/v1/subscribers"
    want = {"local-a", "local-b", "local-c", "edge-127.0.0.200"}

    def current() -> bool:
        auth = {"Authorization": f"Bearer {stack.token}"}
        got = httpx.get(url, headers=auth, timeout=10, verify=stack.ca())
        got.raise_for_status()
        body = got.json()
        versions = {r["url"]: r.get("version") for r in body["replicas"]}
        assert len(versions) == 2 and None not in versions.values(), body["replicas"]
        items = {i["metadata"]["name"]: i for i in body["items"]}
        return set(items) == want and all(
            i["ackedVersion"] == versions[i["replica"]] and i["lagVersions"] == 0
            for i in items.values()
        )

    wait(current, 30, "every subscriber current")


def test_connections_spread_over_ready_pods_and_prefer_the_callers_zone(stack: Stack) -> None:
    echo, pair = _by_node(stack, "echo"), _by_node(stack, "pair")
    # From zone-a: echo has a pod there, and only it is used.
    got = stack.load("a", stack.vip("echo"), rate=50, seconds=2)
    assert got["failed"] == 0, got
    assert {echo[p] for p in got["by_answer"]} == {"local-a"}, got
    # pair has none in zone-a: its two pods (zones b and c) share the connections.
    got = stack.load("a", stack.vip("pair"), rate=50, seconds=2)
    assert got["failed"] == 0, got
    assert set(got["by_answer"]) == set(pair) and min(got["by_answer"].values()) >= 30, got
    # From zone-b, pair's zone-b pod takes them all.
    got = stack.load("b", stack.vip("pair"), rate=50, seconds=1)
    assert {pair[p] for p in got["by_answer"]} == {"local-b"}, got


def test_the_edge_proxy_serves_load_balancer_services(stack: Stack) -> None:
    pair = _by_node(stack, "pair")
    got = json.loads(
        subprocess.run(
            [sys.executable, CLIENT, "127.0.0.200", "80", "--rate", "40", "--seconds", "1"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )
    assert got["failed"] == 0 and set(got["by_answer"]) == set(pair), got


def test_an_unready_pod_gets_no_new_connections_and_is_not_restarted(stack: Stack) -> None:
    pod = next(p for p in stack.pods("echo") if p["spec"]["nodeName"] == "local-a")
    name = pod["metadata"]["name"]
    stack.poke(pod, "/unready")
    t0 = time.monotonic()
    try:
        while True:
            got = stack.load("a", stack.vip("echo"), rate=20, seconds=0.5)
            assert got["failed"] == 0, got
            if name not in got["by_answer"]:
                break
            assert time.monotonic() - t0 < 10, f"{name} still takes connections: {got}"
        endpoint = next(e for e in stack.endpoints("echo") if e["targetRef"]["name"] == name)
        assert endpoint["conditions"]["ready"] is False  # marked, not removed
        again = next(p for p in stack.pods("echo") if p["metadata"]["name"] == name)
        assert again["status"]["containerStatuses"][0]["restartCount"] == 0
    finally:
        stack.poke(pod, "/readyagain")
    wait(
        lambda: any(
            e["conditions"]["ready"]
            for e in stack.endpoints("echo")
            if e["targetRef"]["name"] == name
        ),
        20,
        "ready again",
    )


def test_every_endpoint_unready_still_flows(stack: Stack) -> None:
    pods = [p for p in stack.pods("echo") if ready(p)]
    for pod in pods:
        stack.poke(pod, "/unready")
    try:
        wait(
            lambda: not any(e["conditions"]["ready"] for e in stack.endpoints("echo")),
            20,
            "every echo endpoint unready",
        )
        time.sleep(2)  # the slices' change reaches the proxies
        got = stack.load("a", stack.vip("echo"), rate=50, seconds=2)
        assert got["failed"] == 0 and got["ok"] == got["requests"], got
    finally:
        for pod in pods:
            stack.poke(pod, "/readyagain")
    wait(
        lambda: sum(bool(e["conditions"]["ready"]) for e in stack.endpoints("echo")) == 3,
        30,
        "ready again",
    )


def test_a_rolling_update_drops_no_request(stack: Stack) -> None:
    before = set(_by_node(stack, "echo"))
    load = stack.start_load("a", stack.vip("echo"), rate=100, seconds=90)
    try:
        time.sleep(2)
        stack.apply(deployment("echo", 3, ["local-a", "local-b", "local-c"], version="2"))
        wait(
            lambda: (
                len(set(_by_node(stack, "echo")) - before) == 3 and len(stack.pods("echo")) == 3
            ),
            80,
            "the rollout to finish",
        )
    finally:
        got = finish(load, 150)
    assert got["requests"] >= 9000 and got["failed"] == 0, got
    assert set(got["by_answer"]) & before and set(got["by_answer"]) - before, got


def _frozen_pids(s: Stack) -> list[int]:
    """The API server and its revisioner, the discovery replicas and every PostgreSQL process."""
    want = ("app.api", "app.stream", "app.discovery")
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        mine = str(s.tmp).encode() in environ or any(str(s.tmp).encode() in c for c in cmd)
        if mine and any(w.encode() in cmd for w in want):
            pids.append(int(entry.name))
    pidfile = s.tmp / "state" / "postgres" / "data" / "postmaster.pid"
    postmaster = int(pidfile.read_text().split()[0])
    pids.append(postmaster)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == postmaster:
                pids.append(int(entry.name))
    return pids


@pytest.mark.slow
def test_traffic_flows_while_the_control_plane_is_frozen_for_a_minute(stack: Stack) -> None:
    pids = _frozen_pids(stack)
    assert len(pids) >= 5, pids
    load = stack.start_load("a", stack.vip("echo"), rate=100, seconds=70)
    time.sleep(2)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(62)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    got = finish(load, 120)
    assert got["requests"] == 7000 and got["failed"] == 0, got
