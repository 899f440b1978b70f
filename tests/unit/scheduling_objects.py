"""Node and pod objects for the scheduler's unit tests, built the way the API stores them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.core.scheduling.podinfo import HOSTNAME_KEY, ZONE_KEY

Obj = dict[str, Any]


def node(
    name: str,
    cpu: str | None = "4",
    memory: str | None = "8Gi",
    *,
    gpu: int | None = None,
    pods: int | None = None,
    batch: dict[str, str] | None = None,
    zone: str | None = None,
    labels: dict[str, str] | None = None,
    taints: Sequence[Obj] = (),
    unschedulable: bool = False,
    ready: bool | None = True,
) -> Obj:
    meta_labels = {HOSTNAME_KEY: name}
    if zone is not None:
        meta_labels[ZONE_KEY] = zone
    meta_labels.update(labels or {})
    alloc: dict[str, Any] = {}
    if cpu is not None:
        alloc["cpu"] = cpu
    if memory is not None:
        alloc["memory"] = memory
    if gpu is not None:
        alloc["nvidia.com/gpu"] = str(gpu)
    if pods is not None:
        alloc["pods"] = str(pods)
    status: Obj = {"allocatable": alloc}
    if batch is not None:
        status["batchAllocatable"] = batch
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    spec: Obj = {}
    if taints:
        spec["taints"] = list(taints)
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": meta_labels},
        "spec": spec,
        "status": status,
    }


def pod(
    name: str,
    cpu: str | None = "100m",
    memory: str | None = "128Mi",
    *,
    gpu: int | None = None,
    priority: int = 2000,
    namespace: str = "ns",
    labels: dict[str, str] | None = None,
    node_name: str | None = None,
    nominated: str | None = None,
    host_ports: Sequence[int | tuple[int, str]] = (),
    created: str = "2026-01-01T00:00:00Z",
    **spec: Any,
) -> Obj:
    requests: dict[str, Any] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    if gpu is not None:
        requests["nvidia.com/gpu"] = str(gpu)
    container: Obj = {"name": "c", "image": "img", "resources": {"requests": requests}}
    if host_ports:
        container["ports"] = [
            {"containerPort": p, "hostPort": p}
            if isinstance(p, int)
            else {"containerPort": p[0], "hostPort": p[0], "protocol": p[1]}
            for p in host_ports
        ]
    full_spec: Obj = {"priority": priority, "containers": [container], **spec}
    status: Obj = {}
    if node_name is not None:
        full_spec["nodeName"] = node_name
        status["phase"] = "Running"
    if nominated is not None:
        status["nominatedNodeName"] = nominated
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": labels or {},
            "creationTimestamp": created,
        },
        "spec": full_spec,
        "status": status,
    }
