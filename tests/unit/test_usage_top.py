"""The tables of ``qm top``, from metrics API answers, without a server."""

from __future__ import annotations

from typing import Any

from app.cli.top import node_table, pod_table


def metrics(name: str, cpu: str, memory: str, ns: str = "", **extra: Any) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": ns} if ns else {})}
    return {"metadata": meta, "usage": {"cpu": cpu, "memory": memory}, **extra}


def rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.splitlines()]


def test_nodes_show_shares_of_allocatable() -> None:
    nodes = [{"metadata": {"name": "a"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}]
    table = node_table(
        [metrics("a", "1500m", "2097152Ki"), metrics("gone", "10m", "1024Ki")], nodes, "cpu"
    )
    assert rows(table) == [
        ["NAME", "CPU(cores)", "CPU%", "MEMORY(bytes)", "MEMORY%"],
        ["a", "1500m", "37%", "2048Mi", "25%"],
        ["gone", "10m", "<unknown>", "1Mi", "<unknown>"],
    ]


def test_pods_all_namespaces_containers_and_sorting() -> None:
    ctr = [{"name": "c", "usage": {"cpu": "5m", "memory": "2048Ki"}}]
    items = [
        metrics("small", "5m", "2048Ki", ns="x", containers=ctr),
        metrics("big", "2", "1048576Ki", ns="y", containers=[]),
    ]
    assert rows(pod_table(items, all_namespaces=True, sort_by="memory")) == [
        ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"],
        ["y", "big", "2000m", "1024Mi"],
        ["x", "small", "5m", "2Mi"],
    ]
    assert rows(pod_table(items, containers=True)) == [
        ["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"],
        ["small", "c", "5m", "2Mi"],
    ]
