"""``qm rollout``: watch, inspect and steer a Deployment's rollouts.

``status`` follows the rollout until it completes (exit 0) or its progress deadline passes
(exit 1: ``ProgressDeadlineExceeded``); ``history`` lists the revisions kept as ReplicaSets;
``undo`` puts an earlier revision's template back (the previous one by default), which the
Deployment controller treats as a new rollout that reuses that ReplicaSet; ``restart`` stamps
the template with ``quaymaster.io/restartedAt`` so every pod is replaced within the rollout's
budget; ``pause`` and ``resume`` set ``spec.paused``. Writes are conditional on the version
read, and retried on a conflict.
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from app.core.controllers.deployment.config import references
from app.core.errors import Conflict
from app.core.kinds import BY_KIND

from .context import Context, UsageError

DEPLOYMENT = BY_KIND["Deployment"]
REPLICASET = BY_KIND["ReplicaSet"]
REVISION = "deployment.kubernetes.io/revision"
CHANGE_CAUSE = "kubernetes.io/change-cause"
RESTARTED_AT = "quaymaster.io/restartedAt"
HASH_LABEL = "pod-template-hash"
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


def _revisions(ctx: Context, dep: Obj) -> list[tuple[int, Obj]]:
    uid = dep["metadata"]["uid"]
    listed = ctx.client.list(REPLICASET, dep["metadata"]["namespace"])
    out = []
    for rs in listed["items"]:
        refs = (rs.get("metadata") or {}).get("ownerReferences") or []
        if any(r.get("uid") == uid and r.get("controller") for r in refs):
            annotations = rs["metadata"].get("annotations") or {}
            try:
                out.append((int(annotations.get(REVISION, "0")), rs))
            except ValueError:
                continue
    return sorted(out, key=lambda t: t[0])


def _update(ctx: Context, name: str, change: Callable[[Obj], str | None]) -> int:
    """Read, change and replace the Deployment, retrying conflicts; ``change`` returns a
    message to print, or ``None`` when there is nothing to do."""
    for _ in range(10):
        dep = ctx.client.get(DEPLOYMENT, ctx.namespace, name)
        message = change(dep)
        if message is None:
            return 0
        try:
            ctx.client.replace(DEPLOYMENT, ctx.namespace, dep)
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
    for revision, rs in _revisions(ctx, dep):
        template = (rs.get("spec") or {}).get("template") or {}
        containers = (template.get("spec") or {}).get("containers") or []
        images = ",".join(str(c.get("image", "")) for c in containers)
        # The ConfigMaps and Secrets it reads: snapshots, for a Deployment's ReplicaSets.
        configs = ",".join(f"{_SHORT[k]}/{n}" for k, n in sorted(references(template))) or "-"
        cause = (rs["metadata"].get("annotations") or {}).get(CHANGE_CAUSE, "<none>")
        replicas = (rs.get("spec") or {}).get("replicas", 0)
        ctx.print(f"{revision:<10}{replicas!s:<10}{images:<40}{configs:<40}{cause}")
    return 0


_SHORT = {"ConfigMap": "cm", "Secret": "secret"}


def _template_of(rs: Obj) -> Obj:
    template = copy.deepcopy((rs.get("spec") or {}).get("template") or {})
    labels = (template.get("metadata") or {}).get("labels") or {}
    labels.pop(HASH_LABEL, None)
    return template


def run_undo(ctx: Context, name: str, to_revision: int) -> int:
    def change(dep: Obj) -> str | None:
        revisions = _revisions(ctx, dep)
        if to_revision:
            chosen = [rs for rev, rs in revisions if rev == to_revision]
            if not chosen:
                raise UsageError(f"revision {to_revision} of deployment/{name} not found")
            target = chosen[0]
        else:
            if len(revisions) < 2:
                raise UsageError(f"deployment/{name} has no previous revision")
            target = revisions[-2][1]
        template = _template_of(target)
        current = copy.deepcopy(dep["spec"]["template"])
        (current.get("metadata") or {}).get("labels", {}).pop(HASH_LABEL, None)
        if template == current:
            ctx.print(f"deployment/{name} already runs that template; nothing to undo")
            return None
        dep["spec"]["template"] = template
        return "rolled back"

    return _update(ctx, name, change)


def run_restart(ctx: Context, name: str) -> int:
    def change(dep: Obj) -> str:
        meta = dep["spec"]["template"].setdefault("metadata", {})
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta.setdefault("annotations", {})[RESTARTED_AT] = stamp
        return "restarted"

    return _update(ctx, name, change)


def run_pause(ctx: Context, name: str, paused: bool) -> int:
    def change(dep: Obj) -> str | None:
        if bool(dep["spec"].get("paused")) == paused:
            ctx.print(f"deployment/{name} already {'paused' if paused else 'resumed'}")
            return None
        dep["spec"]["paused"] = paused
        return "paused" if paused else "resumed"

    return _update(ctx, name, change)


def rollout_state(dep: Obj) -> tuple[str, str]:
    """(``done`` | ``failed`` | ``waiting``, a line for people) for one read of the Deployment,
    by Kubernetes' rules: the status must describe the current generation first."""
    spec, status = dep.get("spec") or {}, dep.get("status") or {}
    name = dep["metadata"]["name"]
    if int(status.get("observedGeneration") or 0) < int(dep["metadata"].get("generation") or 0):
        return "waiting", f"Waiting for deployment {name!r} spec update to be observed..."
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return "failed", f"error: deployment {name!r} exceeded its progress deadline"
    want = int(spec.get("replicas", 1))
    updated = int(status.get("updatedReplicas") or 0)
    total = int(status.get("replicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    if updated < want:
        return "waiting", (
            f"Waiting for deployment {name!r} rollout to finish: {updated} out of {want} new "
            "replicas have been updated..."
        )
    if total > updated:
        return "waiting", (
            f"Waiting for deployment {name!r} rollout to finish: {total - updated} old replicas "
            "are pending termination..."
        )
    if available < updated:
        return "waiting", (
            f"Waiting for deployment {name!r} rollout to finish: {available} of {updated} "
            "updated replicas are available..."
        )
    return "done", f"deployment {name!r} successfully rolled out"


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
