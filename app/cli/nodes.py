"""``qm cordon``, ``qm uncordon`` and ``qm drain``: taking a node out of service and back.

Cordoning is a patch of the node's ``spec.unschedulable``. A drain calls the API's
``nodes/{name}/drain`` subresource, which cordons the node and makes one pass of evictions
under the pods' disruption budgets; this command repeats it every ``--interval`` until the node
is empty or ``--timeout`` passes, printing each eviction and, while a budget holds pods back,
which pods and which budget. It exits 1 on timeout with the blockers listed.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from typing import Any

from app.client import build
from app.core.errors import TooManyRequests
from app.core.kinds import BY_KIND

from .context import Context

NODE = BY_KIND["Node"]
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def duration(text: str) -> float:
    """Seconds in ``300s``, ``5m``, ``1m30s``, ``1.5h`` or a bare number of seconds."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        parts = _PART.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise argparse.ArgumentTypeError(
                f"invalid duration {text!r}: use e.g. 300s, 5m or 1m30s"
            ) from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: must not be negative")
    return seconds


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    for name, what in (("cordon", "mark a node unschedulable"),
                       ("uncordon", "mark a node schedulable again")):  # fmt: skip
        p = sub.add_parser(name, parents=[common], help=what)
        p.add_argument("node", metavar="NODE")
    drain = sub.add_parser(
        "drain", parents=[common], help="cordon a node and evict its pods within their budgets"
    )
    drain.add_argument("node", metavar="NODE")
    drain.add_argument("--timeout", type=duration, default=300.0, help="give up after (300s)")
    drain.add_argument("--interval", type=duration, default=2.0, help="between passes (2s)")


def _set_unschedulable(ctx: Context, node: str, value: bool) -> int:
    word = "cordoned" if value else "uncordoned"
    current = ctx.client.get(NODE, None, node)
    if bool((current.get("spec") or {}).get("unschedulable")) == value:
        ctx.print(f"node/{node} already {word}")
        return 0
    ctx.client.patch(NODE, None, node, {"spec": {"unschedulable": value}})
    ctx.print(f"node/{node} {word}")
    return 0


def run_cordon(ctx: Context, args: argparse.Namespace) -> int:
    return _set_unschedulable(ctx, args.node, True)


def run_uncordon(ctx: Context, args: argparse.Namespace) -> int:
    return _set_unschedulable(ctx, args.node, False)


def _blocker(b: dict[str, Any]) -> str:
    who = f"pod {b.get('namespace')}/{b.get('name')}"
    if b.get("budget"):
        return f"{who} blocked by PodDisruptionBudget {b.get('namespace')}/{b['budget']}: " + str(
            b.get("reason")
        )
    return f"{who} blocked: {b.get('reason')}"


def drain_node(
    ctx: Context,
    node: str,
    timeout: float,
    interval: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Call the drain subresource until the node is empty or ``timeout`` passes."""
    deadline = clock() + timeout
    shown: list[str] = []
    first = True
    while True:
        try:
            status: dict[str, Any] = ctx.client.send(build.drain(node))
        except TooManyRequests:
            status = {}
        if first and status:
            ctx.print(f"node/{node} cordoned")
            first = False
        for ev in status.get("evicted") or []:
            ctx.print(f"evicting pod {ev.get('namespace')}/{ev.get('name')}")
        blockers = [_blocker(b) for b in status.get("blocked") or []]
        if blockers != shown:
            for line in blockers:
                ctx.print(line)
            shown = blockers
        if status.get("done"):
            ctx.print(f"node/{node} drained")
            return 0
        if clock() >= deadline:
            left = status.get("remaining", "some")
            ctx.error(
                f"error: timed out after {timeout:g}s draining node/{node}: {left} pods remain"
            )
            for line in blockers:
                ctx.error(f"  {line}")
            return 1
        sleep(min(interval, max(0.0, deadline - clock())))


def run_drain(ctx: Context, args: argparse.Namespace) -> int:
    return drain_node(ctx, args.node, args.timeout, args.interval)


COMMANDS: dict[str, Callable[[Context, argparse.Namespace], int]] = {
    "cordon": run_cordon,
    "uncordon": run_uncordon,
    "drain": run_drain,
}
