"""``qm rollout``: watch, inspect and steer a Deployment's rollouts.

``status`` follows the rollout until it completes (exit 0) or its progress deadline passes
(exit 1: ``ProgressDeadlineExceeded``); ``history`` lists the revisions kept as ReplicaSets;
``undo`` puts an earlier revision's template back (the previous one by default), which the
Deployment controller treats as a new rollout that reuses that ReplicaSet; ``restart`` stamps
the template with ``quaymaster.io/restartedAt`` so every pod is replaced within the rollout's
budget; ``pause`` and ``resume`` set ``spec.paused``. Writes are conditional on the version
read, and retried on a conflict. The rules are :mod:`app.core.rollout`'s, which the web UI
follows too; this module reads, writes and prints.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from app.core import rollout as core
from app.core.errors import Conflict
from app.core.kinds import BY_KIND
from app.core.rollout import rollout_state

from .context import Context, UsageError

DEPLOYMENT = BY_KIND["Deployment"]
REPLICASET = BY_KIND["ReplicaSet"]
Obj = dict[str, Any]


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    rollout = sub.add_parser("rollout", parents=[common], help="manage a Deployment's rollouts")
    actions = rollout.add_subparsers(dest="action", metavar="ACTION")
    for name, what in (
        ("status", "follow the rollout until it completes or stalls"),
        ("history", "list the revisions"),
        ("undo", "roll back to an earlier revision"),
        ("restart", "replace every pod, within the rollout's budget"),
        ("pause", "stop the rollout (scaling still works)"),
        ("resume", "let a paused rollout go on"),
    ):
        p = actions.add_parser(name, parents=[common], help=what)
        p.add_argument("target", metavar="deployment/NAME")
        if name == "undo":
            p.add_argument("--to-revision", type=int, default=0, help="revision (the previous)")
        if name == "status":
            p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait (600)")
            p.add_argument("-w", "--watch", action=argparse.BooleanOptionalAction, default=True)


def _name(target: str) -> str:
    kind, sep, name = target.partition("/")
    if not sep:
        return target
    if kind.lower() not in ("deployment", "deployments", "deploy"):
        raise UsageError(f"rollout works on deployments, not {kind!r}")
    if not name:
        raise UsageError("a deployment name is required")
    return name


def _revisions(ctx: Context, dep: Obj) -> list[core.Revision]:
    listed = ctx.client.list(REPLICASET, dep["metadata"]["namespace"])
    return core.revisions(dep, listed["items"])


def _update(ctx: Context, name: str, change: Callable[[Obj], tuple[Obj | None, str]]) -> int:
    """Read, change and replace the Deployment, retrying conflicts; ``change`` returns the
    changed Deployment (``None``: nothing to do) and the message to print."""
    for _ in range(10):
        dep = ctx.client.get(DEPLOYMENT, ctx.namespace, name)
        changed, message = change(dep)
        if changed is None:
            ctx.print(f"deployment/{name} {message}")
            return 0
        try:
            ctx.client.replace(DEPLOYMENT, ctx.namespace, changed)
        except Conflict:
            continue
        ctx.print(f"deployment/{name} {message}")
        return 0
    ctx.error(f"error: deployment/{name} kept changing; try again")
    return 1


def run_history(ctx: Context, name: str) -> int:
    dep = ctx.client.get(DEPLOYMENT, ctx.namespace, name)
    ctx.print(f"deployment/{name}")
    ctx.print(f"{'REVISION':<10}{'REPLICAS':<10}{'IMAGES':<40}{'CONFIG':<40}CHANGE-CAUSE")
    for r in _revisions(ctx, dep):
        images = ",".join(r.images)
        # The ConfigMaps and Secrets it reads: snapshots, for a Deployment's ReplicaSets.
        configs = ",".join(f"{_SHORT[k]}/{n}" for k, n in r.configs) or "-"
        replicas = (r.replicaset.get("spec") or {}).get("replicas", 0)
        ctx.print(
            f"{r.number:<10}{replicas!s:<10}{images:<40}{configs:<40}{r.change_cause or '<none>'}"
        )
    return 0


_SHORT = {"ConfigMap": "cm", "Secret": "secret"}


def run_undo(ctx: Context, name: str, to_revision: int) -> int:
    def change(dep: Obj) -> tuple[Obj | None, str]:
        try:
            changed = core.rolled_back(dep, _revisions(ctx, dep), to_revision)
        except core.NoSuchRevision as exc:
            raise UsageError(f"deployment/{name}: {exc}") from None
        return changed, "rolled back" if changed else "already runs that template; nothing to undo"

    return _update(ctx, name, change)


def run_restart(ctx: Context, name: str) -> int:
    return _update(ctx, name, lambda dep: (core.restarted(dep, datetime.now(UTC)), "restarted"))


def run_pause(ctx: Context, name: str, paused: bool) -> int:
    def change(dep: Obj) -> tuple[Obj | None, str]:
        changed = core.with_paused(dep, paused)
        done = "paused" if paused else "resumed"
        return changed, done if changed else f"already {done}"

    return _update(ctx, name, change)


def run_status(ctx: Context, name: str, timeout: float, watch: bool) -> int:
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        state, line = rollout_state(ctx.client.get(DEPLOYMENT, ctx.namespace, name))
        if line != last:
            (ctx.error if state == "failed" else ctx.print)(line)
            last = line
        if state == "done":
            return 0
        if state == "failed" or not watch:
            return 1
        if time.monotonic() >= deadline:
            ctx.error(f"error: timed out waiting for deployment {name!r}")
            return 1
        time.sleep(1.0)


def run_rollout(ctx: Context, args: argparse.Namespace) -> int:
    if not getattr(args, "action", None):
        raise UsageError("rollout needs an action: status, history, undo, restart, pause, resume")
    name = _name(args.target)
    if args.action == "status":
        return run_status(ctx, name, args.timeout, args.watch)
    if args.action == "history":
        return run_history(ctx, name)
    if args.action == "undo":
        return run_undo(ctx, name, args.to_revision)
    if args.action == "restart":
        return run_restart(ctx, name)
    return run_pause(ctx, name, args.action == "pause")


COMMANDS: dict[str, Callable[[Context, argparse.Namespace], int]] = {"rollout": run_rollout}
