"""The Service environment variables a pod gets (agent/service_env.py), where they sit under the
container's own envFrom and env (agent/sources.py), and that the pod worker lists its
namespace's Services once per resolution and retries a failed list like any other source."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.api import Unreachable
from agent.backoff import CrashLoopBackoff
from agent.pods import Clocks, PodWorker
from agent.runtime.sim import SimRuntime
from agent.service_env import env_name, links_enabled, one_service, variables
from agent.sources import environment

Obj = dict[str, Any]


def svc(name: str, ip: str | None, *ports: Obj, kind: str = "ClusterIP") -> Obj:
    spec: Obj = {"type": kind, "ports": list(ports)}
    if ip is not None:
        spec["clusterIP"] = ip
    return {"metadata": {"name": name, "namespace": "shop"}, "spec": spec}


HTTP = {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}
METRICS = {"name": "metrics-port", "port": 9090}
DNS_UDP = {"name": "dns", "port": 53, "protocol": "UDP"}


@pytest.mark.parametrize(
    ("name", "expected"),
    [("web", "WEB"), ("my-db", "MY_DB"), ("a-b-c1", "A_B_C1"), ("x.y", "X_Y")],
)
def test_names_become_upper_case_with_underscores(name: str, expected: str) -> None:
    assert env_name(name) == expected


@pytest.mark.parametrize(
    ("service", "links", "expected"),
    [
        (
            svc("my-db", "127.100.0.7", {"port": 5432}),
            True,
            {
                "MY_DB_SERVICE_HOST": "127.100.0.7",
                "MY_DB_SERVICE_PORT": "5432",
                "MY_DB_PORT": "tcp://127.100.0.7:5432",
                "MY_DB_PORT_5432_TCP": "tcp://127.100.0.7:5432",
                "MY_DB_PORT_5432_TCP_PROTO": "tcp",
                "MY_DB_PORT_5432_TCP_PORT": "5432",
                "MY_DB_PORT_5432_TCP_ADDR": "127.100.0.7",
            },
        ),
        (
            svc("web", "127.100.0.9", HTTP, METRICS),
            True,
            {
                "WEB_SERVICE_HOST": "127.100.0.9",
                "WEB_SERVICE_PORT": "80",
                "WEB_SERVICE_PORT_HTTP": "80",
                "WEB_SERVICE_PORT_METRICS_PORT": "9090",
                "WEB_PORT": "tcp://127.100.0.9:80",
                "WEB_PORT_80_TCP": "tcp://127.100.0.9:80",
                "WEB_PORT_80_TCP_PROTO": "tcp",
                "WEB_PORT_80_TCP_PORT": "80",
                "WEB_PORT_80_TCP_ADDR": "127.100.0.9",
                "WEB_PORT_9090_TCP": "tcp://127.100.0.9:9090",
                "WEB_PORT_9090_TCP_PROTO": "tcp",
                "WEB_PORT_9090_TCP_PORT": "9090",
                "WEB_PORT_9090_TCP_ADDR": "127.100.0.9",
            },
        ),
        (
            svc("web", "127.100.0.9", HTTP, METRICS),
            False,
            {
                "WEB_SERVICE_HOST": "127.100.0.9",
                "WEB_SERVICE_PORT": "80",
                "WEB_SERVICE_PORT_HTTP": "80",
                "WEB_SERVICE_PORT_METRICS_PORT": "9090",
            },
        ),
        (
            svc("dns", "127.100.0.10", DNS_UDP),
            True,
            {
                "DNS_SERVICE_HOST": "127.100.0.10",
                "DNS_SERVICE_PORT": "53",
                "DNS_SERVICE_PORT_DNS": "53",
                "DNS_PORT": "udp://127.100.0.10:53",
                "DNS_PORT_53_UDP": "udp://127.100.0.10:53",
                "DNS_PORT_53_UDP_PROTO": "udp",
                "DNS_PORT_53_UDP_PORT": "53",
                "DNS_PORT_53_UDP_ADDR": "127.100.0.10",
            },
        ),
        (
            svc("v6", "fd00::7", {"port": 80}),
            True,
            {
                "V6_SERVICE_HOST": "fd00::7",
                "V6_SERVICE_PORT": "80",
                "V6_PORT": "tcp://[fd00::7]:80",
                "V6_PORT_80_TCP": "tcp://[fd00::7]:80",
                "V6_PORT_80_TCP_PROTO": "tcp",
                "V6_PORT_80_TCP_PORT": "80",
                "V6_PORT_80_TCP_ADDR": "fd00::7",
            },
        ),
        (svc("headless", "None", HTTP), True, {}),
        (svc("pending", None, HTTP), True, {}),
        (svc("pending", "", HTTP), True, {}),
        (svc("ext", None, kind="ExternalName"), True, {}),
    ],
)
def test_one_services_variables(service: Obj, links: bool, expected: dict[str, str]) -> None:
    assert one_service(service, links=links) == expected


def test_every_service_of_the_list_in_name_order() -> None:
    out = variables([svc("b", "127.100.0.2", HTTP), svc("a", "127.100.0.1", {"port": 1})])
    hosts = [k for k in out if k.endswith("_SERVICE_HOST")]
    assert hosts == ["A_SERVICE_HOST", "B_SERVICE_HOST"]
    assert variables([]) == {}


@pytest.mark.parametrize(
    ("spec", "enabled"),
    [({}, True), ({"enableServiceLinks": True}, True), ({"enableServiceLinks": False}, False)],
)
def test_enable_service_links_defaults_to_true(spec: Obj, enabled: bool) -> None:
    assert links_enabled({"spec": spec}) is enabled


SERVICES = {"WEB_SERVICE_HOST": "127.100.0.9", "WEB_SERVICE_PORT": "80", "MODE": "from-service"}


def test_the_containers_own_env_and_env_from_win_over_the_services() -> None:
    fetched = {("ConfigMap", "cfg"): {"data": {"WEB_SERVICE_PORT": "8080"}}}
    container = {
        "name": "app",
        "envFrom": [{"configMapRef": {"name": "cfg"}}],
        "env": [
            {"name": "WEB_SERVICE_HOST", "value": "10.0.0.1"},
            {"name": "URL", "value": "http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)/"},
        ],
    }
    env = environment({"spec": {}}, container, fetched, services=SERVICES)
    assert env["WEB_SERVICE_HOST"] == "10.0.0.1"  # env over the service's
    assert env["WEB_SERVICE_PORT"] == "8080"  # envFrom over the service's
    assert env["MODE"] == "from-service"  # nothing of the container's names it
    assert env["URL"] == "http://10.0.0.1:8080/"


def test_a_container_env_value_may_name_a_service_variable() -> None:
    container = {"name": "app", "env": [{"name": "TARGET", "value": "$(WEB_SERVICE_HOST)"}]}
    assert environment({"spec": {}}, container, {}, services=SERVICES)["TARGET"] == "127.100.0.9"
    assert environment({"spec": {}}, container, {})["TARGET"] == "$(WEB_SERVICE_HOST)"


# -- the worker ------------------------------------------------------------------------------


class ServicesApi:
    """Just what resolution and status need; ``lists`` counts the Service lists."""

    def __init__(self, pod: Obj, services: list[Obj]) -> None:
        self.pod, self.services = copy.deepcopy(pod), services
        self.lists: list[str] = []
        self.down = False

    async def get(self, namespace: str, name: str) -> Obj:
        return copy.deepcopy(self.pod)

    async def write_status(self, pod: Obj, new_status: Obj) -> Obj:
        self.pod["status"] = copy.deepcopy(new_status)
        self.pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(self.pod)

    async def get_source(self, kind: str, namespace: str, name: str) -> Obj | None:
        return None

    async def list_services(self, namespace: str) -> list[Obj]:
        if self.down:
            raise Unreachable("connection refused")
        self.lists.append(namespace)
        return copy.deepcopy(self.services)

    async def confirm_deleted(self, namespace: str, name: str, uid: str) -> None:
        pass


def make_pod(**spec: Any) -> Obj:
    containers = [
        {"name": "app", "image": "app:1", "command": ["serve", "$(WEB_SERVICE_HOST)"]},
        {
            "name": "side",
            "image": "side:1",
            "command": ["tail"],
            "env": [{"name": "A", "value": "1"}],
        },
    ]
    return {
        "metadata": {"name": "p", "namespace": "shop", "uid": "u1", "resourceVersion": "1"},
        "spec": {"nodeName": "n1", "containers": containers, **spec},
        "status": {},
    }


def worker_for(pod: Obj, api: ServicesApi, now: list[float]) -> PodWorker:
    clocks = Clocks(lambda: now[0], lambda: now[0])
    return PodWorker(pod, SimRuntime(), api, CrashLoopBackoff(), clocks=clocks)


async def test_the_worker_lists_services_once_and_every_container_gets_them() -> None:
    pod = make_pod()
    api = ServicesApi(pod, [svc("web", "127.100.0.9", HTTP), svc("headless", "None", HTTP)])
    worker = worker_for(pod, api, [0.0])
    await worker.step()
    await worker.step()
    assert api.lists == ["shop"]
    app, side = (b.spec for b in worker.boxes)
    assert app.env["WEB_PORT"] == "tcp://127.100.0.9:80"
    assert list(app.command) == ["serve", "127.100.0.9"]  # $(VAR) in command sees them too
    assert side.env["WEB_SERVICE_PORT_HTTP"] == "80" and side.env["A"] == "1"
    assert not any(k.startswith("HEADLESS_") for k in app.env)


async def test_enable_service_links_false_keeps_only_the_service_host_and_port() -> None:
    pod = make_pod(enableServiceLinks=False)
    worker = worker_for(pod, ServicesApi(pod, [svc("web", "127.100.0.9", HTTP)]), [0.0])
    await worker.step()
    env = worker.boxes[0].spec.env
    assert env["WEB_SERVICE_HOST"] == "127.100.0.9" and env["WEB_SERVICE_PORT"] == "80"
    assert not any(k.startswith("WEB_PORT") for k in env)


async def test_a_failed_list_holds_the_containers_and_is_retried() -> None:
    pod = make_pod()
    api = ServicesApi(pod, [svc("web", "127.100.0.9", HTTP)])
    api.down = True
    now = [100.0]
    worker = worker_for(pod, api, now)
    await worker.step()
    assert not worker.resolved
    assert worker.boxes[0].view.state.reason == "CreateContainerConfigError"  # type: ignore[union-attr]
    api.down = False
    await worker.step()
    assert not worker.resolved and api.lists == []  # not before its retry time (1 s)
    now[0] += 1.0
    await worker.step()
    assert worker.resolved and api.lists == ["shop"]
    assert worker.boxes[0].spec.env["WEB_SERVICE_HOST"] == "127.100.0.9"
