"""``qm top nodes`` and ``qm top pods``: current CPU and memory use, from the metrics API.

The figures are what the agents last reported (every 10 s) through
``/apis/metrics.quaymaster.io/v1`` (``app.api.usage``): millicores averaged over the agent's
sample window and working-set memory. ``top nodes`` also reads the Node objects to show use as
a share of each node's allocatable, as ``kubectl top`` does. The tables are built by pure
functions of the API's answers, so they are unit-tested without a server.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from app.client import build
from app.core.kinds import BY_KIND
from app.core.quantity import cpu_millis, to_bytes

from .context import Context
from .printers import render_table

Obj = dict[str, Any]
NODE = BY_KIND["Node"]
SORTS = ("cpu", "memory")


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    top = sub.add_parser("top", parents=[common], help="show CPU and memory use")
    what = top.add_subparsers(dest="top_what", metavar="RESOURCE", required=True)
    nodes = what.add_parser("nodes", aliases=["node", "no"], parents=[common],
                            help="use of every node, or of the named one")  # fmt: skip
    nodes.add_argument("name", metavar="NAME", nargs="?")
    nodes.add_argument("--sort-by", choices=SORTS, help="largest first")
    pods = what.add_parser("pods", aliases=["pod", "po"], parents=[common],
                           help="use of a namespace's pods, or of the named one")  # fmt: skip
    pods.add_argument("name", metavar="NAME", nargs="?")
    pods.add_argument("--containers", action="store_true", help="one line per container")
    pods.add_argument("--sort-by", choices=SORTS, help="largest first")


def _usage(item: Obj) -> tuple[int, int]:
    usage = item.get("usage") or {}
    return cpu_millis(usage.get("cpu") or "0"), to_bytes(usage.get("memory") or "0")


def cpu_text(millis: int) -> str:
    return f"{millis}m"


def memory_text(amount: int) -> str:
    return f"{amount // 2**20}Mi"


def _share(used: int, total: int | None) -> str:
    return f"{used * 100 // total}%" if total else "<unknown>"


def _sorted(items: list[Obj], sort_by: str | None) -> list[Obj]:
    if sort_by is None:
        return items
    index = SORTS.index(sort_by)
    return sorted(items, key=lambda i: -_usage(i)[index])


def node_table(metrics: Sequence[Obj], nodes: Sequence[Obj], sort_by: str | None = None) -> str:
    """NAME, CPU(cores), CPU%, MEMORY(bytes), MEMORY% of allocatable; metrics without a Node
    object (removed since) show an unknown share."""
    allocatable: dict[str, tuple[int, int]] = {}
    for n in nodes:
        alloc = (n.get("status") or {}).get("allocatable") or {}
        name = str((n.get("metadata") or {}).get("name"))
        allocatable[name] = (
            cpu_millis(alloc.get("cpu") or "0"),
            to_bytes(alloc.get("memory") or "0"),
        )
    rows = []
    for m in _sorted(list(metrics), sort_by):
        name = str(m["metadata"]["name"])
        cpu, mem = _usage(m)
        cap_cpu, cap_mem = allocatable.get(name, (0, 0))
        rows.append(
            [name, cpu_text(cpu), _share(cpu, cap_cpu), memory_text(mem), _share(mem, cap_mem)]
        )
    return render_table(["NAME", "CPU(cores)", "CPU%", "MEMORY(bytes)", "MEMORY%"], rows)


def pod_table(
    metrics: Sequence[Obj],
    *,
    all_namespaces: bool = False,
    containers: bool = False,
    sort_by: str | None = None,
) -> str:
    """NAME, CPU(cores), MEMORY(bytes), with NAMESPACE first for ``-A`` and a container column
    (one line per container) for ``--containers``."""
    headers = ["NAME", "CPU(cores)", "MEMORY(bytes)"]
    if containers:
        headers = ["POD", *headers]
    if all_namespaces:
        headers = ["NAMESPACE", *headers]
    rows = []
    for m in _sorted(list(metrics), sort_by):
        meta = m["metadata"]
        lead = [str(meta.get("namespace", ""))] if all_namespaces else []
        if not containers:
            cpu, mem = _usage(m)
            rows.append([*lead, str(meta["name"]), cpu_text(cpu), memory_text(mem)])
            continue
        for c in m.get("containers") or []:
            cpu, mem = _usage(c)
            rows.append([*lead, str(meta["name"]), str(c["name"]), cpu_text(cpu), memory_text(mem)])
    return render_table(headers, rows)


def _nodes(ctx: Context, args: argparse.Namespace) -> int:
    if args.name:
        metrics = [ctx.client.send(build.metrics("nodes", None, args.name))]
    else:
        metrics = ctx.client.send(build.metrics("nodes"))["items"]
    if not metrics:
        ctx.error("error: metrics not available yet (no agent has reported usage)")
        return 1
    nodes = ctx.client.list(NODE, None)["items"]
    ctx.print(node_table(metrics, nodes, args.sort_by))
    return 0


def _pods(ctx: Context, args: argparse.Namespace) -> int:
    if args.name:
        metrics = [ctx.client.send(build.metrics("pods", ctx.namespace, args.name))]
    elif ctx.all_namespaces:
        metrics = ctx.client.send(build.metrics("pods"))["items"]
    else:
        metrics = ctx.client.send(build.metrics("pods", ctx.namespace))["items"]
    if not metrics:
        where = "" if ctx.all_namespaces else f" in {ctx.namespace} namespace"
        ctx.error(f"No resources found{where}.")
        return 0
    all_ns = ctx.all_namespaces and not args.name
    table = pod_table(
        metrics, all_namespaces=all_ns, containers=args.containers, sort_by=args.sort_by
    )
    ctx.print(table)
    return 0


def run_top(ctx: Context, args: argparse.Namespace) -> int:
    return _nodes(ctx, args) if args.top_what in ("nodes", "node", "no") else _pods(ctx, args)


COMMANDS = {"top": run_top}
