"""A runc pod's /etc/resolv.conf: its text by dnsPolicy and dnsConfig (agent/resolv.py), the
read-only bind in the OCI config (agent/runtime/oci.py), the settings, and that the pod
worker writes the file for runc pods only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.backoff import CrashLoopBackoff
from agent.config import ConfigError, parse
from agent.pods import Clocks, PodWorker
from agent.resolv import ClusterDns, resolv_conf
from agent.runtime.base import ContainerSpec
from agent.runtime.oci import POD_MOUNT, RESOLV_CONF_FILE, oci_config
from agent.runtime.sim import SimRuntime

Obj = dict[str, Any]
CLUSTER = ClusterDns("127.0.0.53", "cluster.local")
CLUSTER_FILE = (
    "nameserver 127.0.0.53\n"
    "search shop.svc.cluster.local svc.cluster.local cluster.local\n"
    "options ndots:5\n"
)


def pod(**spec: Any) -> Obj:
    return {"metadata": {"name": "p", "namespace": "shop"}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "cluster", "expected"),
    [
        ({}, CLUSTER, CLUSTER_FILE),
        ({"dnsPolicy": "ClusterFirst"}, CLUSTER, CLUSTER_FILE),
        ({"dnsPolicy": "ClusterFirstWithHostNet"}, CLUSTER, CLUSTER_FILE),
        ({}, None, None),  # no --cluster-dns: the image's file
        ({"dnsPolicy": "Default"}, CLUSTER, None),  # the node's
        (
            {},
            ClusterDns("10.0.0.10", "corp.example"),
            "nameserver 10.0.0.10\n"
            "search shop.svc.corp.example svc.corp.example corp.example\n"
            "options ndots:5\n",
        ),
        (
            {
                "dnsPolicy": "None",
                "dnsConfig": {
                    "nameservers": ["1.1.1.1", "8.8.8.8"],
                    "searches": ["corp.example"],
                    "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
                },
            },
            CLUSTER,
            "nameserver 1.1.1.1\nnameserver 8.8.8.8\nsearch corp.example\noptions ndots:2 edns0\n",
        ),
        (
            {"dnsPolicy": "None", "dnsConfig": {"nameservers": ["1.1.1.1"]}},
            None,  # the pod's own file needs no cluster DNS
            "nameserver 1.1.1.1\n",
        ),
        (
            {
                "dnsConfig": {
                    "nameservers": ["1.1.1.1", "127.0.0.53"],
                    "searches": ["corp.example", "svc.cluster.local"],
                    "options": [{"name": "ndots", "value": "1"}, {"name": "timeout", "value": 2}],
                }
            },
            CLUSTER,
            "nameserver 127.0.0.53\nnameserver 1.1.1.1\n"
            "search shop.svc.cluster.local svc.cluster.local cluster.local corp.example\n"
            "options ndots:1 timeout:2\n",
        ),
        (
            {"dnsConfig": {"nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3"]}},
            CLUSTER,
            "nameserver 127.0.0.53\nnameserver 1.1.1.1\nnameserver 2.2.2.2\n"
            "search shop.svc.cluster.local svc.cluster.local cluster.local\n"
            "options ndots:5\n",
        ),
    ],
)
def test_resolv_conf_by_dns_policy_and_config(
    spec: Obj, cluster: ClusterDns | None, expected: str | None
) -> None:
    assert resolv_conf(pod(**spec), cluster) == expected


def spec_with(files: dict[str, bytes]) -> ContainerSpec:
    return ContainerSpec("u1", "web", ["serve"], {}, files, image="busybox:1")


def mounts(spec: ContainerSpec) -> list[Obj]:
    cfg = oci_config(spec, rootfs=Path("/b/rootfs"), pod_dir=Path("/pods/u1"), cgroups="/q")
    mounted: list[Obj] = cfg["mounts"]
    return mounted


def test_the_oci_config_binds_the_pods_resolv_conf_read_only() -> None:
    bound = [m for m in mounts(spec_with({RESOLV_CONF_FILE: b"x"})) if "resolv" in m["destination"]]
    assert bound == [
        {
            "destination": "/etc/resolv.conf",
            "type": "bind",
            "source": f"/pods/u1/{RESOLV_CONF_FILE}",
            "options": ["bind", "ro", "nosuid", "nodev", "noexec"],
        }
    ]
    assert POD_MOUNT in {m["destination"] for m in mounts(spec_with({RESOLV_CONF_FILE: b"x"}))}


def test_without_the_file_the_image_keeps_its_own() -> None:
    destinations = {m["destination"] for m in mounts(spec_with({"etc/app/conf": b"x"}))}
    assert "/etc/resolv.conf" not in destinations and POD_MOUNT in destinations


def test_the_settings() -> None:
    cfg = parse([], {}, hostname="n1")
    assert (cfg.cluster_dns, cfg.cluster_domain) == ("", "cluster.local")
    cfg = parse(["--cluster-dns", "127.0.0.53", "--cluster-domain", "corp.example."], {}, "n1")
    assert (cfg.cluster_dns, cfg.cluster_domain) == ("127.0.0.53", "corp.example")
    from_env = parse([], {"QM_AGENT_CLUSTER_DNS": "10.0.0.10"}, hostname="n1")
    assert from_env.cluster_dns == "10.0.0.10"
    with pytest.raises(ConfigError, match="not an IP address"):
        parse(["--cluster-dns", "dns.local"], {}, hostname="n1")


class NamedRuntime(SimRuntime):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class Api:
    async def get_source(self, kind: str, namespace: str, name: str) -> Obj | None:
        return None

    async def list_services(self, namespace: str) -> list[Obj]:
        return []

    async def write_status(self, pod: Obj, new_status: Obj) -> Obj:
        return {**pod, "status": new_status}


@pytest.mark.parametrize(("runtime", "written"), [("runc", True), ("process", False)])
async def test_the_worker_writes_resolv_conf_for_runc_pods_only(
    runtime: str, written: bool
) -> None:
    body = pod(containers=[{"name": "a", "image": "busybox:1", "command": ["x"]}])
    body["metadata"].update(uid="u1", resourceVersion="1")
    worker = PodWorker(
        body,
        NamedRuntime(runtime),
        Api(),  # type: ignore[arg-type]
        CrashLoopBackoff(),
        clocks=Clocks(lambda: 0.0, lambda: 0.0),
        cluster_dns=CLUSTER,
    )
    await worker.step()
    files = worker.boxes[0].spec.files
    assert (files.get(RESOLV_CONF_FILE) == CLUSTER_FILE.encode()) is written
    assert (RESOLV_CONF_FILE in files) is written
